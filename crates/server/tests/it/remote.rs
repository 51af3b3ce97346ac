//! Remote engines over real HTTP: a second server on another loopback port (with its own engine
//! on the default model and an API key) stands in for vLLM or llama-server, and a socket that
//! answers nonsense for a broken one.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, OnceLock};

use engine::{Engine, EngineConfig};
use playground::Playground;
use serde_json::{json, Value};

use crate::common::*;

const REMOTE_KEY: &str = "remote-engine-key-0123456789";

/// The remote engine: a server on the default model that wants `REMOTE_KEY`.
fn remote() -> &'static str {
    static BASE: OnceLock<String> = OnceLock::new();
    BASE.get_or_init(|| {
        let model = models::default_model_path().expect("default model available");
        let mut config = EngineConfig::new(model);
        config.ctx_size = Some(1024);
        serve(
            move |store| {
                let engine = Arc::new(Engine::load(config.clone()).expect("model loads"));
                Playground::new(engine, store, config)
            },
            None,
            server::AccessPolicy {
                api_key: Some(server::ApiKey::new(REMOTE_KEY).unwrap()),
                ..Default::default()
            },
        )
    })
}

/// The playground under test, with `lab` (the remote, with its key) added through the API.
fn local() -> &'static str {
    static BASE: OnceLock<String> = OnceLock::new();
    BASE.get_or_init(|| {
        let base = start(|_| {});
        let (status, added) = post_to(
            &base,
            "/api/remotes",
            &json!({"name": "lab", "url": remote(), "api_key": REMOTE_KEY}).to_string(),
        );
        assert_eq!(status, 201, "{added}");
        base
    })
}

fn finished(events: &[Value]) -> &Value {
    let last = events.last().expect("events");
    assert_eq!(last["type"], "finished", "{last}");
    last
}

fn remote_runs() -> Vec<Value> {
    let (status, response) = send(
        agent()
            .get(&format!("{}/api/runs", remote()))
            .set("Authorization", &format!("Bearer {REMOTE_KEY}")),
        None,
    );
    assert_eq!(status, 200);
    let list: Value = response.into_json().unwrap();
    list["runs"].as_array().expect("runs").clone()
}

#[test]
fn the_remote_lists_its_model_and_info_shows_it() {
    let base = local();
    let (status, remotes) = get_from(base, "/api/remotes");
    assert_eq!(status, 200);
    let lab = &remotes[0];
    assert_eq!(lab["name"], "lab");
    assert_eq!(lab["has_key"], true);
    assert_eq!(lab["saved"], true);
    assert_eq!(lab["error"], Value::Null);
    let (_, info) = get_from(base, "/api/info");
    assert_eq!(
        lab["models"][0], info["model"]["name"],
        "the same model serves both"
    );
    assert_eq!(info["remotes"][0]["name"], "lab");
    // The remote tells it is a medusa serve by the modes its model list names: those its model
    // runs (no draft model there).
    assert_eq!(lab["kind"], "medusa_serve");
    let remote_get = |path: &str| {
        let (status, answer) = send(
            agent()
                .get(&format!("{}{path}", remote()))
                .set("Authorization", &format!("Bearer {REMOTE_KEY}")),
            None,
        );
        assert_eq!(status, 200, "{path}");
        answer.into_json::<Value>().unwrap()
    };
    let remote_modes = remote_get("/api/info")["modes"].clone();
    assert_eq!(lab["modes"], remote_modes);
    assert_eq!(remote_get("/v1/models")["data"][0]["modes"], remote_modes);
    for mode in ["normal", "lookup", "auto"] {
        assert!(
            remote_modes.as_array().unwrap().contains(&json!(mode)),
            "{remote_modes}"
        );
    }
    // A mode it does not run is refused here, before it is sent.
    let (status, err) = generate(
        base,
        &json!({"prompt": "Hi", "max_tokens": 4, "engine": "lab", "mode": "draft"}),
    )
    .unwrap_err();
    assert_eq!(status, 400, "{err}");
    assert_eq!(err["error"]["code"], "unsupported_parameter");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not draft: another medusa serve"),
        "{err}"
    );
    // The key never comes back.
    assert!(!remotes.to_string().contains(REMOTE_KEY));
    assert!(!info.to_string().contains(REMOTE_KEY));
}

