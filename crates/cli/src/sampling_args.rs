use clap::Args;
use engine::SamplingParams;

// Negative numbers parse, so that they get the range error rather than clap's "unexpected
// argument".
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 means greedy.
    #[arg(long, allow_negative_numbers = true, default_value_t = SamplingParams::default().temperature)]
    pub temperature: f32,
    /// Keep only the k most likely tokens (0: off).
    #[arg(long, allow_negative_numbers = true, default_value_t = SamplingParams::default().top_k)]
    pub top_k: u32,
    /// Keep the smallest set of tokens whose probability reaches p (1: off).
    #[arg(long, allow_negative_numbers = true, default_value_t = SamplingParams::default().top_p)]
    pub top_p: f32,
    /// Drop tokens less likely than this fraction of the best one (0: off).
    #[arg(long, allow_negative_numbers = true, default_value_t = SamplingParams::default().min_p)]
    pub min_p: f32,
    /// Penalise recently used tokens (1: off).
    #[arg(long, allow_negative_numbers = true, default_value_t = SamplingParams::default().repeat_penalty)]
    pub repeat_penalty: f32,
    /// Seed for reproducible sampling.
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            seed: self.seed,
            ..SamplingParams::default()
        }
    }
}
