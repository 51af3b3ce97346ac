//! Sampling fields that the seed and OpenAI request bodies share.

use std::collections::BTreeMap;

use engine::{LogitBias, SamplingParams};
use playground::AppError;
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
    presence_penalty: Option<f32>,
    #[serde(default)]
    frequency_penalty: Option<f32>,
    /// OpenAI's: token id (as text) to the bias added to its logit.
    #[serde(default)]
    logit_bias: Option<BTreeMap<String, f32>>,
    #[serde(default)]
    seed: Option<u64>,
}

impl SamplingFields {
    pub fn temperature(&self) -> Option<f32> {
        self.temperature
    }

    pub fn top_p(&self) -> Option<f32> {
        self.top_p
    }

    /// `defaults` with the fields the request gave; a logit bias key that is not a token id is
    /// refused (the engine checks the ranges).
    pub fn over(&self, defaults: SamplingParams) -> Result<SamplingParams, AppError> {
        let logit_bias = self
            .logit_bias
            .iter()
            .flatten()
            .map(|(token, &bias)| match token.trim().parse() {
                Ok(token) => Ok(LogitBias { token, bias }),
                Err(_) => Err(AppError::invalid_parameter(format!(
                    "logit_bias keys are token ids, got {token:?}"
                ))
                .with_param("logit_bias")),
            })
            .collect::<Result<_, _>>()?;
        Ok(SamplingParams {
            temperature: self.temperature.unwrap_or(defaults.temperature),
            top_k: self.top_k.unwrap_or(defaults.top_k),
            top_p: self.top_p.unwrap_or(defaults.top_p),
            min_p: self.min_p.unwrap_or(defaults.min_p),
            repeat_penalty: self.repeat_penalty.unwrap_or(defaults.repeat_penalty),
            repeat_last_n: self.repeat_last_n.unwrap_or(defaults.repeat_last_n),
            presence_penalty: self.presence_penalty.unwrap_or(defaults.presence_penalty),
            frequency_penalty: self.frequency_penalty.unwrap_or(defaults.frequency_penalty),
            logit_bias,
            seed: self.seed,
        })
    }
}
