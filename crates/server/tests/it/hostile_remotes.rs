//! Remote engines that misbehave on purpose, and searches that hold what no one types: a fake
//! remote (an axum server on another loopback port) redirects to another origin, echoes the key
//! it is sent in its error's body and headers, and answers with endless model lists and event
//! streams. The playground under test has no model (remote runs need none).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::common::*;

const KEY: &str = "sk-hostile-remote-key-0123456789";
/// What the endless answers would send in all, were they read to the end.
const ENDLESS_BYTES: usize = 256 << 20;
const PIECE: usize = 64 << 10;

#[derive(Default)]
struct Counters {
    /// Requests that reached the other origin a redirect points to.
    elsewhere: AtomicUsize,
    /// Model lists served by `/counted`.
    counted: AtomicUsize,
    /// Bytes the endless answers produced before the client stopped reading.
    endless_sent: AtomicUsize,
    flood_sent: AtomicUsize,
}

struct Fake {
    base: String,
    counters: Arc<Counters>,
}

/// The fake remote, and the other origin its redirects point to.
fn fake() -> &'static Fake {
    static FAKE: OnceLock<Fake> = OnceLock::new();
    FAKE.get_or_init(|| {
        let counters = Arc::new(Counters::default());
        let elsewhere_counters = counters.clone();
        let elsewhere = spawn_server(move || {
            let count = move || {
                elsewhere_counters.elsewhere.fetch_add(1, Ordering::SeqCst);
                async { models_json("elsewhere") }
            };
            Router::new().fallback(count)
        });
        let target = format!("{elsewhere}/v1");
        let state = (counters.clone(), target);
        let base = spawn_server(move || {
            Router::new()
                .route("/redirect/v1/models", get(redirect_elsewhere))
                .route("/redirect/v1/completions", post(redirect_elsewhere))
                .route("/same/v1/models", get(redirect_here))
                .route(
                    "/moved/v1/models",
                    get(|| async { models_json("followed") }),
                )
                .route("/echo/v1/models", get(echo_key))
                .route("/echo/v1/completions", post(echo_key))
                .route("/echo-stream/v1/models", get(|| async { models_json("m") }))
                .route("/echo-stream/v1/completions", post(echo_key_in_stream))
                .route("/endless/v1/models", get(endless_models))
                .route("/declared/v1/models", get(declared_models))
                .route("/flood/v1/models", get(|| async { models_json("m") }))
                .route("/flood/v1/completions", post(flood_stream))
                .route("/counted/v1/models", get(counted_models))
                .with_state(state)
        });
        Fake { base, counters }
    })
}

type FakeState = State<(Arc<Counters>, String)>;

fn models_json(id: &str) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({"object": "list", "data": [{"id": id}]}).to_string(),
    )
        .into_response()
}

async fn redirect_elsewhere(State((_, target)): FakeState) -> Response {
    (
        StatusCode::TEMPORARY_REDIRECT,
        [(header::LOCATION, format!("{target}/models"))],
    )
        .into_response()
}

async fn redirect_here() -> Response {
    (
        StatusCode::PERMANENT_REDIRECT,
        [(header::LOCATION, "/moved/v1/models")],
    )
        .into_response()
}

