//! The seam between the batcher and the model: what a step needs of it. A batch to fill and
//! decode, what the decode computed and costs ([`Decoder`]), and the KV cache's cells by
//! sequence id ([`KvCells`]). The batcher, the requests and verification see only this;
//! [`LlamaRuntime`](crate::llama::runtime) is the real one, and the batcher's and the
//! scheduler's tests run on a small deterministic model (`toy_model`).

use crate::error::EngineError;
use crate::request::Prompt;
use crate::speculative::costs::CostModel;
use crate::token::TokenId;

/// How long one decode took: the decode call itself, then the wait for the device to finish.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DecodeTimes {
    pub(crate) submit_ms: f64,
    pub(crate) wait_ms: f64,
}

impl DecodeTimes {
    pub(crate) fn total_ms(&self) -> f64 {
        self.submit_ms + self.wait_ms
    }
}

/// The KV cache's cells, by sequence id.
pub(crate) trait KvCells {
    /// Frees every cell of every sequence.
    fn clear_cells(&mut self);

    /// Makes sequence `to` hold `from`'s cells at positions `first..end` (all when `None`).
    fn copy_cells(
        &mut self,
        from: i32,
        to: i32,
        first: Option<u32>,
        end: Option<u32>,
    ) -> Result<(), EngineError>;

    /// Frees every cell of sequence `seq`.
    fn remove_cells(&mut self, seq: i32) -> Result<(), EngineError>;

    fn holds_cells(&self, seq: i32) -> bool;

    /// Makes room for a decode of up to `incoming` tokens where the model keeps cells in
    /// order (exact mode); the sequences whose cells it had to drop are returned.
    fn keep_cell_order(
        &mut self,
        incoming: usize,
        requests: usize,
    ) -> Result<Vec<i32>, EngineError>;
}

/// A batch to fill and decode, what the decode computed, and what decodes cost.
pub(crate) trait Decoder: KvCells {
    /// Most tokens one decode takes.
    fn n_batch(&self) -> usize;

    /// Context cells one request may use (prompt, output and its draft tree).
    fn n_ctx_seq(&self) -> usize;

    /// Whether decodes keep each position's final hidden state (Medusa heads read it).
    fn returns_hidden_states(&self) -> bool;

    /// The prompt as the model reads it (its chat template applied), refused when empty or
    /// when it leaves no room to generate; with `continues`, a chat's last message is left
    /// open.
    fn prompt_tokens(&self, prompt: &Prompt, continues: bool) -> Result<Vec<TokenId>, EngineError>;

    fn clear_batch(&mut self);

    /// Adds `token` at position `pos` of the sequences `seqs`, with its logits kept when
    /// `logits`.
    fn add_to_batch(
        &mut self,
        token: TokenId,
        pos: usize,
        seqs: &[i32],
        logits: bool,
    ) -> Result<(), EngineError>;

    /// Decodes the batch: its tokens take cells, and their logits (and hidden states) can be
    /// read until the next decode.
    fn decode(&mut self) -> Result<DecodeTimes, EngineError>;

    /// Logits of the last decode at batch index `index`; an error where that decode gave none.
    fn logits(&self, index: i32) -> Result<&[f32], EngineError>;

    /// Final hidden state of the last decode at batch index `index`, when the model returns
    /// them.
    fn hidden_state(&self, index: i32) -> Result<&[f32], EngineError>;

    /// What a decode of n tokens costs here, once known.
    fn cost_model(&self) -> Option<&CostModel>;

    /// Changes each time the cost model's figures change.
    fn cost_version(&self) -> u64;

    /// Teaches the cost model what a decode of `tokens` draft-able tokens took.
    fn observe_decode(&mut self, tokens: usize, ms: f64);

    /// The cost model, measured now if it is not known (which needs every cell free).
    fn ensure_cost_model(&mut self) -> Result<&CostModel, EngineError>;
}
