//! Writing a feature drafter file.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::format::{keys, FeatureShape, ARCH, MATRICES, NORMS};
use super::layer::FeatureWeights;
use crate::error::EngineError;
use crate::medusa::heads::BaseIdentity;
use crate::token::{is_vocabulary_subset, TokenId};
use crate::weights::gguf_file::{token_ids_tensor, write_encoded, EncodedTensor, MetaValue};
use crate::weights::matrix::{QuantMatrix, GGML_TYPE_F16, GGML_TYPE_F32};

/// What training stores with the drafter it writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureTrainingRecord {
    pub answers: usize,
    pub train_positions: usize,
    pub heldout_positions: usize,
    pub epochs: usize,
    /// Levels unrolled on the drafter's own predictions in training (training-time test).
    pub levels: usize,
    /// Per level (depth below the root), the share of held-out positions where its best guess
    /// was right, the levels before it reading the drafter's own predicted features.
    pub heldout_top1: Vec<f64>,
    pub heldout_loss: f64,
    /// Held-out tokens per step of the trees grown with `max_nodes` nodes, along the model's own
    /// answers: `(max_nodes, tokens per step)`.
    pub heldout_tokens_per_step: Vec<(usize, f64)>,
    /// The command line that trained it, to reproduce it.
    pub command: String,
}

/// Writes the drafter: its matrices in F16, the norms' gains in F32, the vocabulary subset
/// its projection keeps (if any) and the training record.
pub fn write_feature_drafter(
    path: &Path,
    base: &BaseIdentity,
    shape: FeatureShape,
    weights: &FeatureWeights,
    vocab_subset: Option<&[TokenId]>,
    training: Option<&FeatureTrainingRecord>,
) -> Result<(), EngineError> {
    shape.check()?;
    if shape.n_embd != base.n_embd as usize {
        return Err(EngineError::FeatureDrafter(format!(
            "a drafter {} wide for a model {} wide",
            shape.n_embd, base.n_embd
        )));
    }
    let mut meta = vec![
        (keys::ARCH, MetaValue::Str(ARCH.into())),
        (keys::N_EMBD, MetaValue::U32(shape.n_embd as u32)),
        (keys::HEADS, MetaValue::U32(shape.heads as u32)),
        (keys::FF, MetaValue::U32(shape.ff as u32)),
        (keys::WINDOW, MetaValue::U32(shape.window as u32)),
        (keys::N_VOCAB, MetaValue::U32(base.n_vocab)),
        (
            keys::TOKENIZER,
            MetaValue::Str(base.tokenizer_sha256.clone()),
        ),
    ];
    if let Some(record) = training {
        let json = serde_json::to_string(record)
            .map_err(|e| EngineError::FeatureDrafter(e.to_string()))?;
        meta.push((keys::TRAINING, MetaValue::Str(json)));
    }
    let mut encoded: Vec<EncodedTensor> = Vec::new();
    for ((name, (rows, cols)), values) in MATRICES
        .iter()
        .zip(shape.matrix_dims())
        .zip(&weights.matrices)
    {
        let m = QuantMatrix::quantize(GGML_TYPE_F16, rows, cols, values)?;
        encoded.push((
            (*name).into(),
            vec![cols as u64, rows as u64],
            m.ty,
            m.bytes().to_vec(),
        ));
    }
    for (name, gain) in NORMS.iter().zip(&weights.norms) {
        if gain.len() != shape.n_embd {
            return Err(EngineError::FeatureDrafter(format!(
                "{name} holds {} values, not {}",
                gain.len(),
                shape.n_embd
            )));
        }
        let bytes = gain.iter().flat_map(|v| v.to_le_bytes()).collect();
        encoded.push((
            (*name).into(),
            vec![gain.len() as u64],
            GGML_TYPE_F32,
            bytes,
        ));
    }
    if let Some(ids) = vocab_subset {
        if !is_vocabulary_subset(ids, base.n_vocab as usize) {
            return Err(EngineError::FeatureDrafter(
                "the vocabulary subset is empty or holds ids outside the vocabulary".into(),
            ));
        }
        encoded.push(token_ids_tensor(keys::VOCAB_SUBSET, ids));
    }
    write_encoded(path, &meta, &encoded)
}
