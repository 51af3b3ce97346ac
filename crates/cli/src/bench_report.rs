//! `medusa bench`'s report: each mode's figures against normal decoding and the bare llama.cpp
//! loop, the prompt cache's, the plan and the machine, as JSON or a table.

use std::path::PathBuf;

use engine::medusa::plan::MedusaPlan;
use engine::speculative::costs::DecodeCosts;
use engine::speculative::outlook::DraftingOutlook;
use engine::{GenerationMode, StepProfile};
use serde::Serialize;
use store::Spread;

#[derive(Serialize)]
pub(crate) struct ModeResult {
    pub(crate) mode: GenerationMode,
    pub(crate) concurrency: usize,
    pub(crate) tokens_per_second: f64,
    pub(crate) ttft_ms: f64,
    pub(crate) tokens_generated: usize,
    pub(crate) total_ms: f64,
    pub(crate) runs: usize,
    /// Tokens per decode step, the base model's own included (normal = 1.0).
    pub(crate) mean_accepted: f64,
    /// Per drafted depth, the share of steps whose token there was accepted.
    pub(crate) acceptance_by_depth: Vec<f64>,
    /// This mode's tokens/s over normal mode's, measured in the same run.
    pub(crate) speedup_vs_normal: f64,
    /// Tokens/s of each round (all prompts once).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) round_tokens_per_second: Vec<f64>,
    /// The median and range over rounds of this mode's tokens/s over normal's in the same round.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) round_speedup: Option<Spread>,
    /// Runs whose tokens equal normal mode's exactly (greedy; with `--no-exact`, near-ties may
    /// differ).
    pub(crate) outputs_identical_to_normal: usize,
    /// For concurrency above 1: aggregate tokens/s of the same requests run one after another.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sequential_tokens_per_second: Option<f64>,
    /// For concurrency above 1: aggregate tokens/s together over one after another.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) throughput_vs_sequential: Option<f64>,
    /// One stream: where this mode's decoding steps spent their time, summed over its runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) step_profile: Option<StepProfile>,
}

#[derive(Serialize)]
pub(crate) struct BaselineResult {
    pub(crate) name: &'static str,
    pub(crate) tokens_per_second: f64,
    pub(crate) ttft_ms: f64,
    pub(crate) tokens_generated: usize,
    pub(crate) total_ms: f64,
}

#[derive(Serialize)]
pub(crate) struct BenchReport {
    pub(crate) model: String,
    pub(crate) model_path: PathBuf,
    pub(crate) model_file_type: String,
    pub(crate) threads: usize,
    pub(crate) cpu: String,
    /// The CPU kernels decodes of several tokens ran with, and their instruction set.
    pub(crate) cpu_kernels: engine::CpuKernels,
    pub(crate) cpu_instruction_set: String,
    pub(crate) prompts: usize,
    pub(crate) rounds: u32,
    pub(crate) max_tokens: u32,
    /// Prompts answered before measuring, for lookup's memory (`--remember`).
    pub(crate) remembered_prompts: usize,
    pub(crate) results: Vec<ModeResult>,
    pub(crate) baseline: BaselineResult,
    /// Normal-mode tokens/s over the baseline's: 1.0 means no engine overhead.
    pub(crate) normal_vs_baseline: f64,
    /// Runs whose greedy tokens equal the baseline's exactly.
    pub(crate) outputs_identical: usize,
    /// Decode time (ms) by tokens per batch on this machine, behind the draft budget; measured
    /// when a speculative mode runs.
    pub(crate) decode_costs: Option<DecodeCosts>,
    /// How Medusa mode's tree was settled, with its predicted speed-up, when Medusa ran.
    pub(crate) medusa_plan: Option<MedusaPlan>,
    /// A follow-up turn of each conversation, its prompt read whole and with the prompt cache.
    pub(crate) prompt_cache: PromptCacheResult,
    /// Whether drafting can pay for this model here, and why.
    pub(crate) outlook: Option<DraftingOutlook>,
}

