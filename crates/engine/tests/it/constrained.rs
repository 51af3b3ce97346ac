//! Output held to a grammar and log-probabilities, on the real model: JSON mode stays valid and
//! lossless under every drafter, and the figures reported per token are the model's own.

use std::sync::OnceLock;

use engine::{
    json_schema_grammar, DraftPolicy, Engine, EngineConfig, EngineError, GenerationMode, LogitBias,
    SamplingParams, StopReason, TreeSpec,
};

use crate::common::{self, assert_identical, chat, greedy, model_path, run};

/// The shipped heads with a tree given, so that Medusa and auto modes draft in full here.
fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = EngineConfig::new(model_path());
        config.heads_path = Some(models::default_heads_path().expect("default heads installed"));
        config.tree = Some(TreeSpec::mc_sim_7b_63());
        config.parallel = 1;
        config.decode_costs = Some(common::cpu_decode_costs());
        Engine::load(config).expect("model loads")
    })
}

fn person_grammar() -> String {
    json_schema_grammar(&serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "age": {"type": "integer"},
            "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 24}, "maxItems": 3}
        },
        "required": ["name", "age", "hobbies"],
        "additionalProperties": false
    }))
    .expect("schema converts")
}

fn assert_person(text: &str, label: &str) {
    let value: serde_json::Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{label}: not JSON ({e}): {text:?}"));
    assert!(value["name"].is_string(), "{label}: {value}");
    assert!(value["age"].is_i64(), "{label}: {value}");
    assert!(value["hobbies"].is_array(), "{label}: {value}");
}

#[test]
fn json_schema_output_is_valid_and_identical_under_every_drafter() {
    let engine = engine();
    let prompt = chat("Describe a made-up person who likes cooking. Answer in JSON.");
    let constrained = |mode| {
        let mut request = greedy(prompt.clone(), 160, mode);
        request.grammar = Some(person_grammar());
        request
    };
    let normal = run(engine, constrained(GenerationMode::Normal));
    assert_eq!(
        normal.stop_reason,
        StopReason::EndOfGeneration,
        "{:?}",
        normal.text
    );
    assert_person(&normal.text, "normal");
    let drafted = [
        (
            "medusa, mc_sim_7b_63 in full",
            constrained(GenerationMode::Medusa)
                .with_draft(DraftPolicy::Tree(TreeSpec::mc_sim_7b_63())),
        ),
        (
            "lookup, 8 tokens",
            constrained(GenerationMode::Lookup).with_draft(DraftPolicy::Length(8)),
        ),
        // A chain beside lookup's continuation still merges two guesses into one branching
        // tree, at a fraction of the 63-node tree's cost per step.
        (
            "auto, chain-3 and lookup in full",
            constrained(GenerationMode::Auto).with_draft(DraftPolicy::Tree(TreeSpec::chain(3))),
        ),
    ];
    for (label, request) in drafted {
        let fast = run(engine, request);
        assert_identical(&normal.token_ids, &fast.token_ids, label);
        assert_person(&fast.text, label);
        assert!(
            fast.draft_tokens.unwrap_or(0) > 0,
            "{label} drafted nothing"
        );
    }
}

#[test]
fn sampled_output_under_a_grammar_stays_valid_with_drafting() {
    let engine = engine();
    for seed in [1, 2] {
        let mut request = greedy(
            chat("Describe a made-up person. Answer in JSON."),
            160,
            GenerationMode::Medusa,
        )
        .with_sampling(SamplingParams {
            temperature: 0.9,
            seed: Some(seed),
            ..SamplingParams::default()
        })
        .with_draft(DraftPolicy::Tree(TreeSpec::mc_sim_7b_63()));
        request.grammar = Some(person_grammar());
        let summary = run(engine, request);
        assert_eq!(
            summary.stop_reason,
            StopReason::EndOfGeneration,
            "{:?}",
            summary.text
        );
        assert_person(&summary.text, &format!("seed {seed}"));
    }
}

#[test]
fn a_grammar_llama_cpp_cannot_parse_is_refused_before_anything_is_generated() {
    let mut request = greedy(chat("Hi"), 8, GenerationMode::Normal);
    request.grammar = Some("root ::= undefined-rule".into());
    let err = engine().generate(request).unwrap().wait().unwrap_err();
    assert!(matches!(err, EngineError::InvalidGrammar(_)), "{err:?}");
    assert_eq!(err.code(), "invalid_grammar");
}

#[test]
fn log_probabilities_are_the_models_own_whoever_drafted_the_token() {
    let engine = engine();
    let prompt = chat("Count from one to twelve in words, separated by commas.");
    let mut request = greedy(prompt.clone(), 24, GenerationMode::Medusa)
        .with_draft(DraftPolicy::Tree(TreeSpec::mc_sim_7b_63()));
    request.logprobs = Some(3);
    let summary = run(engine, request);
    assert_eq!(summary.logprobs.len(), summary.token_ids.len());
    assert!(
        summary.accepted_draft_tokens.unwrap_or(0) > 0,
        "nothing drafted was accepted"
    );
    for (i, (entry, &token)) in summary.logprobs.iter().zip(&summary.token_ids).enumerate() {
        assert_eq!(entry.chosen.token_id, token);
        // Greedy: the chosen token is the most likely one.
        assert_eq!(entry.chosen.rank, 1, "token {i}");
        assert_eq!(entry.top.len(), 3);
        assert_eq!(entry.top[0].token_id, token);
        assert!(entry.top[0].logprob >= entry.top[1].logprob);
        assert!(entry.top[1].logprob >= entry.top[2].logprob);
        if i % 6 == 0 {
            let direct = engine
                .next_token_choices(prompt.clone(), summary.token_ids[..i].to_vec(), vec![token])
                .unwrap();
            assert!(
                (direct[0].logprob - entry.chosen.logprob).abs() < 1e-4,
                "token {i}: reported {} but the model gives {}",
                entry.chosen.logprob,
                direct[0].logprob
            );
        }
    }
    let plain = run(engine, greedy(prompt, 4, GenerationMode::Normal));
    assert!(plain.logprobs.is_empty(), "reported without being asked");
}

