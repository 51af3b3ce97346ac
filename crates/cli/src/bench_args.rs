//! `medusa bench`'s options and the prompts and modes they select, shared by the local bench and
//! the bench of a running server (`--endpoint`).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use engine::{DraftPolicy, GenerateRequest, GenerationMode, LookupMemoryUse};

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
    /// Lookup, draft and eagle modes draft this many tokens at every step that has a guess,
    /// whatever they cost (default: as many as pay here). Lookup drafts fewer where its match
    /// runs out, and the draft model's chain ends early at a guess it gives less than 75%.
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
    /// Every answer must follow this JSON schema (a file): structured output's cost, and
    /// drafting under it.
    #[arg(long, value_name = "FILE", conflicts_with = "endpoint")]
    pub json_schema: Option<PathBuf>,
    /// Every answer must follow this GBNF grammar (a file).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["endpoint", "json_schema"])]
    pub grammar: Option<PathBuf>,
    /// The grammar `--json-schema` or `--grammar` gives, once read.
    #[arg(skip)]
    pub output_grammar: Option<String>,
    /// Before measuring, answer every prompt of this file (repeatable; normal decoding, greedy,
    /// as many tokens as the measured runs), so that lookup's memory holds their text as on a
    /// server that has served them. Measured runs read the memory but add nothing to it, so no
    /// run is drafted from another run's answer to the same prompt.
    #[arg(long, value_name = "FILE", conflicts_with = "endpoint")]
    pub remember: Vec<PathBuf>,
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
    /// Reads `--json-schema` or `--grammar` into [`BenchArgs::output_grammar`].
    pub fn read_output_grammar(&mut self) -> anyhow::Result<()> {
        let read = |path: &PathBuf| {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
        };
        self.output_grammar = match (&self.json_schema, &self.grammar) {
            (Some(path), _) => {
                let schema: serde_json::Value = serde_json::from_str(&read(path)?)
                    .with_context(|| format!("{} is not JSON", path.display()))?;
                Some(engine::json_schema_grammar(&schema)?)
            }
            (None, Some(path)) => Some(read(path)?),
            (None, None) => None,
        };
        Ok(())
    }

    /// The request with the draft the flags ask for (`--tree` for Medusa, `--draft-length` for
    /// lookup) and the grammar, if one is given.
    pub fn with_drafts(&self, request: GenerateRequest) -> GenerateRequest {
        let mut request = self.model.with_default_draft(request);
        if let (GenerationMode::Lookup | GenerationMode::Draft | GenerationMode::Eagle, Some(n)) =
            (request.mode, self.draft_length)
        {
            request.draft = DraftPolicy::Length(n);
        }
        request.grammar = self.output_grammar.clone();
        request.lookup_memory = LookupMemoryUse::ReadOnly;
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
