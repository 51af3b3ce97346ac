//! What the server's tests share: a real server on loopback over the real default model and a
//! fresh SQLite file, and small HTTP helpers.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::Router;
use engine::{Engine, EngineConfig};
use playground::Playground;
use serde_json::{json, Value};
use server::{Server, ServerConfig};

/// Starts a server on a free loopback port in a thread of its own, with a fresh database.
pub fn start(configure: impl FnOnce(&mut EngineConfig)) -> String {
    let model = models::default_model_path().expect("default model available");
    let mut config = EngineConfig::new(model);
    config.ctx_size = Some(1024);
    configure(&mut config);
    serve(
        move |store| {
            let engine = Arc::new(Engine::load(config.clone()).expect("model loads"));
            Playground::new(engine, store, config)
        },
        None,
        server::AccessPolicy::default(),
    )
}

/// A server on a fresh history whose model never loads (its file does not exist): the routes
/// that need no model answer, generations are refused.
pub fn serve_without_model() -> String {
    serve_without_model_under(server::AccessPolicy::default())
}

/// [`serve_without_model`] under `access`.
pub fn serve_without_model_under(access: server::AccessPolicy) -> String {
    serve(
        |store| {
            Playground::loading(
                store,
                EngineConfig::new(PathBuf::new()),
                playground::LoadRequest {
                    model: playground::ModelSource::Path(PathBuf::from("/nonexistent/model.gguf")),
                    heads: None,
                    draft_model: None,
                    drafter: None,
                    tree: None,
                    ctx_size: None,
                    exact: None,
                },
            )
        },
        None,
        access,
    )
}

/// Serves the state `make_state` builds on a fresh database, and the UI from `ui_dir`, under
/// `access`.
pub fn serve(
    make_state: impl FnOnce(store::Store) -> Playground + Send + 'static,
    ui_dir: Option<PathBuf>,
    access: server::AccessPolicy,
) -> String {
    serve_limited(
        make_state,
        ui_dir,
        access,
        server::ConnectionLimits::default(),
    )
}

/// [`serve`] under connection limits of the test's own.
pub fn serve_limited(
    make_state: impl FnOnce(store::Store) -> Playground + Send + 'static,
    ui_dir: Option<PathBuf>,
    access: server::AccessPolicy,
    limits: server::ConnectionLimits,
) -> String {
    let db: PathBuf = tempfile::tempdir()
        .expect("temp dir")
        .keep()
        .join("history.sqlite");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async move {
            let store = store::Store::open(&db).await.expect("store opens");
            let state = make_state(store);
            let config = ServerConfig {
                host: "127.0.0.1".into(),
                port: 0,
                ui_dir,
                access,
                limits,
                embedding_token_ids: Default::default(),
            };
            let server = Server::bind(&config, state).await.expect("binds");
            tx.send(server.local_addr().expect("address"))
                .expect("send");
            server.run(std::future::pending()).await.expect("serves");
        });
    });
    let address = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("server starts");
    format!("http://{address}")
}

/// The shared server: 4 slots, default queue.
pub fn base() -> &'static str {
    static BASE: OnceLock<String> = OnceLock::new();
    BASE.get_or_init(|| start(|_| {}))
}

/// A server whose queue takes nothing: every generation is refused with 503.
pub fn refusing() -> &'static str {
    static BASE: OnceLock<String> = OnceLock::new();
    BASE.get_or_init(|| {
        start(|c| {
            c.parallel = 1;
            c.max_queued = 0;
        })
    })
}

pub fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(600))
        .build()
}

/// Status and response, whatever the status.
pub fn send(request: ureq::Request, body: Option<&str>) -> (u16, ureq::Response) {
    let result = match body {
        Some(body) => request
            .set("Content-Type", "application/json")
            .send_string(body),
        None => request.call(),
    };
    match result {
        Ok(response) => (response.status(), response),
        Err(ureq::Error::Status(code, response)) => (code, response),
        Err(err) => panic!("transport error: {err}"),
    }
}

