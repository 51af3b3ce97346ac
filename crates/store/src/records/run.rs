//! A run as it goes into the store and comes out: its prompt, model, settings, outcome and status.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::step::{StepRecord, TokenLogprobRecord};
use crate::error::StoreError;

/// The model a run used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct ModelRef {
    pub name: String,
    pub path: String,
    /// Weight format, e.g. `Q4_1`.
    pub file_type: String,
    /// A fingerprint of the file (hash or similar); empty when unknown.
    #[serde(default)]
    pub identity: String,
}

/// The Medusa heads a run used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct HeadsRef {
    pub path: String,
    #[serde(default)]
    pub identity: String,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct MessageRecord {
    #[ts(type = "'system' | 'user' | 'assistant'")]
    pub role: String,
    pub content: String,
}

impl MessageRecord {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// The prompt of a run: raw text to continue, or chat messages for the model's template.
///
/// Serialised as `{"kind":"text","content":"..."}` or
/// `{"kind":"chat","content":[{"role":"user","content":"..."}]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(tag = "kind", content = "content", rename_all = "snake_case")]
pub enum PromptRecord {
    Text(String),
    Chat(Vec<MessageRecord>),
}

impl PromptRecord {
    /// The text a person would recognise the prompt by: the plain text, or the last user message
    /// of a chat (the last message of any role when no user spoke).
    pub fn display_text(&self) -> &str {
        match self {
            Self::Text(text) => text,
            Self::Chat(messages) => messages
                .iter()
                .rev()
                .find(|m| m.role == "user")
                .or_else(|| messages.last())
                .map_or("", |m| m.content.as_str()),
        }
    }
}

/// A run's place in a conversation: it answers the prompt's last user message, or with
/// `continues`, it extends the prompt's last (assistant) message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConversationTurn {
    pub conversation_id: i64,
    pub continues: bool,
}

/// Everything known about a run when it starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewRun {
    /// Identity across databases: export and import deduplicate on it.
    pub uid: Uuid,
    pub created_at: DateTime<Utc>,
    /// `normal`, `medusa` or `lookup`; comparisons treat `normal` as the baseline.
    pub mode: String,
    pub model: ModelRef,
    pub heads: Option<HeadsRef>,
    /// The draft model that drafted beside the model, in draft and auto modes.
    #[serde(default)]
    pub draft_model: Option<ModelRef>,
    /// The draft tree as the caller describes it (a name or rank paths).
    pub tree: Option<serde_json::Value>,
    pub prompt: PromptRecord,
    /// All sampling parameters, as the caller serialises them.
    pub sampling: serde_json::Value,
    pub max_tokens: u32,
    pub stop: Vec<String>,
    pub comparison_id: Option<i64>,
    /// The conversation this run answers, if any (linked in the store, not part of the run).
    #[serde(skip)]
    pub conversation: Option<ConversationTurn>,
    /// Time spent waiting in the queue before the run started.
    pub queue_ms: Option<f64>,
    /// The remote engine that ran it, by name; `None`: the playground's own model.
    pub engine: Option<String>,
}

impl NewRun {
    /// A run created now with a fresh uid and no heads, tree, stop strings or comparison.
    pub fn new(
        mode: impl Into<String>,
        model: ModelRef,
        prompt: PromptRecord,
        sampling: serde_json::Value,
        max_tokens: u32,
    ) -> Self {
        Self {
            uid: Uuid::new_v4(),
            created_at: Utc::now(),
            mode: mode.into(),
            model,
            heads: None,
            draft_model: None,
            tree: None,
            prompt,
            sampling,
            max_tokens,
            stop: Vec::new(),
            comparison_id: None,
            conversation: None,
            queue_ms: None,
            engine: None,
        }
    }
}

