//! Downloading a hub file into a models directory: into `NAME.part` first, resumed from there
//! with an HTTP range after a cut or a cancel, checked against the size and SHA-256 the hub
//! lists, and only then renamed to `NAME`, so that a models directory never holds a partial or
//! corrupt model under a model's name.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use ts_rs::TS;

use crate::fetch::file_sha256;
use crate::hub::{Hub, HubError, HubFile};

/// How far a download has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
pub struct DownloadProgress {
    /// Bytes on disk so far, what an earlier attempt kept included.
    pub downloaded: u64,
    pub total: u64,
    /// Bytes kept from an earlier attempt that this one started from.
    pub resumed_from: u64,
}

/// A finished download.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
pub struct Downloaded {
    pub path: PathBuf,
    /// False when the file was already in the directory.
    pub downloaded: bool,
    /// Whether the content was checked against a SHA-256 the hub listed.
    pub checksum_verified: bool,
}

/// At most this often is progress reported (and always at the start and the end).
const PROGRESS_INTERVAL: Duration = Duration::from_millis(200);

/// Suffix of a download in progress.
pub const PARTIAL_SUFFIX: &str = ".part";

impl Hub {
    /// Downloads `file` into `dir`, resuming a `.part` file an earlier attempt left. `progress`
    /// hears how far it got; answering `Break` cancels it, keeping what arrived.
    #[tracing::instrument(skip(self, progress), fields(repo = %file.repo, file = %file.path))]
    pub async fn download(
        &self,
        file: &HubFile,
        dir: &Path,
        mut progress: impl FnMut(DownloadProgress) -> ControlFlow<()>,
    ) -> Result<Downloaded, HubError> {
        crate::hub::check_file_path(&file.path)?;
        let name = file.file_name().to_owned();
        let target = dir.join(&name);
        if std::fs::metadata(&target).is_ok_and(|m| m.len() == file.size_bytes) {
            return Ok(Downloaded {
                path: target,
                downloaded: false,
                checksum_verified: false,
            });
        }
        tokio::fs::create_dir_all(dir).await.map_err(io_err(dir))?;
        let part = dir.join(format!("{name}{PARTIAL_SUFFIX}"));
        let mut kept = tokio::fs::metadata(&part).await.map_or(0, |m| m.len());
        if kept > file.size_bytes {
            kept = 0;
        }
        if kept < file.size_bytes {
            kept = self.fetch_into(file, &part, kept, &mut progress).await?;
        }
        if kept < file.size_bytes {
            return Err(HubError::Interrupted {
                file: name,
                kept,
                reason: "the hub ended the transfer early".into(),
            });
        }
        if let Some(expected) = &file.sha256 {
            let check = part.clone();
            let actual = tokio::task::spawn_blocking(move || file_sha256(&check))
                .await
                .map_err(|e| HubError::Io {
                    path: part.display().to_string(),
                    reason: e.to_string(),
                })?
                .map_err(|e| HubError::Io {
                    path: part.display().to_string(),
                    reason: e.to_string(),
                })?;
            if &actual != expected {
                let _ = tokio::fs::remove_file(&part).await;
                return Err(HubError::Checksum {
                    file: name,
                    expected: expected.clone(),
                    actual,
                });
            }
        }
        // Same directory, so the rename is atomic: a reader sees no model or a whole one.
        tokio::fs::rename(&part, &target)
            .await
            .map_err(io_err(&target))?;
        Ok(Downloaded {
            path: target,
            downloaded: true,
            checksum_verified: file.sha256.is_some(),
        })
    }

    /// Appends the file's bytes from `kept` on to `part`; returns the bytes it then holds.
    async fn fetch_into(
        &self,
        file: &HubFile,
        part: &Path,
        mut kept: u64,
        progress: &mut impl FnMut(DownloadProgress) -> ControlFlow<()>,
    ) -> Result<u64, HubError> {
        let name = file.file_name().to_owned();
        let mut request = self.authorized(self.client.get(self.file_url(file)));
        if kept > 0 {
            request = request.header(reqwest::header::RANGE, format!("bytes={kept}-"));
        }
        let response = request.send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status();
        let resumed = status == reqwest::StatusCode::PARTIAL_CONTENT;
        if !status.is_success() {
            return Err(HubError::from_status(status.as_u16(), &file.path));
        }
        if !resumed {
            // The server sends the whole file: start again.
            kept = 0;
        }
        let mut out = tokio::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(resumed)
            .truncate(!resumed)
            .open(part)
            .await
            .map_err(io_err(part))?;
        let resumed_from = kept;
        let report = |downloaded| DownloadProgress {
            downloaded,
            total: file.size_bytes,
            resumed_from,
        };
        let mut last_report = Instant::now();
        let mut cancelled = progress(report(kept)).is_break();
        let mut body = response.bytes_stream();
        while !cancelled {
            let Some(chunk) = body.next().await else {
                break;
            };
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(e) => {
                    out.flush().await.map_err(io_err(part))?;
                    return Err(HubError::Interrupted {
                        file: name,
                        kept,
                        reason: crate::hub::with_causes(&e.without_url()),
                    });
                }
            };
            if kept + chunk.len() as u64 > file.size_bytes {
                let _ = tokio::fs::remove_file(part).await;
                return Err(HubError::Size {
                    file: name,
                    expected: file.size_bytes,
                    got: kept + chunk.len() as u64,
                });
            }
            out.write_all(&chunk).await.map_err(io_err(part))?;
            kept += chunk.len() as u64;
            if kept == file.size_bytes || last_report.elapsed() >= PROGRESS_INTERVAL {
                last_report = Instant::now();
                cancelled = progress(report(kept)).is_break();
            }
        }
        out.flush().await.map_err(io_err(part))?;
        out.sync_all().await.map_err(io_err(part))?;
        if cancelled {
            return Err(HubError::Cancelled { file: name, kept });
        }
        Ok(kept)
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> HubError + '_ {
    move |e| HubError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}
