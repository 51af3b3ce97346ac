//! `medusa make-prompts`: training prompts made without a network (templates over topics,
//! skills, programming tasks, sentences to rewrite and word problems), one per line, for
//! `train-heads --prompts` or a training job.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

#[derive(Args, Debug)]
pub struct MakePromptsArgs {
    /// How many prompts (at most the number of distinct ones the templates make).
    #[arg(long, short = 'n')]
    pub count: usize,
    /// Another seed gives another order (and another choice when fewer than all are asked for).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where to write them (default: standard output).
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
}

pub fn run(args: MakePromptsArgs) -> anyhow::Result<()> {
    let capacity = training::template_capacity();
    if args.count == 0 || args.count > capacity {
        anyhow::bail!(
            "--count must be between 1 and {capacity}, got {}",
            args.count
        );
    }
    let mut text = training::template_prompts(args.count, args.seed).join("\n");
    text.push('\n');
    match &args.out {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?,
        None => std::io::stdout().write_all(text.as_bytes())?,
    }
    Ok(())
}
