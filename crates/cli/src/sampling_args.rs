//! The sampling flags (temperature, top-k, top-p, min-p, repeat penalty, seed) that the
//! commands which generate share.

use clap::Args;
use engine::SamplingParams;

/// Sampling flags; those not given take the command's defaults (see [`SamplingArgs::params`]).
// Negative numbers parse, so that they get the range error rather than clap's "unexpected
// argument".
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 means greedy.
    #[arg(long, allow_negative_numbers = true)]
    pub temperature: Option<f32>,
    /// Keep only the k most likely tokens (0: off).
    #[arg(long, allow_negative_numbers = true)]
    pub top_k: Option<u32>,
    /// Keep the smallest set of tokens whose probability reaches p (1: off).
    #[arg(long, allow_negative_numbers = true)]
    pub top_p: Option<f32>,
    /// Drop tokens less likely than this fraction of the best one (0: off).
    #[arg(long, allow_negative_numbers = true)]
    pub min_p: Option<f32>,
    /// Penalise recently used tokens (1: off).
    #[arg(long, allow_negative_numbers = true)]
    pub repeat_penalty: Option<f32>,
    /// Seed for reproducible sampling.
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// The flags given, over `defaults`.
    pub fn params(&self, defaults: &SamplingParams) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature.unwrap_or(defaults.temperature),
            top_k: self.top_k.unwrap_or(defaults.top_k),
            top_p: self.top_p.unwrap_or(defaults.top_p),
            min_p: self.min_p.unwrap_or(defaults.min_p),
            repeat_penalty: self.repeat_penalty.unwrap_or(defaults.repeat_penalty),
            seed: self.seed.or(defaults.seed),
            ..defaults.clone()
        }
    }
}
