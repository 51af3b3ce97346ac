//! Speculative modes on the real model: lossless against normal decoding, and useful drafts.

use engine::{
    DraftPolicy, Engine, EngineConfig, EngineError, GenerateRequest, GenerationEvent,
    GenerationMode, LookupMemoryUse, RunSummary, SamplingParams, StopReason, TokenSource,
};

use crate::common::{self, assert_lossless, chat, cpu_decode_costs, greedy, model_path};

fn engine() -> &'static Engine {
    common::solo_engine()
}

fn run(request: engine::GenerateRequest) -> RunSummary {
    common::run(engine(), request)
}

const PROMPTS: &[&str] = &[
    "Write a short story about a robot who learns to paint.",
    "List five tips for staying focused while studying.",
    "Write a Python function that checks whether a number is prime.",
    "Repeat this list exactly three times: apple, banana, cherry, date, elderberry, fig.",
];

#[test]
fn lookup_is_lossless_under_greedy_decoding() {
    for prompt in PROMPTS {
        assert_lossless(engine(), chat(prompt), GenerationMode::Lookup, 96);
    }
}

#[test]
fn lookup_accepts_long_runs_on_repetitive_text() {
    let prompt =
        chat("Repeat this list exactly three times: apple, banana, cherry, date, elderberry, fig.");
    let summary = assert_lossless(engine(), prompt, GenerationMode::Lookup, 128);
    assert!(
        summary.mean_accepted > 1.5,
        "mean accepted {}",
        summary.mean_accepted
    );
    assert!(!summary.acceptance_by_depth.is_empty());
    assert!(summary.steps < summary.tokens_generated);
}

#[test]
fn a_fixed_draft_length_is_drafted_whatever_it_costs() {
    let prompt =
        chat("Repeat this list exactly three times: apple, banana, cherry, date, elderberry, fig.");
    let request =
        greedy(prompt.clone(), 96, GenerationMode::Lookup).with_draft(DraftPolicy::Length(6));
    let mut stream = engine().generate(request).unwrap();
    let mut drafted = Vec::new();
    let summary = loop {
        match stream.blocking_next().expect("stream ends with Finished") {
            GenerationEvent::Step(step) => drafted.push(step.tree_size),
            GenerationEvent::Finished(summary) => break summary,
            GenerationEvent::Failed(err) => panic!("{err}"),
            _ => {}
        }
    };
    // Lookup drafts when the text repeats: then the whole length, never more.
    assert!(drafted.iter().all(|&n| n <= 6), "{drafted:?}");
    assert!(
        drafted.iter().filter(|&&n| n == 6).count() >= 5,
        "{drafted:?}"
    );
    let normal = run(greedy(prompt.clone(), 96, GenerationMode::Normal));
    common::assert_identical(&normal.token_ids, &summary.token_ids, "lookup of 6");
}

#[test]
fn step_events_account_for_every_token() {
    let request = greedy(
        chat("Repeat after me: one two three, one two three, one two three."),
        64,
        GenerationMode::Lookup,
    );
    let mut stream = engine().generate(request).unwrap();
    let (mut steps, mut text_tokens, mut text_sources) = (Vec::new(), Vec::new(), Vec::new());
    let summary = loop {
        match stream.blocking_next().expect("stream ends with Finished") {
            GenerationEvent::Step(step) => steps.push(step),
            GenerationEvent::Text {
                token_ids, sources, ..
            } => {
                assert_eq!(token_ids.len(), sources.len());
                text_tokens.extend(token_ids);
                text_sources.extend(sources);
            }
            GenerationEvent::Finished(summary) => break summary,
            GenerationEvent::Failed(err) => panic!("{err}"),
            GenerationEvent::Started { .. } => {}
        }
    };
    assert_eq!(text_tokens, summary.token_ids);
    // The first token comes from the prompt's own decode; every later one from a step.
    let stepped: Vec<i32> = steps.iter().flat_map(|s| s.tokens.clone()).collect();
    assert_eq!(
        &summary.token_ids[1..],
        &stepped[..summary.token_ids.len() - 1]
    );
    for (i, step) in steps.iter().enumerate() {
        assert_eq!(step.index, i + 1);
        assert_eq!(step.tokens.len(), step.accepted_len);
        assert_eq!(step.sources.last(), Some(&TokenSource::Base));
        assert!(step.sources[..step.accepted_len - 1]
            .iter()
            .all(|s| *s == TokenSource::Lookup));
        assert_eq!(step.depth_hits.len(), step.tree_depth);
        assert_eq!(
            step.depth_hits.iter().filter(|h| **h).count(),
            step.accepted_len - 1
        );
    }
    assert_eq!(summary.steps, steps.len());
    let emitted: usize = 1 + steps.iter().map(|s| s.accepted_len).sum::<usize>();
    assert!(emitted >= summary.tokens_generated);
}