#[test]
fn a_remote_run_is_recorded_on_both_sides_with_the_engine_and_its_draft_figures() {
    let base = local();
    let prompt = "red green blue red green blue red green blue red";
    // Greedy with a repetition penalty: every sampling field must reach the remote engine.
    let greedy = json!({"temperature": 0, "repeat_penalty": 1.1, "repeat_last_n": 32});
    let local_events = generate(
        base,
        &json!({"prompt": prompt, "max_tokens": 16, "sampling": greedy}),
    )
    .unwrap();
    let remote_events = generate(
        base,
        &json!({"prompt": prompt, "max_tokens": 16, "sampling": greedy, "engine": "lab", "mode": "lookup"}),
    )
    .unwrap();
    let (local_end, remote_end) = (finished(&local_events), finished(&remote_events));
    // Greedy decoding of one model, here and there: one answer.
    assert_eq!(remote_end["text"], local_end["text"]);
    assert_eq!(remote_end["tokens_generated"], 16);
    assert_eq!(remote_end["prompt_tokens"], local_end["prompt_tokens"]);
    let streamed: String = remote_events
        .iter()
        .filter(|e| e["type"] == "text")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, remote_end["text"].as_str().unwrap());

    let run_id = remote_events[0]["run_id"].as_i64().unwrap();
    let (_, stored) = get_from(base, &format!("/api/runs/{run_id}"));
    let run = &stored["run"];
    assert_eq!(run["engine"], "lab");
    assert_eq!(run["mode"], "lookup");
    assert_eq!(run["status"], "finished");
    assert_eq!(run["model"]["path"], remote());
    assert_eq!(run["output"], remote_end["text"]);
    // The remote's own figures, from its `timings`: what it drafted and accepted.
    let elsewhere = remote_runs();
    let there = elsewhere
        .iter()
        .find(|r| r["output"] == remote_end["text"] && r["mode"] == "lookup")
        .expect("the remote recorded the request");
    assert_eq!(run["draft_tokens"], there["draft_tokens"]);
    assert_eq!(run["accepted_draft_tokens"], there["accepted_draft_tokens"]);
    // What the history says was asked is what the remote engine ran with.
    assert_eq!(run["sampling"], there["sampling"]);
    assert_eq!(
        there["sampling"]["repeat_penalty"].as_f64(),
        Some(1.1f32 as f64)
    );
    assert_eq!(there["engine"], Value::Null, "a local run there");
    let local_id = local_events[0]["run_id"].as_i64().unwrap();
    let (_, local_run) = get_from(base, &format!("/api/runs/{local_id}"));
    assert_eq!(local_run["run"]["engine"], Value::Null);
    // The history filters by engine: `local` for the model served here.
    let (_, on_lab) = get_from(base, "/api/runs?engine=lab&limit=1000");
    let on_lab = on_lab["runs"].as_array().unwrap();
    assert!(on_lab.iter().all(|r| r["engine"] == "lab"));
    assert!(on_lab.iter().any(|r| r["id"] == run_id));
    let (_, here) = get_from(base, "/api/runs?engine=local&limit=1000");
    let here = here["runs"].as_array().unwrap();
    assert!(here.iter().all(|r| r["engine"].is_null()));
    assert!(here.iter().any(|r| r["id"] == local_id));

    // A local run and the remote one of the same prompt compare.
    let (status, comparison) = post_to(
        base,
        "/api/comparisons",
        &json!({"run_ids": [local_id, run_id]}).to_string(),
    );
    assert_eq!(status, 201, "{comparison}");
}

