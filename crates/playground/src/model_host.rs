//! The model requests are served with, and the one being loaded to replace it. A replacement
//! loads on its own thread while the current model keeps serving; if it fails, the current model
//! stays and the error is kept for the UI to show.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;

use engine::{
    DraftPolicy, Engine, EngineConfig, GenerateRequest, GenerationMode, LoadProgress, LoadStage,
    Prompt, QuantType, TreeSpec,
};
use serde::Serialize;
use ts_rs::TS;

use crate::draft::{DraftFields, TreeChoice};
use crate::error::{AppError, ErrorBody, ErrorKind};

/// A loaded model with the heads file it was loaded with (the engine only knows the contents).
pub struct HostedModel {
    pub engine: Arc<Engine>,
    pub heads_path: Option<PathBuf>,
    /// The tree Medusa requests drafting `auto` draft instead, as the user named it; `None`
    /// keeps `auto`. Changed in Settings without reloading the model.
    default_tree: RwLock<Option<(TreeChoice, DraftPolicy)>>,
    /// Set once lookup's memory has been given this model's earlier answers from the history.
    pub(crate) remembered: tokio::sync::OnceCell<()>,
}

impl HostedModel {
    pub fn new(engine: Arc<Engine>, heads_path: Option<PathBuf>) -> Self {
        Self {
            engine,
            heads_path,
            default_tree: RwLock::new(None),
            remembered: tokio::sync::OnceCell::new(),
        }
    }

    pub fn has_heads(&self) -> bool {
        self.engine.info().heads.is_some()
    }

    /// The tree Medusa requests drafting `auto` draft, as the user named it.
    pub fn default_tree(&self) -> Option<TreeChoice> {
        self.default_tree
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(choice, _)| choice.clone())
    }

    /// Makes `choice` the tree of Medusa requests that draft `auto` (`"auto"` undoes it), after
    /// checking that these heads can draft it.
    pub fn set_default_tree(&self, choice: TreeChoice) -> Result<(), AppError> {
        let policy = DraftFields {
            tree: Some(choice.clone()),
            draft_length: None,
        }
        .policy(GenerationMode::Medusa)?;
        let setting = match policy {
            DraftPolicy::Auto => None,
            policy => {
                let probe = GenerateRequest::new(Prompt::Text("tree check".into()), 1)
                    .with_mode(GenerationMode::Medusa)
                    .with_draft(policy.clone());
                self.engine.validate(probe)?;
                Some((choice, policy))
            }
        };
        *self
            .default_tree
            .write()
            .unwrap_or_else(PoisonError::into_inner) = setting;
        Ok(())
    }

    /// The tree Medusa requests drafting `auto` draft instead, as the engine takes it.
    pub(crate) fn default_tree_policy(&self) -> Option<DraftPolicy> {
        self.default_tree
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(_, policy)| policy.clone())
    }
}

/// Where the model file of a load comes from.
pub enum ModelSource {
    Path(PathBuf),
    /// Found (or downloaded) by a function, e.g. the default model's fetcher, during the load.
    Resolve(Box<dyn FnOnce() -> Result<PathBuf, String> + Send>),
    /// This model's weights converted to another format, written beside it on first use (the
    /// original stays).
    Convert {
        from: PathBuf,
        kind: QuantType,
    },
}

/// What to load.
pub struct LoadRequest {
    pub model: ModelSource,
    pub heads: Option<PathBuf>,
    /// A draft model to load beside it.
    pub draft_model: Option<PathBuf>,
    /// A feature drafter (EAGLE-style) to load beside it.
    pub drafter: Option<PathBuf>,
    pub tree: Option<TreeSpec>,
    /// Context cells per request; `None` keeps the size the host was started with.
    pub ctx_size: Option<u32>,
    /// Exact mode; `None` keeps the host's setting.
    pub exact: Option<bool>,
}

/// A model being loaded (in the background) to replace the current one, if any.
#[derive(Debug, Clone, Serialize, TS)]
pub struct LoadingStatus {
    pub model: String,
    pub heads: Option<String>,
    /// e.g. "fetching model", "loading model", "measuring decode costs (first load only)".
    pub stage: &'static str,
    /// Share of the current stage done (0..1), when known.
    pub progress: Option<f32>,
    pub elapsed_ms: u64,
}

struct Loading {
    model: String,
    heads: Option<String>,
    stage: &'static str,
    /// f32 bits; `NO_PROGRESS` when unknown.
    progress: Arc<AtomicU32>,
    started: Instant,
}

const NO_PROGRESS: u32 = u32::MAX;

/// What a load reports as its stage while the engine loads.
pub fn load_stage_name(stage: LoadStage) -> &'static str {
    match stage {
        LoadStage::Weights => "loading model",
        LoadStage::DecodeCosts => "measuring decode costs (first load only)",
    }
}

/// Holds the served model and loads its replacements.
pub struct ModelHost {
    current: RwLock<Option<Arc<HostedModel>>>,
    loading: Mutex<Option<Loading>>,
    last_error: Mutex<Option<AppError>>,
    /// Threads, context, slots... for every model loaded here; path, heads and tree vary.
    template: EngineConfig,
}

