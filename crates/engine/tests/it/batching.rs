//! Continuous batching on the real model: concurrent requests share each decode.

use std::time::Duration;

use engine::{
    DraftPolicy, EmbeddingInput, Engine, EngineConfig, EngineError, GenerationEvent,
    GenerationMode, StopReason, TreeSpec,
};

use crate::common::{self, assert_identical, chat, greedy, model_path, run};

fn engine(parallel: usize, max_queued: usize) -> Engine {
    let mut config = EngineConfig::new(model_path());
    config.parallel = parallel;
    config.max_queued = max_queued;
    config.ctx_size = Some(1024);
    config.decode_costs = Some(common::cpu_decode_costs());
    Engine::load(config).expect("model loads")
}

const PROMPTS: &[&str] = &[
    "Write a short story about a robot who learns to paint.",
    "List five tips for staying focused while studying.",
    "Explain how a rainbow forms, in simple terms.",
    "Repeat this list exactly three times: apple, banana, cherry, date.",
    "What is the difference between weather and climate?",
    "Write a haiku about the first snow of winter.",
    "Give me a recipe for a simple tomato soup.",
    "Why do cats purr? Answer in two sentences.",
];

/// Greedy requests of every kind, each as a person would send it from the playground.
fn requests() -> Vec<(&'static str, GenerationMode, DraftPolicy)> {
    vec![
        ("normal", GenerationMode::Normal, DraftPolicy::Auto),
        ("lookup", GenerationMode::Lookup, DraftPolicy::Auto),
        ("auto", GenerationMode::Auto, DraftPolicy::Auto),
        (
            "medusa with mc_sim_7b_63 in full",
            GenerationMode::Medusa,
            DraftPolicy::Tree(TreeSpec::mc_sim_7b_63()),
        ),
    ]
}

#[test]
fn batched_and_drafted_runs_are_identical_to_plain_decoding() {
    let mut config = EngineConfig::new(model_path());
    config.parallel = 8;
    config.ctx_size = Some(512);
    config.heads_path = Some(models::default_heads_path().expect("default heads installed"));
    config.decode_costs = Some(common::cpu_decode_costs());
    let engine = Engine::load(config).expect("model loads");
    let request = |prompt: &str, mode, draft: &DraftPolicy| {
        greedy(chat(prompt), 24, mode).with_draft(draft.clone())
    };
    let plain: Vec<_> = PROMPTS
        .iter()
        .map(|p| {
            run(
                &engine,
                request(p, GenerationMode::Normal, &DraftPolicy::Auto),
            )
        })
        .collect();
    for (label, mode, draft) in requests() {
        for streams in [1, 4, 8] {
            // `streams` requests at a time, all of them started before any is waited for.
            let mut outputs = Vec::new();
            for group in PROMPTS.chunks(streams) {
                let running: Vec<_> = group
                    .iter()
                    .map(|p| engine.generate(request(p, mode, &draft)).unwrap())
                    .collect();
                outputs.extend(running.into_iter().map(|s| s.wait().unwrap()));
            }
            for (alone, output) in plain.iter().zip(&outputs) {
                assert_identical(
                    &alone.token_ids,
                    &output.token_ids,
                    &format!("{label} at {streams} streams"),
                );
            }
        }
    }
    let metrics = engine.metrics();
    assert!(
        metrics.batch_tokens > metrics.steps,
        "batches never held more than one token"
    );
}

#[test]
fn the_heads_draft_for_every_request_in_one_evaluation_per_depth() {
    let mut config = EngineConfig::new(model_path());
    config.parallel = 4;
    config.ctx_size = Some(512);
    config.heads_path = Some(models::default_heads_path().expect("default heads installed"));
    config.decode_costs = Some(common::cpu_decode_costs());
    let engine = Engine::load(config).expect("model loads");
    let heads = engine
        .info()
        .heads
        .as_ref()
        .expect("heads loaded")
        .head_count as u64;
    let tree = DraftPolicy::Tree(TreeSpec::mc_sim_7b_63());
    let request =
        |prompt: &str| greedy(chat(prompt), 24, GenerationMode::Medusa).with_draft(tree.clone());
    let before = engine.metrics();
    let running: Vec<_> = PROMPTS[..4]
        .iter()
        .map(|p| engine.generate(request(p)).unwrap())
        .collect();
    let outputs: Vec<_> = running.into_iter().map(|s| s.wait().unwrap()).collect();
    let after = engine.metrics();
    let steps = after.steps - before.steps;
    let evaluations = after.heads_evaluations - before.heads_evaluations;
    let queries = after.heads_queries - before.heads_queries;
    // One request at a time would take about a head per depth per request at each step.
    assert!(
        evaluations > 0 && evaluations <= steps * heads,
        "{evaluations} head evaluations in {steps} steps of 4 requests with {heads} heads"
    );
    println!("{evaluations} head evaluations of {queries} queries in {steps} steps");
    for (prompt, output) in PROMPTS[..4].iter().zip(&outputs) {
        let alone = run(&engine, greedy(chat(prompt), 24, GenerationMode::Normal));
        assert_identical(&alone.token_ids, &output.token_ids, prompt);
    }
}

