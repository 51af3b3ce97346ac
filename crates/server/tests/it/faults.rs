//! The server under faults and hostile input: a full disk, a huge import while generations run,
//! and a corpus of malformed requests. Real model, real SQLite file, real HTTP.

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use engine::{Engine, EngineConfig};
use playground::Playground;
use serde_json::{json, Value};

use crate::common::*;

/// A server of its own, and its history to reach under the server's feet.
fn start_with_store() -> (String, store::Store) {
    let model = models::default_model_path().expect("default model available");
    let (tx, rx) = mpsc::channel();
    let base = serve(
        move |store| {
            tx.send(store.clone()).expect("send");
            let mut config = EngineConfig::new(model);
            config.ctx_size = Some(1024);
            let engine = Arc::new(Engine::load(config.clone()).expect("model loads"));
            Playground::new(engine, store, config)
        },
        None,
        server::AccessPolicy::default(),
    );
    (base, rx.recv().expect("store"))
}

fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

fn chat(base: &str, content: &str) -> (u16, Value) {
    let body = json!({
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 8, "temperature": 0
    });
    post_to(base, "/v1/chat/completions", &body.to_string())
}

fn runs(base: &str, query: &str) -> Vec<Value> {
    let (status, answer) = get_from(base, &format!("/api/runs{query}"));
    assert_eq!(status, 200, "{answer}");
    answer["runs"].as_array().expect("runs").clone()
}

