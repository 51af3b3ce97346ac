use engine::ChatMessage;

use super::*;

fn medusa_serve() -> RemoteKind {
    RemoteKind::MedusaServe {
        modes: GenerationMode::ALL.to_vec(),
    }
}

/// Every field a request in medusa mode with every knob set sends to an engine of `kind`,
/// sorted.
fn fields_sent(kind: RemoteKind) -> Vec<String> {
    let mut request = GenerateRequest::new(Prompt::Chat(vec![ChatMessage::new("user", "Hi")]), 12)
        .with_mode(GenerationMode::Medusa)
        .with_draft(DraftPolicy::Length(3))
        .with_stop(vec!["\n".into()]);
    request.cache_prompt = false;
    request.lookup_memory = LookupMemoryUse::ReadOnly;
    request.continue_final_message = true;
    request.grammar = Some("root ::= \"a\"".into());
    request.sampling.seed = Some(3);
    request.sampling.top_k = 40;
    request.sampling.presence_penalty = 0.5;
    request.sampling.frequency_penalty = 0.25;
    let (_, body) = request_body(&RemoteRequest {
        model: "m".into(),
        request,
        kind,
    });
    let body = serde_json::to_value(body).unwrap();
    let mut fields: Vec<String> = body.as_object().unwrap().keys().cloned().collect();
    fields.sort();
    fields
}

#[test]
fn a_plain_openai_server_is_sent_openai_s_fields_only() {
    let openai = [
        "frequency_penalty",
        "max_tokens",
        "messages",
        "model",
        "presence_penalty",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
    ];
    assert_eq!(fields_sent(RemoteKind::OpenAi), openai);
    let shared = [
        "add_generation_prompt",
        "cache_prompt",
        "continue_final_message",
        "grammar",
        "min_p",
        "repeat_last_n",
        "repeat_penalty",
        "top_k",
    ];
    let mut extended: Vec<&str> = openai.iter().chain(&shared).copied().collect();
    extended.sort();
    assert_eq!(fields_sent(RemoteKind::Extended), extended);
    let mut medusa: Vec<&str> = extended
        .iter()
        .chain(&["draft_length", "lookup_memory", "mode"])
        .copied()
        .collect();
    medusa.sort();
    assert_eq!(fields_sent(medusa_serve()), medusa);
}

#[test]
fn the_stream_guard_bounds_each_event_and_the_whole_stream() {
    let mut guard = StreamGuard::default();
    let event = format!("data: {}\n\n", "x".repeat(1000));
    for _ in 0..2000 {
        guard.admit(event.as_bytes()).unwrap();
    }
    // Lines of one event, whatever ends them, add up.
    for ending in ["\n", "\r\n", "\r"] {
        let mut guard = StreamGuard::default();
        let line = format!("data: {}{ending}", "y".repeat(4096));
        let fault = (0..1000).find_map(|_| guard.admit(line.as_bytes()).err());
        assert!(
            matches!(fault, Some(StreamFault::EventTooLarge)),
            "{ending:?}"
        );
    }
    // Blank lines split across reads still end an event.
    let mut guard = StreamGuard::default();
    for _ in 0..2000 {
        guard
            .admit(b"data: 0123456789abcdef0123456789abcdef\r")
            .unwrap();
        guard.admit(b"\n\r").unwrap();
        guard.admit(b"\n").unwrap();
    }
    let mut guard = StreamGuard::default();
    let big = vec![b'\n'; 1 << 20];
    let fault = (0..100).find_map(|_| guard.admit(&big).err());
    assert!(matches!(fault, Some(StreamFault::StreamTooLarge)));
}

#[test]
fn chat_goes_to_chat_completions_and_text_to_completions() {
    let mut request = GenerateRequest::new(
        Prompt::Chat(vec![ChatMessage {
            role: "user".into(),
            content: "Hi".into(),
        }]),
        12,
    );
    request.sampling.seed = Some(3);
    request.sampling.top_k = 0;
    request.mode = GenerationMode::Medusa;
    let (path, body) = request_body(&RemoteRequest {
        model: "m".into(),
        request,
        kind: medusa_serve(),
    });
    let body = serde_json::to_value(body).unwrap();
    assert_eq!(path, "/v1/chat/completions");
    assert_eq!(body["messages"][0]["content"], "Hi");
    assert_eq!(body["max_tokens"], 12);
    assert_eq!(body["seed"], 3);
    // Every sampling field is sent, so the history records what the remote was asked.
    assert_eq!(body["repeat_penalty"], 1.0);
    assert_eq!(body["repeat_last_n"], 64);
    assert_eq!(body["mode"], "medusa");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert!(body.get("top_k").is_none());
    assert!(body.get("stop").is_none());

    let request = GenerateRequest::new(Prompt::Text("Once".into()), 4).with_stop(vec!["\n".into()]);
    let (path, body) = request_body(&RemoteRequest {
        model: "m".into(),
        request,
        kind: medusa_serve(),
    });
    let body = serde_json::to_value(body).unwrap();
    assert_eq!(path, "/v1/completions");
    assert_eq!(body["prompt"], "Once");
    assert_eq!(body["stop"][0], "\n");
    assert!(body.get("mode").is_none());
    assert!(body.get("seed").is_none());
    assert!(body.get("cache_prompt").is_none());
    assert!(body.get("tree").is_none());
}

#[test]
fn drafts_and_prompt_reuse_are_asked_for_in_medusa_serve_s_fields() {
    let tree = engine::TreeSpec::chain(2);
    let mut request = GenerateRequest::new(Prompt::Text("Once".into()), 4)
        .with_mode(GenerationMode::Medusa)
        .with_draft(DraftPolicy::Tree(tree.clone()));
    request.cache_prompt = false;
    let body = |request: GenerateRequest| {
        let (_, body) = request_body(&RemoteRequest {
            model: "m".into(),
            request,
            kind: medusa_serve(),
        });
        body
    };
    let medusa = body(request.clone());
    assert_eq!(medusa.tree, Some(TreeField::Paths(tree.paths().to_vec())));
    assert_eq!(medusa.cache_prompt, Some(false));
    let lookup = body(
        request
            .clone()
            .with_mode(GenerationMode::Lookup)
            .with_draft(DraftPolicy::Length(5)),
    );
    assert_eq!((lookup.tree, lookup.draft_length), (None, Some(5)));
    let tuned = body(request.with_draft(DraftPolicy::Tuned));
    assert_eq!(tuned.tree, Some(TreeField::Name("tuned".into())));
}
