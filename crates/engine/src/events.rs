//! What a generation run reports while it runs and when it ends.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::error::EngineError;
use crate::request::GenerationMode;
use crate::sampling::token_choice::TokenLogprobs;
use crate::speculative::tree::TokenSource;
use crate::token::TokenId;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model produced an end-of-generation token.
    EndOfGeneration,
    /// `max_tokens` were generated.
    MaxTokens,
    /// A stop string appeared in the output.
    StopString,
    /// The context window is full.
    ContextFull,
    /// The caller cancelled or went away.
    Cancelled,
}

impl StopReason {
    pub const ALL: [StopReason; 5] = [
        Self::EndOfGeneration,
        Self::MaxTokens,
        Self::StopString,
        Self::ContextFull,
        Self::Cancelled,
    ];

    /// The name on the wire and in the history (the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EndOfGeneration => "end_of_generation",
            Self::MaxTokens => "max_tokens",
            Self::StopString => "stop_string",
            Self::ContextFull => "context_full",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Statistics of one finished run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct RunSummary {
    pub text: String,
    pub prompt_tokens: usize,
    /// Leading prompt tokens whose KV cells came from an earlier request (the prompt cache):
    /// not decoded again.
    pub cached_prompt_tokens: usize,
    pub tokens_generated: usize,
    /// Waiting for a free slot.
    pub queue_ms: f64,
    /// From its turn (a free slot) to the first generated token: reading the prompt. The wait
    /// before it is `queue_ms`.
    pub ttft_ms: f64,
    /// From submission to the end (`queue_ms` included).
    pub total_ms: f64,
    /// Generated tokens over the time the run held a slot.
    pub tokens_per_second: f64,
    /// Tokens after the first over the time after the first: the decode speed alone.
    pub decode_tokens_per_second: f64,
    pub stop_reason: StopReason,
    /// The seed the sampler used, so a sampled run can be repeated.
    pub seed: u64,
    /// The generated token ids, in order.
    pub token_ids: Vec<i32>,
    pub mode: GenerationMode,
    /// Decode steps after the prompt (each yields at least the base model's own token): the
    /// number of step events a speculative run sends. The first token, read with the prompt,
    /// is not one.
    pub steps: usize,
    /// Tokens the steps yielded per step, the base model's own token included: plain decoding
    /// is 1.0 (also when no step ran).
    pub mean_accepted: f64,
    /// For each tree depth d (1-based, index d-1), the share of steps whose tree reached depth d
    /// in which the drafted token at that depth was accepted. Empty in normal mode.
    pub acceptance_by_depth: Vec<f64>,
    /// Drafted tokens on the verified paths (each step's tree depth), and how many of them were
    /// accepted: llama-server's `draft_n` and `draft_n_accepted`. `None` from a remote engine
    /// that does not report them.
    pub draft_tokens: Option<usize>,
    pub accepted_draft_tokens: Option<usize>,
    /// Time spent drafting and verifying (speculative modes).
    pub draft_ms: f64,
    pub verify_ms: f64,
    /// When asked for: per generated token, its log-probability and the most likely tokens at
    /// its place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[ts(as = "Option<Vec<TokenLogprobs>>", optional)]
    pub logprobs: Vec<TokenLogprobs>,
    /// When asked for: per generated token, the final hidden state whose logits produced it
    /// (`n_embd` values each, in order).
    #[serde(skip)]
    pub hidden_states: Vec<f32>,
}

/// One speculative step: what was drafted and what the base model kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct StepEvent {
    /// 1-based: the first step after the prompt is step 1, as the summary's `steps` counts.
    pub index: usize,
    /// Drafted nodes (the root not counted).
    pub tree_size: usize,
    pub tree_depth: usize,
    /// Tokens this step emits, the base model's own included.
    pub accepted_len: usize,
    pub tokens: Vec<TokenId>,
    pub sources: Vec<TokenSource>,
    /// Per depth of the drafted tree: whether its token was accepted.
    pub depth_hits: Vec<bool>,
    pub draft_ms: f64,
    pub verify_ms: f64,
    /// What was drafted, node by node, and what the model made of it.
    pub tree: StepTree,
    /// Why nothing was drafted; `None` when something was.
    pub skip: Option<DraftSkip>,
    /// What the draft budget weighed for this step, where it decided (auto drafting). Boxed:
    /// most events carry none, and every event would otherwise be as large.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub decision: Option<Box<DraftDecision>>,
}

