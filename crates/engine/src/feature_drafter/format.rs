//! The feature drafter's file: GGUF with these metadata keys and tensor names.

use serde::{Deserialize, Serialize};

use crate::error::EngineError;

pub(super) const ARCH: &str = "medusa-feature";

pub(super) mod keys {
    pub const ARCH: &str = "general.architecture";
    pub const N_EMBD: &str = "feature.n_embd";
    pub const HEADS: &str = "feature.attention_heads";
    pub const FF: &str = "feature.feed_forward";
    pub const WINDOW: &str = "feature.window";
    pub const N_VOCAB: &str = "feature.base.n_vocab";
    pub const TOKENIZER: &str = "feature.base.tokenizer_sha256";
    pub const VOCAB_SUBSET: &str = "feature.vocab_subset";
    pub const TRAINING: &str = "feature.training";
}

/// The drafter's matrices, by tensor name, with their `(rows, cols)` in units of the shape.
pub(super) const MATRICES: [&str; 8] = [
    "feature.fc",
    "feature.q",
    "feature.k",
    "feature.v",
    "feature.o",
    "feature.gate",
    "feature.up",
    "feature.down",
];
pub(super) const NORMS: [&str; 3] = ["feature.attn_norm", "feature.ffn_norm", "feature.out_norm"];

/// The layer's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureShape {
    /// The base model's hidden size, which the layer keeps.
    pub n_embd: usize,
    /// Attention heads; `n_embd` splits evenly between them.
    pub heads: usize,
    /// The feed-forward block's inner size.
    pub ff: usize,
    /// Most recent positions of the request the attention reads besides the drafted path.
    pub window: usize,
}

impl FeatureShape {
    /// The shape for a model of hidden size `n_embd`: heads of 64 values where they divide it,
    /// a feed-forward block twice as wide.
    pub fn for_model(n_embd: usize, window: usize) -> Self {
        let heads = if n_embd.is_multiple_of(64) {
            n_embd / 64
        } else {
            1
        };
        Self {
            n_embd,
            heads,
            ff: 2 * n_embd,
            window,
        }
    }

    pub fn check(&self) -> Result<(), EngineError> {
        if self.n_embd == 0
            || self.heads == 0
            || !self.n_embd.is_multiple_of(self.heads)
            || self.ff == 0
            || !(1..=64).contains(&self.window)
        {
            return Err(EngineError::FeatureDrafter(format!(
                "{self:?} is not a valid shape (heads must divide the hidden size; a window of 1 to 64)"
            )));
        }
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.n_embd / self.heads
    }

    /// `(rows, cols)` of each of the layer's matrices, in the file's order (`FC, Q, K, V, O,
    /// GATE, UP, DOWN`).
    pub fn matrix_dims(&self) -> [(usize, usize); 8] {
        let (d, ff) = (self.n_embd, self.ff);
        [
            (d, 2 * d),
            (d, d),
            (d, d),
            (d, d),
            (d, d),
            (ff, d),
            (ff, d),
            (d, ff),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_of_64_where_they_divide_the_width() {
        let shape = FeatureShape::for_model(576, 8);
        assert_eq!((shape.heads, shape.head_dim(), shape.ff), (9, 64, 1152));
        assert_eq!(FeatureShape::for_model(100, 8).heads, 1);
        assert!(shape.check().is_ok());
        let no_window = FeatureShape { window: 0, ..shape };
        assert!(no_window.check().is_err());
    }
}
