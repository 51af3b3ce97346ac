//! Models on a Hugging Face-style hub: searching it for GGUF repositories and listing a
//! repository's GGUF files with their sizes, checksums and weight formats. Downloads are in
//! [`crate::download`].
//!
//! The hub's own HTTP API is used (`/api/models?search=`, `/api/models/{repo}` and
//! `/api/models/{repo}/tree/main`); `HF_ENDPOINT` points it at a mirror, as Hugging Face's own
//! tools do, and `HF_TOKEN` is sent for gated repositories.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::network::NetworkFailure;
use crate::quant::quantization_in_name;

/// Where models are searched and downloaded from unless `HF_ENDPOINT` says otherwise.
pub const DEFAULT_HUB: &str = "https://huggingface.co";
/// Most search results asked of the hub.
pub const MAX_SEARCH_RESULTS: usize = 50;

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("{0}")]
    InvalidInput(String),
    /// The hub could not be reached; `reason` keeps the network's own words (for the log or
    /// a detail), the message says it plainly.
    #[error(
        "cannot reach {host} (offline?): {}. Models already on disk, and a model file opened \
         by its path, still work",
        failure.describe()
    )]
    Unreachable {
        endpoint: String,
        /// The hub's host name, as a user knows it (`huggingface.co`).
        host: String,
        failure: NetworkFailure,
        reason: String,
    },
    #[error("the model hub answered {status} for {what}")]
    Status { status: u16, what: String },
    #[error("the model hub refused {what} ({status}): the repository may be gated or private; set HF_TOKEN to a token that may read it")]
    Refused { status: u16, what: String },
    #[error("the model hub's answer for {what} could not be read: {reason}")]
    BadAnswer { what: String, reason: String },
    #[error("{file} is not in {repo}")]
    NoSuchFile { repo: String, file: String },
    #[error("the download of {file} was cancelled; {kept} bytes are kept, and the next download of it resumes there")]
    Cancelled { file: String, kept: u64 },
    #[error("the download of {file} broke off after {kept} bytes ({reason}); the next download of it resumes there")]
    Interrupted {
        file: String,
        kept: u64,
        reason: String,
    },
    #[error(
        "{file} arrived with {got} bytes where the hub lists {expected}; the file was not kept"
    )]
    Size {
        file: String,
        expected: u64,
        got: u64,
    },
    #[error("{file} does not match its checksum (expected sha256 {expected}, got {actual}); the file was not kept")]
    Checksum {
        file: String,
        expected: String,
        actual: String,
    },
    #[error("i/o error on {path}: {reason}")]
    Io { path: String, reason: String },
}

/// A repository found by a search.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, TS)]
pub struct HubRepo {
    /// `owner/name`.
    pub id: String,
    pub downloads: u64,
    pub likes: u64,
    /// The licence the repository declares (`apache-2.0`), if any.
    pub license: Option<String>,
}

/// A repository's GGUF files.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, TS)]
pub struct RepoFiles {
    pub repo: String,
    pub license: Option<String>,
    pub files: Vec<HubFile>,
}

/// One GGUF file of a repository.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, TS)]
pub struct HubFile {
    pub repo: String,
    /// Path in the repository (`Q4_K_M/model.gguf` in repositories with folders).
    pub path: String,
    pub size_bytes: u64,
    /// SHA-256 of the content, in hex, where the hub keeps the file in LFS (GGUFs always are).
    pub sha256: Option<String>,
    /// The weight format its name says, e.g. `Q4_K_M`.
    pub quantization: Option<String>,
    /// One part of a model split over several files (`-00001-of-00003.gguf`).
    pub split: bool,
}

