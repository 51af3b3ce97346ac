//! A run's events as the UI receives them, over HTTP (server-sent events) and IPC alike.

use engine::{GenerationEvent, RunSummary, StepEvent, TokenId, TokenLogprobs, TokenSource};
use serde::Serialize;
use ts_rs::TS;

use crate::error::AppError;

/// One event of a run, `{"type": ..., ...}`. A run sends `started`, then `text` and (in the
/// speculative modes) `step` events, and ends with `finished` or `failed`.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    Started {
        run_id: i64,
        prompt_tokens: usize,
    },
    /// New text; `sources` says, per token of `token_ids`, who proposed it.
    Text {
        text: String,
        token_ids: Vec<TokenId>,
        sources: Vec<TokenSource>,
        /// Per token, when the run asked for log-probabilities.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        logprobs: Option<Vec<TokenLogprobs>>,
    },
    /// One speculative step (medusa and lookup modes only).
    Step(StepEvent),
    Finished(FinishedEvent),
    Failed {
        run_id: i64,
        code: String,
        message: String,
    },
}

/// The run's summary, with its id.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct FinishedEvent {
    pub run_id: i64,
    #[serde(flatten)]
    pub summary: RunSummary,
}

impl RunEvent {
    pub fn new(run_id: i64, event: GenerationEvent) -> Self {
        match event {
            GenerationEvent::Started { prompt_tokens } => Self::Started {
                run_id,
                prompt_tokens,
            },
            GenerationEvent::Text {
                text,
                token_ids,
                sources,
                logprobs,
            } => Self::Text {
                text,
                token_ids,
                sources,
                logprobs: (!logprobs.is_empty()).then_some(logprobs),
            },
            GenerationEvent::Step(step) => Self::Step(step),
            GenerationEvent::Finished(summary) => Self::Finished(FinishedEvent { run_id, summary }),
            GenerationEvent::Failed(err) => Self::failed(run_id, &AppError::from(err)),
        }
    }

    pub fn failed(run_id: i64, err: &AppError) -> Self {
        let body = err.body();
        Self::Failed {
            run_id,
            code: body.code,
            message: body.message,
        }
    }

    /// Whether this event ends the run.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Finished(_) | Self::Failed { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_their_type_and_run() {
        let started = RunEvent::new(3, GenerationEvent::Started { prompt_tokens: 5 });
        assert_eq!(
            serde_json::to_value(&started).unwrap(),
            serde_json::json!({"type": "started", "run_id": 3, "prompt_tokens": 5})
        );
        let text = RunEvent::new(
            3,
            GenerationEvent::Text {
                text: "Hi".into(),
                token_ids: vec![1, 2],
                sources: vec![TokenSource::Base, TokenSource::Head(0)],
                logprobs: Vec::new(),
            },
        );
        assert_eq!(
            serde_json::to_value(&text).unwrap(),
            serde_json::json!({"type": "text", "text": "Hi", "token_ids": [1, 2],
                               "sources": ["model", "medusa_head_0"]})
        );
        let failed = RunEvent::new(3, GenerationEvent::Failed(engine::EngineError::EmptyPrompt));
        assert!(failed.is_terminal());
        assert_eq!(
            serde_json::to_value(&failed).unwrap(),
            serde_json::json!({"type": "failed", "run_id": 3, "code": "empty_prompt",
                               "message": "the prompt is empty"})
        );
        assert!(!text.is_terminal());
    }
}