impl ModelHost {
    pub fn new(template: EngineConfig, current: Option<HostedModel>) -> Self {
        Self {
            current: RwLock::new(current.map(Arc::new)),
            loading: Mutex::new(None),
            last_error: Mutex::new(None),
            template,
        }
    }

    /// The model to generate with; 503 while the first model is still loading or when none
    /// could be loaded.
    pub fn current(&self) -> Result<Arc<HostedModel>, AppError> {
        if let Some(model) = self.current_if_loaded() {
            return Ok(model);
        }
        if let Some(loading) = self.loading_status() {
            let done = loading
                .progress
                .map_or_else(String::new, |share| format!(", {:.0}% done", share * 100.0));
            return Err(AppError::new(
                ErrorKind::Unavailable,
                "model_loading",
                format!(
                    "the model {} is still loading ({}{done})",
                    loading.model, loading.stage
                ),
            ));
        }
        let reason = self
            .last_error()
            .map_or_else(|| "none was given".to_owned(), |e| e.message);
        Err(AppError::new(
            ErrorKind::Unavailable,
            "no_model",
            format!("no model is loaded: {reason}"),
        ))
    }

    pub fn current_if_loaded(&self) -> Option<Arc<HostedModel>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn loading_status(&self) -> Option<LoadingStatus> {
        let loading = self.loading.lock().unwrap_or_else(PoisonError::into_inner);
        loading.as_ref().map(|l| {
            let bits = l.progress.load(Ordering::Relaxed);
            LoadingStatus {
                model: l.model.clone(),
                heads: l.heads.clone(),
                stage: l.stage,
                progress: (bits != NO_PROGRESS).then(|| f32::from_bits(bits)),
                elapsed_ms: l.started.elapsed().as_millis() as u64,
            }
        })
    }

    /// The last load failure, until a load succeeds.
    pub fn last_error(&self) -> Option<ErrorBody> {
        self.last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(AppError::body)
    }

    /// Starts loading `request` on its own thread. Refused while another load runs, and at once
    /// for a model or heads path that is not a file, or a model path that holds no model (a
    /// heads file, say), so the caller hears about mistakes directly.
    pub fn begin_load(self: &Arc<Self>, request: LoadRequest) -> Result<(), AppError> {
        if let ModelSource::Path(path) | ModelSource::Convert { from: path, .. } = &request.model {
            require_file(path, "model")?;
            // A heads file is refused here rather than after a load in the background (the
            // header alone is read); other unreadable files fail the load as before.
            if let Err(err @ engine::EngineError::HeadsNotModel { .. }) =
                engine::inspect_model(path)
            {
                return Err(err.into());
            }
        }
        if let Some(heads) = &request.heads {
            require_file(heads, "heads")?;
        }
        let model_label = match &request.model {
            ModelSource::Path(path) | ModelSource::Convert { from: path, .. } => {
                path.display().to_string()
            }
            ModelSource::Resolve(_) => "the default model".to_owned(),
        };
        let progress = Arc::new(AtomicU32::new(NO_PROGRESS));
        {
            let mut loading = self.loading.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(other) = loading.as_ref() {
                return Err(AppError::new(
                    ErrorKind::Conflict,
                    "model_loading",
                    format!("{} is loading; wait for it to finish", other.model),
                ));
            }
            *loading = Some(Loading {
                model: model_label,
                heads: request.heads.as_ref().map(|p| p.display().to_string()),
                stage: match request.model {
                    ModelSource::Path(_) => "loading model",
                    ModelSource::Resolve(_) => "fetching model",
                    ModelSource::Convert { .. } => "converting weights",
                },
                progress: progress.clone(),
                started: Instant::now(),
            });
        }
        let host = self.clone();
        let spawned = std::thread::Builder::new()
            .name("medusa-model-load".into())
            .spawn(move || host.load(request, progress));
        if let Err(err) = spawned {
            self.finish_load(Err(AppError::internal(
                "load_failed",
                format!("cannot start the loading thread: {err}"),
            )));
        }
        Ok(())
    }

    fn load(self: &Arc<Self>, request: LoadRequest, progress: Arc<AtomicU32>) {
        let span = tracing::info_span!("model_load");
        let _guard = span.enter();
        let model_path = match request.model {
            ModelSource::Path(path) => path,
            ModelSource::Resolve(resolve) => match resolve() {
                Ok(path) => {
                    self.set_stage(&path.display().to_string(), "loading model");
                    path
                }
                Err(message) => {
                    return self.finish_load(Err(AppError::internal("model_fetch_failed", message)))
                }
            },
            ModelSource::Convert { from, kind } => match self.convert(&from, kind, &progress) {
                Ok(path) => {
                    progress.store(NO_PROGRESS, Ordering::Relaxed);
                    self.set_stage(&path.display().to_string(), "loading model");
                    path
                }
                Err(err) => return self.finish_load(Err(err)),
            },
        };
        let mut config = self.template.clone();
        config.model_path = model_path;
        config.heads_path = request.heads.clone();
        config.draft_model_path = request.draft_model;
        config.feature_drafter_path = request.drafter;
        config.tree = request.tree;
        if let Some(ctx_size) = request.ctx_size {
            config.ctx_size = Some(ctx_size);
        }
        if let Some(exact) = request.exact {
            config.exact = exact;
        }
        let host = Arc::downgrade(self);
        // The template's own reporter (a command line's progress bars) hears it too.
        let also = self.template.load_progress.clone();
        config.load_progress = Some(LoadProgress::new(move |stage, share| {
            if let Some(host) = host.upgrade() {
                host.set_stage_of_load(load_stage_name(stage));
            }
            progress.store(share.to_bits(), Ordering::Relaxed);
            if let Some(also) = &also {
                also.report(stage, share);
            }
        }));
        tracing::info!(model = %config.model_path.display(), "loading");
        let result = Engine::load(config)
            .map(|engine| HostedModel::new(Arc::new(engine), request.heads))
            .map_err(AppError::from);
        self.finish_load(result);
    }

