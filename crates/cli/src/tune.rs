//! `medusa tune`: measures how often the loaded heads guess right and what decodes cost on this
//! machine, then builds the tree that maximises tokens per second, or says that plain decoding
//! is faster here.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use engine::tuning::{tune_engine, TuneOptions, TuneReport};

use crate::bench_args::load_prompts;
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
    /// Write the tree of the rank paths most often right on these prompts (`--max-nodes`
    /// nodes) here, for `--tree FILE`.
    #[arg(long, value_name = "FILE")]
    pub counted_out: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: TuneArgs) -> anyhow::Result<()> {
    let options = TuneOptions {
        prompts: load_prompts(args.prompts.as_ref())?,
        max_tokens: args.max_tokens,
        top_k: args.top_k,
        max_nodes: args.max_nodes,
    };
    let config = args.model.config()?;
    anyhow::ensure!(
        config.heads_path.is_some(),
        "tuning needs Medusa heads: pass --heads FILE (or set MEDUSA_HEADS)"
    );
    let engine = engine::Engine::load(config)?;
    let report = tune_engine(&engine, &options, |done, total| {
        if !args.json {
            eprint!("\rmeasuring the heads: prompt {done}/{total}");
        }
    })?;
    if !args.json {
        eprintln!();
    }
    let write_tree = |path: &PathBuf, tree: &Vec<Vec<usize>>| {
        std::fs::write(path, serde_json::to_string(tree)?)
            .with_context(|| format!("writing {}", path.display()))
    };
    if let (Some(path), Some(chosen)) = (&args.out, &report.chosen) {
        write_tree(path, &chosen.tree)?;
    }
    if let (Some(path), Some(counted)) = (&args.counted_out, &report.counted_tree) {
        write_tree(path, &counted.tree)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report, args.out.as_ref());
    }
    Ok(())
}

fn print_table(report: &TuneReport, out: Option<&PathBuf>) {
    let top1: Vec<String> = report
        .head_top1_accuracy
        .iter()
        .enumerate()
        .map(|(k, a)| format!("head {}: {:.1}%", k + 1, a * 100.0))
        .collect();
    println!("top-1 accuracy  {}", top1.join(", "));
    println!(
        "heads cost      {:.2} ms per head per step; plain decoding {:.1} tokens/s",
        report.ms_per_head, report.plain_tokens_per_second
    );
    println!("decode costs    {}", report.decode_costs.summary());
    // "tokens/step" assumes heads are right independently, as the tree builder does;
    // "measured" is what the same tree would have yielded on these prompts.
    println!(
        "{:>6} {:>6} {:>12} {:>9} {:>10} {:>12} {:>9}",
        "nodes", "depth", "tokens/step", "measured", "step ms", "tokens/s", "speed-up"
    );
    let chosen_nodes = report.chosen.as_ref().map(|c| c.nodes);
    for (size, measured) in report.budgets.iter().zip(&report.measured_tokens_per_step) {
        // Every size up to 8, then powers of two, and the chosen one.
        let chosen = chosen_nodes == Some(size.nodes);
        if size.nodes <= 8 || size.nodes.is_power_of_two() || chosen {
            let mark = if chosen { "  <- chosen" } else { "" };
            println!(
                "{:>6} {:>6} {:>12.3} {:>9.3} {:>10.2} {:>12.1} {:>8.2}x{mark}",
                size.nodes,
                size.depth,
                size.expected_tokens,
                measured,
                size.step_ms,
                size.tokens_per_second,
                size.predicted_speedup
            );
        }
    }
    if let Some(reference) = &report.reference_tree {
        println!(
            "{} ({} nodes): {:.3} tokens per step measured on these prompts",
            reference.name, reference.nodes, reference.measured_tokens_per_step
        );
    }
    if let Some(counted) = &report.counted_tree {
        let cross_checked = counted
            .cross_checked_tokens_per_step
            .map_or_else(String::new, |t| {
                format!("; {t:.3} counted on half the prompts and measured on the other half")
            });
        println!(
            "most accepted paths ({} nodes, depth {}): {:.3} tokens per step measured on these prompts{cross_checked}",
            counted.nodes, counted.depth, counted.measured_tokens_per_step
        );
    }
    match (&report.chosen, out) {
        (None, _) => println!(
            "No tree is faster than plain decoding here: Medusa mode decodes plainly with heads \
             that record their accuracy, and drafts little with a given tree."
        ),
        (Some(chosen), Some(path)) => println!(
            "Chosen: {} nodes; written to {} (use --tree {})",
            chosen.nodes,
            path.display(),
            path.display()
        ),
        (Some(chosen), None) => {
            println!("Chosen: {} nodes (--out FILE saves it)", chosen.nodes)
        }
    }
}