impl HubFile {
    /// The name the file is saved under: its base name.
    pub fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// A client of one hub.
#[derive(Debug, Clone)]
pub struct Hub {
    endpoint: String,
    token: Option<String>,
    pub(crate) client: reqwest::Client,
}

impl Hub {
    /// The hub at `endpoint` (`https://huggingface.co`, or a mirror with the same layout).
    pub fn new(endpoint: &str, token: Option<String>) -> Result<Self, HubError> {
        let endpoint = endpoint.trim().trim_end_matches('/');
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(HubError::InvalidInput(format!(
                "the model hub must be an http:// or https:// address, not '{endpoint}'"
            )));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(15))
            // A stalled transfer ends; a slow one does not.
            .read_timeout(Duration::from_secs(60))
            .user_agent(concat!("medusa-playground/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| HubError::InvalidInput(e.to_string()))?;
        Ok(Self {
            endpoint: endpoint.to_owned(),
            token: token.filter(|t| !t.trim().is_empty()),
            client,
        })
    }

    /// The hub `HF_ENDPOINT` names, else Hugging Face, with `HF_TOKEN` if set.
    pub fn from_env() -> Result<Self, HubError> {
        let endpoint = std::env::var("HF_ENDPOINT")
            .ok()
            .filter(|e| !e.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_HUB.to_owned());
        Self::new(&endpoint, std::env::var("HF_TOKEN").ok())
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Repositories with GGUF files matching `query`, most downloaded first.
    #[tracing::instrument(skip(self), fields(endpoint = %self.endpoint))]
    pub async fn search(&self, query: &str, limit: usize) -> Result<Vec<HubRepo>, HubError> {
        let query = query.trim();
        if query.chars().any(char::is_control) || query.len() > 200 {
            return Err(HubError::InvalidInput(
                "a search is at most 200 characters, without control characters".into(),
            ));
        }
        let limit = limit.clamp(1, MAX_SEARCH_RESULTS).to_string();
        let url = format!("{}/api/models", self.endpoint);
        let params = [
            ("search", query),
            ("filter", "gguf"),
            ("sort", "downloads"),
            ("direction", "-1"),
            ("limit", &limit),
        ];
        let found: Vec<ApiRepo> = self
            .get_json(self.client.get(url).query(&params), "the search")
            .await?;
        Ok(found.into_iter().map(ApiRepo::into_repo).collect())
    }

    /// A repository's GGUF files and its licence.
    #[tracing::instrument(skip(self), fields(endpoint = %self.endpoint))]
    pub async fn files(&self, repo: &str) -> Result<RepoFiles, HubError> {
        check_repo_id(repo)?;
        let info: ApiRepo = self
            .get_json(
                self.client
                    .get(format!("{}/api/models/{repo}", self.endpoint)),
                repo,
            )
            .await?;
        Ok(RepoFiles {
            repo: repo.to_owned(),
            license: info.into_repo().license,
            files: self.gguf_files(repo).await?,
        })
    }

    /// The file `path` of `repo`, as the hub lists it.
    pub async fn file(&self, repo: &str, path: &str) -> Result<HubFile, HubError> {
        check_repo_id(repo)?;
        check_file_path(path)?;
        self.gguf_files(repo)
            .await?
            .into_iter()
            .find(|f| f.path == path)
            .ok_or_else(|| HubError::NoSuchFile {
                repo: repo.to_owned(),
                file: path.to_owned(),
            })
    }

    /// The GGUF files of a repository whose id was checked, from its file tree.
    async fn gguf_files(&self, repo: &str) -> Result<Vec<HubFile>, HubError> {
        let tree: Vec<ApiTreeEntry> = self
            .get_json(
                self.client
                    .get(format!("{}/api/models/{repo}/tree/main", self.endpoint))
                    .query(&[("recursive", "true")]),
                repo,
            )
            .await?;
        Ok(tree
            .into_iter()
            .filter(|e| e.kind == "file" && e.path.to_ascii_lowercase().ends_with(".gguf"))
            .map(|e| HubFile {
                repo: repo.to_owned(),
                quantization: quantization_in_name(&e.path).map(str::to_owned),
                split: is_split_part(&e.path),
                size_bytes: e.lfs.as_ref().map_or(e.size, |l| l.size),
                sha256: e.lfs.map(|l| l.oid.to_ascii_lowercase()),
                path: e.path,
            })
            .collect())
    }

    /// Where the hub serves a file's content (it may redirect to a CDN).
    pub(crate) fn file_url(&self, file: &HubFile) -> String {
        format!("{}/{}/resolve/main/{}", self.endpoint, file.repo, file.path)
    }

    pub(crate) fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    pub(crate) fn unreachable(&self, error: reqwest::Error) -> HubError {
        let failure = NetworkFailure::of(&error);
        let reason = with_causes(&error.without_url());
        tracing::warn!(endpoint = %self.endpoint, ?failure, %reason, "the model hub is unreachable");
        HubError::Unreachable {
            host: host_of(&self.endpoint),
            endpoint: self.endpoint.clone(),
            failure,
            reason,
        }
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
        what: &str,
    ) -> Result<T, HubError> {
        let response = self
            .authorized(request)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(HubError::from_status(status.as_u16(), what));
        }
        // Hub listings are small; a bigger answer is not one.
        let bytes = response.bytes().await.map_err(|e| self.unreachable(e))?;
        if bytes.len() > 16 << 20 {
            return Err(HubError::BadAnswer {
                what: what.to_owned(),
                reason: "over 16 MiB".into(),
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| HubError::BadAnswer {
            what: what.to_owned(),
            reason: e.to_string(),
        })
    }
}

impl HubError {
    pub(crate) fn from_status(status: u16, what: &str) -> Self {
        let what = what.to_owned();
        match status {
            401 | 403 => Self::Refused { status, what },
            _ => Self::Status { status, what },
        }
    }
}

/// The host an endpoint names (`https://huggingface.co/` -> `huggingface.co`), with its port if
/// it has one; the endpoint itself if it cannot be read.
fn host_of(endpoint: &str) -> String {
    reqwest::Url::parse(endpoint)
        .ok()
        .and_then(|url| {
            let host = url.host_str()?.to_owned();
            Some(match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host,
            })
        })
        .unwrap_or_else(|| endpoint.to_owned())
}

/// An error with what caused it ("error sending request: ... Connection refused"), which
/// reqwest keeps in its sources rather than its message.
pub(crate) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let said = inner.to_string();
        if !text.contains(&said) {
            text = format!("{text}: {said}");
        }
        cause = inner.source();
    }
    text
}

/// `owner/name`, each of letters, digits, `-`, `_` and `.`, as the hub allows.
pub fn check_repo_id(repo: &str) -> Result<(), HubError> {
    let valid_part = |p: &str| {
        !p.is_empty()
            && p.len() <= 96
            && !p.starts_with('.')
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    match repo.split_once('/') {
        Some((owner, name)) if valid_part(owner) && valid_part(name) => Ok(()),
        _ => Err(HubError::InvalidInput(format!(
            "'{repo}' is not a repository: expected owner/name, e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF"
        ))),
    }
}

/// A `.gguf` path in a repository, without `..`, empty or hidden segments.
pub fn check_file_path(path: &str) -> Result<(), HubError> {
    let segments_ok = path.split('/').all(|s| {
        !s.is_empty()
            && !s.starts_with('.')
            && !s.contains('\\')
            && !s.chars().any(char::is_control)
    });
    if segments_ok && path.len() <= 512 && path.to_ascii_lowercase().ends_with(".gguf") {
        Ok(())
    } else {
        Err(HubError::InvalidInput(format!(
            "'{path}' is not a GGUF file of a repository"
        )))
    }
}

fn is_split_part(path: &str) -> bool {
    // `name-00001-of-00003.gguf`
    let stem = path.rsplit('/').next().unwrap_or(path);
    let stem = &stem[..stem.len().saturating_sub(5)];
    let mut parts = stem.rsplitn(4, '-');
    let (Some(total), Some(of), Some(index)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    of == "of"
        && [total, index]
            .iter()
            .all(|n| n.len() == 5 && n.bytes().all(|b| b.is_ascii_digit()))
}

#[derive(Deserialize)]
struct ApiRepo {
    id: String,
    #[serde(default)]
    downloads: u64,
    #[serde(default)]
    likes: u64,
    #[serde(default)]
    tags: Vec<String>,
}

impl ApiRepo {
    fn into_repo(self) -> HubRepo {
        let license = self
            .tags
            .iter()
            .find_map(|t| t.strip_prefix("license:"))
            .map(str::to_owned);
        HubRepo {
            id: self.id,
            downloads: self.downloads,
            likes: self.likes,
            license,
        }
    }
}

#[derive(Deserialize)]
struct ApiTreeEntry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: u64,
    lfs: Option<ApiLfs>,
}

#[derive(Deserialize)]
struct ApiLfs {
    oid: String,
    size: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_ids_and_paths_are_checked() {
        assert!(check_repo_id("Qwen/Qwen2.5-0.5B-Instruct-GGUF").is_ok());
        for bad in ["", "qwen", "a/b/c", "../x", "a/..", "a/b c", "/b", "a/"] {
            assert!(check_repo_id(bad).is_err(), "{bad}");
        }
        assert!(check_file_path("q4/model-q4_0.gguf").is_ok());
        for bad in [
            "../x.gguf",
            "a//b.gguf",
            ".hidden.gguf",
            "x.bin",
            "a\\b.gguf",
            "",
        ] {
            assert!(check_file_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn split_parts_are_recognised() {
        assert!(is_split_part("m-Q4_K_M-00001-of-00003.gguf"));
        assert!(is_split_part("dir/m-00002-of-00002.gguf"));
        assert!(!is_split_part("m-Q4_K_M.gguf"));
        assert!(!is_split_part("m-1-of-3.gguf"));
    }

    #[test]
    fn the_licence_comes_from_the_tags() {
        let repo: ApiRepo = serde_json::from_str(
            r#"{"id":"a/b","downloads":7,"likes":2,"tags":["gguf","license:apache-2.0"]}"#,
        )
        .unwrap();
        assert_eq!(
            repo.into_repo(),
            HubRepo {
                id: "a/b".into(),
                downloads: 7,
                likes: 2,
                license: Some("apache-2.0".into()),
            }
        );
    }
}
