//! One Medusa head's weights, as loaded: apart from the heads that hold them, so that the
//! ggml backend can upload a head without depending on the loader that made it.

use crate::weights::matrix::QuantMatrix;

/// A head's matrices: its blocks' `(W, b)`, and its own projection unless it shares the base
/// model's.
pub(super) struct Head {
    pub(super) blocks: Vec<(QuantMatrix, Vec<f32>)>,
    /// `R`, applied to the root token's embedding in the first block.
    pub(super) root: Option<QuantMatrix>,
    /// `P_j`, applied to the embedding of the token drafted at depth j + 1, for heads that read
    /// the drafted path (head k has k of them).
    pub(super) path: Vec<QuantMatrix>,
    pub(super) projection: Option<QuantMatrix>,
}
