//! The GGUF files in a models directory: listed with their sizes and weight formats (as their
//! headers say, else their names; downloads in progress too, to resume), and deleted by name.

use std::path::{Path, PathBuf};

use serde::Serialize;
use ts_rs::TS;

use crate::download::PARTIAL_SUFFIX;
use crate::gguf_header::{header_facts, HeaderFacts};
use crate::quant::quantization_of;

/// A model file in a models directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
pub struct LocalModel {
    /// The model's file name (without `.part` for a download in progress).
    pub file_name: String,
    pub path: PathBuf,
    pub size_bytes: u64,
    pub quantization: Option<String>,
    /// A download that has not finished: `size_bytes` arrived so far.
    pub partial: bool,
    /// Medusa heads (`*.medusa.gguf`) rather than a model.
    pub heads: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("'{0}' is not the name of a GGUF file in the models directory")]
    InvalidName(String),
    #[error("{0} is not in the models directory")]
    NotFound(String),
    #[error("i/o error on {path}: {reason}")]
    Io { path: String, reason: String },
}

/// The GGUF files directly in `dir`, by name; a missing directory holds none.
pub fn local_models(dir: &Path) -> Result<Vec<LocalModel>, LocalError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(dir, &e)),
    };
    let mut models: Vec<LocalModel> = entries
        .filter_map(Result::ok)
        // Followed through links: a folder of links to models kept elsewhere lists them.
        .filter(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.is_file()))
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let (file_name, partial) = match name.strip_suffix(PARTIAL_SUFFIX) {
                Some(stem) => (stem.to_owned(), true),
                None => (name, false),
            };
            if !is_gguf(&file_name) || file_name.starts_with('.') {
                return None;
            }
            // Read once for both the format and whether it holds heads.
            let header = header_facts(&e.path());
            Some(LocalModel {
                quantization: quantization_of(&header, &file_name).map(str::to_owned),
                heads: is_heads(&header, &file_name, partial),
                size_bytes: std::fs::metadata(e.path()).ok()?.len(),
                path: e.path(),
                file_name,
                partial,
            })
        })
        .collect();
    models.sort_by(|a, b| (&a.file_name, a.partial).cmp(&(&b.file_name, b.partial)));
    Ok(models)
}

/// Deletes the model `file_name` from `dir` (with `partial`, its unfinished download). Only a
/// plain file directly in `dir` is deleted.
pub fn delete_local_model(dir: &Path, file_name: &str, partial: bool) -> Result<(), LocalError> {
    if !is_gguf(file_name)
        || file_name.starts_with('.')
        || file_name.contains(['/', '\\'])
        || file_name.chars().any(char::is_control)
    {
        return Err(LocalError::InvalidName(file_name.to_owned()));
    }
    let name = if partial {
        format!("{file_name}{PARTIAL_SUFFIX}")
    } else {
        file_name.to_owned()
    };
    let path = dir.join(&name);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_file() => std::fs::remove_file(&path).map_err(|e| io_error(&path, &e)),
        Ok(_) => Err(LocalError::InvalidName(name)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(LocalError::NotFound(name)),
        Err(e) => Err(io_error(&path, &e)),
    }
}

/// Medusa heads by their name (`*.medusa.gguf`), or by what their header says whatever they are
/// called, so that heads are never offered as a model.
fn is_heads(header: &HeaderFacts, file_name: &str, partial: bool) -> bool {
    file_name.to_ascii_lowercase().ends_with(".medusa.gguf")
        || (!partial && header.architecture.as_deref() == Some("medusa"))
}

fn is_gguf(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with(".gguf")
}

fn io_error(path: &Path, e: &std::io::Error) -> LocalError {
    LocalError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_models_and_unfinished_downloads_and_deletes_only_what_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let write =
            |name: &str, bytes: usize| std::fs::write(dir.path().join(name), vec![0; bytes]);
        write("b-Q8_0.gguf", 3).unwrap();
        write("a-q4_k_m.gguf.part", 2).unwrap();
        write("a.medusa.gguf", 1).unwrap();
        write("notes.txt", 1).unwrap();
        std::fs::create_dir(dir.path().join("sub.gguf")).unwrap();
        let listed: Vec<(String, u64, Option<String>, bool, bool)> = local_models(dir.path())
            .unwrap()
            .into_iter()
            .map(|m| {
                (
                    m.file_name,
                    m.size_bytes,
                    m.quantization,
                    m.partial,
                    m.heads,
                )
            })
            .collect();
        assert_eq!(
            listed,
            vec![
                (
                    "a-q4_k_m.gguf".into(),
                    2,
                    Some("Q4_K_M".into()),
                    true,
                    false
                ),
                ("a.medusa.gguf".into(), 1, None, false, true),
                ("b-Q8_0.gguf".into(), 3, Some("Q8_0".into()), false, false),
            ]
        );
        for bad in ["../b-Q8_0.gguf", "notes.txt", "sub/x.gguf", ".x.gguf"] {
            assert!(matches!(
                delete_local_model(dir.path(), bad, false),
                Err(LocalError::InvalidName(_))
            ));
        }
        assert!(matches!(
            delete_local_model(dir.path(), "sub.gguf", false),
            Err(LocalError::InvalidName(_))
        ));
        assert!(matches!(
            delete_local_model(dir.path(), "a-q4_k_m.gguf", false),
            Err(LocalError::NotFound(_))
        ));
        delete_local_model(dir.path(), "a-q4_k_m.gguf", true).unwrap();
        delete_local_model(dir.path(), "b-Q8_0.gguf", false).unwrap();
        let left: Vec<String> = local_models(dir.path())
            .unwrap()
            .into_iter()
            .map(|m| m.file_name)
            .collect();
        assert_eq!(left, vec!["a.medusa.gguf".to_owned()]);
        assert!(local_models(&dir.path().join("missing"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn heads_under_any_name_are_told_from_models_by_their_header() {
        let dir = tempfile::tempdir().unwrap();
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("heads")
            .join(crate::DEFAULT_HEADS_FILE);
        std::fs::copy(&shipped, dir.path().join("renamed.gguf")).unwrap();
        std::fs::write(dir.path().join("other.gguf"), b"GGUF not really").unwrap();
        let listed: Vec<(String, bool)> = local_models(dir.path())
            .unwrap()
            .into_iter()
            .map(|m| (m.file_name, m.heads))
            .collect();
        assert_eq!(
            listed,
            [("other.gguf".into(), false), ("renamed.gguf".into(), true)]
        );
    }

    #[cfg(unix)]
    #[test]
    fn links_to_models_are_listed_and_never_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let model = elsewhere.path().join("m-Q4_0.gguf");
        std::fs::write(&model, vec![0; 5]).unwrap();
        std::os::unix::fs::symlink(&model, dir.path().join("m-Q4_0.gguf")).unwrap();
        std::os::unix::fs::symlink(
            elsewhere.path().join("gone.gguf"),
            dir.path().join("gone.gguf"),
        )
        .unwrap();
        let listed: Vec<(String, u64)> = local_models(dir.path())
            .unwrap()
            .into_iter()
            .map(|m| (m.file_name, m.size_bytes))
            .collect();
        assert_eq!(listed, vec![("m-Q4_0.gguf".to_owned(), 5)]);
        // Only plain files are deleted: a link is refused, and what it points to stays.
        assert!(matches!(
            delete_local_model(dir.path(), "m-Q4_0.gguf", false),
            Err(LocalError::InvalidName(_))
        ));
        assert!(model.exists());
    }
}