#[test]
fn a_cancelled_request_frees_its_slot_and_the_others_finish() {
    let engine = engine(2, 8);
    let mut doomed = engine
        .generate(greedy(
            chat("Count from one to two hundred."),
            400,
            GenerationMode::Normal,
        ))
        .unwrap();
    let survivor = engine
        .generate(greedy(
            chat("Name three colours."),
            24,
            GenerationMode::Normal,
        ))
        .unwrap();
    let mut texts = 0;
    while let Some(event) = doomed.blocking_next() {
        if matches!(event, GenerationEvent::Text { .. }) {
            texts += 1;
            if texts == 3 {
                doomed.cancel();
            }
        }
        if let GenerationEvent::Finished(summary) = event {
            assert_eq!(summary.stop_reason, StopReason::Cancelled);
            break;
        }
    }
    let finished = survivor.wait().unwrap();
    assert!(finished.tokens_generated > 0);
    // The freed slot serves a new request.
    let next = run(&engine, greedy(chat("Say hi."), 4, GenerationMode::Normal));
    assert_eq!(next.tokens_generated, 4);
}

#[test]
fn a_dropped_stream_cancels_its_request() {
    let engine = engine(1, 4);
    let stream = engine
        .generate(greedy(
            chat("Count from one to two hundred."),
            400,
            GenerationMode::Normal,
        ))
        .unwrap();
    drop(stream);
    // With the only slot freed, the next request runs to the end.
    let next = run(&engine, greedy(chat("Say hi."), 4, GenerationMode::Normal));
    assert_eq!(next.tokens_generated, 4);
}

#[test]
fn a_full_queue_answers_at_once_with_a_retry_hint() {
    let engine = engine(1, 1);
    let mut running = engine
        .generate(greedy(
            chat("Count from one to two hundred."),
            300,
            GenerationMode::Normal,
        ))
        .unwrap();
    // Once it holds the slot, one more request may wait, and the next is refused.
    assert!(matches!(
        running.blocking_next(),
        Some(GenerationEvent::Started { .. })
    ));
    let waiting = engine
        .generate(greedy(chat("Say hi."), 4, GenerationMode::Normal))
        .unwrap();
    match engine.generate(greedy(chat("Say hello."), 4, GenerationMode::Normal)) {
        Err(EngineError::QueueFull {
            capacity: 1,
            retry_after_ms,
        }) => assert!(retry_after_ms > 0),
        Err(other) => panic!("expected QueueFull, got {other}"),
        Ok(_) => panic!("a full queue accepted a request"),
    }
    running.cancel();
    assert_eq!(waiting.wait().unwrap().tokens_generated, 4);
}

fn resident_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4
}

#[test]
fn two_hundred_short_requests_leave_nothing_behind() {
    // The process's resident memory is measured: no other test may load a model meanwhile.
    if crate::alone::in_own_process("batching::two_hundred_short_requests_leave_nothing_behind") {
        return;
    }
    let engine = engine(4, 256);
    let burst = |n: usize| {
        let streams: Vec<_> = (0..n)
            .map(|i| {
                engine
                    .generate(greedy(
                        chat(&format!("Say the number {i}.")),
                        3,
                        GenerationMode::Normal,
                    ))
                    .unwrap()
            })
            .collect();
        for stream in streams {
            assert!(stream.wait().unwrap().tokens_generated >= 1);
        }
    };
    burst(20);
    let before = resident_kib();
    burst(200);
    let after = resident_kib();
    // The engine goes idle after the last request; then no sequence may hold KV cells.
    let mut metrics = engine.metrics();
    for _ in 0..100 {
        if metrics.active == 0 && metrics.queued == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        metrics = engine.metrics();
    }
    // A request that needs the idle engine runs only once everything else has ended.
    engine.decode_costs().unwrap();
    let metrics = engine.metrics();
    assert_eq!((metrics.active, metrics.queued), (0, 0));
    assert_eq!(metrics.idle_sequences_in_kv, 0, "KV cells left behind");
    assert!(metrics.requests_finished >= 220);
    assert!(
        after < before + 64 * 1024,
        "resident memory grew from {before} KiB to {after} KiB"
    );
}

