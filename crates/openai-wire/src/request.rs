//! What a client sends to `/v1/chat/completions` or `/v1/completions`: OpenAI's fields, the
//! sampling fields vLLM, SGLang and llama-server take beside them, and `medusa serve`'s own
//! (`mode`, `tree`, `draft_length`); engines ignore the fields they do not know.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    /// Chat completions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<RequestMessage>>,
    /// Text completions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// vLLM's names for going on with the last (assistant) message instead of answering it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continue_final_message: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_generation_prompt: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f32>,
    /// llama-server's repetition penalty (1 disables it) and how many recent tokens it covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_penalty: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_last_n: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f32>,
    /// Token id (as text) to the bias added to its logit.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub logit_bias: BTreeMap<String, f32>,
    /// llama-server's (ours too): GBNF the output must follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grammar: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// `medusa serve`'s: how to decode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `medusa serve`'s: the tree Medusa and auto modes draft, by name or rank paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<TreeField>,
    /// `medusa serve`'s: how many tokens lookup mode drafts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_length: Option<usize>,
    /// llama-server's (ours too): `false` reads the whole prompt, reusing no cached cells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_prompt: Option<bool>,
    /// `medusa serve`'s: `read_only` drafts from lookup's memory of earlier requests without
    /// adding this one, `off` neither (the default, `read_write`, is left unsaid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lookup_memory: Option<String>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestMessage {
    pub role: String,
    pub content: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// A tree by name (`"mc_sim_7b_63"`, `"chain-3"`, `"tuned"`) or by its rank paths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TreeField {
    Name(String),
    Paths(Vec<Vec<usize>>),
}
