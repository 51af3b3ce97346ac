//! Where fetched models are cached: `$MEDUSA_MODELS_DIR`, else the platform cache directory.

use std::path::PathBuf;

use crate::fetch::FetchError;

/// Overrides where models are cached.
pub const MODELS_DIR_ENV: &str = "MEDUSA_MODELS_DIR";

/// `$MEDUSA_MODELS_DIR`, else the platform cache directory (e.g. `~/.cache/medusa-playground/models`).
pub fn cache_dir() -> Result<PathBuf, FetchError> {
    if let Some(dir) = std::env::var_os(MODELS_DIR_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    dirs::cache_dir()
        .map(|d| d.join("medusa-playground").join("models"))
        .ok_or(FetchError::NoCacheDir)
}