/// A 401 that hands the key back in its body and in every header it can.
async fn echo_key(headers: HeaderMap) -> Response {
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none")
        .to_owned();
    let body = json!({"error": {"message": format!("invalid key: {sent}"), "code": 401}});
    Response::builder()
        .status(StatusCode::UNAUTHORIZED)
        .header(
            header::CONTENT_TYPE,
            format!("application/json; echo=\"{sent}\""),
        )
        .header(header::WWW_AUTHENTICATE, format!("Bearer error=\"{sent}\""))
        .header("x-echo", sent)
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// A stream that starts well and reports an error holding the key.
async fn echo_key_in_stream(headers: HeaderMap) -> Response {
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none")
        .to_owned();
    let error = json!({"error": {"message": format!("invalid key: {sent}"), "code": 401}});
    let body = format!(
        "data: {}\n\ndata: {error}\n\n",
        json!({"choices": [{"text": "Hi"}]})
    );
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

/// `bytes` of `piece` repeated, counted into `sent` as they are produced.
fn endless_body(piece: Bytes, bytes: usize, sent: &'static AtomicUsize) -> Body {
    let pieces = bytes / piece.len();
    let stream = futures_util::stream::iter(0..pieces).map(move |_| {
        sent.fetch_add(piece.len(), Ordering::SeqCst);
        Ok::<_, std::io::Error>(piece.clone())
    });
    Body::from_stream(stream)
}

/// A model list that never ends (a JSON array of one name after another), of no stated length.
async fn endless_models() -> Response {
    let piece = Bytes::from(r#"{"id":"m"},"#.repeat(PIECE / 11));
    let body = endless_body(piece, ENDLESS_BYTES, &fake().counters.endless_sent);
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A model list that says up front that it is 256 MiB.
async fn declared_models() -> Response {
    let piece = Bytes::from(vec![b' '; PIECE]);
    let pieces = ENDLESS_BYTES / PIECE;
    let stream =
        futures_util::stream::iter(0..pieces).map(move |_| Ok::<_, std::io::Error>(piece.clone()));
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, (pieces * PIECE).to_string())
        .body(Body::from_stream(stream))
        .unwrap()
}

/// One event that never ends: `data:` lines without the blank line that would close it.
async fn flood_stream() -> Response {
    let line = format!("data: {}\n", "x".repeat(PIECE - 7));
    let body = endless_body(
        Bytes::from(line),
        ENDLESS_BYTES,
        &fake().counters.flood_sent,
    );
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

async fn counted_models(State((counters, _)): FakeState) -> Response {
    counters.counted.fetch_add(1, Ordering::SeqCst);
    models_json("counted")
}

fn add(base: &str, name: &str, url: &str, key: Option<&str>) -> (u16, Value) {
    post_to(
        base,
        "/api/remotes",
        &json!({"name": name, "url": url, "api_key": key}).to_string(),
    )
}

fn remote_run(engine: &str) -> Value {
    json!({"prompt": "Hi", "max_tokens": 4, "engine": engine, "model": "m"})
}

/// The server's memory in use now (Linux), in bytes.
fn resident_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[test]
fn redirects_to_another_origin_are_not_followed() {
    let base = serve_without_model();
    let fake = fake();
    let (status, added) = add(
        &base,
        "redirect",
        &format!("{}/redirect", fake.base),
        Some(KEY),
    );
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["error"]["code"], "remote_refused", "{added}");
    let message = added["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("307") && message.contains("not followed"),
        "{message}"
    );
    assert!(
        !message.contains("elsewhere") && !message.contains("127.0.0.1:"),
        "{message}"
    );
    let (status, err) = generate(&base, &remote_run("redirect")).unwrap_err();
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (502, Some("remote_refused"))
    );
    assert_eq!(
        fake.counters.elsewhere.load(Ordering::SeqCst),
        0,
        "nothing reached the other origin"
    );

    // Within the engine's own origin a redirect is followed.
    let (status, same) = add(&base, "same", &format!("{}/same", fake.base), None);
    assert_eq!(status, 201);
    assert_eq!(same["error"], Value::Null, "{same}");
    assert_eq!(same["models"], json!(["followed"]));
}

#[test]
fn a_key_the_remote_echoes_never_comes_back() {
    let base = serve_without_model();
    let fake = fake();
    let (status, added) = add(&base, "echo", &format!("{}/echo", fake.base), Some(KEY));
    assert_eq!(status, 201);
    assert_eq!(added["error"]["code"], "remote_unauthorized", "{added}");
    let message = added["error"]["message"].as_str().unwrap();
    assert!(message.contains("401"), "{message}");
    // Not the body's words either: the status, the content type and ours.
    assert!(!message.contains("invalid key"), "{message}");
    assert!(message.contains("application/json"), "{message}");

    let (status, err) = generate(&base, &remote_run("echo")).unwrap_err();
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (502, Some("remote_unauthorized"))
    );
    assert!(!err.to_string().contains(KEY), "{err}");

    add(
        &base,
        "echo-stream",
        &format!("{}/echo-stream", fake.base),
        Some(KEY),
    );
    let events = generate(&base, &remote_run("echo-stream")).unwrap();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "failed", "{last}");
    assert_eq!(last["code"], "remote_failed");
    assert!(
        last["message"].as_str().unwrap().contains("code 401"),
        "{last}"
    );
    for event in &events {
        assert!(!event.to_string().contains(KEY), "{event}");
    }

    // Nowhere: the list (asked again), the info, the history.
    for path in [
        "/api/remotes",
        "/api/remotes?refresh=true",
        "/api/info",
        "/api/runs",
    ] {
        let (status, answer) = get_from(&base, path);
        assert_eq!(status, 200, "{path}");
        let text = answer.to_string();
        assert!(!text.contains(KEY), "{path}: {text}");
        assert!(!text.contains("invalid key"), "{path}: {text}");
    }
    let (_, runs) = get_from(&base, "/api/runs?engine=echo-stream");
    assert_eq!(runs["runs"][0]["status"], "failed", "{runs}");
}