pub fn post(path: &str, body: &Value) -> (u16, Value) {
    post_to(base(), path, &body.to_string())
}

pub fn post_to(base: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, response) = send(agent().post(&format!("{base}{path}")), Some(body));
    (status, response.into_json().expect("JSON answer"))
}

pub fn get(path: &str) -> (u16, Value) {
    get_from(base(), path)
}

pub fn get_from(base: &str, path: &str) -> (u16, Value) {
    let (status, response) = send(agent().get(&format!("{base}{path}")), None);
    (status, response.into_json().expect("JSON answer"))
}

pub fn assert_error(answer: (u16, Value), status: u16, code: &str) {
    assert_eq!(answer.0, status, "{}", answer.1);
    assert_eq!(answer.1["error"]["code"], code, "{}", answer.1);
    assert!(answer.1["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
}

/// The `data:` payloads of an SSE answer.
pub fn sse_data(path: &str, body: &Value) -> Vec<String> {
    let (status, response) = send(
        agent().post(&format!("{}{path}", base())),
        Some(&body.to_string()),
    );
    assert_eq!(status, 200);
    assert_eq!(response.content_type(), "text/event-stream");
    BufReader::new(response.into_reader())
        .lines()
        .map(|l| l.expect("line"))
        .filter_map(|l| l.strip_prefix("data: ").map(str::to_owned))
        .collect()
}

/// A generation through `/api/generate` on `base`: its events, or the error answered before the
/// first.
pub fn generate(base: &str, body: &Value) -> Result<Vec<Value>, (u16, Value)> {
    let (status, response) = send(
        agent().post(&format!("{base}/api/generate")),
        Some(&body.to_string()),
    );
    if status != 200 {
        return Err((status, response.into_json().expect("JSON error")));
    }
    Ok(BufReader::new(response.into_reader())
        .lines()
        .map(|l| l.expect("line"))
        .filter_map(|l| Some(serde_json::from_str(l.strip_prefix("data: ")?).expect("JSON event")))
        .collect())
}

/// Sends `request` as written (head and body) and returns the status and the whole answer.
pub fn raw_http(base: &str, request: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let address = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).expect("connects");
    stream.write_all(request.as_bytes()).expect("sends");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("reads");
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"));
    (status, answer)
}

pub fn wait_for_info(base: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (status, info) = get_from(base, "/api/info");
        assert_eq!(status, 200);
        if done(&info) {
            return info;
        }
        assert!(Instant::now() < deadline, "never reached: {info}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Serves the router `make` builds on a free loopback port, in a thread of its own.
pub fn spawn_server(make: impl FnOnce() -> Router + Send + 'static) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, make()).await.unwrap();
        });
    });
    format!("http://{address}")
}

/// An export document of `count` finished runs holding `tokens` token ids each, as JSON text.
pub fn heavy_document(count: usize, tokens: usize) -> String {
    let token_ids = format!("[{}7]", "7,".repeat(tokens - 1));
    let runs: Vec<String> = (0..count)
        .map(|i| {
            let run = json!({
                "id": i + 1,
                "uid": uuid::Uuid::new_v4(),
                "status": "finished",
                "created_at": "2025-03-01T12:00:00Z",
                "mode": "normal",
                "model": {"name": "heavy", "path": "/models/heavy.gguf", "file_type": "Q4_1"},
                "prompt": {"kind": "text", "content": format!("heavy run {i}")},
                "sampling": {"temperature": 0.0},
                "max_tokens": tokens,
                "stop": [],
                "output": "7777",
                "tokens_generated": tokens,
                "token_ids": "TOKEN_IDS",
            });
            let run = run.to_string().replace("\"TOKEN_IDS\"", &token_ids);
            format!(r#"{{"run": {run}, "steps": []}}"#)
        })
        .collect();
    format!(
        r#"{{"version": 1, "exported_at": "2025-03-01T12:00:00Z", "runs": [{}], "comparisons": []}}"#,
        runs.join(",")
    )
}
