//! Any engine's stream chunk as a client reads it: chat deltas or completion text, and at the
//! end usage and timings, each optional since engines differ; or an error in the stream.

use serde::Deserialize;

use crate::usage::{Timings, Usage};

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamChunk {
    #[serde(default)]
    pub choices: Vec<StreamChoice>,
    #[serde(default)]
    pub usage: Option<Usage>,
    #[serde(default)]
    pub timings: Option<Timings>,
    /// An error reported mid-stream, in whatever shape the engine sends it.
    #[serde(default)]
    pub error: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamChoice {
    /// Chat completions.
    #[serde(default)]
    pub delta: Option<StreamDelta>,
    /// Text completions.
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamDelta {
    #[serde(default)]
    pub content: Option<String>,
}

impl StreamChunk {
    /// The text this chunk adds, over all its choices.
    pub fn text(&self) -> String {
        self.choices
            .iter()
            .filter_map(|choice| {
                choice
                    .delta
                    .as_ref()
                    .and_then(|d| d.content.as_deref())
                    .or(choice.text.as_deref())
            })
            .collect()
    }

    /// The finish reason of the last choice that gives one.
    pub fn finish_reason(&self) -> Option<&str> {
        self.choices
            .iter()
            .rev()
            .find_map(|choice| choice.finish_reason.as_deref())
    }

    /// The numeric code of the error member (`{"code": 503, ...}`) when it is an HTTP-like
    /// status.
    pub fn error_status(&self) -> Option<u16> {
        let code = self.error.as_ref()?.as_object()?.get("code")?.as_u64()?;
        (100..=599)
            .contains(&code)
            .then(|| u16::try_from(code).ok())
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(json: &str) -> StreamChunk {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn chat_and_text_chunks_give_their_text() {
        assert_eq!(
            chunk(r#"{"choices":[{"delta":{"content":"Hel"}}]}"#).text(),
            "Hel"
        );
        assert_eq!(
            chunk(r#"{"choices":[{"text":"lo"},{"text":"!"}]}"#).text(),
            "lo!"
        );
        assert_eq!(
            chunk(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#).text(),
            ""
        );
        let last = chunk(r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#);
        assert_eq!(last.finish_reason(), Some("length"));
    }

    #[test]
    fn only_http_like_error_codes_are_read() {
        assert_eq!(chunk(r#"{"error":{"code":503}}"#).error_status(), Some(503));
        assert_eq!(chunk(r#"{"error":{"code":42}}"#).error_status(), None);
        assert_eq!(chunk(r#"{"error":"text"}"#).error_status(), None);
        assert_eq!(chunk(r#"{"choices":[]}"#).error_status(), None);
    }
}