/// What a run produced, written when it ends (or, for a cancelled run, what it had so far).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOutcome {
    pub output: String,
    pub stop_reason: String,
    pub prompt_tokens: i64,
    pub tokens_generated: i64,
    /// Waiting for a free slot before the run's turn; `None` where the engine did not say.
    #[serde(default)]
    pub queue_ms: Option<f64>,
    /// From the run's turn to its first token.
    pub ttft_ms: f64,
    pub total_ms: f64,
    pub tokens_per_second: f64,
    /// Tokens after the first over the time after the first: the decode speed alone.
    pub decode_tokens_per_second: f64,
    pub steps: i64,
    /// Tokens emitted per step, the model's own included (1.0 in normal mode).
    pub mean_accepted: f64,
    /// Acceptance rate per tree depth.
    pub acceptance_by_depth: Vec<f64>,
    /// Drafted tokens on the verified paths and those accepted; `None` when a remote engine did
    /// not report them.
    pub draft_tokens: Option<i64>,
    pub accepted_draft_tokens: Option<i64>,
    /// The generated token ids, in order; `None` when the engine gave none (a remote engine).
    #[serde(default)]
    pub token_ids: Option<Vec<i32>>,
    /// Each generated token's log-probability, when the run asked for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<TokenLogprobRecord>>,
    pub seed: u64,
    pub finished_at: DateTime<Utc>,
}

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Finished,
    Failed,
    Cancelled,
    /// The process ended while the run was still going.
    Interrupted,
}

impl RunStatus {
    pub const ALL: [RunStatus; 5] = [
        Self::Running,
        Self::Finished,
        Self::Failed,
        Self::Cancelled,
        Self::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Finished => "finished",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Interrupted => "interrupted",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunStatus {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| {
                StoreError::invalid(format!(
                    "unknown run status {s:?} (expected running, finished, failed, cancelled or interrupted)"
                ))
            })
    }
}

/// A stored run: every field the history lists ([`ListedRun`], flattened into the same JSON
/// object) with its per-token arrays. It reads as a `ListedRun` through `Deref`, so that the
/// fields have one definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
#[ts(rename = "RunRecord")]
pub struct Run {
    #[serde(flatten)]
    #[ts(flatten)]
    pub listed: ListedRun,
    /// The generated token ids, in order: the playground's own runs recorded since they were
    /// kept.
    #[serde(default)]
    pub token_ids: Option<Vec<i32>>,
    /// Each generated token's log-probability and the likeliest tokens at its place, kept only
    /// for runs that asked for them (rows stay small otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub logprobs: Option<Vec<TokenLogprobRecord>>,
}

impl std::ops::Deref for Run {
    type Target = ListedRun;

    fn deref(&self) -> &ListedRun {
        &self.listed
    }
}

impl std::ops::DerefMut for Run {
    fn deref_mut(&mut self) -> &mut ListedRun {
        &mut self.listed
    }
}

impl Run {
    /// A run that has just begun: the fields of `new`, no outcome yet.
    pub(crate) fn running(id: i64, new: &NewRun) -> Self {
        Self {
            listed: ListedRun {
                id,
                uid: new.uid,
                status: RunStatus::Running,
                created_at: new.created_at,
                mode: new.mode.clone(),
                model: new.model.clone(),
                heads: new.heads.clone(),
                draft_model: new.draft_model.clone(),
                tree: new.tree.clone(),
                prompt: new.prompt.clone(),
                sampling: new.sampling.clone(),
                max_tokens: new.max_tokens,
                stop: new.stop.clone(),
                comparison_id: new.comparison_id,
                queue_ms: new.queue_ms,
                engine: new.engine.clone(),
                output: None,
                stop_reason: None,
                prompt_tokens: None,
                tokens_generated: None,
                ttft_ms: None,
                total_ms: None,
                tokens_per_second: None,
                decode_tokens_per_second: None,
                steps: None,
                mean_accepted: None,
                acceptance_by_depth: None,
                draft_tokens: None,
                accepted_draft_tokens: None,
                seed: None,
                error: None,
                finished_at: None,
            },
            token_ids: None,
            logprobs: None,
        }
    }

    /// The outcome, when every outcome field is present.
    pub fn outcome(&self) -> Option<RunOutcome> {
        Some(RunOutcome {
            output: self.output.clone()?,
            stop_reason: self.stop_reason.clone()?,
            prompt_tokens: self.prompt_tokens?,
            tokens_generated: self.tokens_generated?,
            queue_ms: self.queue_ms,
            ttft_ms: self.ttft_ms?,
            total_ms: self.total_ms?,
            tokens_per_second: self.tokens_per_second?,
            decode_tokens_per_second: self.decode_tokens_per_second?,
            steps: self.steps?,
            mean_accepted: self.mean_accepted?,
            acceptance_by_depth: self.acceptance_by_depth.clone()?,
            draft_tokens: self.draft_tokens,
            accepted_draft_tokens: self.accepted_draft_tokens,
            token_ids: self.token_ids.clone(),
            logprobs: self.logprobs.clone(),
            seed: self.seed?,
            finished_at: self.finished_at?,
        })
    }
}