#[test]
fn a_chat_on_the_remote_joins_its_conversation() {
    let base = local();
    let (status, conversation) = post_to(base, "/api/conversations", "{}");
    assert_eq!(status, 201);
    let id = conversation["id"].as_i64().unwrap();
    let events = generate(
        base,
        &json!({
            "messages": [{"role": "user", "content": "Name a colour."}],
            "max_tokens": 6, "engine": "lab", "model": conversation_model(base),
            "conversation_id": id, "sampling": {"temperature": 0},
        }),
    )
    .unwrap();
    let answer = finished(&events)["text"].as_str().unwrap().to_owned();
    assert!(!answer.is_empty());
    let (_, stored) = get_from(base, &format!("/api/conversations/{id}"));
    let messages = stored["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap()["content"], answer.as_str());
}

fn conversation_model(base: &str) -> Value {
    get_from(base, "/api/info").1["model"]["name"].clone()
}

#[test]
fn remote_failures_are_clear_errors_and_the_history_keeps_them() {
    let base = local();
    let add = |name: &str, url: &str, key: Option<&str>| {
        post_to(
            base,
            "/api/remotes",
            &json!({"name": name, "url": url, "api_key": key}).to_string(),
        )
    };
    // Refused when added: a bad address, a taken name.
    assert_error(add("bad", "gpu-box:8000", None), 400, "invalid_remote");
    assert_error(add("lab", remote(), None), 409, "remote_exists");

    // Added, but each fails its own way when used.
    let (status, wrong_key) = add("wrongkey", remote(), Some("not-the-key-at-all"));
    assert_eq!(status, 201);
    assert_eq!(wrong_key["error"]["code"], "remote_unauthorized");
    let (status, dead) = add("dead", "http://127.0.0.1:9", None);
    assert_eq!(status, 201);
    assert_eq!(dead["error"]["code"], "remote_unreachable");
    let garbage = garbage_server();
    add("garbage", &garbage, None);
    // HTTPS to a server that speaks plain HTTP: no TLS handshake.
    let (status, tls) = add("tls", &garbage.replace("http://", "https://"), None);
    assert_eq!(status, 201);
    assert_eq!(tls["error"]["code"], "remote_unreachable", "{tls}");

    let request =
        |engine: &str| json!({"prompt": "Hi", "max_tokens": 4, "engine": engine, "model": "m"});
    let (status, err) = generate(base, &request("wrongkey")).unwrap_err();
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (502, Some("remote_unauthorized"))
    );
    let (status, err) = generate(base, &request("dead")).unwrap_err();
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (502, Some("remote_unreachable"))
    );
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("cannot be reached"));
    let (status, err) = generate(base, &request("nowhere")).unwrap_err();
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (404, Some("remote_not_found"))
    );
    // A stream that is not one: the run fails with the reason, after it started.
    let events = generate(base, &request("garbage")).unwrap();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "failed", "{last}");
    assert_eq!(last["code"], "remote_malformed");
    assert!(last["message"]
        .as_str()
        .unwrap()
        .contains("not an OpenAI-compatible answer"));
    // Only the model served here takes trees and draft lengths.
    let (status, err) = generate(
        base,
        &json!({"prompt": "Hi", "engine": "lab", "mode": "lookup", "draft_length": 3}),
    )
    .unwrap_err();
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (400, Some("invalid_parameter"))
    );

    // Every failed run is in the history, named by its engine; nothing else was lost.
    let (_, list) = get_from(base, "/api/runs?status=failed");
    let engines: Vec<&str> = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["engine"].as_str())
        .collect();
    let (status, err) = generate(base, &request("tls")).unwrap_err();
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (502, Some("remote_unreachable"))
    );
    for engine in ["wrongkey", "dead", "garbage"] {
        assert!(engines.contains(&engine), "{engine} in {engines:?}");
    }

    // Removed engines stay named in their runs.
    for name in ["wrongkey", "dead", "garbage", "tls"] {
        let (status, _) = send(agent().delete(&format!("{base}/api/remotes/{name}")), None);
        assert_eq!(status, 204);
    }
    let (status, _) = send(agent().delete(&format!("{base}/api/remotes/dead")), None);
    assert_eq!(status, 404);
}

/// A server that answers every request with an event stream of HTML.
fn garbage_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer);
            let body = "data: <html>not a chunk</html>\n\n";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{address}")
}
