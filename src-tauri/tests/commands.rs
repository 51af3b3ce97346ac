//! The desktop app's commands through Tauri's IPC (mock runtime, no display), on the real default
//! model and a real SQLite file.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engine::{Engine, EngineConfig};
use medusa_desktop::commands;
use playground::history::RunsQuery;
use playground::Playground;
use serde_json::{json, Value};
use tauri::ipc::{CallbackFn, Channel, InvokeBody, InvokeResponseBody};
use tauri::test::{
    get_ipc_response, mock_builder, mock_context, noop_assets, MockRuntime, INVOKE_KEY,
};
use tauri::webview::InvokeRequest;
use tauri::{App, WebviewWindow, WebviewWindowBuilder};

fn state(db: &Path) -> Playground {
    let mut config = EngineConfig::new(models::default_model_path().expect("default model"));
    config.ctx_size = Some(1024);
    config.parallel = 2;
    let engine = Arc::new(Engine::load(config.clone()).expect("model loads"));
    let store = tauri::async_runtime::block_on(store::Store::open(db)).expect("store opens");
    Playground::new(engine, store, config)
}

fn app(state: Playground) -> (App<MockRuntime>, WebviewWindow<MockRuntime>) {
    let app = mock_builder()
        .invoke_handler(medusa_desktop::invoke_handler())
        .manage(state)
        .build(mock_context(noop_assets()))
        .expect("app builds");
    let window = WebviewWindowBuilder::new(&app, "main", Default::default())
        .build()
        .expect("window builds");
    (app, window)
}

fn invoke(window: &WebviewWindow<MockRuntime>, cmd: &str, args: Value) -> Result<Value, Value> {
    get_ipc_response(
        window,
        InvokeRequest {
            cmd: cmd.into(),
            callback: CallbackFn(0),
            error: CallbackFn(1),
            // The mock only accepts invokes from the app's own origin.
            url: "tauri://localhost".parse().unwrap(),
            body: InvokeBody::Json(args),
            headers: Default::default(),
            invoke_key: INVOKE_KEY.to_string(),
        },
    )
    .map(|body| body.deserialize::<Value>().expect("JSON answer"))
}