    /// `from` in `kind`'s weight format, beside it: converted now with llama.cpp's quantizer
    /// (its share done in `progress`), or found there from an earlier conversion.
    fn convert(
        &self,
        from: &Path,
        kind: QuantType,
        progress: &Arc<AtomicU32>,
    ) -> Result<PathBuf, AppError> {
        let to = converted_path(from, kind);
        if to.is_file() {
            return Ok(to);
        }
        let share = progress.clone();
        engine::quantize(
            from,
            &to,
            kind,
            self.template.resolved_threads(),
            move |done, total| {
                let done = done as f32 / total.max(1) as f32;
                share.store(done.to_bits(), Ordering::Relaxed);
            },
        )?;
        Ok(to)
    }

    /// How the served model was loaded (threads, cost cache, GPU layers), for another engine
    /// on `model`, without heads or other drafters.
    pub fn config_for(&self, model: &Path) -> EngineConfig {
        let mut config = self.template.clone();
        config.model_path = model.to_path_buf();
        config.heads_path = None;
        config.draft_model_path = None;
        config.feature_drafter_path = None;
        config.tree = None;
        config.load_progress = None;
        config
    }

    /// Keeps a failure that happened before any load could start.
    pub fn record_failure(&self, failure: AppError) {
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(failure);
    }

    /// The stage of the load under way, its model unchanged.
    fn set_stage_of_load(&self, stage: &'static str) {
        let mut loading = self.loading.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(loading) = loading.as_mut() {
            loading.stage = stage;
        }
    }

    fn set_stage(&self, model: &str, stage: &'static str) {
        let mut loading = self.loading.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(loading) = loading.as_mut() {
            loading.model = model.to_owned();
            loading.stage = stage;
        }
    }

    fn finish_load(&self, result: Result<HostedModel, AppError>) {
        let mut last_error = self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok(model) => {
                tracing::info!(model = %model.engine.info().name, "model loaded");
                // Runs on the old engine hold their own `Arc` and finish on it.
                *self.current.write().unwrap_or_else(PoisonError::into_inner) =
                    Some(Arc::new(model));
                *last_error = None;
            }
            Err(failure) => {
                tracing::warn!(code = failure.code, message = %failure.message, "model load failed");
                *last_error = Some(failure);
            }
        }
        *self.loading.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// Where `from` converted to `kind` is kept: its name with the format part replaced
/// (`m.Q4_1.gguf` -> `m.Q4_0.gguf`), or added where the name has none.
fn converted_path(from: &Path, kind: QuantType) -> PathBuf {
    let name = from.file_name().unwrap_or_default().to_string_lossy();
    let stem = name.strip_suffix(".gguf").unwrap_or(&name);
    let base = match stem.rsplit_once(['.', '-']) {
        Some((base, format))
            if engine::quantize_type_names()
                .chain(["f32"])
                .any(|known| known.eq_ignore_ascii_case(format)) =>
        {
            base
        }
        _ => stem,
    };
    from.with_file_name(format!("{base}.{}.gguf", kind.name()))
}

fn require_file(path: &std::path::Path, what: &str) -> Result<(), AppError> {
    if path.is_file() {
        Ok(())
    } else {
        Err(AppError::new(
            ErrorKind::Invalid,
            "file_not_found",
            format!("the {what} file {} does not exist", path.display()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converted_weights_are_named_for_their_format_beside_the_model() {
        let q4_0: QuantType = "q4_0".parse().unwrap();
        let beside = |name: &str| {
            converted_path(&Path::new("/models").join(name), q4_0)
                .display()
                .to_string()
        };
        assert_eq!(
            beside("SmolLM2-135M-Instruct.Q4_1.gguf"),
            "/models/SmolLM2-135M-Instruct.Q4_0.gguf"
        );
        assert_eq!(
            beside("llama-3-8b-f16.gguf"),
            "/models/llama-3-8b.Q4_0.gguf"
        );
        assert_eq!(beside("tiny.gguf"), "/models/tiny.Q4_0.gguf");
        assert_eq!(beside("m.wide4.gguf"), "/models/m.wide4.Q4_0.gguf");
    }
}