#[test]
fn endless_answers_are_cut_at_their_limit() {
    // The process's resident memory is measured: no other test may load a model meanwhile.
    if crate::alone::in_own_process("hostile_remotes::endless_answers_are_cut_at_their_limit") {
        return;
    }
    let base = serve_without_model();
    let fake = fake();
    let before = resident_bytes();
    let (status, added) = add(&base, "endless", &format!("{}/endless", fake.base), None);
    assert_eq!(status, 201);
    assert_eq!(added["error"]["code"], "remote_too_large", "{added}");
    let (_, declared) = add(&base, "declared", &format!("{}/declared", fake.base), None);
    assert_eq!(declared["error"]["code"], "remote_too_large", "{declared}");
    // Another listing asks again (after a failure's short while) and stops again.
    std::thread::sleep(std::time::Duration::from_secs(6));
    let (_, listed) = get_from(&base, "/api/remotes");
    assert_eq!(listed[0]["error"]["code"], "remote_too_large", "{listed}");

    // A generation whose one event never ends.
    add(&base, "flood", &format!("{}/flood", fake.base), None);
    let events = generate(&base, &remote_run("flood")).unwrap();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "failed", "{last}");
    assert_eq!(last["code"], "remote_too_large", "{last}");

    // Each stopped near its limit (a few MiB, and what the sockets held), far from 256 MiB.
    for (what, sent) in [
        ("model lists", &fake.counters.endless_sent),
        ("event stream", &fake.counters.flood_sent),
    ] {
        let sent = sent.load(Ordering::SeqCst);
        assert!(sent < 48 << 20, "{what}: {sent} bytes sent");
    }
    if let (Some(before), Some(after)) = (before, resident_bytes()) {
        let grown = after.saturating_sub(before);
        assert!(grown < 128 << 20, "the server grew by {grown} bytes");
    }
}

#[test]
fn model_lists_are_kept_and_asked_again_when_refreshed() {
    let base = serve_without_model();
    let fake = fake();
    let (status, added) = add(&base, "counted", &format!("{}/counted", fake.base), None);
    assert_eq!(status, 201);
    assert_eq!(added["models"], json!(["counted"]));
    let asked = || fake.counters.counted.load(Ordering::SeqCst);
    assert_eq!(asked(), 1);
    for _ in 0..5 {
        let (_, listed) = get_from(&base, "/api/remotes");
        assert_eq!(listed[0]["models"], json!(["counted"]));
        get_from(&base, "/api/info");
    }
    assert_eq!(asked(), 1, "listings use the kept list");
    let (_, refreshed) = get_from(&base, "/api/remotes?refresh=true");
    assert_eq!(refreshed[0]["models"], json!(["counted"]));
    assert_eq!(asked(), 2, "an explicit refresh asks");
    assert_error(
        get_from(&base, "/api/remotes?refresh=maybe"),
        400,
        "invalid_parameter",
    );
}

#[test]
fn link_local_addresses_and_impossible_ports_are_refused() {
    let base = serve_without_model();
    for url in [
        "http://169.254.169.254/latest/meta-data",
        "http://169.254.169.254:80",
        "http://2852039166/latest",
        "http://[fe80::1]:8000",
        "http://[::ffff:169.254.169.254]",
        "http://[fd00:ec2::254]",
    ] {
        let answer = add(&base, "meta", url, Some(KEY));
        let message = answer.1["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert_error(answer, 400, "invalid_remote");
        assert!(
            message.contains("--allow-link-local-remotes"),
            "{url}: {message}"
        );
    }
    for url in [
        "http://127.0.0.1:99999",
        "http://gpu-box:0",
        "http://[::1]:65536/v1",
    ] {
        let answer = add(&base, "port", url, None);
        let message = answer.1["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert_error(answer, 400, "invalid_remote");
        assert!(message.contains("1 to 65535"), "{url}: {message}");
    }
    let (_, listed) = get_from(&base, "/api/remotes");
    assert_eq!(listed, json!([]), "none was added");
}

#[test]
fn control_characters_in_any_search_field_answer_400() {
    let base = serve_without_model();
    let (status, _) = post_to(&base, "/api/conversations", r#"{"title": "Giraffes"}"#);
    assert_eq!(status, 201);
    for bad in ["%00", "gir%00affe", "%01", "%0A", "%09", "%7F", "%C2%9B"] {
        for path in [
            format!("/api/runs?search={bad}"),
            format!("/api/runs?model={bad}"),
            format!("/api/runs?engine={bad}"),
            format!("/api/runs?mode={bad}"),
            format!("/api/runs/export?format=csv&search={bad}"),
            format!("/api/runs/export?format=json&model={bad}"),
            format!("/api/runs/export?format=jsonl&search={bad}"),
            format!("/api/conversations?search={bad}"),
        ] {
            let (status, response) = send(agent().get(&format!("{base}{path}")), None);
            let body: Value = response.into_json().expect("JSON error");
            assert_error((status, body), 400, "invalid_input");
        }
    }
    // Ordinary searches, FTS syntax and all, still answer.
    for path in [
        "/api/runs?search=%22vent%20NEAR(lava%20*",
        "/api/runs/export?format=csv&search=a%20OR%20b",
        "/api/conversations?search=giraffe",
    ] {
        let (status, _) = send(agent().get(&format!("{base}{path}")), None);
        assert_eq!(status, 200, "{path}");
    }
}
