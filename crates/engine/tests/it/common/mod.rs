//! Helpers shared by the real-model test modules.

use std::path::PathBuf;
use std::sync::OnceLock;

use engine::feature_drafter::{write_feature_drafter, FeatureShape, FeatureWeights};
use engine::medusa::convert::base_identity;
use engine::speculative::costs::CostPoint;
use engine::{
    ChatMessage, Engine, EngineConfig, GenerateRequest, GenerationMode, Prompt, RunSummary,
    SamplingParams,
};

pub fn model_path() -> PathBuf {
    models::default_model_path().expect("default model available")
}

/// One engine for the tests that share it. It decodes one request at a time, so that runs
/// compared with each other are computed alike; batching has its own tests.
pub fn solo_engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = EngineConfig::new(model_path());
        config.parallel = 1;
        config.decode_costs = Some(cpu_decode_costs());
        // Tests share it in any order: what lookup drafts must not depend on which ran before.
        config.lookup_memory = 0;
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
    .map(|(tokens, ms)| CostPoint::without_spread(tokens, ms))
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

/// Runs `prompt` normally and in `mode`; the outputs must match token for token.
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
/// output of `max_tokens`, token for token.
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
    assert_identical(&normal.token_ids, tokens, label);
}

/// Two greedy outputs of the same prompt must be identical, token for token: exact mode (the
/// engine's default) sums every token's logits alike however it was batched or drafted, so
/// not even a near-tie may tip.
pub fn assert_identical(expected: &[i32], got: &[i32], label: &str) {
    if let Some(at) = expected.iter().zip(got).position(|(a, b)| a != b) {
        panic!(
            "{label} parted from the reference at token {at}: {} instead of {}",
            got[at], expected[at]
        );
    }
    assert_eq!(
        expected.len(),
        got.len(),
        "{label}: same prefix, different length"
    );
}

/// A feature drafter for the default model with small random weights (its guesses are seldom
/// right), written once per test binary.
pub fn random_drafter() -> &'static PathBuf {
    static FILE: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &FILE
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("random.eagle.gguf");
            let base = base_identity(&model_path()).unwrap();
            let shape = FeatureShape::for_model(base.n_embd as usize, 8);
            let mut x = 0x2545_f491_u32;
            let mut random = |n: usize| -> Vec<f32> {
                (0..n)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        (x as f32 / u32::MAX as f32 - 0.5) * 0.1
                    })
                    .collect()
            };
            let mut matrices: [Vec<f32>; 8] = Default::default();
            for (m, (rows, cols)) in matrices.iter_mut().zip(shape.matrix_dims()) {
                *m = random(rows * cols);
            }
            let norms = [
                vec![1.0; shape.n_embd],
                vec![1.0; shape.n_embd],
                vec![1.0; shape.n_embd],
            ];
            let weights = FeatureWeights { matrices, norms };
            write_feature_drafter(&path, &base, shape, &weights, None, None).unwrap();
            (dir, path)
        })
        .1
}
