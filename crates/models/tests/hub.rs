//! The hub client and downloader against a local HTTP server that answers in Hugging Face's
//! URL layout: search, a repository's files, downloads through a redirect with ranges, a
//! transfer cut halfway, and a file whose listed checksum is wrong.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use models::{DownloadProgress, Hub, HubError, NetworkFailure, PARTIAL_SUFFIX};
use sha2::{Digest, Sha256};

const REPO: &str = "tester/Tiny-Chat-GGUF";
const SIZE: usize = 1 << 20;

#[derive(Default)]
struct Seen {
    /// The Range header of each file request, by file.
    ranges: HashMap<String, Vec<Option<String>>>,
}

#[derive(Clone)]
struct Hub0 {
    content: Arc<Vec<u8>>,
    seen: Arc<Mutex<Seen>>,
}

fn content() -> Vec<u8> {
    (0..SIZE).map(|i| (i * 31 % 251) as u8).collect()
}

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn search(Query(q): Query<HashMap<String, String>>) -> Json<serde_json::Value> {
    assert_eq!(q.get("filter").map(String::as_str), Some("gguf"));
    let all = serde_json::json!([
        {"id": REPO, "downloads": 1200, "likes": 3, "tags": ["gguf", "license:apache-2.0"]},
        {"id": "other/Big-GGUF", "downloads": 50, "likes": 0, "tags": ["gguf"]},
    ]);
    let term = q.get("search").cloned().unwrap_or_default().to_lowercase();
    let found: Vec<_> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["id"].as_str().unwrap().to_lowercase().contains(&term))
        .cloned()
        .collect();
    Json(serde_json::Value::Array(found))
}

