//! A run's steps: what was drafted, what was accepted, and why a step drafted nothing.

use serde::{Deserialize, Serialize};

/// A generated token's log-probability (natural log, the served model's own) and the likeliest
/// tokens at its place, most likely first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct TokenLogprobRecord {
    pub token_id: i32,
    pub text: String,
    pub logprob: f32,
    pub top: Vec<TopLogprobRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct TopLogprobRecord {
    pub token_id: i32,
    pub text: String,
    pub logprob: f32,
}

/// One decoding step of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct StepRecord {
    pub step_index: i64,
    pub tree_size: i64,
    pub tree_depth: i64,
    pub accepted_len: i64,
    /// Tokens emitted by this step.
    pub tokens: Vec<i32>,
    /// Who produced each emitted token (`model`, `medusa`, `lookup`, ...).
    pub sources: Vec<String>,
    /// Whether the draft was accepted at each tree depth.
    pub depth_hits: Vec<bool>,
    pub draft_ms: f64,
    pub verify_ms: f64,
    /// What was drafted and what the model made of it; `None` for steps recorded before trees
    /// were kept.
    #[serde(default)]
    pub tree: Option<StepTreeRecord>,
    /// Why the step drafted nothing.
    #[serde(default)]
    pub skip: Option<DraftSkipRecord>,
    /// What the draft budget weighed; absent where no budget decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub decision: Option<DraftDecisionRecord>,
}

/// The figures the draft budget weighed for a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct DraftDecisionRecord {
    /// Tokens the step was expected to yield (1 when nothing was drafted).
    pub expected_tokens: f64,
    /// Expected time of the step with its draft, and of a plain step.
    pub step_ms: f64,
    pub plain_ms: f64,
    pub evidence: Vec<DrafterEvidenceRecord>,
}

/// What one drafter's acceptance rate rested on in a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct DrafterEvidenceRecord {
    pub drafter: String,
    pub class: u32,
    pub accepted: u32,
    pub tried: u32,
    /// The lower confidence bound of its acceptance rate that the budget planned with.
    pub cautious_rate: f64,
    pub proposed: u32,
    pub drafted: u32,
}

/// A token and its text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct StepTokenRecord {
    pub token: i32,
    pub text: String,
}

/// A step's drafted tree as the model judged it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct StepTreeRecord {
    /// The token the tree hangs from.
    pub root: StepTokenRecord,
    /// Parents come before their children.
    pub nodes: Vec<DraftNodeRecord>,
    /// The model's own token after the accepted path.
    pub model_token: StepTokenRecord,
}

/// One drafted token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct DraftNodeRecord {
    pub token: i32,
    pub text: String,
    /// Index of its parent in `nodes`; `None` hangs from the root.
    pub parent: Option<u32>,
    /// Who proposed it (`medusa_head_K`, `lookup`).
    pub source: String,
    /// Rank among its proposer's guesses.
    pub rank: u32,
    /// A second drafter that proposed the same token here (auto mode); absent in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub also_proposed_by: Option<String>,
    pub accepted: bool,
}

/// Why a step drafted nothing: a short code and the reason in words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct DraftSkipRecord {
    pub reason: String,
    pub message: String,
}
