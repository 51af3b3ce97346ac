//! Sampling fields that the seed and OpenAI request bodies share.

use engine::SamplingParams;
use serde::Deserialize;

/// Each field is optional; an absent one takes the endpoint's default.
#[derive(Debug, Default, Deserialize)]
pub struct SamplingFields {
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_k: Option<u32>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    min_p: Option<f32>,
    #[serde(default)]
    repeat_penalty: Option<f32>,
    #[serde(default)]
    repeat_last_n: Option<usize>,
    #[serde(default)]
    seed: Option<u64>,
}

impl SamplingFields {
    /// `defaults` with the fields the request gave.
    pub fn over(&self, defaults: SamplingParams) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature.unwrap_or(defaults.temperature),
            top_k: self.top_k.unwrap_or(defaults.top_k),
            top_p: self.top_p.unwrap_or(defaults.top_p),
            min_p: self.min_p.unwrap_or(defaults.min_p),
            repeat_penalty: self.repeat_penalty.unwrap_or(defaults.repeat_penalty),
            repeat_last_n: self.repeat_last_n.unwrap_or(defaults.repeat_last_n),
            seed: self.seed,
        }
    }
}
