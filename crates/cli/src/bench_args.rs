//! `medusa bench`'s options and the prompts and modes they select, shared by the local bench and
//! the bench of a running server (`--endpoint`).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use engine::{DraftPolicy, GenerateRequest, GenerationMode};

use crate::model_args::ModelArgs;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// File with one prompt per line, each run as a chat message (default: a built-in set of 8).
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// Tokens to generate per prompt.
    #[arg(long, short = 'n', default_value_t = 128)]
    pub max_tokens: u32,
    /// How many times to run the prompt set.
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
    /// Modes to compare, comma-separated (normal always runs: speed-ups are against it).
    #[arg(long, value_delimiter = ',', default_value = "normal")]
    pub modes: Vec<GenerationMode>,
    /// Most drafted tokens per step in speculative modes.
    #[arg(long)]
    pub max_draft: Option<usize>,
    /// Lookup mode drafts this many tokens at every step that finds a match, whatever they
    /// cost (default: as many as pay here).
    #[arg(long, value_name = "N")]
    pub draft_length: Option<usize>,
    /// Concurrent streams to measure, comma-separated: for each N above 1, N requests run
    /// together and the same N one after another, in the same run.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub concurrency: Vec<usize>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Bench a running OpenAI-compatible server (another `medusa serve`, llama-server, vLLM)
    /// at this URL instead of a model here: the same prompts, rounds and report.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// The endpoint's API key (also `MEDUSA_REMOTE_API_KEY`).
    #[arg(
        long,
        env = "MEDUSA_REMOTE_API_KEY",
        hide_env_values = true,
        requires = "endpoint"
    )]
    pub api_key: Option<String>,
}

impl BenchArgs {
    /// The request with the draft the flags ask for: `--tree` for Medusa, `--draft-length` for
    /// lookup.
    pub fn with_drafts(&self, request: GenerateRequest) -> GenerateRequest {
        let mut request = self.model.with_default_draft(request);
        if let (GenerationMode::Lookup, Some(n)) = (request.mode, self.draft_length) {
            request.draft = DraftPolicy::Length(n);
        }
        request
    }
}

/// The modes to run, normal first: every speed-up is measured against it.
pub fn modes_with_normal_first(requested: &[GenerationMode]) -> Vec<GenerationMode> {
    let mut modes = vec![GenerationMode::Normal];
    for &mode in requested {
        if !modes.contains(&mode) {
            modes.push(mode);
        }
    }
    modes
}

/// The prompts of `file`, one per line, or the built-in set.
pub fn load_prompts(file: Option<&PathBuf>) -> anyhow::Result<Vec<String>> {
    let prompts: Vec<String> = match file {
        None => engine::tuning::DEFAULT_PROMPTS
            .iter()
            .map(|s| s.to_string())
            .collect(),
        Some(path) => engine::tuning::prompt_lines(
            &std::fs::read_to_string(path)
                .with_context(|| format!("reading prompts from {}", path.display()))?,
        ),
    };
    anyhow::ensure!(!prompts.is_empty(), "the prompt file has no prompts");
    Ok(prompts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_runs_first_and_each_mode_once() {
        let requested = [
            GenerationMode::Auto,
            GenerationMode::Normal,
            GenerationMode::Lookup,
            GenerationMode::Auto,
        ];
        assert_eq!(
            modes_with_normal_first(&requested),
            [
                GenerationMode::Normal,
                GenerationMode::Auto,
                GenerationMode::Lookup
            ]
        );
    }
}
