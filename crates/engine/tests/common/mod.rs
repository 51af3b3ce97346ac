//! Helpers shared by the real-model test files.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use engine::speculative::costs::CostPoint;
use engine::{
    ChatMessage, Engine, EngineConfig, GenerateRequest, GenerationMode, Prompt, RunSummary,
    SamplingParams,
};

pub fn model_path() -> PathBuf {
    models::default_model_path().expect("default model available")
}

/// One engine per test binary. It decodes one request at a time, so that runs compared with
/// each other are computed alike; batching has its own tests.
pub fn solo_engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = EngineConfig::new(model_path());
        config.parallel = 1;
        config.decode_costs = Some(cpu_decode_costs());
        Engine::load(config).expect("model loads")
    })
}

/// Decode costs of the default model on a 2-core x86 CPU, given so that what the draft budget
/// decides does not depend on how busy the machine running the tests is.
pub fn cpu_decode_costs() -> Vec<CostPoint> {
    [
        (1, 9.0),
        (2, 15.9),
        (4, 23.3),
        (8, 41.5),
        (16, 77.5),
        (64, 225.0),
    ]
    .into_iter()
    .map(|(tokens, ms)| CostPoint::exact(tokens, ms))
    .collect()
}

pub fn chat(text: &str) -> Prompt {
    Prompt::Chat(vec![ChatMessage::new("user", text)])
}

pub fn greedy(prompt: Prompt, max_tokens: u32, mode: GenerationMode) -> GenerateRequest {
    GenerateRequest::new(prompt, max_tokens)
        .with_sampling(SamplingParams::greedy())
        .with_mode(mode)
}

pub fn run(engine: &Engine, request: GenerateRequest) -> RunSummary {
    engine
        .generate(request)
        .expect("accepted")
        .wait()
        .expect("finished")
}

/// Logit gap under which two tokens count as tied: batched and single-token decodes sum in a
/// different order, and KV cells move after pruning, so logits wobble by a few tenths.
pub const NEAR_TIE: f32 = 1.0;

/// Runs `prompt` normally and in `mode`; the outputs must match token for token, except that
/// they may part at a numerical near-tie (reported on stderr).
pub fn assert_lossless(
    engine: &Engine,
    prompt: Prompt,
    mode: GenerationMode,
    max_tokens: u32,
) -> RunSummary {
    let fast = run(engine, greedy(prompt.clone(), max_tokens, mode));
    assert_like_normal(
        engine,
        &prompt,
        &fast.token_ids,
        max_tokens,
        &mode.to_string(),
    );
    fast
}

/// `tokens`, generated greedily from `prompt` by some other means, must be normal decoding's
/// output of `max_tokens`, up to a numerical near-tie.
pub fn assert_like_normal(
    engine: &Engine,
    prompt: &Prompt,
    tokens: &[i32],
    max_tokens: u32,
    label: &str,
) {
    let normal = run(
        engine,
        greedy(prompt.clone(), max_tokens, GenerationMode::Normal),
    );
    assert_same_up_to_near_tie(engine, prompt, &normal.token_ids, tokens, label);
}

/// Two greedy outputs of the same prompt must be equal, or part where the model's two best
/// logits are within `NEAR_TIE` of each other (batched kernels sum in a different order).
pub fn assert_same_up_to_near_tie(
    engine: &Engine,
    prompt: &Prompt,
    expected: &[i32],
    got: &[i32],
    label: &str,
) {
    let Some(at) = expected.iter().zip(got).position(|(a, b)| a != b) else {
        assert_eq!(expected, got, "{label}: same prefix, different length");
        return;
    };
    let candidates = engine
        .next_token_logits(prompt.clone(), expected[..at].to_vec(), 50)
        .unwrap();
    let logit = |token| candidates.iter().find(|c| c.0 == token).map(|c| c.1);
    let (ours, theirs) = (expected[at], got[at]);
    let gap = match (logit(ours), logit(theirs)) {
        (Some(a), Some(b)) => (a - b).abs(),
        _ => f32::INFINITY,
    };
    eprintln!(
        "{label} parted from the reference at token {at}: {ours} vs {theirs}, logit gap {gap:.4}"
    );
    assert!(
        gap < NEAR_TIE,
        "{label} diverged at token {at} where the logits are {gap} apart: a real bug, not a near-tie"
    );
}
