//! Reading an OpenAI-compatible stream: each `data:` chunk's text, and at the end the run's
//! summary from what the stream said (usage, llama-server's `timings`) and what was measured here.

use std::time::Instant;

use engine::{tokens_per_second as per_second, GenerateRequest, RunSummary, StopReason};
use openai_wire::{StreamChunk, Timings, Usage};

/// What went wrong with a chunk, in our words (the chunk's own text is never passed on).
#[derive(Debug, PartialEq)]
pub(crate) enum ChunkError {
    /// Not JSON of a completion chunk.
    Malformed(String),
    /// The engine sent an error in the stream: its numeric code, if any, as " (code N)".
    Reported(String),
}

/// The answer as it streams in.
pub(crate) struct Answer {
    started_at: Instant,
    first_text_at: Option<Instant>,
    text: String,
    text_chunks: usize,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    timings: Option<Timings>,
}

impl Answer {
    /// `started_at`: when the request was sent, from which the times are measured.
    pub(crate) fn new(started_at: Instant) -> Self {
        Self {
            started_at,
            first_text_at: None,
            text: String::new(),
            text_chunks: 0,
            finish_reason: None,
            usage: None,
            timings: None,
        }
    }

    /// Reads one chunk's data; its new text, if any.
    pub(crate) fn read(&mut self, data: &str) -> Result<Option<String>, ChunkError> {
        let chunk: StreamChunk = serde_json::from_str(data)
            .map_err(|err| ChunkError::Malformed(format!("a chunk {}", json_fault(&err))))?;
        if chunk.error.is_some() {
            return Err(ChunkError::Reported(error_code(&chunk)));
        }
        self.usage = chunk.usage.or(self.usage);
        self.timings = chunk.timings.or(self.timings);
        if let Some(reason) = chunk.finish_reason() {
            self.finish_reason = Some(reason.to_owned());
        }
        let new_text = chunk.text();
        if new_text.is_empty() {
            return Ok(None);
        }
        self.first_text_at.get_or_insert_with(Instant::now);
        self.text_chunks += 1;
        self.text.push_str(&new_text);
        Ok(Some(new_text))
    }

    /// The run's summary. Times are this side's; counts are the engine's where it reported them
    /// (else each text chunk counts as one token); drafting is what its `timings` said.
    pub(crate) fn summary(self, request: &GenerateRequest, cancelled: bool) -> RunSummary {
        let total_ms = ms_between(self.started_at, Instant::now());
        let ttft_ms = self
            .first_text_at
            .map_or(total_ms, |at| ms_between(self.started_at, at));
        let usage = self.usage;
        let tokens = usage
            .and_then(|u| u.completion_tokens)
            .unwrap_or(self.text_chunks);
        let draft_tokens = self.timings.and_then(|t| t.draft_n);
        let accepted = self.timings.and_then(|t| t.draft_n_accepted);
        // Each step yields the model's own token plus the draft tokens it accepted.
        let steps = tokens.saturating_sub(accepted.unwrap_or(0)).max(1);
        let stop_reason = match (cancelled, self.finish_reason.as_deref()) {
            (true, _) => StopReason::Cancelled,
            (false, Some("length")) => StopReason::MaxTokens,
            _ => StopReason::EndOfGeneration,
        };
        RunSummary {
            text: self.text,
            prompt_tokens: usage.and_then(|u| u.prompt_tokens).unwrap_or(0),
            cached_prompt_tokens: self
                .timings
                .and_then(|t| t.cache_n)
                .or_else(|| usage?.prompt_tokens_details?.cached_tokens)
                .unwrap_or(0),
            tokens_generated: tokens,
            queue_ms: 0.0,
            ttft_ms,
            total_ms,
            tokens_per_second: per_second(tokens, total_ms),
            decode_tokens_per_second: per_second(tokens.saturating_sub(1), total_ms - ttft_ms),
            stop_reason,
            seed: request.sampling.seed.unwrap_or(0),
            token_ids: Vec::new(),
            logprobs: Vec::new(),
            mode: request.mode,
            steps: if tokens == 0 { 0 } else { steps },
            mean_accepted: if tokens == 0 {
                0.0
            } else {
                tokens as f64 / steps as f64
            },
            acceptance_by_depth: Vec::new(),
            draft_tokens,
            accepted_draft_tokens: accepted,
            draft_ms: 0.0,
            verify_ms: 0.0,
            hidden_states: Vec::new(),
        }
    }
}

/// The numeric code of a chunk's `error` member (`{"code": 503, ...}`), as " (code 503)", when
/// it is an HTTP-like status; else nothing. Its message is the remote's text, which is not passed
/// on.
fn error_code(chunk: &StreamChunk) -> String {
    chunk
        .error_status()
        .map_or_else(String::new, |code| format!(" (code {code})"))
}

