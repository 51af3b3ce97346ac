//! A remote engine that is a plain OpenAI-compatible server: a fake (an axum server on another
//! loopback port) whose model list names no medusa serve modes and no known engine, which keeps
//! the body of every generation it is sent and answers with a short stream. The playground under
//! test has no model (remote runs need none). Each test adds its own fake, so one test's requests
//! never land in the other's record while they run at once.

use std::sync::{Arc, Mutex, OnceLock};

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::common::*;

/// The bodies of the generations the fake was sent, in order.
type Received = Arc<Mutex<Vec<Value>>>;

/// A fake plain server, added to the playground under test as the remote engine `name`.
struct PlainRemote {
    received: Received,
}

impl PlainRemote {
    fn added_as(name: &str) -> Self {
        let received = Received::default();
        let state = received.clone();
        let url = spawn_server(move || {
            Router::new()
                .route("/v1/models", get(models))
                .route("/v1/chat/completions", post(answer))
                .route("/v1/completions", post(answer))
                .with_state(state)
        });
        let (status, added) = post_to(
            local(),
            "/api/remotes",
            &json!({"name": name, "url": url}).to_string(),
        );
        assert_eq!(status, 201, "{added}");
        Self { received }
    }

    fn received_count(&self) -> usize {
        self.received.lock().unwrap().len()
    }

    fn last_received(&self) -> Value {
        self.received
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request")
    }
}

async fn models() -> Json<Value> {
    Json(
        json!({"object": "list", "data": [{"id": "plain-model", "object": "model", "owned_by": "someone"}]}),
    )
}

async fn answer(State(received): State<Received>, Json(body): Json<Value>) -> Response {
    let chat = body.get("messages").is_some();
    received.lock().unwrap().push(body);
    let piece = |text: &str| {
        if chat {
            json!({"choices": [{"index": 0, "delta": {"content": text}}]})
        } else {
            json!({"choices": [{"index": 0, "text": text}]})
        }
    };
    let usage = json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}});
    let stream = format!(
        "data: {}\n\ndata: {}\n\ndata: {usage}\n\ndata: [DONE]\n\n",
        piece("Blue"),
        piece(" sky")
    );
    ([(header::CONTENT_TYPE, "text/event-stream")], stream).into_response()
}

/// The fields OpenAI's own API takes in a completion request, of those the playground sends.
const OPENAI_FIELDS: [&str; 14] = [
    "model",
    "messages",
    "prompt",
    "max_tokens",
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "n",
];

/// The playground under test, shared by the tests here.
fn local() -> &'static str {
    static BASE: OnceLock<String> = OnceLock::new();
    BASE.get_or_init(serve_without_model)
}

#[test]
fn a_plain_openai_server_is_offered_normal_decoding_and_sent_openai_s_fields_only() {
    let remote = PlainRemote::added_as("plain");
    let base = local();
    let (_, remotes) = get_from(base, "/api/remotes");
    let plain = remotes
        .as_array()
        .unwrap()
        .iter()
        .find(|remote| remote["name"] == "plain")
        .expect("the remote just added");
    assert_eq!(plain["kind"], "openai", "{plain}");
    assert_eq!(plain["modes"], json!(["normal"]));

    // Auto (the UI's default) is normal decoding there, and recorded so; every knob is set.
    let events = generate(
        base,
        &json!({
            "messages": [{"role": "user", "content": "What colour is the sky?"}],
            "max_tokens": 8,
            "engine": "plain",
            "mode": "auto",
            "stop": ["\n"],
            "sampling": {"temperature": 0.5, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1, "seed": 7},
        }),
    )
    .unwrap();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "finished", "{last}");
    assert_eq!(last["text"], "Blue sky");
    let sent = remote.last_received();
    let fields: Vec<&String> = sent.as_object().unwrap().keys().collect();
    for field in &fields {
        assert!(
            OPENAI_FIELDS.contains(&field.as_str()),
            "'{field}' is not OpenAI's: {sent}"
        );
    }
    for ours in [
        "mode",
        "tree",
        "draft_length",
        "cache_prompt",
        "top_k",
        "min_p",
        "repeat_penalty",
    ] {
        assert!(sent.get(ours).is_none(), "{ours} in {sent}");
    }
    assert_eq!(sent["model"], "plain-model");
    assert_eq!(sent["seed"], 7);
    assert_eq!(sent["stop"], json!(["\n"]));
    let run_id = events[0]["run_id"].as_i64().unwrap();
    let (_, stored) = get_from(base, &format!("/api/runs/{run_id}"));
    assert_eq!(stored["run"]["mode"], "normal", "what really ran");
    assert_eq!(stored["run"]["engine"], "plain");

    // A raw prompt through completions, the same way.
    let events = generate(
        base,
        &json!({"prompt": "Once", "max_tokens": 4, "engine": "plain", "mode": "normal"}),
    )
    .unwrap();
    assert_eq!(events.last().unwrap()["type"], "finished");
    let sent = remote.last_received();
    assert_eq!(sent["prompt"], "Once");
    assert!(sent.get("mode").is_none(), "{sent}");
}

#[test]
fn what_a_plain_server_cannot_do_is_refused_before_it_is_sent() {
    let remote = PlainRemote::added_as("plain-refusing");
    let base = local();
    let refused = |body: Value, says: &str| {
        let (status, err) = generate(base, &body).unwrap_err();
        assert_eq!(status, 400, "{err}");
        assert_eq!(err["error"]["code"], "unsupported_parameter", "{err}");
        let message = err["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
        assert!(
            message.contains("plain OpenAI-compatible server"),
            "{message}"
        );
    };
    for mode in ["medusa", "lookup", "draft"] {
        refused(
            json!({"prompt": "Hi", "max_tokens": 4, "engine": "plain-refusing", "mode": mode}),
            &format!("runs the modes normal only, not {mode}"),
        );
    }
    refused(
        json!({"prompt": "Hi", "max_tokens": 4, "engine": "plain-refusing", "grammar": "root ::= \"a\""}),
        "takes no grammar",
    );
    // Through the OpenAI API too, naming the engine as the model.
    let (status, answer) = post_to(
        base,
        "/v1/chat/completions",
        &json!({"model": "plain-refusing", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "mode": "lookup"})
            .to_string(),
    );
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not lookup"),
        "{answer}"
    );
    assert_eq!(
        remote.received_count(),
        0,
        "nothing refused reached the remote"
    );
}
