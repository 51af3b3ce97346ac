//! `medusa train-heads`: trains Medusa heads for a GGUF model on its own answers and writes a
//! heads file that records its held-out accuracy and a tree built from it.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use training::{
    load_prompts, train_heads, CollectEvent, Evaluation, TrainEvent, TrainHeadsOptions,
    TrainProgress, TrainReport,
};

use crate::figures::percents;
use crate::model_args::fetch_default;

#[derive(Args, Debug)]
pub struct TrainHeadsArgs {
    /// GGUF model file (default: the default model, fetched on first use).
    #[arg(long, short = 'm', env = "MEDUSA_MODEL")]
    pub model: Option<PathBuf>,
    /// Where to write the heads (`*.medusa.gguf`).
    #[arg(long)]
    pub out: PathBuf,
    /// Number of heads (head k guesses the token k + 2 ahead).
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    /// Residual blocks per head.
    #[arg(long, default_value_t = 1)]
    pub layers: usize,
    /// Heads also read the root token, the base model's own next token (`false`: only its
    /// hidden state, as in the Medusa paper).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub root_input: bool,
    /// Heads also read the tokens drafted between the root and the one they guess (Hydra-style
    /// sequentially dependent heads): each node's children are drafted knowing its whole path,
    /// at one head evaluation per node that has children instead of one per depth.
    #[arg(long)]
    pub path_input: bool,
    /// Prompts for the model to answer, one per line (default: the project's prompt set).
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// Use only the first N prompts.
    #[arg(long)]
    pub samples: Option<usize>,
    /// Tokens the model writes per answer.
    #[arg(long, short = 'n', default_value_t = 256)]
    pub max_tokens: u32,
    #[arg(long, default_value_t = 3)]
    pub epochs: usize,
    /// Positions per optimizer step.
    #[arg(long, default_value_t = 256)]
    pub batch_size: usize,
    /// Peak learning rate (AdamW, warm-up then cosine decay).
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    #[arg(long, default_value_t = 0.0)]
    pub weight_decay: f64,
    /// Let the heads propose only the N most frequent tokens of the answers (cheaper heads).
    #[arg(long)]
    pub vocab_subset: Option<usize>,
    /// Keep the collected data in this file, and train from it instead of collecting again
    /// when it exists (to compare settings on the same data). A collection stopped part-way
    /// (Ctrl-C, a crash) continues from the answers kept beside it (`*.partial`).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Hold out every Nth answer for evaluation.
    #[arg(long, default_value_t = 10)]
    pub heldout_every: usize,
    /// Nodes of the token tree stored with the heads.
    #[arg(long, default_value_t = 16)]
    pub tree_nodes: usize,
    /// Threads for decoding and training (default: one per core).
    #[arg(long, short = 't')]
    pub threads: Option<usize>,
    /// Answers generated together while collecting data.
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: TrainHeadsArgs) -> anyhow::Result<()> {
    let model_path = match &args.model {
        Some(path) => path.clone(),
        None => fetch_default()?,
    };
    let mut options = TrainHeadsOptions::new(model_path, &args.out);
    options.prompts = load_prompts(args.prompts.as_deref())?;
    options.samples = args.samples;
    options.heads = args.heads;
    options.layers = args.layers;
    options.root_input = args.root_input;
    options.path_input = args.path_input;
    options.max_tokens = args.max_tokens;
    options.epochs = args.epochs;
    options.batch_size = args.batch_size;
    options.learning_rate = args.lr;
    options.weight_decay = args.weight_decay;
    options.vocab_subset = args.vocab_subset;
    options.data = args.data.clone();
    options.heldout_every = args.heldout_every;
    options.tree_nodes = args.tree_nodes;
    options.threads = args.threads;
    options.parallel = args.parallel;
    options.seed = args.seed;
    options.command = std::iter::once("medusa".to_owned())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let mut bar = ProgressBar::new();
    let report = train_heads(&options, &mut |event| bar.show(&event))?;
    bar.finish();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

/// One status line on stderr: the stage, how far it is, the loss and the time left.
struct ProgressBar {
    live: bool,
    stage_started: Instant,
    stage: &'static str,
    last_draw: Option<Instant>,
}

impl ProgressBar {
    fn new() -> Self {
        Self {
            live: std::io::stderr().is_terminal(),
            stage_started: Instant::now(),
            stage: "",
            last_draw: None,
        }
    }

    fn enter(&mut self, stage: &'static str) {
        if self.stage != stage {
            if self.live && !self.stage.is_empty() {
                eprintln!();
            }
            self.stage = stage;
            self.stage_started = Instant::now();
            if !self.live {
                eprintln!("{stage}...");
            }
        }
    }

    fn draw(&mut self, done: usize, total: usize, detail: String) {
        let finished = done >= total;
        if !self.live
            || (!finished
                && self
                    .last_draw
                    .is_some_and(|t| t.elapsed().as_millis() < 200))
        {
            return;
        }
        self.last_draw = Some(Instant::now());
        let share = done as f64 / total.max(1) as f64;
        let filled = (share * 24.0).round() as usize;
        let elapsed = self.stage_started.elapsed().as_secs_f64();
        let eta = if done == 0 {
            "?".to_owned()
        } else {
            duration(elapsed / share - elapsed)
        };
        eprint!(
            "\r\x1b[2K{:<10} [{}{}] {done}/{total} {detail} ETA {eta}",
            self.stage,
            "#".repeat(filled),
            "-".repeat(24 - filled)
        );
    }

    fn show(&mut self, event: &TrainProgress) {
        match event {
            TrainProgress::LoadingModel => self.enter("loading"),
            TrainProgress::LoadedData { texts, positions } => {
                self.line(&format!("read {texts} texts, {positions} positions"));
            }
            TrainProgress::Collect(CollectEvent {
                done,
                total,
                tokens,
            }) => {
                self.enter("answering");
                self.draw(*done, *total, format!("{tokens} tokens"));
            }
            TrainProgress::Baseline(evaluation) => {
                self.enter("training");
                self.line(&format!("untrained: {}", summary(evaluation)));
            }
            TrainProgress::Train(TrainEvent::Step {
                epoch,
                step,
                steps,
                loss,
                learning_rate,
                ..
            }) => {
                self.enter("training");
                self.draw(
                    *step,
                    *steps,
                    format!("epoch {epoch} loss {loss:.3} lr {learning_rate:.1e}"),
                );
            }
            TrainProgress::Train(TrainEvent::Evaluated {
                epoch, evaluation, ..
            }) => {
                self.line(&format!("epoch {epoch}: {}", summary(evaluation)));
            }
            TrainProgress::Writing => self.enter("writing"),
        }
    }

    /// A line that stays, above the live one.
    fn line(&self, text: &str) {
        if self.live {
            eprint!("\r\x1b[2K");
        }
        eprintln!("{text}");
    }

    fn finish(&self) {
        if self.live {
            eprintln!();
        }
    }
}

fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Shares as percentages with one decimal, joined by slashes (one per head).
fn summary(evaluation: &Evaluation) -> String {
    format!(
        "held-out loss {:.3}, top-1 % {}, top-5 % {}",
        evaluation.loss,
        percents(&evaluation.top1),
        percents(&evaluation.top5)
    )
}

fn print_report(report: &TrainReport) {
    println!(
        "data        {} prompts, {} tokens written; {} training and {} held-out positions",
        report.prompts, report.generated_tokens, report.train_positions, report.heldout_positions
    );
    println!(
        "vocabulary  {} tokens ({:.1}% of held-out targets)",
        report.vocabulary_rows,
        report.heldout_coverage * 100.0
    );
    println!("untrained   {}", summary(&report.untrained));
    println!("trained     {}", summary(&report.trained));
    println!(
        "tree        {} nodes, {:.2} tokens per step expected: {:?}",
        report.tree.len(),
        report.expected_tokens_per_step,
        report.tree
    );
    println!(
        "time        {} collecting, {} training",
        duration(report.collect_seconds),
        duration(report.train_seconds)
    );
    println!(
        "wrote       {} ({} bytes)",
        report.out.display(),
        report.file_bytes
    );
}
