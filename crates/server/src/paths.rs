//! Which files `/api/model` may load: those under the models cache and the directories the
//! operator named. Over HTTP a path is somebody else's input, so any other path is refused with
//! one answer whether or not the file exists, and the file is never opened. The files the server
//! has loaded already (the operator's choice at start-up) may be loaded again, with another
//! context size say. (The desktop app, where the user picks files in a dialog, does not come
//! through here.)

use std::path::{Path, PathBuf};

use engine::TreeSpec;
use playground::{AppError, ErrorKind, LoadModelRequest};
use store::TrainingJob;

/// Where files may be loaded from: directories, and files loaded already.
pub(crate) struct Loadable<'a> {
    pub dirs: &'a [PathBuf],
    pub loaded: &'a [PathBuf],
}

/// Refuses a request naming a model, heads, draft model, drafter or tree file that is not
/// loadable.
pub(crate) fn check_load_request(
    loadable: &Loadable<'_>,
    request: &LoadModelRequest,
) -> Result<(), AppError> {
    check_loadable(loadable, &request.model)?;
    for file in request
        .heads
        .iter()
        .chain(&request.draft_model)
        .chain(&request.drafter)
    {
        check_loadable(loadable, file)?;
    }
    if let Some(tree) = request.tree.as_deref().map(str::trim) {
        if !tree.is_empty() && !TreeSpec::is_builtin_name(tree) {
            check_loadable(loadable, Path::new(tree))?;
        }
    }
    Ok(())
}

/// Refuses a stored training job whose model or prompt file is not loadable: its paths may
/// come from an import, and a resume reads them.
pub(crate) fn check_training_job(
    loadable: &Loadable<'_>,
    job: &TrainingJob,
) -> Result<(), AppError> {
    playground::training_job_inputs(job)
        .iter()
        .try_for_each(|file| check_loadable(loadable, file))
}

pub(crate) fn check_loadable(loadable: &Loadable<'_>, path: &Path) -> Result<(), AppError> {
    // Links and `..` resolved, so that no path leads out of an allowed directory. A missing
    // file is placed by its directory, so that inside an allowed one it is reported missing.
    let resolved = std::fs::canonicalize(path).ok().or_else(|| {
        let dir = std::fs::canonicalize(path.parent()?).ok()?;
        Some(dir.join(path.file_name()?))
    });
    let allowed = resolved.is_some_and(|file| {
        let canonical = |paths: &[PathBuf]| {
            paths
                .iter()
                .filter_map(|p| std::fs::canonicalize(p).ok())
                .collect::<Vec<_>>()
        };
        canonical(loadable.dirs)
            .iter()
            .any(|dir| file.starts_with(dir))
            || canonical(loadable.loaded).contains(&file)
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
            draft_model: None,
            drafter: None,
            tree: tree.map(str::to_owned),
            ctx_size: None,
            exact: None,
            convert_to: None,
        }
    }

    fn code(dirs: &[PathBuf], request: &LoadModelRequest) -> Option<&'static str> {
        let loadable = Loadable { dirs, loaded: &[] };
        check_load_request(&loadable, request).err().map(|e| e.code)
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
            LoadModelRequest {
                draft_model: Some(secret.clone()),
                ..request(&model, None, None)
            },
            LoadModelRequest {
                drafter: Some(secret.clone()),
                ..request(&model, None, None)
            },
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
            let loadable = Loadable {
                dirs: &dirs,
                loaded: &[],
            };
            check_load_request(&loadable, r)
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

    #[test]
    fn the_files_loaded_already_may_load_again() {
        let outside = tempfile::tempdir().unwrap();
        let model = outside.path().join("m.gguf");
        let heads = outside.path().join("h.medusa.gguf");
        let other = outside.path().join("other.gguf");
        for file in [&model, &heads, &other] {
            std::fs::write(file, b"x").unwrap();
        }
        let loaded = [model.clone(), heads.clone()];
        let loadable = Loadable {
            dirs: &[],
            loaded: &loaded,
        };
        let check = |r: &LoadModelRequest| check_load_request(&loadable, r).err().map(|e| e.code);
        assert_eq!(check(&request(&model, Some(&heads), None)), None);
        let via_dots = outside.path().join(".").join("m.gguf");
        assert_eq!(check(&request(&via_dots, None, None)), None);
        assert_eq!(
            check(&request(&other, Some(&heads), None)),
            Some("path_not_allowed")
        );
    }
}
