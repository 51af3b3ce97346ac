//! The feature drafter (eagle mode) on the real model, with a drafter of random weights: its
//! guesses are seldom right, which is what checks that verification keeps only the model's own
//! tokens. Lossless against normal decoding alone and in a full batch, its nodes named as its
//! own, and refused where no drafter is loaded or the file is not one.

use std::sync::OnceLock;

use engine::{
    DraftPolicy, Engine, EngineConfig, EngineError, GenerationEvent, GenerationMode, TokenSource,
};

use crate::common::{self, assert_like_normal, chat, greedy, model_path, run};

const PARALLEL: usize = 3;

const PROMPTS: &[&str] = &[
    "Write a short story about a robot who learns to paint.",
    "List five tips for staying focused while studying.",
    "Explain what a hash map is to a beginner.",
];

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = EngineConfig::new(model_path());
        config.parallel = PARALLEL;
        config.decode_costs = Some(common::cpu_decode_costs());
        config.feature_drafter_path = Some(common::random_drafter().clone());
        Engine::load(config).expect("model and drafter load")
    })
}

/// Eagle mode growing `n` nodes at every step, greedy.
fn drafting(prompt: &str, n: usize, max_tokens: u32) -> engine::GenerateRequest {
    greedy(chat(prompt), max_tokens, GenerationMode::Eagle).with_draft(DraftPolicy::Length(n))
}

#[test]
fn the_drafter_loads_and_says_what_it_is() {
    let info = engine().info().eagle.clone().expect("a drafter");
    assert_eq!(&info.path, common::random_drafter());
    assert_eq!(info.window, 8);
    assert_eq!(info.vocab_subset, None);
    assert!(info.draft_ms > 0.0, "a tree was timed");
    assert!(
        info.heldout_tokens_per_step.is_empty(),
        "it was never trained"
    );
}

#[test]
fn eagle_mode_is_lossless_and_its_nodes_are_its_own() {
    let mut stream = engine()
        .generate(drafting(PROMPTS[0], 6, 48))
        .expect("accepted");
    let mut drafted = Vec::new();
    let summary = loop {
        match stream.blocking_next().expect("stream ends with Finished") {
            GenerationEvent::Step(step) => drafted.extend(step.tree.nodes.iter().map(|n| n.source)),
            GenerationEvent::Finished(summary) => break summary,
            GenerationEvent::Failed(err) => panic!("{err}"),
            _ => {}
        }
    };
    assert_like_normal(
        engine(),
        &chat(PROMPTS[0]),
        &summary.token_ids,
        48,
        PROMPTS[0],
    );
    assert_eq!(summary.mode, GenerationMode::Eagle);
    assert!(!drafted.is_empty(), "no step drafted");
    assert!(
        drafted.iter().all(|s| *s == TokenSource::Eagle),
        "{drafted:?}"
    );
}

#[test]
fn a_full_batch_of_eagle_requests_is_lossless() {
    let streams: Vec<_> = PROMPTS
        .iter()
        .map(|p| engine().generate(drafting(p, 4, 40)).expect("accepted"))
        .collect();
    for (stream, prompt) in streams.into_iter().zip(PROMPTS) {
        let summary = stream.wait().expect("finished");
        assert_like_normal(engine(), &chat(prompt), &summary.token_ids, 40, prompt);
        assert!(
            summary.draft_tokens.unwrap_or(0) > 0,
            "{prompt}: drafted nothing"
        );
    }
}

#[test]
fn auto_drafts_with_the_drafter_losslessly() {
    let prompt = chat(PROMPTS[2]);
    let summary = run(engine(), greedy(prompt.clone(), 48, GenerationMode::Auto));
    assert_like_normal(engine(), &prompt, &summary.token_ids, 48, PROMPTS[2]);
}

#[test]
fn eagle_mode_without_a_drafter_is_refused() {
    let refused = common::solo_engine()
        .generate(greedy(chat(PROMPTS[0]), 8, GenerationMode::Eagle))
        .err()
        .expect("refused");
    assert!(matches!(refused, EngineError::NoEagleDrafter), "{refused}");
}

#[test]
fn a_file_that_is_not_a_drafter_is_refused_when_it_loads() {
    let mut config = EngineConfig::new(model_path());
    config.feature_drafter_path = Some(model_path());
    let refused = Engine::load(config).err().expect("refused");
    assert!(
        matches!(&refused, EngineError::FeatureDrafter(m) if m.contains("not a feature drafter")),
        "{refused}"
    );
}
