//! A long prompt is read a chunk a step: a short request that arrives meanwhile is answered
//! before the long one's first token, and a client that leaves while its prompt is read stops
//! it there. Real model, real HTTP.

use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;

/// A server of its own: the shared one's other tests would share its steps.
fn server() -> &'static str {
    static BASE: OnceLock<String> = OnceLock::new();
    BASE.get_or_init(|| start(|_| {}))
}

/// About 800 tokens about `subject`: several steps' worth of prompt, within the tests'
/// 1,024-token context. Each test has its own, so that none finds another's in the prompt cache.
fn long_prompt(subject: &str) -> String {
    format!("The quick brown {subject} jumps over the lazy dog near the river bank. ").repeat(55)
}

/// Starts a streamed generation; its events until `started` is read, and the rest of them.
fn stream_generation(
    base: &str,
    body: &Value,
) -> (
    i64,
    std::io::Lines<BufReader<Box<dyn std::io::Read + Send + Sync>>>,
) {
    let (status, response) = send(
        agent().post(&format!("{base}/api/generate")),
        Some(&body.to_string()),
    );
    assert_eq!(status, 200);
    let mut lines = BufReader::new(response.into_reader()).lines();
    let started: Value = loop {
        let line = lines.next().expect("an event").expect("line");
        if let Some(data) = line.strip_prefix("data: ") {
            break serde_json::from_str(data).expect("JSON event");
        }
    };
    assert_eq!(started["type"], "started", "{started}");
    (started["run_id"].as_i64().expect("run id"), lines)
}

#[test]
fn a_short_request_is_answered_while_a_long_prompt_is_read() {
    let base = server();
    let (started_tx, started) = mpsc::channel();
    let long_wrote = Arc::new(AtomicBool::new(false));
    let long = {
        let long_wrote = long_wrote.clone();
        thread::spawn(move || {
            let body = json!({"prompt": long_prompt("fox"), "max_tokens": 8});
            let (_, lines) = stream_generation(server(), &body);
            started_tx.send(()).expect("main thread");
            for line in lines {
                let line = line.expect("line");
                let Some(data) = line.strip_prefix("data: ") else {
                    continue;
                };
                let event: Value = serde_json::from_str(data).expect("JSON event");
                if event["type"] == "text" {
                    long_wrote.store(true, Ordering::SeqCst);
                }
                if event["type"] == "finished" {
                    return event;
                }
            }
            panic!("the long prompt's run never finished");
        })
    };
    started.recv().expect("the long run started");
    let events = generate(
        base,
        &json!({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}),
    )
    .expect("the short request");
    assert_eq!(events.last().expect("events")["type"], "finished");
    assert!(
        !long_wrote.load(Ordering::SeqCst),
        "the short request waited for the long prompt's first token"
    );
    let finished = long.join().expect("the long run");
    assert_ne!(finished["stop_reason"], "cancelled", "{finished}");
}

#[test]
fn a_client_that_leaves_while_its_prompt_is_read_stops_it_there() {
    let base = server();
    let body = json!({"prompt": long_prompt("hare"), "max_tokens": 64});
    let (run_id, lines) = stream_generation(base, &body);
    drop(lines);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (_, run) = get_from(base, &format!("/api/runs/{run_id}"));
        if run["run"]["status"] != "running" {
            assert_eq!(run["run"]["status"], "cancelled", "{run}");
            // Stopped before the prompt's end: no token was generated.
            assert_eq!(run["run"]["tokens_generated"], 0, "{run}");
            break;
        }
        assert!(Instant::now() < deadline, "run {run_id} still running");
        thread::sleep(Duration::from_millis(200));
    }
}
