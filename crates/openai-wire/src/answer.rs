//! What the server answers: a whole completion, or one chunk of a streamed one. Both share one
//! envelope; the choices differ by endpoint and by whether the answer streams.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::usage::{Timings, Usage};

/// `object` of a whole chat completion.
pub const CHAT_COMPLETION: &str = "chat.completion";
/// `object` of a streamed chat completion's chunks.
pub const CHAT_COMPLETION_CHUNK: &str = "chat.completion.chunk";
/// `object` of a text completion, whole or streamed.
pub const TEXT_COMPLETION: &str = "text_completion";

/// An answer or a stream chunk, with its choices `C`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion<C> {
    pub id: String,
    pub object: String,
    pub created: i64,
    pub model: String,
    pub system_fingerprint: Option<String>,
    pub choices: Vec<C>,
    /// Absent from chunks unless the client asked for usage; then null in every chunk but the
    /// last, as OpenAI sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
    /// llama-server's figures, on whole answers and on the last chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
    /// Not OpenAI's: the run's id in this server's history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<i64>,
}

/// A whole chat completion's choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChoice {
    pub index: u32,
    pub message: Message,
    /// When asked for.
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<String>,
}

/// The assistant's message: its text, or null when it calls tools instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

/// A call of one of the request's tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// The arguments as JSON text, as OpenAI sends them.
    pub arguments: String,
}

/// A tool call in a stream: `index` says which call of the choice the delta belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallDelta {
    pub index: u32,
    #[serde(flatten)]
    pub call: ToolCall,
}

/// A streamed chat completion's choice: what the chunk adds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<String>,
}

/// The role comes with the first chunk only, and the text with those that carry some.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallDelta>,
}

/// A text completion's choice, whole or streamed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<TextLogprobs>,
    pub finish_reason: Option<String>,
}

/// A chat choice's log-probabilities: one entry per token.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    /// The most likely tokens at this place, most likely first.
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// A text completion's log-probabilities (the legacy shape): parallel lists per token.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TextLogprobs {
    pub tokens: Vec<String>,
    /// Null for the first token of an echoed prompt, which nothing predicts.
    pub token_logprobs: Vec<Option<f32>>,
    /// The most likely tokens at each place, by text; null where `token_logprobs` is.
    pub top_logprobs: Vec<Option<BTreeMap<String, f32>>>,
    /// Where each token starts in the choice's text, in characters.
    pub text_offset: Vec<usize>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn chunk(usage: Option<Option<Usage>>) -> Completion<ChatChunkChoice> {
        Completion {
            id: "chatcmpl-1".into(),
            object: CHAT_COMPLETION_CHUNK.into(),
            created: 7,
            model: "m".into(),
            system_fingerprint: None,
            choices: vec![ChatChunkChoice {
                index: 0,
                delta: Delta {
                    role: None,
                    content: Some("Hi".into()),
                    tool_calls: Vec::new(),
                },
                logprobs: None,
                finish_reason: None,
            }],
            usage,
            timings: None,
            run_id: None,
        }
    }

    #[test]
    fn chunks_carry_usage_only_when_asked_for_and_then_null_until_the_last() {
        assert_eq!(
            serde_json::to_value(chunk(None)).unwrap(),
            json!({
                "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7,
                "model": "m", "system_fingerprint": null,
                "choices": [{"index": 0, "delta": {"content": "Hi"}, "logprobs": null,
                             "finish_reason": null}],
            })
        );
        let asked = serde_json::to_value(chunk(Some(None))).unwrap();
        assert_eq!(asked["usage"], json!(null));
        let usage = Usage::counted(3, 2, 1);
        let last = serde_json::to_value(chunk(Some(Some(usage)))).unwrap();
        assert_eq!(
            last["usage"],
            json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                   "prompt_tokens_details": {"cached_tokens": 1}})
        );
    }
}
