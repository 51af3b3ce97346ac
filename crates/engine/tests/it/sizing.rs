//! Every accepted sizing of the context loads and generates: the smallest value of each option,
//! and the batch sizes that once aborted the process inside llama.cpp (`--batch-size 32`, 64 and
//! 128 reserved fewer outputs than the context has sequences).

use engine::{Engine, EngineConfig, GenerationMode, Prompt, StopReason};

use crate::common::{greedy, model_path, run};

fn config(configure: impl FnOnce(&mut EngineConfig)) -> EngineConfig {
    let mut config = EngineConfig::new(model_path());
    config.ctx_size = Some(512);
    configure(&mut config);
    config
        .validate()
        .unwrap_or_else(|e| panic!("{config:?} is accepted: {e}"));
    config
}

/// Loads `config` and runs a few tokens in each of `modes`.
fn loads_and_generates(config: EngineConfig, modes: &[GenerationMode]) {
    let label = format!(
        "batch {} ctx {:?} parallel {} threads {:?} heads {}",
        config.batch_size,
        config.ctx_size,
        config.parallel,
        config.threads,
        config.heads_path.is_some()
    );
    let engine = Engine::load(config).unwrap_or_else(|e| panic!("{label}: {e}"));
    let info = engine.info();
    assert!(info.n_batch as usize >= info.parallel, "{label}");
    for &mode in modes {
        // A few tokens of prompt and answer: within the 16 cells each of 64 requests may have.
        let prompt = Prompt::Text("Red, green, blue,".into());
        let summary = run(&engine, greedy(prompt, 4, mode));
        assert!(summary.tokens_generated > 0, "{label} {mode}");
        assert!(
            matches!(
                summary.stop_reason,
                StopReason::MaxTokens | StopReason::EndOfGeneration
            ),
            "{label} {mode}: {:?}",
            summary.stop_reason
        );
    }
}

fn heads() -> std::path::PathBuf {
    models::default_heads_path().expect("default heads installed")
}

#[test]
fn the_smallest_accepted_sizes_load_and_generate() {
    let smallest = config(|c| {
        c.threads = Some(1);
        c.ctx_size = Some(16);
        c.parallel = 1;
        c.batch_size = 1;
        c.gpu_layers = 0;
    });
    loads_and_generates(
        smallest.clone(),
        &[GenerationMode::Normal, GenerationMode::Lookup],
    );
    let mut with_heads = smallest;
    with_heads.heads_path = Some(heads());
    loads_and_generates(with_heads, &[GenerationMode::Medusa]);
}

#[test]
fn batch_sizes_under_the_largest_batch_of_outputs_load_with_and_without_heads() {
    for batch_size in [32, 64, 128] {
        loads_and_generates(
            config(|c| c.batch_size = batch_size),
            &[GenerationMode::Normal],
        );
    }
    loads_and_generates(
        config(|c| {
            c.batch_size = 32;
            c.heads_path = Some(heads());
        }),
        &[GenerationMode::Medusa],
    );
}

#[test]
fn the_most_requests_fit_the_smallest_context_and_batch() {
    loads_and_generates(
        config(|c| {
            c.parallel = 64;
            c.ctx_size = Some(16);
            c.batch_size = 1;
        }),
        &[GenerationMode::Lookup],
    );
}

/// A decode's threads split its rows, never a row's sum: on one thread and on every core, exact
/// mode gives the same tokens and the same hidden states, bit for bit, alone and in Medusa's
/// trees, so a decode's thread count may follow the machine's load without changing a result.
#[test]
fn exact_sums_are_the_same_on_one_thread_and_on_every_core() {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let answers = |threads: usize| {
        let engine = Engine::load(config(|c| {
            c.threads = Some(threads);
            c.parallel = 1;
            c.hidden_states = true;
            c.heads_path = Some(heads());
            c.decode_costs = Some(crate::common::cpu_decode_costs());
        }))
        .expect("model loads");
        assert!(engine.info().exact);
        [GenerationMode::Normal, GenerationMode::Medusa].map(|mode| {
            let prompt = crate::common::chat("Name three rivers and a sea.");
            let summary = run(&engine, greedy(prompt, 24, mode).with_hidden_states());
            let bits: Vec<u32> = summary.hidden_states.iter().map(|x| x.to_bits()).collect();
            (summary.token_ids, bits)
        })
    };
    let one = answers(1);
    let every = answers(cores.max(2));
    for (mode, (one, every)) in ["normal", "medusa"].iter().zip(one.iter().zip(&every)) {
        assert!(!one.0.is_empty(), "{mode}");
        assert_eq!(one.0, every.0, "{mode}: tokens");
        assert!(one.1 == every.1, "{mode}: hidden states differ");
    }
}