/// What is wrong with a JSON text, in our words: serde's own messages quote the text.
pub(crate) fn json_fault(err: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match err.classify() {
        Category::Data => "is JSON of another shape",
        Category::Syntax | Category::Eof => "is not JSON",
        Category::Io => "could not be read",
    };
    format!("{what} (line {}, column {})", err.line(), err.column())
}

fn ms_between(from: Instant, to: Instant) -> f64 {
    to.duration_since(from).as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use engine::{GenerationMode, Prompt};

    use super::*;

    fn request() -> GenerateRequest {
        let mut request = GenerateRequest::new(Prompt::Text("Hi".into()), 8);
        request.mode = GenerationMode::Lookup;
        request.sampling.seed = Some(7);
        request
    }

    #[test]
    fn chat_and_text_chunks_give_their_text_and_the_summary_takes_the_reports() {
        let mut answer = Answer::new(Instant::now());
        let chunks = [
            r#"{"choices":[{"delta":{"role":"assistant"}}]}"#,
            r#"{"choices":[{"delta":{"content":"Hel"}}]}"#,
            r#"{"choices":[{"text":"lo","finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":8},"timings":{"cache_n":2,"draft_n":6,"draft_n_accepted":4}}"#,
        ];
        let texts: Vec<Option<String>> = chunks.iter().map(|c| answer.read(c).unwrap()).collect();
        assert_eq!(
            texts,
            [None, Some("Hel".into()), Some("lo".into()), None, None]
        );
        let summary = answer.summary(&request(), false);
        assert_eq!(summary.text, "Hello");
        assert_eq!(summary.tokens_generated, 8);
        assert_eq!(summary.prompt_tokens, 5);
        assert_eq!(summary.cached_prompt_tokens, 2);
        assert_eq!(summary.stop_reason, StopReason::MaxTokens);
        assert_eq!(summary.draft_tokens, Some(6));
        assert_eq!(summary.accepted_draft_tokens, Some(4));
        // 8 tokens, 4 of them accepted drafts: 4 steps of 2.
        assert_eq!(summary.steps, 4);
        assert_eq!(summary.mean_accepted, 2.0);
        assert_eq!(summary.mode, GenerationMode::Lookup);
        assert_eq!(summary.seed, 7);
        assert!(summary.ttft_ms <= summary.total_ms);
    }

    #[test]
    fn without_reports_each_text_chunk_is_a_token_and_nothing_was_drafted() {
        let mut answer = Answer::new(Instant::now());
        for chunk in [
            r#"{"choices":[{"delta":{"content":"a"}}]}"#,
            r#"{"choices":[{"delta":{"content":"b"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}}"#,
        ] {
            answer.read(chunk).unwrap();
        }
        let summary = answer.summary(&request(), false);
        assert_eq!(summary.tokens_generated, 2);
        assert_eq!(summary.cached_prompt_tokens, 1);
        assert_eq!(summary.stop_reason, StopReason::EndOfGeneration);
        assert_eq!(summary.draft_tokens, None);
        assert_eq!(summary.mean_accepted, 1.0);

        let mut cancelled = Answer::new(Instant::now());
        cancelled
            .read(r#"{"choices":[{"text":"x"},{"text":"y"}]}"#)
            .unwrap();
        let summary = cancelled.summary(&request(), true);
        assert_eq!(summary.tokens_generated, 1);
        assert_eq!(summary.text, "xy");
        assert_eq!(summary.stop_reason, StopReason::Cancelled);
    }

    #[test]
    fn errors_in_the_stream_and_malformed_chunks_are_told_apart() {
        let mut answer = Answer::new(Instant::now());
        // The remote's words are not passed on; an HTTP-like code is.
        assert_eq!(
            answer.read(r#"{"error":{"message":"out of memory","code":500}}"#),
            Err(ChunkError::Reported(" (code 500)".into()))
        );
        assert_eq!(
            answer.read(r#"{"error":"Bearer sk-secret"}"#),
            Err(ChunkError::Reported(String::new()))
        );
        match answer.read("<html>sk-secret") {
            Err(ChunkError::Malformed(message)) => {
                assert!(message.contains("is not JSON"), "{message}");
                assert!(!message.contains("sk-secret"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        match answer.read(r#"{"choices":[{"text":["sk-secret"]}]}"#) {
            Err(ChunkError::Malformed(message)) => {
                assert!(message.contains("another shape"), "{message}");
                assert!(!message.contains("sk-secret"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            answer.read(r#"{"choices":"many"}"#),
            Err(ChunkError::Malformed(_))
        ));
    }
}