#[test]
fn speculative_runs_respect_max_tokens_and_stop_strings() {
    let prompt =
        chat("Repeat this list exactly three times: apple, banana, cherry, date, elderberry, fig.");
    let capped = run(greedy(prompt.clone(), 37, GenerationMode::Lookup));
    assert_eq!(capped.tokens_generated, 37);
    assert_eq!(capped.stop_reason, StopReason::MaxTokens);
    let normal = run(greedy(prompt.clone(), 37, GenerationMode::Normal));
    let stopped = run(greedy(prompt, 100, GenerationMode::Lookup).with_stop(vec!["cherry".into()]));
    assert_eq!(stopped.stop_reason, StopReason::StopString);
    assert_eq!(
        stopped.text,
        &normal.text[..normal.text.find("cherry").unwrap()]
    );
}

#[test]
fn seeded_speculative_sampling_repeats() {
    let request = |seed| {
        let mut r = greedy(
            chat("Repeat: red green blue, red green blue, red green blue."),
            48,
            GenerationMode::Lookup,
        );
        r.sampling = SamplingParams {
            temperature: 0.7,
            seed: Some(seed),
            ..SamplingParams::default()
        };
        r
    };
    assert_eq!(run(request(5)).token_ids, run(request(5)).token_ids);
}

#[test]
fn medusa_without_heads_says_what_is_missing() {
    // Refused before it is queued: `Engine::validate` is the one check.
    let err = engine()
        .generate(greedy(chat("hi"), 8, GenerationMode::Medusa))
        .err()
        .expect("medusa without heads is refused");
    assert_eq!(err, EngineError::NoMedusaHeads);
}

#[test]
fn out_of_range_draft_size_is_refused() {
    let mut request = greedy(chat("hi"), 8, GenerationMode::Lookup);
    request.max_draft_tokens = Some(0);
    let err = engine().generate(request).err().unwrap();
    assert!(
        matches!(
            err,
            EngineError::InvalidParameter {
                name: "max_draft_tokens",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn lookup_drafts_an_answer_it_remembers_and_writes_the_same_tokens() {
    let mut config = EngineConfig::new(model_path());
    config.parallel = 1;
    config.decode_costs = Some(cpu_decode_costs());
    let engine = Engine::load(config).expect("model loads");
    let prompt = "Explain in three sentences why the sky is blue.";
    let lookup = |memory: LookupMemoryUse| GenerateRequest {
        lookup_memory: memory,
        ..greedy(chat(prompt), 48, GenerationMode::Lookup).with_draft(DraftPolicy::Length(8))
    };
    // Nothing remembered yet, and what it reads adds nothing.
    let cold = common::run(&engine, lookup(LookupMemoryUse::ReadOnly));
    let again = common::run(&engine, lookup(LookupMemoryUse::ReadOnly));
    assert_eq!(again.mean_accepted, cold.mean_accepted);
    // A normal run's answer is remembered when it finishes.
    let normal = common::run(&engine, greedy(chat(prompt), 48, GenerationMode::Normal));
    let remembered = common::run(&engine, lookup(LookupMemoryUse::ReadOnly));
    let off = common::run(&engine, lookup(LookupMemoryUse::Off));
    for run in [&cold, &remembered, &off] {
        assert_eq!(
            run.token_ids, normal.token_ids,
            "drafting changed the answer"
        );
    }
    assert!(
        remembered.mean_accepted >= 4.0 && remembered.mean_accepted > cold.mean_accepted + 2.0,
        "remembered {} tokens per step, cold {}",
        remembered.mean_accepted,
        cold.mean_accepted
    );
    // A request that may not read it drafts as if nothing were remembered.
    assert_eq!(off.mean_accepted, cold.mean_accepted);
}
