//! Token counts (OpenAI's `usage`) and llama-server's `timings`. Every count is optional when
//! read, since engines differ in what they report; this server always writes them all.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: Option<usize>,
    #[serde(default)]
    pub completion_tokens: Option<usize>,
    #[serde(default)]
    pub total_tokens: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

impl Usage {
    /// A run's counts: prompt tokens (`cached` of them reused from the prompt cache) and
    /// generated ones.
    pub fn counted(prompt: usize, completion: usize, cached: usize) -> Self {
        Self {
            prompt_tokens: Some(prompt),
            completion_tokens: Some(completion),
            total_tokens: Some(prompt + completion),
            prompt_tokens_details: Some(PromptTokensDetails {
                cached_tokens: Some(cached),
            }),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    #[serde(default)]
    pub cached_tokens: Option<usize>,
}

/// llama-server's `timings`: prompt tokens decoded (cached ones apart, in `cache_n`) and the time
/// to the first token after the queue; tokens generated, the time from the first to the last and
/// the decode speed; drafted tokens on the verified paths and how many were accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    #[serde(default)]
    pub cache_n: Option<usize>,
    #[serde(default)]
    pub prompt_n: Option<usize>,
    #[serde(default)]
    pub prompt_ms: Option<f64>,
    #[serde(default)]
    pub prompt_per_second: Option<f64>,
    #[serde(default)]
    pub predicted_n: Option<usize>,
    #[serde(default)]
    pub predicted_ms: Option<f64>,
    #[serde(default)]
    pub predicted_per_second: Option<f64>,
    #[serde(default)]
    pub draft_n: Option<usize>,
    #[serde(default)]
    pub draft_n_accepted: Option<usize>,
}
