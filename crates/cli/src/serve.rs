//! `medusa serve`: the HTTP server over one engine and the run history.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::model_args::ModelArgs;

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one; the chosen address is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Run history database (default: $MEDUSA_DB, else the user's data directory).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// The built web UI to serve at `/` (default: $MEDUSA_UI_DIR, else `ui/dist` next to the
    /// program's source tree or the working directory, when built).
    #[arg(long, env = "MEDUSA_UI_DIR")]
    pub ui: Option<PathBuf>,
    /// Serve the API only, without the web UI.
    #[arg(long, conflicts_with = "ui")]
    pub no_ui: bool,
    /// Also accept requests addressed to this host name (repeatable); requests naming any host
    /// but localhost and loopback addresses are refused, which stops DNS rebinding.
    #[arg(long = "allowed-host", value_name = "NAME")]
    pub allowed_hosts: Vec<String>,
    /// Also accept state-changing requests from pages of this origin, e.g.
    /// `http://localhost:5173` (repeatable); pages of other sites are refused.
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,
    /// Require this key on every request but /health (`Authorization: Bearer KEY`, as OpenAI
    /// clients send it); browsers get in through the link printed at start. At least 16
    /// characters. A key given here shows in the process list (`ps`) to every user of the
    /// machine: prefer MEDUSA_API_KEY or --api-key-file.
    #[arg(
        long,
        env = "MEDUSA_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub api_key: Option<String>,
    /// Read the API key (see --api-key) from this file, surrounding whitespace trimmed; unlike
    /// --api-key it never shows in the process list.
    #[arg(long, value_name = "PATH", conflicts_with = "api_key")]
    pub api_key_file: Option<PathBuf>,
    /// Serve a non-loopback address without an API key (anyone who can reach it can use the
    /// model and read the history).
    #[arg(long, conflicts_with_all = ["api_key", "api_key_file"])]
    pub no_auth: bool,
    /// Also let `/api/model` load files under this directory (repeatable); by default only
    /// the models cache is loadable over HTTP.
    #[arg(long = "models-dir", value_name = "DIR")]
    pub models_dirs: Vec<PathBuf>,
    /// A remote OpenAI-compatible engine (vLLM, SGLang, llama-server, another `medusa serve`)
    /// whose models runs may name beside this one's, for this process (repeatable), e.g.
    /// `lab=http://gpu-box:8000` or `lab=http://gpu-box:8000,KEY`. A key given here shows in the
    /// process list; engines added in Settings keep theirs in a file only you can read.
    #[arg(long = "remote", value_name = "NAME=URL[,KEY]")]
    pub remotes: Vec<remote::RemoteSpec>,
    /// Let remote engines have link-local addresses (169.254.0.0/16, fe80::/10) and cloud
    /// metadata addresses, which are refused by default: whoever may add a remote engine could
    /// otherwise make the server read a cloud machine's credentials.
    #[arg(long)]
    pub allow_link_local_remotes: bool,
    /// Whose token ids `/v1/embeddings` reads: `model` (this model's), `openai` (OpenAI's
    /// tokenizer's, as tiktoken writes them; LangChain's `OpenAIEmbeddings()` sends those) or
    /// `auto`: OpenAI's where they are exactly how OpenAI's tokenizer writes a text and not how
    /// this model writes what they spell in its vocabulary, this model's otherwise.
    #[arg(long, value_name = "WHOSE", default_value = "auto")]
    pub embedding_token_ids: server::EmbeddingTokenIds,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let db = match args.db {
        Some(path) => path,
        None => store::Store::default_path().context("locating the run history database")?,
    };
    let ui_dir = if args.no_ui { None } else { ui_dir(args.ui)? };
    let api_key = api_key(args.api_key, args.api_key_file.as_deref())?;
    if !server::is_loopback_name(&args.host) && api_key.is_none() {
        anyhow::ensure!(
            args.no_auth,
            "serving on {} would let anyone who can reach it use the model and read the run \
             history; give --api-key KEY (or set MEDUSA_API_KEY, or --api-key-file PATH), or \
             --no-auth to serve it open anyway (see docs/security.md)",
            args.host
        );
        eprintln!(
            "warning: serving on {} without authentication (--no-auth): anyone who can reach it \
             can use the model and read the run history",
            args.host
        );
    }
    let remote_access = remote::RemoteAccess {
        allow_link_local: args.allow_link_local_remotes,
    };
    // Refused before the model loads, not after.
    for spec in &args.remotes {
        spec.check_access(remote_access)
            .map_err(|e| anyhow::anyhow!("--remote {}: {e}", spec.name))?;
    }
    let mut loadable_dirs = args.models_dirs;
    loadable_dirs.extend(models::cache_dir().ok());
    // The model loads while the server listens (the default model is fetched then too).
    let (model, mut template) = args.model.config_to_fetch()?;
    template.load_progress = Some(crate::load_progress::load_progress());
    let load = playground::LoadRequest {
        model: match model {
            Some(path) => playground::ModelSource::Path(path),
            None => playground::ModelSource::Resolve(Box::new(|| {
                crate::model_args::fetch_default().map_err(|e| format!("{e:#}"))
            })),
        },
        heads: template.heads_path.clone(),
        draft_model: template.draft_model_path.clone(),
        drafter: template.feature_drafter_path.clone(),
        tree: template.tree.clone(),
        ctx_size: None,
        exact: None,
    };
    let tuned = args.model.default_draft() == engine::DraftPolicy::Tuned;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let store = store::Store::open(&db)
            .await
            .with_context(|| format!("opening the run history {}", db.display()))?;
        let playground = playground::Playground::loading(store, template, load);
        // A model refused at once (a missing file) is refused before listening.
        if playground.model_host().loading_status().is_none() {
            if let Err(err) = playground.model() {
                anyhow::bail!("{}", err.message);
            }
        }
        playground.remotes().set_access(remote_access);
        add_remotes(&playground, args.remotes).await?;
        let config = server::ServerConfig {
            host: args.host,
            port: args.port,
            ui_dir,
            access: server::AccessPolicy {
                allowed_hosts: args.allowed_hosts,
                allowed_origins: args.allowed_origins,
                api_key,
                loadable_dirs,
            },
            limits: server::ConnectionLimits::default(),
            embedding_token_ids: args.embedding_token_ids,
        };
        server::serve(config, playground, move |playground| {
            if tuned {
                playground
                    .set_default_tree(playground::TreeChoice::Name("tuned".into()))
                    .map_err(|e| playground::AppError {
                        message: format!("--tree tuned: {}", e.message),
                        ..e
                    })?;
            }
            Ok(())
        })
        .await?;
        anyhow::Ok(())
    })
}

