//! The batched CPU kernels (patches/ggml) change what a decode of several tokens costs, never
//! what it computes: a token verified in Medusa's tree of 63 or decoded beside other requests
//! gets the hidden state, bit for bit, that a decode of it alone gives, with the batched kernels
//! and with ggml's stock ones. The batched kernels run with AVX-512 VNNI where the CPU has it and
//! may be held to AVX2: both give the stock bits.

use engine::{CpuKernels, Engine, EngineConfig, GenerationMode, TreeSpec};

use crate::common::{chat, cpu_decode_costs, greedy, model_path};

fn engine(kernels: CpuKernels, parallel: usize) -> Engine {
    let mut config = EngineConfig::new(model_path());
    config.ctx_size = Some(1024);
    config.parallel = parallel;
    config.cpu_kernels = kernels;
    config.hidden_states = true;
    config.heads_path = Some(models::default_heads_path().expect("default heads installed"));
    // Drafted in full at every step: every verifying decode has 63 tokens and more.
    config.tree = Some(TreeSpec::from_name_or_file("mc_sim_7b_63").unwrap());
    config.decode_costs = Some(cpu_decode_costs());
    Engine::load(config).expect("model loads")
}

/// Each prompt's tokens and hidden states, the prompts sent all at once.
fn answers(engine: &Engine, mode: GenerationMode) -> Vec<(Vec<i32>, Vec<u32>)> {
    let prompts = [
        "Name three rivers and a sea.",
        "Count from one to twelve in words.",
        "What is a prime number?",
        "Write a haiku about rain.",
    ];
    let streams: Vec<_> = prompts
        .iter()
        .map(|p| {
            let request = greedy(chat(p), 24, mode).with_hidden_states();
            engine.generate(request).expect("accepted")
        })
        .collect();
    streams
        .into_iter()
        .map(|stream| {
            let summary = stream.wait().expect("finished");
            let bits = summary.hidden_states.iter().map(|x| x.to_bits()).collect();
            (summary.token_ids, bits)
        })
        .collect()
}

#[test]
fn batched_kernels_give_every_token_the_bits_of_a_decode_of_it_alone() {
    // One request at a time, normal mode: every decode holds one token, which no batched
    // kernel touches. This is the reference.
    let alone = answers(&engine(CpuKernels::Stock, 1), GenerationMode::Normal);
    assert!(alone
        .iter()
        .all(|(tokens, bits)| !tokens.is_empty() && !bits.is_empty()));
    for kernels in [
        CpuKernels::Batched,
        CpuKernels::BatchedAvx2,
        CpuKernels::Stock,
    ] {
        let engine = engine(kernels, 4);
        assert_eq!(
            engine.info().cpu_kernels,
            kernels,
            "this build or CPU has no batched kernels (patches/ggml, AVX2 and FMA)"
        );
        let instruction_set = match kernels {
            CpuKernels::Batched if cpu_has_avx512_vnni() => "AVX-512 VNNI",
            _ => "AVX2",
        };
        assert_eq!(
            engine.info().cpu_instruction_set,
            instruction_set,
            "{kernels:?}"
        );
        for mode in [GenerationMode::Normal, GenerationMode::Medusa] {
            let got = answers(&engine, mode);
            for (i, (want, got)) in alone.iter().zip(&got).enumerate() {
                assert_eq!(want.0, got.0, "{kernels:?} {mode} prompt {i}: tokens");
                assert!(
                    want.1 == got.1,
                    "{kernels:?} {mode} prompt {i}: hidden states differ"
                );
            }
        }
    }
}

/// Whether this CPU (and its kernel) offers what the VNNI kernels need.
fn cpu_has_avx512_vnni() -> bool {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = cpuinfo
        .lines()
        .find(|line| line.starts_with("flags"))
        .unwrap_or_default();
    ["avx512_vnni", "avx512vl", "avx512bw"]
        .iter()
        .all(|flag| flags.split_whitespace().any(|f| f == *flag))
}
