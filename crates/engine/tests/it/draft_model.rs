//! A draft model on the real model: the model itself as its own draft model (acceptance near
//! 100%, which checks the machinery), lossless against normal decoding alone and in a full
//! batch, its cache kept in step through cancels and new requests, and a draft model whose
//! vocabulary differs refused when it loads.

use std::sync::OnceLock;

use engine::{
    DraftPolicy, Engine, EngineConfig, EngineError, GenerationEvent, GenerationMode, RunSummary,
    SamplingParams, TokenSource,
};

use crate::common::{self, assert_identical, assert_like_normal, chat, greedy, model_path, run};

/// Requests decoded together by the engine below.
const PARALLEL: usize = 3;

/// The default model drafting for itself.
fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = EngineConfig::new(model_path());
        config.parallel = PARALLEL;
        config.decode_costs = Some(common::cpu_decode_costs());
        config.draft_model_path = Some(model_path());
        Engine::load(config).expect("model and draft model load")
    })
}

const PROMPTS: &[&str] = &[
    "Write a short story about a robot who learns to paint.",
    "List five tips for staying focused while studying.",
    "Explain what a hash map is to a beginner.",
];

/// Draft mode drafting `n` tokens at every step, greedy.
fn drafting(prompt: &str, n: usize, max_tokens: u32) -> engine::GenerateRequest {
    greedy(chat(prompt), max_tokens, GenerationMode::Draft).with_draft(DraftPolicy::Length(n))
}

/// Of the drafted tokens, the share accepted.
fn accepted_share(summary: &RunSummary) -> f64 {
    let drafted = summary.draft_tokens.unwrap_or(0);
    assert!(drafted > 0, "drafted nothing");
    summary.accepted_draft_tokens.unwrap_or(0) as f64 / drafted as f64
}

#[test]
fn the_model_agrees_with_itself_when_it_loads() {
    let info = engine().info().draft_model.clone().expect("a draft model");
    assert_eq!(info.path, model_path());
    assert!(info.agreement.expect("measured") > 0.9, "{info:?}");
    assert!(info.ms_per_token.is_some(), "the draft decode was timed");
}

#[test]
fn drafting_with_itself_is_lossless_and_nearly_always_accepted() {
    for prompt in PROMPTS {
        let summary = run(engine(), drafting(prompt, 4, 64));
        assert_like_normal(engine(), &chat(prompt), &summary.token_ids, 64, prompt);
        assert_eq!(summary.mode, GenerationMode::Draft);
        // The model agrees with itself: every guess is accepted. It only guesses where it is
        // sure (a chain ends at a guess under 75%), so steps carry fewer than 4 guesses.
        let share = accepted_share(&summary);
        assert!(share > 0.95, "{prompt}: {share} of its drafts accepted");
        assert!(
            summary.mean_accepted > 1.1,
            "{prompt}: {} tokens per step",
            summary.mean_accepted
        );
    }
}

#[test]
fn its_nodes_are_named_as_the_draft_model_s() {
    let mut stream = engine()
        .generate(drafting(PROMPTS[0], 3, 24))
        .expect("accepted");
    let mut sources = Vec::new();
    loop {
        match stream.blocking_next().expect("stream ends with Finished") {
            GenerationEvent::Step(step) => sources.extend(step.sources),
            GenerationEvent::Finished(_) => break,
            GenerationEvent::Failed(err) => panic!("{err}"),
            _ => {}
        }
    }
    assert!(sources.contains(&TokenSource::DraftModel), "{sources:?}");
    assert!(sources
        .iter()
        .all(|s| matches!(s, TokenSource::DraftModel | TokenSource::Base)));
}

#[test]
fn where_it_is_torn_between_a_few_tokens_they_branch_and_output_stays_normal_s() {
    let mut branched = 0;
    for prompt in PROMPTS {
        let mut stream = engine()
            .generate(drafting(prompt, 4, 64))
            .expect("accepted");
        let summary = loop {
            match stream.blocking_next().expect("stream ends with Finished") {
                // A tree wider than it is deep has siblings: branches of the draft model.
                GenerationEvent::Step(step) if step.tree_size > step.tree_depth => branched += 1,
                GenerationEvent::Finished(summary) => break summary,
                GenerationEvent::Failed(err) => panic!("{err}"),
                _ => {}
            }
        };
        assert_like_normal(engine(), &chat(prompt), &summary.token_ids, 64, prompt);
    }
    assert!(branched > 0, "no step branched");
}

#[test]
fn a_full_batch_of_drafting_requests_is_lossless() {
    let streams: Vec<_> = PROMPTS
        .iter()
        .map(|p| engine().generate(drafting(p, 4, 48)).expect("accepted"))
        .collect();
    assert_eq!(streams.len(), PARALLEL);
    for (stream, prompt) in streams.into_iter().zip(PROMPTS) {
        let summary = stream.wait().expect("finished");
        assert_like_normal(engine(), &chat(prompt), &summary.token_ids, 48, prompt);
        assert!(accepted_share(&summary) > 0.9, "{prompt}");
    }
}