/// A run as the history lists it: every field of a [`Run`] but its per-token arrays
/// (`token_ids`, `logprobs`), which only the run's own record and the export carry. A run may
/// hold millions of tokens, so a page of a listing would otherwise weigh hundreds of megabytes.
/// Outcome fields are `None` until the run finishes (and stay `None` for runs that failed or
/// were interrupted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct ListedRun {
    /// Local id: differs between databases, unlike `uid`.
    pub id: i64,
    pub uid: Uuid,
    pub status: RunStatus,
    pub created_at: DateTime<Utc>,
    pub mode: String,
    pub model: ModelRef,
    pub heads: Option<HeadsRef>,
    /// The draft model that drafted beside the model, in draft and auto modes. Exports made
    /// before draft models lack it.
    #[serde(default)]
    pub draft_model: Option<ModelRef>,
    pub tree: Option<serde_json::Value>,
    pub prompt: PromptRecord,
    pub sampling: serde_json::Value,
    pub max_tokens: u32,
    pub stop: Vec<String>,
    pub comparison_id: Option<i64>,
    pub queue_ms: Option<f64>,
    /// The remote engine that ran it, by name; `None`: the playground's own model. Exports made
    /// before remote engines lack it.
    #[serde(default)]
    pub engine: Option<String>,
    pub output: Option<String>,
    pub stop_reason: Option<String>,
    pub prompt_tokens: Option<i64>,
    pub tokens_generated: Option<i64>,
    pub ttft_ms: Option<f64>,
    pub total_ms: Option<f64>,
    pub tokens_per_second: Option<f64>,
    /// Exports made before it was kept lack it; their import derives it.
    #[serde(default)]
    pub decode_tokens_per_second: Option<f64>,
    pub steps: Option<i64>,
    pub mean_accepted: Option<f64>,
    // Exports made before the rename call it `acceptance_by_head`.
    #[serde(alias = "acceptance_by_head")]
    pub acceptance_by_depth: Option<Vec<f64>>,
    /// Drafted tokens on the verified paths and those accepted (llama-server's `draft_n` and
    /// `draft_n_accepted`); a remote engine's own report for its runs.
    #[serde(default)]
    pub draft_tokens: Option<i64>,
    #[serde(default)]
    pub accepted_draft_tokens: Option<i64>,
    pub seed: Option<u64>,
    pub error: Option<String>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl ListedRun {
    /// Leaves reading the prompt out of the step count and tokens per step, as runs recorded
    /// before export version 2 counted it (the rule migration 0013 applied to stored rows).
    pub fn count_steps_after_the_prompt(&mut self) {
        let Some(steps) = self.steps.filter(|&steps| steps >= 1) else {
            return;
        };
        self.mean_accepted = self.mean_accepted.map(|mean| {
            if steps > 1 {
                (mean * steps as f64 - 1.0) / (steps - 1) as f64
            } else {
                1.0
            }
        });
        self.steps = Some(steps - 1);
    }

    /// Tokens after the first over the time after the first, from the stored counts and times
    /// (the rule migration 0004 applied to older rows).
    pub fn derived_decode_rate(&self) -> Option<f64> {
        let (tokens, ttft, total) = (self.tokens_generated?, self.ttft_ms?, self.total_ms?);
        (tokens > 1 && total > ttft).then(|| (tokens - 1) as f64 * 1000.0 / (total - ttft))
    }

    /// The whole run: these fields with its per-token arrays.
    pub fn with_tokens(
        self,
        token_ids: Option<Vec<i32>>,
        logprobs: Option<Vec<TokenLogprobRecord>>,
    ) -> Run {
        Run {
            listed: self,
            token_ids,
            logprobs,
        }
    }
}

impl From<Run> for ListedRun {
    fn from(run: Run) -> Self {
        run.listed
    }
}

/// A run together with its steps, in step order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct RunWithSteps {
    pub run: Run,
    pub steps: Vec<StepRecord>,
}

#[cfg(test)]
mod tests;
