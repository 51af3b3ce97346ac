//! `medusa train-drafter`: trains a feature-level drafter (one decoder layer, EAGLE-style) on
//! answers collected by `medusa train-heads --data`, and reports the trees it grows along
//! held-out answers.

use std::path::PathBuf;

use clap::Args;
use training::{
    train_feature_drafter, FeatureProgress, FeatureReport, FeatureTrainOptions, StopFlag,
    TreeMeasure,
};

use crate::figures::percents;
use crate::model_args::fetch_default;

#[derive(Args, Debug)]
pub struct TrainDrafterArgs {
    /// GGUF model file (default: the default model, fetched on first use).
    #[arg(long, short = 'm', env = "MEDUSA_MODEL")]
    model: Option<PathBuf>,
    /// Where to write the drafter (`*.feature.gguf`).
    #[arg(long)]
    out: PathBuf,
    /// Answers the model wrote, with its hidden states (a data file of `medusa train-heads
    /// --data`).
    #[arg(long)]
    data: PathBuf,
    /// Further answers to measure the trees on, e.g. of prompts no training saw.
    #[arg(long)]
    eval_data: Option<PathBuf>,
    /// Recent positions the drafter's attention reads besides the drafted path.
    #[arg(long, default_value_t = 8)]
    window: usize,
    /// Levels unrolled on the drafter's own predictions in training (training-time test).
    #[arg(long, default_value_t = 4)]
    levels: usize,
    #[arg(long, default_value_t = 2)]
    epochs: usize,
    /// Answers per optimizer step.
    #[arg(long, default_value_t = 4)]
    batch_answers: usize,
    /// Peak learning rate (AdamW, warm-up then cosine decay).
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    #[arg(long, default_value_t = 0.0)]
    weight_decay: f64,
    /// Let the drafter propose only the N most frequent tokens of the answers.
    #[arg(long, default_value_t = 8192)]
    vocab_subset: usize,
    /// Hold out every Nth answer for evaluation.
    #[arg(long, default_value_t = 10)]
    heldout_every: usize,
    /// Tree sizes measured along the held-out answers, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,16,64")]
    tree_sizes: Vec<usize>,
    /// Held-out answers the trees are grown along (each position grows a whole tree).
    #[arg(long, default_value_t = 24)]
    measured_answers: usize,
    /// Threads for measuring the trees (default: one per core).
    #[arg(long, short = 't')]
    threads: Option<usize>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: TrainDrafterArgs) -> anyhow::Result<()> {
    let model_path = match &args.model {
        Some(path) => path.clone(),
        None => fetch_default()?,
    };
    let options = FeatureTrainOptions {
        model_path,
        out: args.out.clone(),
        data: args.data.clone(),
        eval_data: args.eval_data.clone(),
        window: args.window,
        levels: args.levels,
        epochs: args.epochs,
        batch_answers: args.batch_answers,
        learning_rate: args.lr,
        weight_decay: args.weight_decay,
        vocab_subset: Some(args.vocab_subset),
        heldout_every: args.heldout_every,
        tree_sizes: args.tree_sizes.clone(),
        measured_answers: args.measured_answers,
        threads: args.threads.unwrap_or_else(engine::default_threads),
        seed: args.seed,
        command: std::iter::once("medusa".to_owned())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" "),
        stop: StopFlag::default(),
    };
    let report = train_feature_drafter(&options, &mut show)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

fn show(event: FeatureProgress) {
    match event {
        FeatureProgress::Loaded { answers, positions } => {
            eprintln!("read {answers} answers, {positions} positions");
        }
        FeatureProgress::Step {
            epoch,
            step,
            steps,
            loss,
        } => {
            if step % 50 == 0 || step == steps {
                eprintln!("epoch {epoch}, step {step}/{steps}: loss {loss:.3}");
            }
        }
        FeatureProgress::Evaluated { epoch, evaluation } => eprintln!(
            "after epoch {epoch}: held-out loss {:.3}, top-1 by level {}",
            evaluation.loss,
            percents(&evaluation.top1)
        ),
        FeatureProgress::Measuring { max_nodes } => {
            eprintln!("growing trees of {max_nodes} nodes along the answers...");
        }
    }
}

fn trees(title: &str, measures: &[TreeMeasure]) {
    if measures.is_empty() {
        return;
    }
    println!("{title}:");
    for m in measures {
        println!(
            "  {:>3} nodes: {:.2} tokens per step over {} positions; at least d accepted: {}",
            m.max_nodes,
            m.tokens_per_step,
            m.positions,
            percents(&m.accepted_at_depth)
        );
    }
}

fn print_report(report: &FeatureReport) {
    println!(
        "wrote {} ({:.1} MB): {} answers, {} training and {} held-out positions, {} tokens in its vocabulary, trained in {:.0} s",
        report.out.display(),
        report.file_bytes as f64 / 1e6,
        report.answers,
        report.train_positions,
        report.heldout_positions,
        report.vocabulary_rows,
        report.train_seconds
    );
    println!(
        "held-out top-1 by level: untrained {}, trained {} (loss {:.3} -> {:.3})",
        percents(&report.untrained.top1),
        percents(&report.trained.top1),
        report.untrained.loss,
        report.trained.loss
    );
    trees("trees along the held-out answers", &report.heldout_trees);
    trees("trees along the further answers", &report.eval_trees);
}