#[test]
fn the_draft_model_guesses_for_every_request_in_the_same_decodes() {
    // An engine of its own, so that no other test's requests are counted.
    let mut config = EngineConfig::new(model_path());
    config.parallel = PARALLEL;
    config.decode_costs = Some(common::cpu_decode_costs());
    config.draft_model_path = Some(model_path());
    let engine = Engine::load(config).expect("model and draft model load");
    let streams: Vec<_> = PROMPTS
        .iter()
        .map(|p| engine.generate(drafting(p, 4, 48)).expect("accepted"))
        .collect();
    let mut steps = 0;
    for (stream, prompt) in streams.into_iter().zip(PROMPTS) {
        let summary = stream.wait().expect("finished");
        assert_like_normal(&engine, &chat(prompt), &summary.token_ids, 48, prompt);
        assert!(
            summary.draft_tokens.unwrap_or(0) > 0,
            "{prompt}: drafted nothing"
        );
        steps += summary.steps as u64;
    }
    // One request at a time takes a decode to read each step's tokens and one more per guess;
    // three requests reading and guessing together share those decodes.
    let metrics = engine.metrics();
    assert!(
        metrics.draft_model_decodes < steps,
        "{} draft model decodes for {steps} steps of the three requests",
        metrics.draft_model_decodes
    );
    assert!(metrics.draft_model_tokens > 2 * metrics.draft_model_decodes);
}

#[test]
fn its_cache_stays_in_step_through_a_cancel_and_a_new_request_in_the_same_place() {
    // A run cancelled after a few steps leaves the draft model's cells mid-answer; the next
    // requests start elsewhere and with part of its prompt. Had the cells not followed, the
    // guesses would be another text's and mostly rejected.
    let mut stream = engine()
        .generate(drafting(PROMPTS[0], 4, 200))
        .expect("accepted");
    let mut steps = 0;
    while steps < 3 {
        match stream.blocking_next().expect("events") {
            GenerationEvent::Step(_) => steps += 1,
            GenerationEvent::Finished(_) => break,
            GenerationEvent::Failed(err) => panic!("{err}"),
            _ => {}
        }
    }
    stream.cancel();
    drop(stream);
    for prompt in [
        "Write a short story about a cat who learns to swim.",
        PROMPTS[1],
    ] {
        let summary = run(engine(), drafting(prompt, 4, 48));
        assert_like_normal(engine(), &chat(prompt), &summary.token_ids, 48, prompt);
        assert!(accepted_share(&summary) > 0.9, "{prompt}");
    }
}

#[test]
fn auto_drafts_with_the_draft_model_losslessly() {
    let prompt = chat(PROMPTS[2]);
    let auto = run(engine(), greedy(prompt.clone(), 64, GenerationMode::Auto));
    let normal = run(engine(), greedy(prompt, 64, GenerationMode::Normal));
    assert_identical(&normal.token_ids, &auto.token_ids, "auto");
}

#[test]
fn sampled_drafting_repeats_with_its_seed() {
    // Sampled tokens are accepted by exact speculative sampling, whoever drafted them (the
    // verifier's chi-square test); here the draft model's guesses go through it.
    let request = || {
        greedy(chat(PROMPTS[1]), 40, GenerationMode::Draft)
            .with_sampling(SamplingParams {
                temperature: 0.8,
                seed: Some(11),
                ..SamplingParams::default()
            })
            .with_draft(DraftPolicy::Length(3))
    };
    let first = run(engine(), request());
    let again = run(engine(), request());
    assert!(first.draft_tokens.unwrap_or(0) > 0, "drafted nothing");
    assert_identical(&first.token_ids, &again.token_ids, "the same seed");
}

#[test]
fn draft_mode_without_a_draft_model_is_refused() {
    let err = common::solo_engine()
        .generate(greedy(chat("Hi"), 8, GenerationMode::Draft))
        .err()
        .expect("refused");
    assert_eq!(err, EngineError::NoDraftModel);
    assert!(err.is_client_error());
}

#[test]
fn a_draft_model_with_another_vocabulary_is_refused_when_it_loads() {
    // The default model with one token's text changed in place (same length, so the file
    // stays a valid GGUF): a model whose token 'Hello' means something else.
    let original = std::fs::read(model_path()).expect("model readable");
    let mut needle = (5u64).to_le_bytes().to_vec();
    needle.extend_from_slice(b"Hello");
    let at = original
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .expect("the vocabulary has a token 'Hello'");
    let mut changed = original;
    changed[at + needle.len() - 1] = b'p';
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other-vocabulary.gguf");
    std::fs::write(&other, changed).unwrap();

    let mut config = EngineConfig::new(model_path());
    config.parallel = 1;
    config.decode_costs = Some(common::cpu_decode_costs());
    config.draft_model_path = Some(other.clone());
    match Engine::load(config) {
        Err(EngineError::DraftModelMismatch { path, reason }) => {
            assert_eq!(path, other);
            assert!(reason.contains("\"Hellp\""), "{reason}");
            assert!(reason.contains("\"Hello\""), "{reason}");
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("a draft model with another vocabulary loaded"),
    }
}