#[test]
fn a_full_disk_fails_generations_clearly_and_heals_without_a_restart() {
    let (base, store) = start_with_store();
    assert_eq!(chat(&base, "Hello").0, 200);
    block_on(store.limit_size(Some(block_on(store.size_bytes()).unwrap()))).unwrap();

    // Runs carry their prompts; long ones fill the last free pages quickly.
    let long = "Tell me about the sea and the sky and the wind. ".repeat(30);
    let refusal = (0..40)
        .map(|_| chat(&base, &long))
        .find(|(status, _)| *status != 200)
        .expect("a full history refuses generations");
    assert_error(refusal.clone(), 503, "history_unavailable");
    let message = refusal.1["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("full"), "{message}");
    let (_, health) = get_from(&base, "/health");
    assert_eq!(health["status"], "degraded", "{health}");
    assert!(
        health["reason"].as_str().unwrap().contains("full"),
        "{health}"
    );
    // Reading the history goes on.
    assert!(!runs(&base, "").is_empty());

    block_on(store.limit_size(None)).unwrap();
    let (_, health) = get_from(&base, "/health");
    assert_eq!(health["status"], "ok", "{health}");
    let (status, answer) = chat(&base, &long);
    assert_eq!(status, 200, "{answer}");
    // Runs whose end could not be written are written now: none stays running.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !runs(&base, "?status=running").is_empty() {
        assert!(Instant::now() < deadline, "a run stayed running");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_huge_import_lets_generations_run_and_be_recorded() {
    let (base, _store) = start_with_store();
    assert_eq!(chat(&base, "A run to copy").0, 200);
    let (_, export) = get_from(&base, "/api/runs/export?format=json");
    let template = export["runs"][0].clone();
    const IMPORTED: usize = 150_000;
    let runs_json: Vec<Value> = (0..IMPORTED)
        .map(|i| {
            let mut entry = template.clone();
            entry["run"]["id"] = json!(i + 1);
            entry["run"]["uid"] = json!(uuid::Uuid::new_v4());
            entry
        })
        .collect();
    let document = json!({
        "version": export["version"],
        "exported_at": export["exported_at"],
        "runs": runs_json,
        "comparisons": [],
    })
    .to_string();
    drop(export);

    let import = {
        let base = base.clone();
        std::thread::spawn(move || post_to(&base, "/api/runs/import", &document))
    };
    // Generations start once the import is under way.
    std::thread::sleep(Duration::from_secs(2));
    let generations: Vec<_> = (0..8)
        .map(|i| {
            let base = base.clone();
            std::thread::spawn(move || chat(&base, &format!("Name a colour, number {i}.")))
        })
        .collect();
    let mut recorded = Vec::new();
    for generation in generations {
        let (status, answer) = generation.join().expect("generation thread");
        assert_eq!(status, 200, "{answer}");
        recorded.push(answer["id"].as_str().unwrap().to_owned());
    }
    // They ran during the import, not after it.
    assert!(
        !import.is_finished(),
        "the import ended before the generations"
    );
    let (status, report) = import.join().expect("import thread");
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["imported"], IMPORTED, "{report}");

    assert!(runs(&base, "?status=running").is_empty());
    let finished = runs(
        &base,
        "?status=finished&mode=normal&limit=1000&sort=created_at",
    );
    let chatted: Vec<&Value> = finished
        .iter()
        .filter(|r| {
            r["prompt"]["content"][0]["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("Name a colour"))
        })
        .collect();
    assert_eq!(chatted.len(), 8, "{recorded:?}");
}

/// Requests no client should send, across every endpoint.
fn malformed_corpus() -> Vec<(&'static str, String, &'static str, Vec<u8>)> {
    let posts = [
        "/generate/normal",
        "/generate/medusa",
        "/compare",
        "/v1/chat/completions",
        "/v1/completions",
        "/api/generate",
        "/api/model",
        "/api/tune",
        "/api/comparisons",
        "/api/runs/import",
        "/api/runs/1/cancel",
    ];
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let bodies: Vec<Vec<u8>> = [
        "",
        "{",
        "null",
        "[]",
        "42",
        "\"text\"",
        "{\"prompt\": 5}",
        "{\"messages\": \"hi\"}",
        "{\"messages\": [{\"role\": \"wizard\", \"content\": \"hi\"}]}",
        "{\"prompt\": \"a\", \"max_tokens\": -1, \"max_length\": -1}",
        "{\"prompt\": \"a\", \"max_tokens\": 1e999, \"max_length\": 1e999}",
        "{\"prompt\": \"a\", \"temperature\": \"hot\", \"sampling\": {\"temperature\": \"hot\"}}",
        "{\"prompt\": \"a\\u0000b\"}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"\\u0000\"}]}",
        "{\"model\": \"/etc/passwd\", \"tree\": \"/etc/shadow\"}",
        "{\"run_ids\": [1, 1, 1]}",
        "{\"version\": 1, \"runs\": [{\"run\": {}}], \"comparisons\": []}",
    ]
    .iter()
    .map(|b| b.as_bytes().to_vec())
    .chain([vec![0xff, 0xfe, 0x00, 0x7b], deep.into_bytes()])
    .collect();
    let mut corpus = Vec::new();
    for path in posts {
        for body in &bodies {
            corpus.push(("POST", path.to_owned(), "application/json", body.clone()));
        }
    }
    let many_ids: Vec<i64> = vec![7; 250_000];
    corpus.push((
        "POST",
        "/api/comparisons".into(),
        "application/json",
        json!({"run_ids": many_ids}).to_string().into_bytes(),
    ));
    for query in [
        "/api/runs?limit=-1",
        "/api/runs?limit=abc",
        "/api/runs?limit=100000",
        "/api/runs?offset=-5",
        "/api/runs?since=yesterday",
        "/api/runs?sort=id;DROP%20TABLE%20runs",
        "/api/runs?order=sideways",
        "/api/runs?status=exploded",
        "/api/runs?until=2025-13-45T99:00:00Z",
        "/api/runs/abc",
        "/api/runs/99999999999999999999",
        "/api/runs/-1",
        "/api/comparisons/abc",
        "/api/comparisons?limit=-3",
        "/api/runs/export?format=xml",
        "/api/runs/export?format=json&limit=-1",
        "/v1/nothing",
        "/api/runs/%ff%fe",
    ] {
        corpus.push(("GET", query.to_owned(), "application/json", Vec::new()));
    }
    corpus
}

#[test]
fn malformed_requests_get_clear_refusals_and_change_nothing() {
    let (base, _store) = start_with_store();
    assert_eq!(chat(&base, "Keep me").0, 200);
    let (_, before) = get_from(&base, "/api/runs/export?format=json");

    let corpus = malformed_corpus();
    assert!(corpus.len() >= 150, "{} requests", corpus.len());
    for (method, path, content_type, body) in &corpus {
        let request = agent()
            .request(method, &format!("{base}{path}"))
            .set("Content-Type", content_type);
        let result = if body.is_empty() && *method == "GET" {
            request.call()
        } else {
            request.send_bytes(body)
        };
        let (status, answer) = match result {
            Ok(response) => (
                response.status(),
                response.into_string().unwrap_or_default(),
            ),
            Err(ureq::Error::Status(code, response)) => {
                (code, response.into_string().unwrap_or_default())
            }
            Err(err) => panic!("{method} {path}: transport error {err}"),
        };
        let shown = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        assert!(
            (400..500).contains(&status),
            "{method} {path} {shown:?}: {status} {answer}"
        );
        let error: Value = serde_json::from_str(&answer)
            .unwrap_or_else(|_| panic!("{method} {path} {shown:?}: not JSON: {answer}"));
        assert!(error["error"]["code"].is_string(), "{answer}");
    }

    let (_, after) = get_from(&base, "/api/runs/export?format=json");
    assert_eq!(before["runs"], after["runs"], "the history changed");
    assert_eq!(chat(&base, "Still here").0, 200);
}

fn metric(base: &str, name: &str) -> f64 {
    let (status, response) = send(agent().get(&format!("{base}/metrics")), None);
    assert_eq!(status, 200);
    let text = response.into_string().expect("metrics text");
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from\n{text}"))
}

#[test]
fn no_grammar_or_schema_takes_the_server_down_or_stalls_it() {
    let (base, _store) = start_with_store();
    let ask = |extra: Value| {
        let mut body = json!({
            "messages": [{"role": "user", "content": "Write some letters."}],
            "max_tokens": 8, "temperature": 0
        });
        body.as_object_mut()
            .expect("object")
            .extend(extra.as_object().expect("object").clone());
        post_to(&base, "/v1/chat/completions", &body.to_string())
    };
    // 10 KB, 5,000 groups deep: llama.cpp's recursive parser would overflow a thread's stack.
    let deep = format!("root ::= {}\"a\"{}", "(".repeat(5000), ")".repeat(5000));
    let refused = ask(json!({ "grammar": deep }));
    assert_error(refused.clone(), 400, "grammar_too_complex");
    assert_eq!(refused.1["error"]["param"], "grammar");
    // Ambiguous alternatives, many of them: refused, or followed within the step limit.
    let group = r#"("a" | "a" | [a-z] | [^b])*"#;
    let ambiguous = ask(json!({ "grammar": format!("root ::= {}", vec![group; 300].join(" ")) }));
    if ambiguous.0 != 200 {
        assert_error(ambiguous, 400, "grammar_too_complex");
    }
    let pattern = format!("^(a+)+(b|c)*({}){}$", "a?".repeat(200), "a".repeat(200));
    let schema = |schema: Value| {
        json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "s", "schema": schema}}})
    };
    let pathological = ask(schema(json!({"type": "string", "pattern": pattern})));
    if pathological.0 != 200 {
        assert_eq!(pathological.0, 400, "{}", pathological.1);
    }
    let values: Vec<String> = (0..20_000).map(|i| format!("value-{i}")).collect();
    assert_error(
        ask(schema(json!({"enum": values}))),
        400,
        "grammar_too_complex",
    );
    // The server is alive and answers as before.
    assert_eq!(ask(json!({})).0, 200);
    assert_eq!(metric(&base, "medusa_queue_depth"), 0.0);
}

