//! Conversations and the page's event socket over real HTTP on the real model.

use std::net::TcpStream;

use serde_json::{json, Value};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

use crate::common::*;

fn greedy_chat(messages: Value, conversation_id: Option<i64>, max_tokens: u32) -> Value {
    json!({
        "messages": messages,
        "conversation_id": conversation_id,
        "max_tokens": max_tokens,
        "sampling": {"temperature": 0},
    })
}

/// The events of one generation over `/api/generate`.
fn generate(body: &Value) -> Vec<Value> {
    sse_data("/api/generate", body)
        .iter()
        .map(|data| serde_json::from_str(data).expect("JSON event"))
        .collect()
}

fn delete(path: &str) -> u16 {
    send(agent().delete(&format!("{}{path}", base())), None).0
}

#[test]
fn a_chat_keeps_its_conversation_with_links_to_runs() {
    let (status, created) = post("/api/conversations", &json!({"system_prompt": "Be brief."}));
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_i64().unwrap();
    assert_eq!(created["messages"], json!([]));

    let turn = json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name three colours of the rainbow."}
    ]);
    let events = generate(&greedy_chat(turn, Some(id), 12));
    let run_id = events[0]["run_id"].as_i64().unwrap();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "finished", "{last}");
    let answer: String = events
        .iter()
        .filter(|e| e["type"] == "text")
        .map(|e| e["text"].as_str().unwrap())
        .collect();

    let (status, conversation) = get(&format!("/api/conversations/{id}"));
    assert_eq!(status, 200);
    assert_eq!(conversation["title"], "Name three colours of the rainbow.");
    let messages = conversation["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1]["content"], answer.as_str());
    assert_eq!(messages[1]["run_id"], run_id);
    assert_eq!(messages[1]["answering"], false);

    // Continuing the answer writes on in the same message.
    let continued = json!({
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Name three colours of the rainbow."},
            {"role": "assistant", "content": answer}
        ],
        "conversation_id": id,
        "continue_final_message": true,
        "max_tokens": 4,
        "sampling": {"temperature": 0},
    });
    let continued = generate(&continued);
    let continued_run = continued[0]["run_id"].as_i64().unwrap();
    let more: String = continued
        .iter()
        .filter(|e| e["type"] == "text")
        .map(|e| e["text"].as_str().unwrap().to_owned())
        .collect();
    let (_, conversation) = get(&format!("/api/conversations/{id}"));
    assert_eq!(
        conversation["messages"][1]["content"],
        format!("{answer}{more}")
    );
    assert_eq!(conversation["messages"][1]["run_id"], continued_run);

    let (status, found) = get("/api/conversations?search=RAINBOW%20colo");
    assert_eq!(status, 200);
    let ids: Vec<i64> = found["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_i64().unwrap())
        .collect();
    assert!(ids.contains(&id), "{found}");

    let (status, renamed) = send(
        agent().request("PATCH", &format!("{}/api/conversations/{id}", base())),
        Some(r#"{"title": "Colours"}"#),
    );
    assert_eq!(status, 200);
    assert_eq!(renamed.into_json::<Value>().unwrap()["title"], "Colours");

    let (status, response) = send(
        agent().get(&format!(
            "{}/api/conversations/{id}/export?format=markdown",
            base()
        )),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(
        response.header("content-disposition"),
        Some("attachment; filename=\"colours.md\"")
    );
    let text = response.into_string().unwrap();
    assert!(text.starts_with("# Colours\n"), "{text}");
    assert!(
        text.contains(&format!(
            "## Assistant (run {continued_run})\n\n{answer}{more}"
        )),
        "{text}"
    );
    assert_error(
        get(&format!("/api/conversations/{id}/export?format=pdf")),
        400,
        "invalid_parameter",
    );

    assert_eq!(delete(&format!("/api/conversations/{id}")), 204);
    assert_error(get(&format!("/api/conversations/{id}")), 404, "not_found");
    // Its runs stay in the history.
    assert_eq!(get(&format!("/api/runs/{run_id}")).0, 200);
}

#[test]
fn a_chat_for_a_missing_conversation_is_refused() {
    let body = greedy_chat(json!([{"role": "user", "content": "Hi"}]), Some(987_654), 4);
    assert_error(post("/api/generate", &body), 404, "not_found");
    let raw = json!({"prompt": "Hi", "conversation_id": 1});
    assert_error(post("/api/generate", &raw), 400, "invalid_parameter");
}

fn connect() -> WebSocket<MaybeTlsStream<TcpStream>> {
    let url = format!("{}/api/events", base().replacen("http", "ws", 1));
    let (socket, _) = tungstenite::connect(url).expect("the event socket opens");
    socket
}

fn send_json(socket: &mut WebSocket<MaybeTlsStream<TcpStream>>, message: Value) {
    socket
        .send(Message::Text(message.to_string().into()))
        .expect("sends");
}

fn receive(socket: &mut WebSocket<MaybeTlsStream<TcpStream>>) -> Value {
    loop {
        match socket.read().expect("reads") {
            Message::Text(text) => return serde_json::from_str(text.as_str()).expect("JSON"),
            Message::Close(frame) => panic!("closed: {frame:?}"),
            _ => continue,
        }
    }
}

#[test]
fn one_socket_carries_many_generations_and_the_status() {
    let mut socket = connect();
    send_json(&mut socket, json!({"type": "status", "every_ms": 100}));
    let status = receive(&mut socket);
    assert_eq!(status["type"], "status", "{status}");
    assert!(status["info"]["model"]["name"].is_string(), "{status}");
    send_json(&mut socket, json!({"type": "status", "every_ms": 0}));

    let prompts = [
        "Name a colour.",
        "Name a fruit.",
        "Name a city.",
        "Name a tree.",
    ];
    for (id, prompt) in prompts.iter().enumerate() {
        let request = greedy_chat(json!([{"role": "user", "content": prompt}]), None, 8);
        send_json(
            &mut socket,
            json!({"type": "generate", "id": id, "request": request}),
        );
    }
    let empty = json!({"messages": [{"role": "user", "content": "  "}]});
    send_json(
        &mut socket,
        json!({"type": "generate", "id": 99, "request": empty}),
    );
    // An id still in use is refused by that id; the generation that has it goes on.
    let again = greedy_chat(json!([{"role": "user", "content": "Again"}]), None, 8);
    send_json(
        &mut socket,
        json!({"type": "generate", "id": 0, "request": again}),
    );
    socket.send(Message::Text("{not json".into())).unwrap();

    let mut texts = vec![String::new(); prompts.len()];
    let mut ended = vec![false; prompts.len()];
    let (mut refused, mut errors) = (Vec::new(), 0);
    while ended.iter().any(|e| !e) || refused.len() < 2 || errors == 0 {
        let message = receive(&mut socket);
        match message["type"].as_str().unwrap() {
            "run" => {
                let id = message["id"].as_u64().unwrap() as usize;
                let event = &message["event"];
                match event["type"].as_str().unwrap() {
                    "text" => texts[id].push_str(event["text"].as_str().unwrap()),
                    "finished" => ended[id] = true,
                    "failed" => panic!("{message}"),
                    _ => {}
                }
            }
            "refused" => refused.push(message),
            "error" => errors += 1,
            "status" => {}
            other => panic!("unexpected {other}: {message}"),
        }
    }
    refused.sort_by_key(|r| r["id"].as_u64());
    assert_eq!(refused[0]["id"], 0);
    assert_eq!(
        refused[0]["error"]["code"], "invalid_parameter",
        "{}",
        refused[0]
    );
    assert_eq!(refused[1]["id"], 99);
    assert_eq!(
        refused[1]["error"]["code"], "empty_prompt",
        "{}",
        refused[1]
    );
    // Every lane got its own answer.
    assert!(texts.iter().all(|t| !t.is_empty()), "{texts:?}");

    // A cancelled generation still ends with its (cancelled) summary.
    let long = greedy_chat(
        json!([{"role": "user", "content": "Tell a long story."}]),
        None,
        400,
    );
    send_json(
        &mut socket,
        json!({"type": "generate", "id": 7, "request": long}),
    );
    loop {
        let message = receive(&mut socket);
        if message["event"]["type"] == "text" {
            send_json(&mut socket, json!({"type": "cancel", "id": 7}));
        }
        if message["event"]["type"] == "finished" {
            assert_eq!(message["event"]["stop_reason"], "cancelled", "{message}");
            break;
        }
    }
}

#[test]
fn a_pages_generations_start_in_the_order_it_sent_them() {
    let mut socket = connect();
    // More than the shared server's slots: the later ones queue.
    let lanes = 8;
    for id in 0..lanes {
        let prompt = format!("Count to {}.", id + 2);
        let request = greedy_chat(json!([{"role": "user", "content": prompt}]), None, 6);
        send_json(
            &mut socket,
            json!({"type": "generate", "id": id, "request": request}),
        );
    }
    let mut run_ids = vec![None; lanes];
    let mut ended = 0;
    while ended < lanes {
        let message = receive(&mut socket);
        let event = &message["event"];
        match event["type"].as_str() {
            Some("started") => {
                run_ids[message["id"].as_u64().unwrap() as usize] = event["run_id"].as_i64()
            }
            Some("finished") => ended += 1,
            Some("failed") => panic!("{message}"),
            _ => assert_ne!(message["type"], "refused", "{message}"),
        }
    }
    let run_ids: Vec<i64> = run_ids.into_iter().map(Option::unwrap).collect();
    assert!(
        run_ids.windows(2).all(|pair| pair[0] < pair[1]),
        "runs recorded out of the page's order: {run_ids:?}"
    );
    // Each keeps its wait for a slot apart from its first token's time, within its total.
    for id in run_ids {
        let (status, stored) = get(&format!("/api/runs/{id}"));
        assert_eq!(status, 200, "{stored}");
        let run = &stored["run"];
        let figure = |name: &str| {
            run[name]
                .as_f64()
                .unwrap_or_else(|| panic!("{name}: {run}"))
        };
        assert!(
            figure("queue_ms") + figure("ttft_ms") <= figure("total_ms"),
            "{run}"
        );
    }
}

#[test]
fn a_generation_cancelled_at_once_still_ends_with_one_last_message() {
    let mut socket = connect();
    let long = greedy_chat(
        json!([{"role": "user", "content": "Tell a long story."}]),
        None,
        400,
    );
    for id in 0..3 {
        send_json(
            &mut socket,
            json!({"type": "generate", "id": id, "request": long}),
        );
        send_json(&mut socket, json!({"type": "cancel", "id": id}));
    }
    let mut ends = 0;
    while ends < 3 {
        let message = receive(&mut socket);
        let event = &message["event"];
        let last = match message["type"].as_str().unwrap() {
            // Cancelled before its run started.
            "refused" => message["error"]["code"] == "cancelled",
            // Or after: the run ends with its cancelled summary.
            "run" if event["type"] == "finished" => event["stop_reason"] == "cancelled",
            "run" if event["type"] == "failed" => panic!("{message}"),
            _ => continue,
        };
        assert!(last, "{message}");
        ends += 1;
    }
}

#[test]
fn pages_of_other_origins_cannot_open_the_socket() {
    let address = base().trim_start_matches("http://");
    let request = format!(
        "GET /api/events HTTP/1.1\r\nHost: {address}\r\nOrigin: https://evil.example\r\n\
         Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    let (status, answer) = raw_http(base(), &request);
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("forbidden_origin"), "{answer}");
}
