//! `medusa tune`: measures how often the loaded heads guess right and what decodes cost on this
//! machine, then builds the tree that maximises tokens per second, or says that plain decoding
//! is faster here.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use engine::medusa::accuracy::HeadAccuracy;
use engine::speculative::budget::CostModel;
use engine::speculative::tree_builder::{tune, TuneResult};
use engine::{ChatMessage, GenerateRequest, Prompt, SamplingParams};
use serde_json::json;

use crate::bench::load_prompts;
use crate::model_args::ModelArgs;

#[derive(Args, Debug)]
pub struct TuneArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompts the model answers to measure the heads on, one per line (default: the bench set).
    /// Use prompts the heads were not trained on.
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// Tokens the model writes per prompt.
    #[arg(long, short = 'n', default_value_t = 128)]
    pub max_tokens: u32,
    /// Candidates per head measured (the widest a tree may branch).
    #[arg(long, default_value_t = 10)]
    pub top_k: usize,
    /// Largest tree considered, in nodes.
    #[arg(long, default_value_t = 64)]
    pub max_nodes: usize,
    /// Write the chosen tree (Medusa choices, JSON) here, for `--tree FILE`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: TuneArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.model.heads.is_some(),
        "tuning needs Medusa heads: pass --heads FILE (or set MEDUSA_HEADS)"
    );
    anyhow::ensure!(
        (1..=engine::speculative::tree::MAX_RANK).contains(&args.top_k),
        "--top-k must be between 1 and {}",
        engine::speculative::tree::MAX_RANK
    );
    anyhow::ensure!(
        (1..=256).contains(&args.max_nodes),
        "--max-nodes must be between 1 and 256"
    );
    let prompts = load_prompts(args.prompts.as_ref())?;
    let engine = args.model.load()?;
    let heads = engine.info().heads.as_ref().map_or(0, |h| h.head_count);
    let mut accuracy = HeadAccuracy::new(heads, args.top_k);
    for (i, text) in prompts.iter().enumerate() {
        if !args.json {
            eprint!("\rmeasuring the heads: prompt {}/{}", i + 1, prompts.len());
        }
        let prompt = Prompt::Chat(vec![ChatMessage::new("user", text.as_str())]);
        // The model's own greedy answer is what the heads must predict.
        let answer = engine
            .generate(
                GenerateRequest::new(prompt.clone(), args.max_tokens)
                    .with_sampling(SamplingParams::greedy()),
            )?
            .wait()?;
        let measured = engine
            .measure_heads(prompt, answer.token_ids, args.top_k)
            .with_context(|| format!("measuring the heads on prompt {}", i + 1))?;
        accuracy.absorb(&measured);
    }
    if !args.json {
        eprintln!();
    }
    let costs = engine.decode_costs()?;
    let result = tune(
        &accuracy.table()?,
        &CostModel::new(costs.clone()),
        accuracy.mean_head_ms(),
        args.max_nodes,
    );
    if let (Some(path), Some(built)) = (&args.out, result.chosen_tree()) {
        std::fs::write(path, serde_json::to_string(built.tree.paths())?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report(&accuracy, &costs, &result))?
        );
    } else {
        print_table(&accuracy, &result, args.out.as_ref());
    }
    Ok(())
}

fn report(
    accuracy: &HeadAccuracy,
    costs: &[(usize, f64)],
    result: &TuneResult,
) -> serde_json::Value {
    let chosen = result.chosen.map(|i| {
        let size = &result.sizes[i];
        json!({
            "nodes": size.nodes,
            "expected_tokens_per_step": size.expected_tokens,
            "predicted_speedup": size.predicted_speedup,
            "tree": result.trees[i].tree.paths(),
        })
    });
    json!({
        "decode_ms_by_tokens": costs,
        "ms_per_head": accuracy.mean_head_ms(),
        "positions": accuracy.positions,
        "head_top1_accuracy": accuracy.top1(),
        "head_accuracy_by_rank": accuracy.rates(),
        "plain_tokens_per_second": result.plain_tokens_per_second,
        "budgets": result.sizes,
        "chosen": chosen,
        "decision": if chosen.is_some() { "medusa" } else { "plain decoding: no tree is faster on this machine" },
    })
}

fn print_table(accuracy: &HeadAccuracy, result: &TuneResult, out: Option<&PathBuf>) {
    let top1: Vec<String> = accuracy
        .top1()
        .iter()
        .enumerate()
        .map(|(k, a)| format!("head {}: {:.1}%", k + 1, a * 100.0))
        .collect();
    println!("top-1 accuracy  {}", top1.join(", "));
    println!(
        "heads cost      {:.2} ms per head per step; plain decoding {:.1} tokens/s",
        accuracy.mean_head_ms(),
        result.plain_tokens_per_second
    );
    println!(
        "{:>6} {:>6} {:>12} {:>10} {:>12} {:>9}",
        "nodes", "depth", "tokens/step", "step ms", "tokens/s", "speed-up"
    );
    for (i, size) in result.sizes.iter().enumerate() {
        // Every size up to 8, then powers of two, and the chosen one.
        if size.nodes <= 8 || size.nodes.is_power_of_two() || result.chosen == Some(i) {
            let mark = if result.chosen == Some(i) {
                "  <- chosen"
            } else {
                ""
            };
            println!(
                "{:>6} {:>6} {:>12.3} {:>10.2} {:>12.1} {:>8.2}x{mark}",
                size.nodes,
                size.depth,
                size.expected_tokens,
                size.step_ms,
                size.tokens_per_second,
                size.predicted_speedup
            );
        }
    }
    match (result.chosen_tree(), out) {
        (None, _) => {
            println!("No tree is faster than plain decoding here: Medusa mode will barely draft.")
        }
        (Some(built), Some(path)) => println!(
            "Chosen: {} nodes; written to {} (use --tree {})",
            built.tree.len(),
            path.display(),
            path.display()
        ),
        (Some(built), None) => println!("Chosen: {} nodes (--out FILE saves it)", built.tree.len()),
    }
}
