//! Models to choose from: the GGUF files in the folders the playground may load from, and a
//! model hub's catalog (search, a repository's files, downloads into the models cache with
//! progress, cancel and resume). The HTTP server and the desktop app answer with these.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use models::{DownloadProgress, Downloaded, Hub, HubError, LocalError, RepoFiles};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::error::{AppError, ErrorBody, ErrorKind};

/// The model files the playground may load, folder by folder.
#[derive(Debug, Clone, Serialize, TS)]
pub struct ModelsOnDisk {
    /// Where downloads are saved (the models cache).
    pub download_dir: String,
    pub folders: Vec<ModelsFolder>,
}

#[derive(Debug, Clone, Serialize, TS)]
pub struct ModelsFolder {
    pub path: String,
    pub models: Vec<DiskModel>,
}

/// A GGUF file in one of the folders.
#[derive(Debug, Clone, Serialize, TS)]
pub struct DiskModel {
    pub file_name: String,
    pub path: String,
    pub size_bytes: u64,
    /// The weight format its name says, e.g. `Q4_K_M`.
    pub quantization: Option<String>,
    /// A download that has not finished (`size_bytes` arrived so far); downloading it again
    /// resumes.
    pub partial: bool,
    /// Medusa heads rather than a model.
    pub heads: bool,
    /// The model or heads running now.
    pub loaded: bool,
    /// In the download folder, so it may be deleted from here.
    pub deletable: bool,
}

/// Search results, or the suggested models when the search is empty.
#[derive(Debug, Clone, Serialize, TS)]
pub struct CatalogSearch {
    /// The hub asked (`HF_ENDPOINT`, else Hugging Face).
    pub hub: String,
    pub suggested: bool,
    pub results: Vec<CatalogEntry>,
    /// This machine's memory, which the suggested models are sized against; `None` where the
    /// system does not say.
    pub memory_bytes: Option<u64>,
}

/// A repository of GGUF files.
#[derive(Debug, Clone, Serialize, TS)]
pub struct CatalogEntry {
    /// `owner/name`.
    pub repo: String,
    pub downloads: Option<u64>,
    pub likes: Option<u64>,
    pub license: Option<String>,
    /// For suggestions: the parameter count and why it is suggested.
    pub parameters: Option<String>,
    pub note: Option<String>,
}

/// Download a repository's file into the models cache.
#[derive(Debug, Clone, Deserialize, TS)]
pub struct DownloadRequest {
    pub repo: String,
    /// The file's path in the repository.
    pub file: String,
}

/// Deletes a file from the download folder.
#[derive(Debug, Clone, Deserialize, TS)]
pub struct DeleteModelRequest {
    pub file_name: String,
    /// The unfinished download of that name rather than the model.
    #[serde(default)]
    pub partial: bool,
}

/// What a download reports, in order: progress (the first one says where it resumed), then
/// `done` or `failed`.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DownloadEvent {
    Progress(DownloadProgress),
    Done(Downloaded),
    Failed { error: ErrorBody },
}

/// The folders, the hub and the downloads under way.
pub struct Catalog {
    hub: Result<Hub, String>,
    download_dir: PathBuf,
    folders: Vec<PathBuf>,
    /// Downloads under way by file name, each with its cancel flag.
    active: Mutex<HashMap<String, Arc<AtomicBool>>>,
}

impl Catalog {
    /// The hub from the environment (`HF_ENDPOINT`, `HF_TOKEN`); downloads go to
    /// `download_dir`, listed first among `folders`.
    pub fn new(download_dir: PathBuf, folders: Vec<PathBuf>) -> Self {
        Self::with_hub(Hub::from_env(), download_dir, folders)
    }

    pub fn with_hub(
        hub: Result<Hub, HubError>,
        download_dir: PathBuf,
        folders: Vec<PathBuf>,
    ) -> Self {
        let mut all = vec![download_dir.clone()];
        for folder in folders {
            if !all.contains(&folder) {
                all.push(folder);
            }
        }
        Self {
            hub: hub.map_err(|e| e.to_string()),
            download_dir,
            folders: all,
            active: Mutex::default(),
        }
    }

