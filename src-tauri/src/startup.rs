//! What the app starts with: the run history and the model, loaded in the background.

use std::path::PathBuf;

use engine::EngineConfig;
use playground::catalog::Catalog;
use playground::{LoadRequest, ModelSource, Playground};

/// Which model, heads and database the app starts with: `MEDUSA_MODEL` (default: the default
/// model, fetched on first use), `MEDUSA_HEADS` (default: the default model's shipped heads,
/// when the model is the default), `MEDUSA_DB` (default: the user's data directory),
/// `MEDUSA_TREE`.
#[derive(Debug, Clone, Default)]
pub struct StartupOptions {
    pub model: Option<PathBuf>,
    pub heads: Option<PathBuf>,
    pub tree: Option<String>,
    pub db: Option<PathBuf>,
}

impl StartupOptions {
    pub fn from_env() -> Self {
        let path = |name| std::env::var_os(name).map(PathBuf::from);
        Self {
            model: path("MEDUSA_MODEL"),
            heads: path("MEDUSA_HEADS"),
            tree: std::env::var("MEDUSA_TREE").ok(),
            db: path("MEDUSA_DB"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot open the run history: {0}")]
    Store(#[from] store::StoreError),
    #[error("invalid tree: {0}")]
    Tree(String),
    #[error("cannot install the default model's heads: {0}")]
    Heads(#[from] models::FetchError),
}

/// The models cache and the model hub (`HF_ENDPOINT`, else Hugging Face): the app loads any
/// file the user picks, so the cache is the one folder it lists.
pub fn catalog() -> Result<Catalog, StartupError> {
    Ok(Catalog::new(models::cache_dir()?, Vec::new()))
}

/// Opens the run history and starts loading the model; returns without waiting for the model.
pub async fn start(options: StartupOptions) -> Result<Playground, StartupError> {
    let db = match options.db {
        Some(path) => path,
        None => store::Store::default_path()?,
    };
    let store = store::Store::open(&db).await?;
    let tree = options
        .tree
        .as_deref()
        .map(engine::TreeSpec::from_name_or_file)
        .transpose()
        .map_err(|e| StartupError::Tree(e.to_string()))?;
    let heads = models::heads_to_load(options.heads, options.model.as_deref())?;
    let model = match options.model {
        Some(path) => ModelSource::Path(path),
        None => ModelSource::Resolve(Box::new(|| {
            models::default_model_path().map_err(|e| format!("fetching the default model: {e}"))
        })),
    };
    // The path is replaced by each load; the rest sizes every model the same way.
    let mut template = EngineConfig::new(PathBuf::new());
    template.decode_costs_dir = models::decode_costs_dir().ok();
    Ok(Playground::loading(
        store,
        template,
        LoadRequest {
            model,
            heads,
            draft_model: None,
            drafter: None,
            tree,
            ctx_size: None,
            exact: None,
        },
    ))
}
