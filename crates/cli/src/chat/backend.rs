//! What a chat talks to: the model loaded here, or a remote engine's model.

use anyhow::Context;
use engine::{Engine, GenerateRequest, GenerationMode, GenerationStream, SamplingParams};
use remote::{RemoteAccess, RemoteEngine, RemoteKind, RemoteRequest, RemoteSpec};

pub enum ChatBackend {
    Local(Box<Engine>),
    Remote {
        engine: RemoteEngine,
        model: String,
        /// What the engine takes (its fields, its modes), as its model list told (boxed: the
        /// variants stay alike in size).
        kind: Box<RemoteKind>,
        /// Runs the remote's HTTP streams while the terminal reads events on this thread.
        runtime: tokio::runtime::Runtime,
    },
}

impl ChatBackend {
    /// The remote engine `spec`, reached where `access` allows, running `model` (else the first
    /// model it lists).
    pub fn remote(
        spec: RemoteSpec,
        model: Option<String>,
        access: RemoteAccess,
    ) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        spec.check_access(access)?;
        let engine = RemoteEngine::with_access(spec, access)?;
        let listing = runtime.block_on(engine.listing());
        let (model, kind) = match (model, listing) {
            (model, Ok(listing)) => {
                let model = match model {
                    Some(model) => model,
                    None => listing.models.into_iter().next().with_context(|| {
                        format!(
                            "remote engine {} lists no models; name one with --remote-model",
                            engine.name()
                        )
                    })?,
                };
                (model, listing.kind)
            }
            // A model named needs no list: an engine that gives none is taken for a plain
            // OpenAI server.
            (Some(model), Err(err)) => {
                eprintln!("({err}; taking it for a plain OpenAI server)");
                (model, RemoteKind::OpenAi)
            }
            (None, Err(err)) => return Err(err.into()),
        };
        Ok(Self::Remote {
            engine,
            model,
            kind: Box::new(kind),
            runtime,
        })
    }

    /// How the greeting names it.
    pub fn describe(&self) -> String {
        match self {
            Self::Local(engine) => {
                let info = engine.info();
                format!(
                    "{} ({}, {} threads)",
                    info.name, info.file_type, info.threads
                )
            }
            Self::Remote { engine, model, .. } => {
                format!("{model} on {} ({})", engine.name(), engine.spec().url)
            }
        }
    }

    pub fn name(&self) -> String {
        match self {
            Self::Local(engine) => engine.info().name.clone(),
            Self::Remote { model, .. } => model.clone(),
        }
    }

    /// The sampling a chat starts from: the model's own defaults here; the playground's chat
    /// defaults for a remote model, whose defaults are not known.
    pub fn sampling_defaults(&self) -> SamplingParams {
        match self {
            Self::Local(engine) => engine.info().sampling_defaults.params.clone(),
            Self::Remote { .. } => SamplingParams::chat_default(),
        }
    }

    /// Why `mode` cannot run here, if it cannot.
    pub fn mode_problem(&self, mode: GenerationMode) -> Option<String> {
        match self {
            Self::Local(engine)
                if mode == GenerationMode::Medusa && engine.info().heads.is_none() =>
            {
                Some("medusa mode needs heads: start medusa chat with --heads FILE".into())
            }
            Self::Local(_) => None,
            Self::Remote { engine, kind, .. } => kind
                .resolve_mode(engine.name(), mode)
                .err()
                .map(|err| err.to_string()),
        }
    }

    pub fn is_remote(&self) -> bool {
        matches!(self, Self::Remote { .. })
    }

    pub fn generate(&self, request: GenerateRequest) -> anyhow::Result<GenerationStream> {
        match self {
            Self::Local(engine) => Ok(engine.generate(request)?),
            Self::Remote {
                engine,
                model,
                kind,
                runtime,
            } => {
                request.validate()?;
                let request = kind.prepare(engine.name(), request)?;
                let _entered = runtime.enter();
                Ok(engine.generate(RemoteRequest {
                    model: model.clone(),
                    request,
                    kind: RemoteKind::clone(kind),
                }))
            }
        }
    }
}
