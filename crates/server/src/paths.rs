//! Which files `/api/model` may load: those under the models cache and the directories the
//! operator named. Over HTTP a path is somebody else's input, so any other path is refused with
//! one answer whether or not the file exists, and the file is never opened. (The desktop app,
//! where the user picks files in a dialog, does not come through here.)

use std::path::{Path, PathBuf};

use engine::TreeSpec;
use playground::{AppError, ErrorKind, LoadModelRequest};

/// Refuses a request naming a model, heads or tree file outside `dirs`.
pub(crate) fn check_load_request(
    dirs: &[PathBuf],
    request: &LoadModelRequest,
) -> Result<(), AppError> {
    check_loadable(dirs, &request.model)?;
    if let Some(heads) = &request.heads {
        check_loadable(dirs, heads)?;
    }
    if let Some(tree) = request.tree.as_deref().map(str::trim) {
        if !tree.is_empty() && !TreeSpec::is_builtin_name(tree) {
            check_loadable(dirs, Path::new(tree))?;
        }
    }
    Ok(())
}

fn check_loadable(dirs: &[PathBuf], path: &Path) -> Result<(), AppError> {
    // Links and `..` resolved, so that no path leads out of an allowed directory. A missing
    // file is placed by its directory, so that inside an allowed one it is reported missing.
    let resolved = std::fs::canonicalize(path).ok().or_else(|| {
        let dir = std::fs::canonicalize(path.parent()?).ok()?;
        Some(dir.join(path.file_name()?))
    });
    let allowed = resolved.is_some_and(|file| {
        dirs.iter()
            .filter_map(|dir| std::fs::canonicalize(dir).ok())
            .any(|dir| file.starts_with(dir))
    });
    if allowed {
        return Ok(());
    }
    Err(AppError::new(
        ErrorKind::Forbidden,
        "path_not_allowed",
        format!(
            "{} is not a file in the models directory or a directory given with --models-dir; \
             only those can be loaded over HTTP",
            path.display()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(model: &Path, heads: Option<&Path>, tree: Option<&str>) -> LoadModelRequest {
        LoadModelRequest {
            model: model.to_path_buf(),
            heads: heads.map(Path::to_path_buf),
            tree: tree.map(str::to_owned),
            ctx_size: None,
        }
    }

    fn code(dirs: &[PathBuf], request: &LoadModelRequest) -> Option<&'static str> {
        check_load_request(dirs, request).err().map(|e| e.code)
    }

    #[test]
    fn only_files_under_the_allowed_directories_load() {
        let allowed = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let model = allowed.path().join("m.gguf");
        let tree = allowed.path().join("tree.json");
        let secret = outside.path().join("secret.gguf");
        for file in [&model, &tree, &secret] {
            std::fs::write(file, b"x").unwrap();
        }
        let dirs = vec![allowed.path().to_path_buf()];
        assert_eq!(code(&dirs, &request(&model, None, None)), None);
        assert_eq!(
            code(&dirs, &request(&model, Some(&model), Some("mc_sim_7b_63"))),
            None
        );
        assert_eq!(code(&dirs, &request(&model, None, tree.to_str())), None);
        let escape = allowed
            .path()
            .join("../")
            .join(outside.path().file_name().unwrap());
        for refused in [
            request(&secret, None, None),
            request(&escape.join("secret.gguf"), None, None),
            request(Path::new("/etc/passwd"), None, None),
            request(&model, Some(&secret), None),
            request(&model, None, Some("/etc/passwd")),
        ] {
            assert_eq!(
                code(&dirs, &refused),
                Some("path_not_allowed"),
                "{refused:?}"
            );
        }
        // A missing file gets the same answer as an existing one outside.
        let missing = request(&outside.path().join("missing.gguf"), None, None);
        let existing = request(&secret, None, None);
        let message = |r: &LoadModelRequest| {
            check_load_request(&dirs, r)
                .unwrap_err()
                .message
                .replace(&r.model.display().to_string(), "PATH")
        };
        assert_eq!(message(&missing), message(&existing));
        // A link inside the allowed directory to a file outside it is outside.
        #[cfg(unix)]
        {
            let link = allowed.path().join("link.gguf");
            std::os::unix::fs::symlink(&secret, &link).unwrap();
            assert_eq!(
                code(&dirs, &request(&link, None, None)),
                Some("path_not_allowed")
            );
        }
        assert_eq!(
            code(&[], &request(&model, None, None)),
            Some("path_not_allowed")
        );
    }
}
