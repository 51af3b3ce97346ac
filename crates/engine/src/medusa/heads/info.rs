//! What heads say about themselves: the base model they were made for, their shape and default
//! tree, how they were trained and where they run.

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::compute::HeadsCompute;
use crate::speculative::tree::TreeSpec;
use crate::speculative::tree_builder::HeadCost;

/// Who the heads were made for: enough to refuse heads of another model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct BaseIdentity {
    pub n_embd: u32,
    pub n_vocab: u32,
    /// SHA-256 over every token's text, in id order.
    pub tokenizer_sha256: String,
}

impl BaseIdentity {
    pub fn of(model: &LlamaModel) -> Self {
        let vocab = model.vocab();
        let n_vocab = vocab.n_tokens().max(0);
        let mut hasher = Sha256::new();
        for id in 0..n_vocab {
            if let Some(text) = vocab.text(LlamaToken(id)) {
                hasher.update(text.to_bytes());
            }
            hasher.update([0u8]);
        }
        Self {
            n_embd: model.n_embd().max(0) as u32,
            n_vocab: n_vocab as u32,
            tokenizer_sha256: hasher
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        }
    }
}

/// What a heads file says about itself.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct HeadsInfo {
    pub head_count: usize,
    pub layers_per_head: usize,
    /// True when the heads reuse the base model's output projection.
    pub shared_projection: bool,
    /// True when the heads also read the root token's embedding.
    pub root_token_input: bool,
    /// True when each head also reads the tokens drafted between the root and its guess.
    pub path_input: bool,
    pub default_tree: TreeSpec,
    pub base: BaseIdentity,
    pub projection_type: String,
    /// Tokens the heads can propose when their vocabulary is restricted to the most frequent
    /// ones (FR-Spec); `None` for the whole vocabulary.
    pub vocab_subset: Option<usize>,
    /// How the heads were trained and how well they did on held-out text, when trained here.
    pub training: Option<TrainingRecord>,
    /// Where they run.
    pub compute: HeadsCompute,
}

/// What `medusa train-heads` stores with the heads it writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct TrainingRecord {
    pub prompts: usize,
    pub train_positions: usize,
    pub heldout_positions: usize,
    pub epochs: usize,
    /// Per head, the share of held-out positions where its best guess was right.
    pub heldout_top1: Vec<f64>,
    /// Per head, the share where the right token was among its five best guesses.
    pub heldout_top5: Vec<f64>,
    /// Per head, the share of held-out positions where its rank-r guess was right (r = 0..10):
    /// what Medusa mode sizes its tree from. Empty in files written before it was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub heldout_by_rank: Vec<Vec<f64>>,
    pub heldout_loss: f64,
    /// The command line that trained them, to reproduce them.
    pub command: String,
}

impl HeadsInfo {
    /// What drafting costs with these heads, one evaluation taking `ms`.
    pub fn head_cost(&self, ms: f64) -> HeadCost {
        HeadCost {
            ms,
            // Unmeasured, each node counts as a whole evaluation.
            per_extra_node_ms: self
                .path_input
                .then(|| self.compute.extra_node_ms.unwrap_or(ms)),
        }
    }
}