/// Why a step drafted what it did: the figures the draft budget weighed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct DraftDecision {
    /// Tokens the step was expected to yield with what was drafted (1 when nothing was), at
    /// the cautious acceptance rates below.
    pub expected_tokens: f64,
    /// The step's expected time with that draft (drafting included, the decode at the top of
    /// its measured band), and a plain step's time.
    pub step_ms: f64,
    pub plain_ms: f64,
    /// Each drafter's evidence.
    pub evidence: Vec<DrafterEvidence>,
}

/// What a drafter's acceptance rate in a step rested on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct DrafterEvidence {
    pub drafter: String,
    /// The evidence class of its proposal (lookup: by the length of its match).
    pub class: usize,
    /// Drafted tokens judged in that class so far, and how many were accepted.
    pub accepted: u32,
    pub tried: u32,
    /// The lower confidence bound of the acceptance rate the budget planned with.
    pub cautious_rate: f64,
    /// Tokens it could propose, and how many the budget drafted.
    pub proposed: usize,
    pub drafted: usize,
}

/// A token and its text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct StepToken {
    pub token: TokenId,
    pub text: String,
}

/// A step's drafted tree as the model judged it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct StepTree {
    /// The token the tree hangs from (the last one emitted before the step).
    pub root: StepToken,
    /// Parents come before their children.
    pub nodes: Vec<DraftNode>,
    /// The model's own token after the accepted path: at the first rejection, the token it chose
    /// instead of the drafted ones.
    pub model_token: StepToken,
}

/// One drafted token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct DraftNode {
    pub token: TokenId,
    pub text: String,
    /// Index of its parent in the step's `nodes`; `None` hangs from the root.
    pub parent: Option<usize>,
    pub source: TokenSource,
    /// Rank among its proposer's guesses: 0 is a head's top-1; for lookup, which earlier match.
    pub rank: usize,
    /// A second drafter that guessed the same token here (auto mode merges their trees).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub also_proposed_by: Option<TokenSource>,
    pub accepted: bool,
}

/// Why a speculative step drafted nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct DraftSkip {
    pub reason: DraftSkipReason,
    /// The reason in words, with the budget's figures where it weighed costs.
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum DraftSkipReason {
    /// Auto drafting: no draft was expected to pay for itself on this machine.
    NotWorthIt,
    /// Auto drafting before decode costs were measured.
    CostsUnknown,
    /// The drafter had no guess (no heads' input, no earlier text matching).
    NoCandidates,
    /// No room: the context is full or the run is one token from its end.
    NoRoom,
}

impl DraftSkipReason {
    /// The serde name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotWorthIt => "not_worth_it",
            Self::CostsUnknown => "costs_unknown",
            Self::NoCandidates => "no_candidates",
            Self::NoRoom => "no_room",
        }
    }
}

impl DraftSkip {
    pub fn new(reason: DraftSkipReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum GenerationEvent {
    /// The prompt was accepted; generation begins.
    Started {
        prompt_tokens: usize,
    },
    /// New text. `text` never splits a UTF-8 character and never contains a stop string.
    /// `sources` says, per token, whether the base model or a drafter proposed it.
    Text {
        text: String,
        token_ids: Vec<TokenId>,
        sources: Vec<TokenSource>,
        /// Per token, when the request asked for log-probabilities; else empty.
        logprobs: Vec<TokenLogprobs>,
    },
    /// A speculative step finished (not sent in normal mode).
    Step(StepEvent),
    Finished(RunSummary),
    Failed(EngineError),
}

impl RunSummary {
    /// Percent of drafted tokens accepted; `None` when nothing was drafted (or not reported).
    pub fn acceptance_rate(&self) -> Option<f64> {
        let drafted = self.draft_tokens.filter(|&n| n > 0)?;
        let accepted = self.accepted_draft_tokens.unwrap_or(0);
        Some(100.0 * accepted as f64 / drafted as f64)
    }
}

/// `tokens` over `ms` milliseconds, per second; 0 for no time.
pub fn tokens_per_second(tokens: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        tokens as f64 * 1000.0 / ms
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_reason_names_are_the_serde_names() {
        let reasons = [
            DraftSkipReason::NotWorthIt,
            DraftSkipReason::CostsUnknown,
            DraftSkipReason::NoCandidates,
            DraftSkipReason::NoRoom,
        ];
        for reason in reasons {
            assert_eq!(
                serde_json::to_value(reason).unwrap(),
                serde_json::Value::from(reason.as_str())
            );
        }
    }

    #[test]
    fn stop_reason_names_are_the_serde_names() {
        for reason in StopReason::ALL {
            assert_eq!(
                serde_json::to_value(reason).unwrap(),
                serde_json::Value::from(reason.as_str())
            );
        }
    }
}