    /// Every GGUF file in the folders; `loaded` marks the files running now.
    pub fn on_disk(&self, loaded: &[PathBuf]) -> Result<ModelsOnDisk, AppError> {
        let loaded: Vec<PathBuf> = loaded
            .iter()
            .filter_map(|p| p.canonicalize().ok())
            .collect();
        let folders = self
            .folders
            .iter()
            .map(|folder| {
                let deletable = folder == &self.download_dir;
                let models = models::local_models(folder)
                    .map_err(local_error)?
                    .into_iter()
                    .map(|m| DiskModel {
                        loaded: !m.partial
                            && m.path.canonicalize().is_ok_and(|p| loaded.contains(&p)),
                        path: m.path.display().to_string(),
                        file_name: m.file_name,
                        size_bytes: m.size_bytes,
                        quantization: m.quantization,
                        partial: m.partial,
                        heads: m.heads,
                        deletable,
                    })
                    .collect();
                Ok(ModelsFolder {
                    path: folder.display().to_string(),
                    models,
                })
            })
            .collect::<Result<_, AppError>>()?;
        Ok(ModelsOnDisk {
            download_dir: self.download_dir.display().to_string(),
            folders,
        })
    }

    /// Repositories matching `query`, or the suggested ones when it is empty.
    pub async fn search(&self, query: &str) -> Result<CatalogSearch, AppError> {
        let hub = self.hub()?;
        if query.trim().is_empty() {
            return Ok(CatalogSearch {
                hub: hub.endpoint().to_owned(),
                suggested: true,
                results: models::SUGGESTED
                    .iter()
                    .map(|s| CatalogEntry {
                        repo: s.repo.to_owned(),
                        downloads: None,
                        likes: None,
                        license: None,
                        parameters: Some(s.parameters.to_owned()),
                        note: Some(s.why.to_owned()),
                    })
                    .collect(),
                memory_bytes: models::memory_bytes(),
            });
        }
        let found = hub.search(query, 30).await.map_err(hub_error)?;
        Ok(CatalogSearch {
            hub: hub.endpoint().to_owned(),
            suggested: false,
            results: found
                .into_iter()
                .map(|r| CatalogEntry {
                    repo: r.id,
                    downloads: Some(r.downloads),
                    likes: Some(r.likes),
                    license: r.license,
                    parameters: None,
                    note: None,
                })
                .collect(),
            memory_bytes: models::memory_bytes(),
        })
    }

    pub async fn files(&self, repo: &str) -> Result<RepoFiles, AppError> {
        self.hub()?.files(repo).await.map_err(hub_error)
    }

    /// Downloads a file into the download folder; `progress` hears how far it got, and the
    /// download stops (keeping what arrived) when it answers `Break` or [`Self::cancel`] is
    /// called for the file.
    #[tracing::instrument(skip(self, progress), fields(repo = %request.repo, file = %request.file))]
    pub async fn download(
        &self,
        request: &DownloadRequest,
        mut progress: impl FnMut(DownloadProgress) -> ControlFlow<()>,
    ) -> Result<Downloaded, AppError> {
        let hub = self.hub()?;
        models::check_repo_id(&request.repo).map_err(hub_error)?;
        models::check_file_path(&request.file).map_err(hub_error)?;
        let file = hub
            .file(&request.repo, &request.file)
            .await
            .map_err(hub_error)?;
        if file.split {
            return Err(AppError::new(
                ErrorKind::Invalid,
                "split_model",
                format!(
                    "{} is one part of a model split over several files, which cannot be loaded here yet; choose a file that is whole",
                    file.path
                ),
            ));
        }
        let name = file.file_name().to_owned();
        let cancel = Arc::new(AtomicBool::new(false));
        let _active = ActiveDownload::start(&self.active, &name, cancel.clone())?;
        hub.download(&file, &self.download_dir, |p| {
            if cancel.load(Ordering::SeqCst) {
                return ControlFlow::Break(());
            }
            progress(p)
        })
        .await
        .map_err(hub_error)
    }

    /// Stops the download of `file_name`; false when none is under way.
    pub fn cancel(&self, file_name: &str) -> bool {
        let active = self.active.lock().unwrap_or_else(|e| e.into_inner());
        active
            .get(file_name)
            .map(|flag| flag.store(true, Ordering::SeqCst))
            .is_some()
    }

