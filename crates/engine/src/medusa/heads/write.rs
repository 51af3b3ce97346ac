//! Writing heads files: heads' weights, encoded as asked, with what the file says about them.

use std::path::Path;

use super::format::{
    block_bias, block_weight, check_subset, keys, path_weight, projection, root_weight,
};
use super::info::{BaseIdentity, TrainingRecord};
use crate::error::EngineError;
use crate::speculative::tree::TreeSpec;
use crate::token::{token_rows, TokenId};
use crate::weights::gguf_file::{token_ids_tensor, write_encoded, EncodedTensor, MetaValue};
use crate::weights::matrix::{QuantMatrix, GGML_TYPE_F32};

/// Weights of heads to be written to a file, in f32.
pub struct HeadsWeights {
    /// Per head, per block: (W as `n_embd * n_embd` row-major, b).
    pub blocks: Vec<Vec<(Vec<f32>, Vec<f32>)>>,
    /// Per head, `R` (`n_embd * n_embd`) for the root token's embedding; `None` for heads
    /// that read only the hidden state.
    pub root: Option<Vec<Vec<f32>>>,
    /// Per head k, its `P_j` (`n_embd * n_embd`, j < k) for the tokens drafted at depths
    /// 1..=k; `None` for heads that do not read the drafted path (needs `root`).
    pub path: Option<Vec<Vec<Vec<f32>>>>,
    /// Per head, its own `n_vocab * n_embd` projection; `None` to share the base model's.
    pub projections: Option<Vec<Vec<f32>>>,
    /// Restricts proposals to these tokens (FR-Spec); own projections keep only their rows.
    pub vocab_subset: Option<Vec<TokenId>>,
    pub training: Option<TrainingRecord>,
}

/// How to encode the weights on disk.
#[derive(Debug, Clone, Copy)]
pub struct HeadsEncoding {
    pub block_type: llama_cpp_sys_2::ggml_type,
    pub projection_type: llama_cpp_sys_2::ggml_type,
}

pub fn write_heads(
    path: &Path,
    base: &BaseIdentity,
    weights: &HeadsWeights,
    tree: &TreeSpec,
    encoding: HeadsEncoding,
) -> Result<(), EngineError> {
    let head_count = weights.blocks.len();
    let layers = weights.blocks.first().map_or(0, Vec::len);
    if head_count == 0 || weights.blocks.iter().any(|b| b.len() != layers) {
        return Err(EngineError::Heads(
            "every head needs the same number of blocks".into(),
        ));
    }
    tree.check_heads(head_count)
        .map_err(|e| EngineError::Heads(e.to_string()))?;
    let (n_embd, n_vocab) = (base.n_embd as usize, base.n_vocab as usize);
    let tree_json = serde_json::to_string(tree).map_err(|e| EngineError::Heads(e.to_string()))?;
    let mut meta = vec![
        (keys::ARCH, MetaValue::Str("medusa".into())),
        (keys::HEADS, MetaValue::U32(head_count as u32)),
        (keys::LAYERS, MetaValue::U32(layers as u32)),
        (keys::SHARED, MetaValue::Bool(weights.projections.is_none())),
        (keys::ROOT_INPUT, MetaValue::Bool(weights.root.is_some())),
        (keys::PATH_INPUT, MetaValue::Bool(weights.path.is_some())),
        (keys::TREE, MetaValue::Str(tree_json)),
        (keys::N_EMBD, MetaValue::U32(base.n_embd)),
        (keys::N_VOCAB, MetaValue::U32(base.n_vocab)),
        (
            keys::TOKENIZER,
            MetaValue::Str(base.tokenizer_sha256.clone()),
        ),
    ];
    if let Some(record) = &weights.training {
        let json = serde_json::to_string(record).map_err(|e| EngineError::Heads(e.to_string()))?;
        meta.push((keys::TRAINING, MetaValue::Str(json)));
    }
    let mut encoded: Vec<EncodedTensor> = Vec::new();
    let f32_bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    if let Some(ids) = &weights.vocab_subset {
        check_subset(ids, n_vocab)?;
        encoded.push(token_ids_tensor(keys::VOCAB_SUBSET, ids));
    }
    let square = |name: String, values: &[f32]| {
        let m = QuantMatrix::quantize(encoding.block_type, n_embd, n_embd, values)?;
        Ok::<_, EngineError>((
            name,
            vec![n_embd as u64, n_embd as u64],
            m.ty,
            m.bytes().to_vec(),
        ))
    };
    if weights.root.as_ref().is_some_and(|r| r.len() != head_count)
        || (weights.root.is_some() && layers == 0)
    {
        return Err(EngineError::Heads(
            "reading the root token needs one matrix per head and at least one block".into(),
        ));
    }
    let path_shape_ok = |path: &Vec<Vec<Vec<f32>>>| {
        path.len() == head_count && path.iter().enumerate().all(|(h, p)| p.len() == h)
    };
    if weights
        .path
        .as_ref()
        .is_some_and(|p| weights.root.is_none() || !path_shape_ok(p))
    {
        return Err(EngineError::Heads(
            "reading the drafted path needs the root matrices and k matrices for head k".into(),
        ));
    }
    for (h, blocks) in weights.blocks.iter().enumerate() {
        for (l, (w, b)) in blocks.iter().enumerate() {
            if w.len() != n_embd * n_embd || b.len() != n_embd {
                return Err(EngineError::Heads(format!(
                    "head {h} block {l} is not {n_embd}x{n_embd}"
                )));
            }
            encoded.push(square(block_weight(h, l), w)?);
            encoded.push((
                block_bias(h, l),
                vec![n_embd as u64],
                GGML_TYPE_F32,
                f32_bytes(b),
            ));
        }
        if let Some(root) = weights.root.as_ref().map(|r| &r[h]) {
            if root.len() != n_embd * n_embd {
                return Err(EngineError::Heads(format!(
                    "head {h}'s root matrix is not {n_embd}x{n_embd}"
                )));
            }
            encoded.push(square(root_weight(h), root)?);
        }
        for (j, p) in weights.path.iter().flat_map(|path| &path[h]).enumerate() {
            if p.len() != n_embd * n_embd {
                return Err(EngineError::Heads(format!(
                    "head {h}'s path matrix {j} is not {n_embd}x{n_embd}"
                )));
            }
            encoded.push(square(path_weight(h, j), p)?);
        }
        if let Some(projections) = &weights.projections {
            let p = projections
                .get(h)
                .filter(|p| p.len() == n_vocab * n_embd)
                .ok_or_else(|| {
                    EngineError::Heads(format!("head {h} projection is not {n_vocab}x{n_embd}"))
                })?;
            let m = QuantMatrix::quantize(encoding.projection_type, n_vocab, n_embd, p)?;
            let m = match &weights.vocab_subset {
                Some(ids) => m.gather_rows(&token_rows(ids))?,
                None => m,
            };
            encoded.push((
                projection(h),
                vec![n_embd as u64, m.rows as u64],
                m.ty,
                m.bytes().to_vec(),
            ));
        }
    }
    write_encoded(path, &meta, &encoded)
}