async fn info(Path((owner, name)): Path<(String, String)>) -> Response {
    if name == "Gated-GGUF" {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    if format!("{owner}/{name}") != REPO {
        return StatusCode::NOT_FOUND.into_response();
    }
    Json(serde_json::json!({"id": REPO, "tags": ["gguf", "license:apache-2.0"]})).into_response()
}

async fn tree(State(hub): State<Hub0>, Path((owner, name)): Path<(String, String)>) -> Response {
    if format!("{owner}/{name}") != REPO {
        return StatusCode::NOT_FOUND.into_response();
    }
    let good = sha(&hub.content);
    let lfs = |oid: &str| serde_json::json!({"oid": oid, "size": SIZE, "pointerSize": 134});
    Json(serde_json::json!([
        {"type": "file", "path": "README.md", "size": 10},
        {"type": "file", "path": "tiny-chat-Q4_K_M.gguf", "size": 134, "lfs": lfs(&good)},
        {"type": "file", "path": "cut/tiny-chat-Q8_0.gguf", "size": 134, "lfs": lfs(&good)},
        {"type": "file", "path": "tiny-chat-F16.gguf", "size": 134, "lfs": lfs(&"0".repeat(64))},
        {"type": "file", "path": "tiny-chat-Q2_K-00001-of-00002.gguf", "size": 134, "lfs": lfs(&good)},
        {"type": "directory", "path": "cut", "size": 0},
    ]))
    .into_response()
}

/// The hub redirects a file to its storage, as Hugging Face does.
async fn resolve(Path((owner, name, path)): Path<(String, String, String)>) -> Response {
    (
        StatusCode::FOUND,
        [(header::LOCATION, format!("/storage/{owner}/{name}/{path}"))],
    )
        .into_response()
}

async fn storage(
    State(hub): State<Hub0>,
    Path((_owner, _name, path)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let attempt = {
        let mut seen = hub.seen.lock().unwrap();
        let ranges = seen.ranges.entry(path.clone()).or_default();
        ranges.push(range.clone());
        ranges.len()
    };
    let start = range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0);
    let rest = Bytes::copy_from_slice(&hub.content[start..]);
    let status = if range.is_some() {
        StatusCode::PARTIAL_CONTENT
    } else {
        StatusCode::OK
    };
    let mut response = Response::builder()
        .status(status)
        .header(header::CONTENT_LENGTH, rest.len());
    if range.is_some() {
        response = response.header(
            header::CONTENT_RANGE,
            format!("bytes {start}-{}/{SIZE}", SIZE - 1),
        );
    }
    // The first transfer of the `cut/` file stops halfway, the connection dropped.
    let body = if path.starts_with("cut/") && attempt == 1 {
        let half = rest.slice(..rest.len() / 2);
        Body::from_stream(futures_util::stream::iter(vec![
            Ok(half),
            Err(std::io::Error::other("connection cut")),
        ]))
    } else {
        Body::from_stream(futures_util::stream::iter(
            rest.chunks(64 << 10)
                .map(|c| Ok::<_, std::io::Error>(Bytes::copy_from_slice(c)))
                .collect::<Vec<_>>(),
        ))
    };
    response.body(body).unwrap()
}

async fn start_hub() -> (String, Hub0) {
    let state = Hub0 {
        content: Arc::new(content()),
        seen: Arc::default(),
    };
    let app = Router::new()
        .route("/api/models", get(search))
        .route("/api/models/{owner}/{name}", get(info))
        .route("/api/models/{owner}/{name}/tree/main", get(tree))
        .route("/{owner}/{name}/resolve/main/{*path}", get(resolve))
        .route("/storage/{owner}/{name}/{*path}", get(storage))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{address}"), state)
}

/// Downloads a file of the test repository, keeping every progress report.
async fn download(
    hub: &Hub,
    path: &str,
    dir: &std::path::Path,
    cancel_after: Option<usize>,
) -> (Result<models::Downloaded, HubError>, Vec<DownloadProgress>) {
    let file = hub.file(REPO, path).await.unwrap();
    let mut reports = Vec::new();
    let result = hub
        .download(&file, dir, |p| {
            reports.push(p);
            match cancel_after {
                Some(n) if reports.len() >= n => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        })
        .await;
    (result, reports)
}

#[tokio::test]
async fn search_lists_repositories_with_their_licence_and_files_with_format_and_checksum() {
    let (url, state) = start_hub().await;
    let hub = Hub::new(&url, None).unwrap();
    let found = hub.search("tiny", 10).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].id, REPO);
    assert_eq!(found[0].downloads, 1200);
    assert_eq!(found[0].license.as_deref(), Some("apache-2.0"));

    let files = hub.files(REPO).await.unwrap();
    assert_eq!(files.license.as_deref(), Some("apache-2.0"));
    let listed: Vec<(&str, u64, Option<&str>, bool)> = files
        .files
        .iter()
        .map(|f| {
            (
                f.path.as_str(),
                f.size_bytes,
                f.quantization.as_deref(),
                f.split,
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            ("tiny-chat-Q4_K_M.gguf", SIZE as u64, Some("Q4_K_M"), false),
            ("cut/tiny-chat-Q8_0.gguf", SIZE as u64, Some("Q8_0"), false),
            ("tiny-chat-F16.gguf", SIZE as u64, Some("F16"), false),
            (
                "tiny-chat-Q2_K-00001-of-00002.gguf",
                SIZE as u64,
                Some("Q2_K"),
                true
            ),
        ]
    );
    assert_eq!(
        files.files[0].sha256.as_deref(),
        Some(sha(&state.content).as_str())
    );
    assert!(matches!(
        hub.files("tester/missing").await,
        Err(HubError::Status { status: 404, .. })
    ));
    let gated = hub.files("tester/Gated-GGUF").await.unwrap_err();
    assert!(
        matches!(gated, HubError::Refused { status: 401, .. }),
        "{gated}"
    );
    assert!(gated.to_string().contains("HF_TOKEN"));
    assert!(matches!(
        hub.files("../etc").await,
        Err(HubError::InvalidInput(_))
    ));
    assert!(matches!(
        hub.file(REPO, "absent.gguf").await,
        Err(HubError::NoSuchFile { .. })
    ));
}

#[tokio::test]
async fn a_download_reports_progress_in_order_and_keeps_a_checked_file() {
    let (url, state) = start_hub().await;
    let hub = Hub::new(&url, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (result, reports) = download(&hub, "tiny-chat-Q4_K_M.gguf", dir.path(), None).await;
    let done = result.unwrap();
    assert!(done.downloaded && done.checksum_verified);
    assert_eq!(done.path, dir.path().join("tiny-chat-Q4_K_M.gguf"));
    assert_eq!(std::fs::read(&done.path).unwrap(), *state.content);
    assert!(!dir
        .path()
        .join(format!("tiny-chat-Q4_K_M.gguf{PARTIAL_SUFFIX}"))
        .exists());
    assert_eq!(reports.first().map(|p| p.downloaded), Some(0));
    assert_eq!(reports.last().map(|p| p.downloaded), Some(SIZE as u64));
    assert!(reports
        .windows(2)
        .all(|w| w[0].downloaded <= w[1].downloaded));
    assert!(reports
        .iter()
        .all(|p| p.total == SIZE as u64 && p.resumed_from == 0));

    // Already there: nothing is fetched again.
    let (again, _) = download(&hub, "tiny-chat-Q4_K_M.gguf", dir.path(), None).await;
    assert!(!again.unwrap().downloaded);
    assert_eq!(
        state.seen.lock().unwrap().ranges["tiny-chat-Q4_K_M.gguf"].len(),
        1
    );
}

#[tokio::test]
async fn a_cut_download_resumes_where_it_stopped() {
    let (url, state) = start_hub().await;
    let hub = Hub::new(&url, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let part = dir
        .path()
        .join(format!("tiny-chat-Q8_0.gguf{PARTIAL_SUFFIX}"));

    let (cut, _) = download(&hub, "cut/tiny-chat-Q8_0.gguf", dir.path(), None).await;
    let kept = match cut {
        Err(HubError::Interrupted { kept, .. }) => kept,
        other => panic!("expected an interrupted download, got {other:?}"),
    };
    assert_eq!(kept, (SIZE / 2) as u64);
    assert_eq!(std::fs::metadata(&part).unwrap().len(), kept);
    assert!(!dir.path().join("tiny-chat-Q8_0.gguf").exists());

    let (resumed, reports) = download(&hub, "cut/tiny-chat-Q8_0.gguf", dir.path(), None).await;
    let done = resumed.unwrap();
    assert_eq!(std::fs::read(&done.path).unwrap(), *state.content);
    assert_eq!(
        reports.first().map(|p| (p.downloaded, p.resumed_from)),
        Some((kept, kept))
    );
    assert_eq!(
        state.seen.lock().unwrap().ranges["cut/tiny-chat-Q8_0.gguf"],
        vec![None, Some(format!("bytes={kept}-"))]
    );
}

#[tokio::test]
async fn a_cancelled_download_keeps_what_arrived_and_resumes() {
    let (url, state) = start_hub().await;
    let hub = Hub::new(&url, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cancelled, _) = download(&hub, "tiny-chat-Q4_K_M.gguf", dir.path(), Some(1)).await;
    assert!(
        matches!(cancelled, Err(HubError::Cancelled { kept: 0, .. })),
        "{cancelled:?}"
    );
    assert!(!dir.path().join("tiny-chat-Q4_K_M.gguf").exists());
    let (done, _) = download(&hub, "tiny-chat-Q4_K_M.gguf", dir.path(), None).await;
    assert_eq!(std::fs::read(done.unwrap().path).unwrap(), *state.content);
}

#[tokio::test]
async fn a_file_that_fails_its_checksum_is_refused_and_nothing_is_kept() {
    let (url, _) = start_hub().await;
    let hub = Hub::new(&url, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (result, _) = download(&hub, "tiny-chat-F16.gguf", dir.path(), None).await;
    assert!(
        matches!(result, Err(HubError::Checksum { .. })),
        "{result:?}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn an_unreachable_hub_is_said_plainly() {
    // Port 1 on loopback: nothing listens there.
    let hub = Hub::new("http://127.0.0.1:1", None).unwrap();
    let err = hub.search("x", 5).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot reach 127.0.0.1:1 (offline?): the connection was refused. Models already on \
         disk, and a model file opened by its path, still work"
    );
    let HubError::Unreachable {
        host,
        failure,
        reason,
        ..
    } = err
    else {
        panic!("{err}")
    };
    assert_eq!(host, "127.0.0.1:1");
    assert_eq!(failure, NetworkFailure::Refused);
    // The network's own words are kept for the log and the detail.
    assert!(reason.contains("onnection refused"), "{reason}");
    assert!(Hub::new("ftp://x", None).is_err());
}