    /// Deletes a file of the download folder, unless it runs now or is being downloaded.
    pub fn delete(&self, request: &DeleteModelRequest, loaded: &[PathBuf]) -> Result<(), AppError> {
        let path = self.download_dir.join(&request.file_name);
        let running = path.canonicalize().is_ok_and(|p| {
            loaded
                .iter()
                .filter_map(|l| l.canonicalize().ok())
                .any(|l| l == p)
        });
        if running && !request.partial {
            return Err(AppError::new(
                ErrorKind::Conflict,
                "model_in_use",
                format!(
                    "{} is loaded now; load another model first",
                    request.file_name
                ),
            ));
        }
        if self.is_downloading(&request.file_name) {
            return Err(AppError::new(
                ErrorKind::Conflict,
                "download_in_progress",
                format!("{} is being downloaded; cancel it first", request.file_name),
            ));
        }
        models::delete_local_model(&self.download_dir, &request.file_name, request.partial)
            .map_err(local_error)
    }

    fn is_downloading(&self, file_name: &str) -> bool {
        let active = self.active.lock().unwrap_or_else(|e| e.into_inner());
        active.contains_key(file_name)
    }

    fn hub(&self) -> Result<&Hub, AppError> {
        self.hub.as_ref().map_err(|reason| {
            AppError::new(ErrorKind::Unavailable, "hub_not_configured", reason.clone())
        })
    }
}

/// A download's place in the list of those under way, left when it ends however it ends.
struct ActiveDownload<'a> {
    active: &'a Mutex<HashMap<String, Arc<AtomicBool>>>,
    name: String,
}

impl<'a> ActiveDownload<'a> {
    fn start(
        active: &'a Mutex<HashMap<String, Arc<AtomicBool>>>,
        name: &str,
        cancel: Arc<AtomicBool>,
    ) -> Result<Self, AppError> {
        let mut map = active.lock().unwrap_or_else(|e| e.into_inner());
        if map.contains_key(name) {
            return Err(AppError::new(
                ErrorKind::Conflict,
                "download_in_progress",
                format!("{name} is already being downloaded"),
            ));
        }
        map.insert(name.to_owned(), cancel);
        Ok(Self {
            active,
            name: name.to_owned(),
        })
    }
}

impl Drop for ActiveDownload<'_> {
    fn drop(&mut self) {
        let mut map = self.active.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&self.name);
    }
}

fn hub_error(e: HubError) -> AppError {
    let message = e.to_string();
    let detail = match &e {
        HubError::Unreachable { reason, .. } => Some(reason.clone()),
        _ => None,
    };
    let (kind, code) = match e {
        HubError::InvalidInput(_) => (ErrorKind::Invalid, "invalid_input"),
        HubError::Unreachable { .. } => (ErrorKind::Upstream, "hub_unreachable"),
        HubError::Status { status: 404, .. } | HubError::NoSuchFile { .. } => {
            (ErrorKind::NotFound, "not_found")
        }
        HubError::Refused { .. } => (ErrorKind::Upstream, "hub_refused"),
        HubError::Status { .. } | HubError::BadAnswer { .. } => (ErrorKind::Upstream, "hub_error"),
        HubError::Cancelled { .. } => (ErrorKind::Conflict, "download_cancelled"),
        HubError::Interrupted { .. } => (ErrorKind::Upstream, "download_interrupted"),
        HubError::Size { .. } | HubError::Checksum { .. } => {
            (ErrorKind::Upstream, "checksum_mismatch")
        }
        HubError::Io { .. } => (ErrorKind::Internal, "io_error"),
    };
    let error = AppError::new(kind, code, message);
    match detail {
        Some(detail) => error.with_detail(detail),
        None => error,
    }
}

fn local_error(e: LocalError) -> AppError {
    let message = e.to_string();
    match e {
        LocalError::InvalidName(_) => AppError::new(ErrorKind::Invalid, "invalid_input", message),
        LocalError::NotFound(_) => AppError::not_found(message),
        LocalError::Io { .. } => AppError::internal("io_error", message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unreachable_hub_is_said_plainly_with_its_cause_kept_as_detail() {
        // Port 1 on loopback: nothing listens there.
        let hub = Hub::new("http://127.0.0.1:1", None).unwrap();
        let err = hub_error(hub.search("smol", 5).await.unwrap_err());
        assert_eq!(err.code, "hub_unreachable");
        assert_eq!(err.kind, ErrorKind::Upstream);
        assert_eq!(
            err.message,
            "cannot reach 127.0.0.1:1 (offline?): the connection was refused. Models already on \
             disk, and a model file opened by its path, still work"
        );
        let body = err.body();
        let detail = body.detail.expect("the network's own words");
        assert!(detail.contains("onnection refused"), "{detail}");
        assert!(!body.message.contains("error sending request"));
    }
}