#[test]
fn logit_bias_moves_the_greedy_choice() {
    let engine = engine();
    let prompt = chat("Name a colour.");
    let plain = run(engine, greedy(prompt.clone(), 4, GenerationMode::Normal));
    let banned = plain.token_ids[0];
    let request = greedy(prompt, 4, GenerationMode::Normal).with_sampling(SamplingParams {
        logit_bias: vec![LogitBias {
            token: banned,
            bias: -100.0,
        }],
        ..SamplingParams::greedy()
    });
    let biased = run(engine, request);
    assert_ne!(biased.token_ids[0], banned);
    let outside = greedy(chat("Hi"), 4, GenerationMode::Normal).with_sampling(SamplingParams {
        logit_bias: vec![LogitBias {
            token: 10_000_000,
            bias: 1.0,
        }],
        ..SamplingParams::greedy()
    });
    let err = engine.generate(outside).err().expect("refused");
    assert!(err.to_string().contains("vocabulary"), "{err}");
}

/// The request's end within a generous deadline (the engine must not stall on a grammar): the
/// tokens it wrote, or its error's code.
fn end_within(request: engine::GenerateRequest) -> Result<usize, &'static str> {
    let started = std::time::Instant::now();
    let stream = engine().generate(request).map_err(|e| e.code())?;
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(stream.wait());
    });
    let ended = ended
        .recv_timeout(std::time::Duration::from_secs(180))
        .expect("the request ended within its deadline");
    eprintln!(
        "ended after {:?}: {:?}",
        started.elapsed(),
        ended.as_ref().map(|s| &s.text)
    );
    ended.map(|s| s.tokens_generated).map_err(|e| e.code())
}

fn assert_engine_alive() {
    let summary = common::run(engine(), greedy(chat("Say hi."), 4, GenerationMode::Normal));
    assert_eq!(summary.tokens_generated, 4);
}

#[test]
fn a_grammar_nested_five_thousand_deep_is_refused_and_the_engine_lives() {
    let deep = format!("root ::= {}\"a\"{}", "(".repeat(5000), ")".repeat(5000));
    let mut request = greedy(chat("Hi"), 8, GenerationMode::Normal);
    request.grammar = Some(deep);
    let err = engine().generate(request).err().expect("refused at once");
    assert_eq!(err.code(), "grammar_too_complex", "{err}");
    assert!(err.to_string().contains("1024"), "{err}");
    assert_engine_alive();
}

#[test]
fn an_ambiguous_grammar_is_refused_or_answered_and_the_engine_lives() {
    let group = r#"("a" | "a" | [a-z] | [^b])*"#;
    let grammar = format!("root ::= {}", vec![group; 300].join(" "));
    let mut request = greedy(
        chat("Write the letter a many times."),
        16,
        GenerationMode::Normal,
    );
    request.grammar = Some(grammar);
    match end_within(request) {
        Ok(tokens) => assert!(tokens > 0),
        Err(code) => assert_eq!(code, "grammar_too_complex"),
    }
    assert_engine_alive();
}

#[test]
fn a_pathological_pattern_is_refused_or_answered_and_the_engine_lives() {
    let pattern = format!("^(a+)+(b|c)*({}){}$", "a?".repeat(200), "a".repeat(200));
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": pattern}},
        "required": ["s"]
    });
    match json_schema_grammar(&schema) {
        Err(err) => assert_eq!(err.code(), "grammar_too_complex", "{err}"),
        Ok(grammar) => {
            let mut request = greedy(chat("Answer in JSON."), 16, GenerationMode::Normal);
            request.grammar = Some(grammar);
            match end_within(request) {
                Ok(tokens) => assert!(tokens > 0),
                Err(code) => assert_eq!(code, "grammar_too_complex"),
            }
        }
    }
    let nested = format!("^{}a{}$", "(".repeat(3000), ")".repeat(3000));
    let err = json_schema_grammar(&serde_json::json!({"type": "string", "pattern": nested}))
        .expect_err("nested too deep for the converter");
    assert_eq!(err.code(), "grammar_too_complex", "{err}");
    assert_engine_alive();
}

#[test]
fn an_enum_of_twenty_thousand_values_is_refused_by_size() {
    let values: Vec<String> = (0..20_000).map(|i| format!("value-{i}")).collect();
    let err =
        json_schema_grammar(&serde_json::json!({"enum": values})).expect_err("over the size limit");
    assert_eq!(err.code(), "grammar_too_complex", "{err}");
    assert!(
        err.to_string()
            .contains(&engine::MAX_GRAMMAR_BYTES.to_string()),
        "{err}"
    );
}
