//! What the server answers: a whole completion, or one chunk of a streamed one. Both share one
//! envelope; the choices differ by endpoint and by whether the answer streams.

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
    /// Log-probabilities are not computed: always null.
    pub logprobs: Option<serde_json::Value>,
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

/// A streamed chat completion's choice: what the chunk adds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub logprobs: Option<serde_json::Value>,
    pub finish_reason: Option<String>,
}

/// The role comes with the first chunk only, and the text with those that carry some.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// A text completion's choice, whole or streamed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<serde_json::Value>,
    pub finish_reason: Option<String>,
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