#[test]
fn batched_greedy_runs_return_the_hidden_state_behind_each_token() {
    let mut config = EngineConfig::new(model_path());
    config.parallel = 3;
    config.ctx_size = Some(1024);
    config.hidden_states = true;
    let recording = Engine::load(config).expect("model loads");
    let n_embd = recording.info().n_embd as usize;
    let n_vocab = recording.info().n_vocab as usize;
    let projection =
        engine::medusa::heads::base_projection(&model_path(), n_vocab, n_embd).unwrap();
    let streams: Vec<_> = PROMPTS[..3]
        .iter()
        .map(|p| {
            recording
                .generate(greedy(chat(p), 24, GenerationMode::Normal).with_hidden_states())
                .unwrap()
        })
        .collect();
    let mut logits = vec![0.0; n_vocab];
    for stream in streams {
        let summary = stream.wait().unwrap();
        assert_eq!(
            summary.hidden_states.len(),
            summary.token_ids.len() * n_embd
        );
        // Each state, through the model's output projection, gives back the token it produced.
        let agreeing = summary
            .hidden_states
            .chunks_exact(n_embd)
            .zip(&summary.token_ids)
            .filter(|(state, &token)| {
                projection.matvec(state, &mut logits);
                engine::argmax(&logits) == token
            })
            .count();
        assert!(
            agreeing + 1 >= summary.token_ids.len(),
            "{agreeing} of {} states give back their token",
            summary.token_ids.len()
        );
    }

    let err = engine(1, 4)
        .generate(greedy(chat("Hi"), 4, GenerationMode::Normal).with_hidden_states())
        .and_then(|s| s.wait())
        .unwrap_err();
    assert!(err.to_string().contains("hidden states"), "{err}");
}