#[test]
fn a_megabyte_of_texts_to_embed_is_refused_and_a_large_call_lets_generations_through() {
    let (base, _store) = start_with_store();
    let embed = |texts: Vec<String>| {
        post_to(
            &base,
            "/v1/embeddings",
            &json!({ "input": texts }).to_string(),
        )
    };
    let megabyte = vec!["lorem ipsum dolor sit amet ".repeat(150); 256];
    let refused = embed(megabyte);
    assert_error(refused.clone(), 413, "request_too_large");
    assert_eq!(refused.1["error"]["param"], "input");
    // Within the budget (the KV cache's 4 x 1,024 cells) but hundreds of decodes long.
    let texts: Vec<String> = (0..60)
        .map(|i| {
            format!(
                "text {i}: {}",
                "the quick brown fox jumps over the lazy dog ".repeat(6)
            )
        })
        .collect();
    let large = {
        let (base, texts) = (base.clone(), texts.clone());
        std::thread::spawn(move || {
            post_to(
                &base,
                "/v1/embeddings",
                &json!({ "input": texts }).to_string(),
            )
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(&base, "medusa_embedding_tokens_total") == 0.0 {
        assert!(
            Instant::now() < deadline,
            "the embedding call never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(chat(&base, "Say hi.").0, 200);
    let read_when_answered = metric(&base, "medusa_embedding_tokens_total");
    let (status, answer) = large.join().expect("embedding thread");
    assert_eq!(status, 200, "{answer}");
    let total = answer["usage"]["prompt_tokens"].as_f64().expect("usage");
    assert!(
        read_when_answered < total,
        "the completion waited for the whole embedding call ({read_when_answered} of {total})"
    );

    // A client that gives up cancels its call: the engine stops reading it.
    let before = metric(&base, "medusa_embedding_tokens_total");
    let impatient = ureq::AgentBuilder::new()
        .timeout(Duration::from_millis(300))
        .build();
    let given_up = impatient
        .post(&format!("{base}/v1/embeddings"))
        .set("Content-Type", "application/json")
        .send_string(&json!({ "input": texts }).to_string());
    assert!(given_up.is_err(), "the call ended within 300 ms");
    assert_eq!(embed(vec!["one short text".into()]).0, 200);
    let read_for_abandoned = metric(&base, "medusa_embedding_tokens_total") - before;
    assert!(
        read_for_abandoned < total / 2.0,
        "the abandoned call went on being read: {read_for_abandoned} of {total} tokens"
    );
}