/// A second turn of every bench conversation, normal mode, greedy: once with its prompt read
/// whole (`cache_prompt: false`) and once reusing the first turn's cells, in alternating order.
#[derive(Serialize)]
pub(crate) struct PromptCacheResult {
    pub(crate) follow_ups: usize,
    /// Mean prompt tokens of a follow-up, and how many of them the cache held.
    pub(crate) prompt_tokens: f64,
    pub(crate) cached_prompt_tokens: f64,
    pub(crate) ttft_ms_cold: f64,
    pub(crate) ttft_ms_cached: f64,
    pub(crate) cached_over_cold: f64,
    /// Follow-ups whose greedy tokens were the same both ways.
    pub(crate) outputs_identical: usize,
}

pub(crate) fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned())
}

pub(crate) fn print_table(r: &BenchReport) {
    println!(
        "model    {} ({}), {} threads, {}",
        r.model, r.model_file_type, r.threads, r.cpu
    );
    println!(
        "kernels  {} ({})",
        r.cpu_kernels.describe(),
        r.cpu_instruction_set
    );
    println!(
        "prompts  {} x {} rounds, {} max tokens, greedy",
        r.prompts, r.rounds, r.max_tokens
    );
    if r.remembered_prompts > 0 {
        println!(
            "memory   lookup remembers the answers to {} other prompts",
            r.remembered_prompts
        );
    }
    println!(
        "{:<28} {:>9} {:>9} {:>8} {:>10} {:>9} {:>10}",
        "", "tok/s", "TTFT ms", "tokens", "tok/step", "speed-up", "identical"
    );
    for m in &r.results {
        let vs_sequential = m.throughput_vs_sequential.map_or_else(String::new, |x| {
            format!("  {x:.2}x the same requests one after another")
        });
        // With several rounds, how far the speed-up moved between them: what one run is worth.
        let spread = m
            .round_speedup
            .filter(|s| s.count > 1)
            .map_or_else(String::new, |s| {
                format!(
                    "  rounds {:.2}x-{:.2}x, median {:.2}x",
                    s.min, s.max, s.median
                )
            });
        println!(
            "{:<28} {:>9.1} {:>9.1} {:>8} {:>10.2} {:>8.2}x {:>7}/{}{vs_sequential}{spread}",
            format!("{} (concurrency {})", m.mode, m.concurrency),
            m.tokens_per_second,
            m.ttft_ms,
            m.tokens_generated,
            m.mean_accepted,
            m.speedup_vs_normal,
            m.outputs_identical_to_normal,
            m.runs
        );
    }
    println!(
        "{:<28} {:>9.1} {:>9.1} {:>8}",
        r.baseline.name,
        r.baseline.tokens_per_second,
        r.baseline.ttft_ms,
        r.baseline.tokens_generated
    );
    println!(
        "normal / baseline = {:.3}; identical outputs {}/{}",
        r.normal_vs_baseline, r.outputs_identical, r.results[0].runs
    );
    for m in r.results.iter() {
        if let Some(profile) = m.step_profile.filter(|p| p.steps > 0) {
            println!("{} steps: {}", m.mode, profile.summary());
        }
    }
    if let Some(costs) = &r.decode_costs {
        println!("decode costs: {}", costs.summary());
    }
    if let Some(plan) = &r.medusa_plan {
        println!("medusa plan: {}", plan.decision);
        let measured = r
            .results
            .iter()
            .find(|m| m.mode == GenerationMode::Medusa && m.concurrency == 1);
        if let (Some(predicted), Some(measured)) = (plan.predicted_speedup, measured) {
            println!(
                "medusa speed-up: predicted {predicted:.2}x, measured {:.2}x ({:+.1}%)",
                measured.speedup_vs_normal,
                (measured.speedup_vs_normal / predicted - 1.0) * 100.0
            );
        }
    }
    let cache = &r.prompt_cache;
    println!(
        "prompt cache: {} follow-ups of {:.0} prompt tokens ({:.0} cached): first token after {:.1} ms read whole, {:.1} ms cached ({:.2}x); identical {}/{}",
        cache.follow_ups,
        cache.prompt_tokens,
        cache.cached_prompt_tokens,
        cache.ttft_ms_cold,
        cache.ttft_ms_cached,
        cache.cached_over_cold,
        cache.outputs_identical,
        cache.follow_ups
    );
    if let Some(outlook) = &r.outlook {
        println!("drafting here: {}", outlook.explanation);
        println!("model size: {}", outlook.model_size);
        if let Some(note) = &outlook.format_note {
            println!("hint: {note}");
        }
    }
}
