//! The models API over real HTTP: the models folder, the hub's catalog (a local server in
//! Hugging Face's URL layout) and a download answered as newline-delimited JSON, checked and
//! refused when its checksum fails. One test: the hub and the models folder are the process's
//! environment (`HF_ENDPOINT`, `MEDUSA_MODELS_DIR`), as for `medusa serve`, so it runs in a
//! process of its own, where no other test reads the environment it sets.

use std::io::{BufRead, BufReader};
use std::sync::{mpsc, Arc};

use axum::extract::Path;
use axum::routing::get;
use axum::{Json, Router};
use engine::{Engine, EngineConfig};
use playground::Playground;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::common;

const REPO: &str = "tester/Tiny-GGUF";

fn content() -> Vec<u8> {
    (0..300_000u32).map(|i| (i % 253) as u8).collect()
}

/// A hub with one repository: a good file and one whose listed checksum is wrong.
fn start_hub() -> String {
    let body = Arc::new(content());
    let sha: String = Sha256::digest(body.as_slice())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let size = body.len();
    let app = Router::new()
        .route(
            "/api/models",
            get(|| async { Json(json!([{"id": REPO, "downloads": 3, "likes": 1, "tags": ["license:mit"]}])) }),
        )
        .route(
            "/api/models/{owner}/{name}",
            get(|| async { Json(json!({"id": REPO, "tags": ["license:mit"]})) }),
        )
        .route(
            "/api/models/{owner}/{name}/tree/main",
            get(move || async move {
                Json(json!([
                    {"type": "file", "path": "tiny-Q4_0.gguf", "size": 134, "lfs": {"oid": sha, "size": size}},
                    {"type": "file", "path": "tiny-F16.gguf", "size": 134, "lfs": {"oid": "0".repeat(64), "size": size}},
                ]))
            }),
        )
        .route(
            "/{owner}/{name}/resolve/main/{file}",
            get(move |Path((_, _, _)): Path<(String, String, String)>| {
                let body = body.clone();
                async move { body.as_ref().clone() }
            }),
        );
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    format!("http://{}", rx.recv().unwrap())
}

/// The lines of a download's answer, each a JSON event.
fn download(base: &str, body: &Value) -> (u16, Vec<Value>) {
    let (status, response) = common::send(
        common::agent().post(&format!("{base}/api/catalog/download")),
        Some(&body.to_string()),
    );
    if status != 200 {
        return (status, vec![response.into_json().expect("JSON error")]);
    }
    assert_eq!(response.content_type(), "application/x-ndjson");
    let events = BufReader::new(response.into_reader())
        .lines()
        .map(|l| serde_json::from_str(&l.expect("line")).expect("a JSON event"))
        .collect();
    (status, events)
}

#[test]
fn the_models_api_lists_searches_downloads_checks_and_deletes() {
    if crate::alone::in_own_process(
        "catalog::the_models_api_lists_searches_downloads_checks_and_deletes",
    ) {
        return;
    }
    // The default model is found before the models folder moves to a fresh directory.
    let model = models::default_model_path().expect("default model available");
    let folder = tempfile::tempdir().unwrap();
    std::env::set_var(models::MODELS_DIR_ENV, folder.path());
    std::env::set_var("HF_ENDPOINT", start_hub());
    let base = common::serve(
        move |store| {
            let mut config = EngineConfig::new(model);
            config.ctx_size = Some(512);
            let engine = Arc::new(Engine::load(config.clone()).expect("model loads"));
            Playground::new(engine, store, config)
        },
        None,
        server::AccessPolicy::default(),
    );

    let (status, disk) = common::get_from(&base, "/api/models/local");
    assert_eq!(status, 200);
    assert_eq!(
        disk["folders"][0]["path"],
        folder.path().display().to_string()
    );
    assert_eq!(disk["folders"][0]["models"], json!([]));

    let (status, found) = common::get_from(&base, "/api/catalog?q=tiny");
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["suggested"], false);
    assert_eq!(found["results"][0]["repo"], REPO);
    assert_eq!(found["results"][0]["license"], "mit");
    let (_, suggested) = common::get_from(&base, "/api/catalog");
    assert_eq!(suggested["suggested"], true);
    assert!(suggested["results"]
        .as_array()
        .is_some_and(|r| !r.is_empty()));

    let (status, files) = common::get_from(&base, &format!("/api/catalog/{REPO}"));
    assert_eq!(status, 200, "{files}");
    assert_eq!(files["files"][0]["quantization"], "Q4_0");
    assert_eq!(files["files"][0]["size_bytes"], 300_000);
    common::assert_error(
        common::get_from(&base, "/api/catalog/bad%20owner/x"),
        400,
        "invalid_input",
    );

    // Malformed names are refused before the answer starts.
    let (status, refused) = download(&base, &json!({"repo": REPO, "file": "../x.gguf"}));
    assert_eq!(status, 400);
    assert_eq!(refused[0]["error"]["code"], "invalid_input");

    let (status, events) = download(&base, &json!({"repo": REPO, "file": "tiny-Q4_0.gguf"}));
    assert_eq!(status, 200);
    let (last, progress) = events.split_last().expect("events");
    assert_eq!(last["type"], "done", "{events:?}");
    assert_eq!(last["checksum_verified"], true);
    assert_eq!(progress[0]["type"], "progress");
    assert_eq!(progress[0]["downloaded"], 0);
    assert!(progress.iter().all(|p| p["total"] == 300_000));
    let saved = folder.path().join("tiny-Q4_0.gguf");
    assert_eq!(std::fs::read(&saved).unwrap(), content());

    let (_, events) = download(&base, &json!({"repo": REPO, "file": "tiny-F16.gguf"}));
    let last = events.last().expect("events");
    assert_eq!(last["type"], "failed", "{events:?}");
    assert_eq!(last["error"]["code"], "checksum_mismatch");
    assert!(!folder.path().join("tiny-F16.gguf").exists());
    assert!(!folder.path().join("tiny-F16.gguf.part").exists());

    let (_, disk) = common::get_from(&base, "/api/models/local");
    let listed = &disk["folders"][0]["models"][0];
    assert_eq!(listed["file_name"], "tiny-Q4_0.gguf");
    assert_eq!(listed["deletable"], true);
    assert_eq!(listed["loaded"], false);

    let delete =
        |path: &str| common::send(common::agent().delete(&format!("{base}{path}")), None).0;
    assert_eq!(delete("/api/models/local/tiny-Q4_0.gguf"), 204);
    assert!(!saved.exists());
    assert_eq!(delete("/api/models/local/tiny-Q4_0.gguf"), 404);
    assert_eq!(delete("/api/models/local/notes.txt"), 400);
}
