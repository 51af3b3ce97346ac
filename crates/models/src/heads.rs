//! Medusa heads for the default model, trained with `medusa train-heads` and shipped inside the
//! program; written next to the cached model on first use.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::fetch::FetchError;

/// File name of the default model's heads in the cache.
pub const DEFAULT_HEADS_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.medusa.gguf";

static DEFAULT_HEADS: &[u8] = include_bytes!("../heads/SmolLM2-135M-Instruct.Q4_1.medusa.gguf");

/// Writes the default heads into `dir` unless an identical copy is there; returns their path.
pub fn install_default_heads(dir: &Path) -> Result<PathBuf, FetchError> {
    let target = dir.join(DEFAULT_HEADS_FILE);
    if std::fs::read(&target).is_ok_and(|bytes| bytes == DEFAULT_HEADS) {
        return Ok(target);
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FetchError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    // Written aside and renamed, so a reader never sees half a file.
    let mut staged = tempfile::NamedTempFile::new_in(dir).map_err(io(dir))?;
    staged.write_all(DEFAULT_HEADS).map_err(io(&target))?;
    staged.persist(&target).map_err(|e| FetchError::Io {
        path: target.clone(),
        source: e.error,
    })?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_once_and_repairs_a_damaged_copy() {
        let dir = tempfile::tempdir().unwrap();
        let path = install_default_heads(dir.path()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), DEFAULT_HEADS);
        assert_eq!(&DEFAULT_HEADS[..4], b"GGUF");
        std::fs::write(&path, b"GGUF broken").unwrap();
        assert_eq!(install_default_heads(dir.path()).unwrap(), path);
        assert_eq!(std::fs::read(&path).unwrap(), DEFAULT_HEADS);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
