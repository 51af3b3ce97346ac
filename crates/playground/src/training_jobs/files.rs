//! A job's files: its collected answers, and where its heads go beside the model.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use training::TrainError;

pub(super) fn data_file(dir: &Path, id: i64) -> PathBuf {
    dir.join(format!("job-{id}.data"))
}

/// Removes a file of collected answers if it is there; the bytes it held.
pub(super) fn remove_answers(path: &Path) -> u64 {
    let Ok(meta) = std::fs::metadata(path) else {
        return 0;
    };
    match std::fs::remove_file(path) {
        Ok(()) => meta.len(),
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "collected answers not removed");
            0
        }
    }
}

pub(super) fn model_name(model: &Path) -> String {
    model.file_stem().map_or_else(
        || model.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}

/// Where new heads for `model` go: `<model>.medusa.gguf` beside it, the name the models list
/// pairs with the model, or `<model>-2.medusa.gguf` and so on when that is taken by a file or
/// is in `taken` (another job's), so that existing heads are never overwritten and no two jobs
/// share a name.
pub(super) fn heads_path_for(model: &Path, taken: &HashSet<PathBuf>) -> PathBuf {
    let dir = model.parent().unwrap_or(Path::new("."));
    let stem = model_name(model);
    let unused = engine::heads_file_names(&stem)
        .map(|name| dir.join(name))
        .find(|path| !taken.contains(path) && std::fs::symlink_metadata(path).is_err());
    unused.expect("an unused name")
}

/// Moves the finished heads from `staged` to `planned`, never over a file: when a file took
/// that name while the job ran, the next free name is used. Where they went.
pub(super) fn place_heads(
    staged: &Path,
    planned: &Path,
    model: &Path,
    taken: &HashSet<PathBuf>,
) -> Result<PathBuf, TrainError> {
    let mut taken = taken.clone();
    let mut target = planned.to_path_buf();
    loop {
        // A hard link fails where the name exists, where a rename would replace it.
        match std::fs::hard_link(staged, &target) {
            Ok(()) => {
                let _ = std::fs::remove_file(staged);
                return Ok(target);
            }
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                tracing::warn!(path = %target.display(), "heads file appeared while the job ran; writing beside it");
                taken.insert(target);
                target = heads_path_for(model, &taken);
            }
            // A filesystem without hard links: renamed, after one more look.
            Err(_) if std::fs::symlink_metadata(&target).is_err() => {
                std::fs::rename(staged, &target).map_err(|e| TrainError::Data {
                    path: target.clone(),
                    message: e.to_string(),
                })?;
                return Ok(target);
            }
            Err(err) => {
                return Err(TrainError::Data {
                    path: target,
                    message: err.to_string(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests;