/// The API key: from `--api-key` (or `MEDUSA_API_KEY`), or read from `--api-key-file`.
fn api_key(
    given: Option<String>,
    file: Option<&std::path::Path>,
) -> anyhow::Result<Option<server::ApiKey>> {
    if let Some(file) = file {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("--api-key-file: reading {}", file.display()))?;
        let key = text.trim();
        anyhow::ensure!(
            !key.is_empty(),
            "--api-key-file: {} is empty; write the key in it (e.g. `openssl rand -hex 24 > {}`)",
            file.display(),
            file.display()
        );
        let key = server::ApiKey::new(key)
            .map_err(|e| anyhow::anyhow!("--api-key-file {}: {e}", file.display()))?;
        return Ok(Some(key));
    }
    given
        .filter(|key| !key.is_empty())
        .map(server::ApiKey::new)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--api-key: {e}"))
}

/// Adds the command line's remote engines and says what each serves (or why it did not answer:
/// it is kept, since it may start later).
async fn add_remotes(
    playground: &playground::Playground,
    specs: Vec<remote::RemoteSpec>,
) -> anyhow::Result<()> {
    for spec in specs {
        let name = spec.name.clone();
        let added = playground
            .remotes()
            .add(spec, false)
            .await
            .map_err(|e| anyhow::anyhow!("--remote {name}: {}", e.message))?;
        match &added.error {
            None => eprintln!(
                "remote engine {name} at {}: {}",
                added.url,
                added.models.join(", ")
            ),
            Some(error) => eprintln!("warning: remote engine {name}: {}", error.message),
        }
    }
    Ok(())
}

/// The UI directory: the one asked for (which must hold a built UI), else the first built one of
/// `../share/medusa-playground/ui` beside this program (where the packages install it), `ui/dist`
/// in the source tree this program was built from, and `ui/dist` in the working directory.
fn ui_dir(requested: Option<PathBuf>) -> anyhow::Result<Option<PathBuf>> {
    let built = |dir: &std::path::Path| dir.join("index.html").is_file();
    if let Some(dir) = requested {
        anyhow::ensure!(
            built(&dir),
            "{} holds no built web UI (index.html); build it with `npm run build` in ui/",
            dir.display()
        );
        return Ok(Some(dir));
    }
    let installed = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("../share/medusa-playground/ui")));
    let source_tree = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ui/dist");
    let found = installed
        .into_iter()
        .chain([source_tree, PathBuf::from("ui/dist")])
        .find(|dir| built(dir));
    if found.is_none() {
        tracing::warn!("no built web UI found; serving the API only (see `medusa serve --help`)");
    }
    Ok(found)
}