/// Texts of about `words` words each, all different.
fn long_texts(count: usize, words: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            (0..words)
                .map(|w| format!("word{}", (i * 7919 + w * 31) % 1000))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// An engine that takes large embedding calls.
fn embedding_engine() -> Engine {
    let mut config = EngineConfig::new(model_path());
    config.parallel = 2;
    config.ctx_size = Some(1024);
    config.max_embedding_tokens = Some(100_000);
    config.decode_costs = Some(common::cpu_decode_costs());
    Engine::load(config).expect("model loads")
}

/// The engine's counters once nothing runs or waits (they are updated just after a run's
/// last event is sent).
fn settled_metrics(engine: &Engine) -> engine::EngineMetrics {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = engine.metrics();
        let settled = (metrics.active, metrics.queued, metrics.embedding_calls) == (0, 0, 0);
        if settled || std::time::Instant::now() > deadline {
            return metrics;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_generation_answers_while_a_large_embedding_call_is_read_between_its_steps() {
    let engine = embedding_engine();
    // About 40 chunks: many more than the few steps a 2-token answer takes.
    let call = engine
        .submit_embedding(long_texts(8, 100))
        .expect("within the budget");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while engine.metrics().embedding_calls == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the call never showed in the counters"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let summary = run(&engine, greedy(chat("Say hi."), 2, GenerationMode::Normal));
    assert_eq!(summary.tokens_generated, 2);
    // The call reads a chunk between steps: the generation ended long before it did.
    let read = engine.metrics().embedding_tokens;
    assert!(read > 0, "the call started");
    let embeddings = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(call)
        .expect("embedded");
    let total: u64 = embeddings.iter().map(|e| e.tokens as u64).sum();
    assert!(
        read < total,
        "the generation waited for the whole call: {read} of {total} tokens read when it ended"
    );
    assert_eq!(embeddings.len(), 8);
    for embedding in &embeddings {
        let norm: f32 = embedding.vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-3, "{norm}");
    }
    // Chunked reading gives a text the same vector alone as among others.
    let alone = engine.embed(long_texts(1, 100)).expect("embedded");
    assert_eq!(alone[0], embeddings[0]);
    let metrics = settled_metrics(&engine);
    assert_eq!(
        (metrics.embedding_calls, metrics.queued),
        (0, 0),
        "{metrics:?}"
    );
}

#[test]
fn an_embedding_call_over_the_budget_is_refused_before_it_queues() {
    let mut config = EngineConfig::new(model_path());
    config.parallel = 1;
    config.ctx_size = Some(2048);
    config.decode_costs = Some(common::cpu_decode_costs());
    let engine = Engine::load(config).expect("model loads");
    // 256 texts of about 4,000 characters: a megabyte. Each fits a request's context; two
    // already take more than the KV cache holds.
    let err = engine
        .submit_embedding(vec!["lorem ipsum dolor sit amet ".repeat(150); 256])
        .err()
        .expect("refused");
    assert_eq!(err.code(), "request_too_large", "{err}");
    assert!(err.to_string().contains("at most 2048"), "{err}");
    let metrics = engine.metrics();
    assert_eq!((metrics.queued, metrics.embedding_calls), (0, 0));
    // One text over a request's context is refused too, as a prompt would be.
    let err = engine
        .embed(vec!["word ".repeat(2100)])
        .expect_err("longer than the context");
    assert_eq!(err.code(), "prompt_too_long", "{err}");
    assert_eq!(engine.embed(vec!["fits".into()]).unwrap().len(), 1);
}

#[test]
fn a_diagnostic_that_panics_answers_a_step_failure_and_the_engine_goes_on() {
    let engine = engine(1, 8);
    let prompt = chat("Name three colours.");
    let before = engine.prompt_logprobs(prompt.clone(), 2).unwrap();
    engine.inject_step_panic().unwrap();
    let err = engine
        .prompt_logprobs(prompt.clone(), 2)
        .expect_err("the diagnostic panicked");
    assert_eq!(err.code(), "engine_step_failed", "{err}");
    assert_eq!(engine.prompt_logprobs(prompt.clone(), 2).unwrap(), before);
    assert_eq!(
        run(&engine, greedy(prompt, 4, GenerationMode::Normal)).tokens_generated,
        4
    );
}

#[test]
fn a_step_that_panics_fails_its_requests_and_the_next_ones_succeed() {
    let engine = engine(2, 8);
    let prompt = chat("Write a short story about a robot who learns to paint.");
    let expected = run(&engine, greedy(prompt.clone(), 24, GenerationMode::Normal));
    let mut first = engine
        .generate(greedy(prompt.clone(), 200, GenerationMode::Normal))
        .unwrap();
    let second = engine
        .generate(greedy(chat("Count to ten."), 200, GenerationMode::Auto))
        .unwrap();
    // Both are decoding once the first has a token.
    loop {
        match first.blocking_next() {
            Some(GenerationEvent::Text { .. }) => break,
            Some(GenerationEvent::Failed(err)) => panic!("{err}"),
            Some(_) => {}
            None => panic!("stream ended"),
        }
    }
    engine.inject_step_panic().unwrap();
    for stream in [first, second] {
        let err = stream.wait().expect_err("the step panicked");
        assert_eq!(err.code(), "engine_step_failed", "{err}");
        assert!(err.to_string().contains("fault injected"), "{err}");
    }
    let after = run(&engine, greedy(prompt, 24, GenerationMode::Normal));
    assert_identical(&expected.token_ids, &after.token_ids, "after the panic");
    let lookup = run(
        &engine,
        greedy(chat("Repeat: a b c a b c"), 16, GenerationMode::Lookup),
    );
    assert_eq!(lookup.tokens_generated, 16);
    let metrics = settled_metrics(&engine);
    assert_eq!((metrics.active, metrics.queued), (0, 0), "{metrics:?}");
}

/// Embeds `inputs`, waiting for the answer.
fn embed_inputs(engine: &Engine, inputs: Vec<EmbeddingInput>) -> Vec<Vec<f32>> {
    let call = engine.submit_embedding_inputs(inputs).expect("queued");
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(call)
        .expect("embedded")
        .into_iter()
        .map(|embedding| embedding.vector)
        .collect()
}

#[test]
fn ids_that_may_be_another_tokenizers_are_read_as_the_models_only_where_they_are_its_own() {
    let engine = embedding_engine();
    let text = "The cat sat on the mat, and the dog slept on the rug.";
    // The model's own tokens of the text after its first word (a prompt's first token has no
    // logprob entry): how this model writes that text.
    let read = engine
        .prompt_logprobs(engine::Prompt::Text(format!("Yes.\n{text}")), 1)
        .unwrap();
    let own: Vec<_> = read.rest.iter().map(|t| t.chosen.token_id).collect();
    let other_text = "Stock markets fell sharply today.";
    let vectors = embed_inputs(
        &engine,
        vec![
            EmbeddingInput::Tokens(own.clone()),
            EmbeddingInput::TokensOrText {
                ids: own.clone(),
                text: other_text.into(),
            },
            EmbeddingInput::Text(other_text.into()),
            // Special tokens spell no text: not how this model writes anything.
            EmbeddingInput::TokensOrText {
                ids: vec![1, 2, 3],
                text: other_text.into(),
            },
            // Beyond its vocabulary.
            EmbeddingInput::TokensOrText {
                ids: vec![i32::MAX],
                text: other_text.into(),
            },
        ],
    );
    assert_eq!(vectors[1], vectors[0], "its own ids stay its own");
    assert_eq!(
        vectors[3], vectors[2],
        "ids it would not write are the text"
    );
    assert_eq!(vectors[4], vectors[2], "ids outside it are the text");
    assert_ne!(vectors[0], vectors[2]);
}