fn wait_for_status(window: &WebviewWindow<MockRuntime>, run_id: i64, wanted: &str) -> Value {
    let start = Instant::now();
    loop {
        let run = invoke(window, "get_run", json!({"id": run_id})).expect("get_run answers");
        if run["run"]["status"] == wanted {
            return run;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "run {run_id} never reached {wanted}: {run}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn commands_answer_like_the_http_api() {
    let dir = tempfile::tempdir().unwrap();
    let (_app, window) = app(state(&dir.path().join("history.sqlite")));

    let info = invoke(&window, "info", json!({})).expect("info answers");
    assert_eq!(info["model"]["architecture"], "llama");
    assert_eq!(info["modes"], json!(["normal", "lookup", "auto"]));
    assert!(info["loading"].is_null() && info["error"].is_null());

    // A generation through IPC: resolves with the run id; the run is recorded when it ends.
    let run_id = invoke(
        &window,
        "generate",
        json!({
            // Greedy, so that the model cannot end early by chance.
            "request": {"prompt": "The capital of France is", "max_tokens": 8,
                        "sampling": {"temperature": 0.0}},
            "onEvent": "__CHANNEL__:7",
        }),
    )
    .expect("generate starts")
    .as_i64()
    .expect("a run id");
    let run = wait_for_status(&window, run_id, "finished");
    assert_eq!(run["run"]["tokens_generated"], 8);
    assert!(!run["run"]["output"].as_str().unwrap().is_empty());

    // The same shape as `GET /api/runs`.
    let runs = invoke(&window, "list_runs", json!({"query": {"mode": "normal"}})).unwrap();
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1);
    assert_eq!(runs["runs"][0]["id"], run_id);

    // Bad input rejects with the same {code, message} as the HTTP API.
    let err = invoke(
        &window,
        "generate",
        json!({"request": {"prompt": ""}, "onEvent": "__CHANNEL__:8"}),
    )
    .expect_err("an empty prompt is refused");
    assert_eq!(err["code"], "empty_prompt");
    let err = invoke(
        &window,
        "generate",
        json!({"request": {"prompt": "Hi", "mode": "medusa"}, "onEvent": "__CHANNEL__:9"}),
    )
    .expect_err("medusa without heads is refused");
    assert_eq!(err["code"], "no_medusa_heads");
    let err = invoke(&window, "get_run", json!({"id": 999})).expect_err("unknown run");
    assert_eq!(err["code"], "not_found");
    let err = invoke(&window, "cancel_run", json!({"runId": run_id})).expect_err("not running");
    assert_eq!(err["code"], "not_running");
    let err = invoke(
        &window,
        "load_model",
        json!({"request": {"model": "/nonexistent/model.gguf"}}),
    )
    .expect_err("a missing model file is refused");
    assert_eq!(err["code"], "file_not_found");
    let err = invoke(&window, "set_tree", json!({"request": {"tree": "chain-2"}}))
        .expect_err("a tree needs heads");
    assert_eq!(err["code"], "no_medusa_heads");
    let info = invoke(&window, "set_tree", json!({"request": {"tree": "auto"}})).unwrap();
    assert!(info["default_tree"].is_null(), "{info}");
    let err = invoke(&window, "delete_runs", json!({"runIds": []})).expect_err("nothing to delete");
    assert_eq!(err["code"], "invalid_parameter");
    let err = invoke(&window, "import_runs", json!({"document": {"runs": 7}}))
        .expect_err("not an export");
    assert!(err.to_string().contains("document"), "{err}");
    let report = invoke(
        &window,
        "import_runs",
        json!({"document": {"version": 1, "exported_at": "2026-01-02T03:04:05Z", "runs": [], "comparisons": []}}),
    )
    .unwrap();
    assert_eq!(report["imported"], 0, "{report}");
    let err = invoke(&window, "create_comparison", json!({"runIds": [run_id]}))
        .expect_err("one run is no comparison");
    assert_eq!(err["code"], "invalid_parameter");
}

#[test]
fn events_stream_in_order_and_a_cancelled_run_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let state = state(&dir.path().join("history.sqlite"));
    let events: Arc<Mutex<Vec<Value>>> = Arc::default();
    let sink = events.clone();
    let channel = Channel::new(move |body| {
        let InvokeResponseBody::Json(text) = body else {
            panic!("events are JSON");
        };
        sink.lock()
            .unwrap()
            .push(serde_json::from_str(&text).unwrap());
        Ok(())
    });
    let request = serde_json::from_value(json!({
        "messages": [{"role": "user", "content": "Count from one to fifty in words."}],
        "mode": "lookup",
        "max_tokens": 200,
    }))
    .unwrap();
    let run_id =
        tauri::async_runtime::block_on(commands::start_run(&state, request, channel)).unwrap();

    // Stop it once some text arrived, as the Stop button does.
    let start = Instant::now();
    while !events.lock().unwrap().iter().any(|e| e["type"] == "text") {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "no text arrived"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    state.cancel_run(run_id).unwrap();
    while !events
        .lock()
        .unwrap()
        .iter()
        .any(|e| e["type"] == "finished")
    {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the run never ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    let events = events.lock().unwrap().clone();
    assert_eq!(events[0]["type"], "started");
    assert_eq!(events[0]["run_id"], run_id);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "finished");
    assert_eq!(last["stop_reason"], "cancelled");
    let streamed: String = events
        .iter()
        .filter(|e| e["type"] == "text")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, last["text"].as_str().unwrap());
    assert!(last["tokens_generated"].as_u64().unwrap() < 200);

    // The history keeps the cancelled run with what it produced, and exports it.
    let stored = tauri::async_runtime::block_on(async {
        // The driver records the end right after sending it.
        for _ in 0..200 {
            let run = state.store().get_run(run_id).await.unwrap();
            if run.run.status == store::RunStatus::Cancelled {
                return run;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the run was not recorded as cancelled");
    });
    assert_eq!(stored.run.output.as_deref(), last["text"].as_str());

    let export = dir.path().join("runs.csv");
    let query = RunsQuery {
        format: Some("csv".into()),
        ..RunsQuery::default()
    };
    tauri::async_runtime::block_on(commands::export_to(&state, &query, &export)).unwrap();
    let mut reader = csv::Reader::from_path(&export).unwrap();
    let status = reader
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "status")
        .expect("a status column");
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(&rows[0][status], "cancelled");
}

#[test]
fn conversations_through_ipc() {
    let dir = tempfile::tempdir().unwrap();
    let (_app, window) = app(state(&dir.path().join("history.sqlite")));
    let created = invoke(&window, "create_conversation", json!({})).unwrap();
    let id = created["id"].as_i64().unwrap();
    let run_id = invoke(
        &window,
        "generate",
        json!({
            "request": {"messages": [{"role": "user", "content": "Say hello."}],
                        "conversation_id": id, "max_tokens": 6,
                        "sampling": {"temperature": 0.0}},
            "onEvent": "__CHANNEL__:11",
        }),
    )
    .unwrap()
    .as_i64()
    .unwrap();
    let run = wait_for_status(&window, run_id, "finished");
    let conversation = invoke(&window, "get_conversation", json!({"id": id})).unwrap();
    assert_eq!(conversation["title"], "Say hello.");
    assert_eq!(conversation["messages"][1]["run_id"], run_id);
    assert_eq!(conversation["messages"][1]["content"], run["run"]["output"]);
    let renamed = invoke(
        &window,
        "update_conversation",
        json!({"id": id, "patch": {"title": "Greeting"}}),
    )
    .unwrap();
    assert_eq!(renamed["title"], "Greeting");
    let listed = invoke(
        &window,
        "list_conversations",
        json!({"query": {"search": "greet"}}),
    )
    .unwrap();
    assert_eq!(listed["conversations"][0]["id"], id);
    invoke(&window, "delete_conversation", json!({"id": id})).unwrap();
    let err = invoke(&window, "get_conversation", json!({"id": id})).expect_err("deleted");
    assert_eq!(err["code"], "not_found");
}

#[test]
fn remote_engines_through_ipc() {
    let dir = tempfile::tempdir().unwrap();
    let (_app, window) = app(state(&dir.path().join("history.sqlite")));
    // Nothing listens on port 9: the engine is kept, with the reason.
    let added = invoke(
        &window,
        "add_remote",
        json!({"request": {"name": "lab", "url": "http://127.0.0.1:9", "api_key": "sk-0123"}}),
    )
    .unwrap();
    assert_eq!(added["has_key"], true);
    assert_eq!(added["error"]["code"], "remote_unreachable");
    let saved = std::fs::read_to_string(dir.path().join("history.sqlite.remotes.json")).unwrap();
    assert!(saved.contains("sk-0123"), "kept for the next start");
    let listed = invoke(&window, "list_remotes", json!({})).unwrap();
    assert_eq!(listed[0]["name"], "lab");
    assert!(!listed.to_string().contains("sk-0123"));
    let err = invoke(
        &window,
        "add_remote",
        json!({"request": {"name": "two words", "url": "http://h:1"}}),
    )
    .expect_err("a bad name");
    assert_eq!(err["code"], "invalid_remote");
    let err = invoke(
        &window,
        "generate",
        json!({"request": {"prompt": "Hi", "engine": "lab", "model": "m"}, "onEvent": "__CHANNEL__:12"}),
    )
    .expect_err("unreachable");
    assert_eq!(err["code"], "remote_unreachable");
    invoke(&window, "remove_remote", json!({"name": "lab"})).unwrap();
    let err = invoke(&window, "remove_remote", json!({"name": "lab"})).expect_err("gone");
    assert_eq!(err["code"], "remote_not_found");
    // The failed run stays in the history, named by its engine.
    let runs = invoke(&window, "list_runs", json!({"query": {}})).unwrap();
    assert_eq!(runs["runs"][0]["engine"], "lab");
    assert_eq!(runs["runs"][0]["status"], "failed");
}

#[test]
fn heads_training_through_ipc() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    std::fs::copy(models::default_model_path().unwrap(), &model).unwrap();
    let (_app, window) = app(state(&dir.path().join("history.sqlite")));
    let err = invoke(
        &window,
        "start_training",
        json!({"request": {"model": dir.path().join("missing.gguf")}}),
    )
    .expect_err("no such model");
    assert_eq!(err["code"], "invalid_parameter", "{err}");
    let planned = |window: &WebviewWindow<MockRuntime>| {
        invoke(window, "planned_heads", json!({"model": model})).unwrap()["heads_path"].clone()
    };
    let heads = dir.path().join("tiny.medusa.gguf").display().to_string();
    assert_eq!(planned(&window), heads);

    let job = invoke(
        &window,
        "start_training",
        json!({"request": {"model": model, "samples": 10, "max_tokens": 16, "epochs": 1,
                           "vocab_subset": 256, "tune_prompts": 1, "tune_max_tokens": 8}}),
    )
    .expect("the job starts");
    let id = job["id"].as_i64().unwrap();
    assert_eq!(job["status"], "running");
    assert_eq!(job["heads_path"], heads);
    assert_eq!(job["name"], "tiny.medusa.gguf");
    // The running job keeps its heads file's name from the next job.
    assert_eq!(
        planned(&window),
        dir.path().join("tiny-2.medusa.gguf").display().to_string()
    );
    let start = Instant::now();
    let done = loop {
        let now = invoke(&window, "get_training_job", json!({"id": id})).unwrap();
        if now["status"] != "running" {
            break now;
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "the job never ended"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(done["status"], "finished", "{done}");
    assert_eq!(
        done["heads_path"],
        dir.path().join("tiny.medusa.gguf").display().to_string()
    );
    let listed = invoke(&window, "list_training_jobs", json!({})).unwrap();
    assert_eq!(listed[0]["id"], id);
    let err = invoke(&window, "cancel_training", json!({"id": id})).expect_err("finished");
    assert_eq!(err["code"], "not_running");
    let err = invoke(&window, "resume_training", json!({"id": id})).expect_err("finished");
    assert_eq!(err["code"], "not_resumable");
    let deleted = invoke(&window, "delete_training_job", json!({"id": id})).unwrap();
    assert_eq!(deleted["id"], id);
    assert!(deleted["freed_bytes"].as_u64().unwrap() > 0, "{deleted}");
    let listed = invoke(&window, "list_training_jobs", json!({})).unwrap();
    assert_eq!(listed, json!([]));
    assert!(dir.path().join("tiny.medusa.gguf").is_file());
}
