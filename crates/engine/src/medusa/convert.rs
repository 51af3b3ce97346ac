//! Imports FasterDecoding/Medusa checkpoints (safetensors). Two layouts exist:
//! - per-head projection: `{h}.{l}.linear.weight|bias` blocks, then `{h}.{L}.weight` [vocab, hidden];
//! - blocks only (the base model's projection is reused): `{h}.{l}.linear.weight|bias`.

use std::path::Path;

use safetensors::{Dtype, SafeTensors};
use serde::Serialize;

use super::heads::{write_heads, BaseIdentity, HeadsEncoding, HeadsWeights};
use crate::error::EngineError;
use crate::speculative::tree::TreeSpec;
use crate::token::TokenId;

#[derive(Debug, Clone, Serialize)]
pub struct ConvertReport {
    pub heads: usize,
    pub layers_per_head: usize,
    pub shared_projection: bool,
    pub vocab_subset: Option<usize>,
    pub output_bytes: u64,
}

fn err(message: impl Into<String>) -> EngineError {
    EngineError::Heads(message.into())
}

fn to_f32(tensors: &SafeTensors<'_>, name: &str, shape: &[usize]) -> Result<Vec<f32>, EngineError> {
    let view = tensors
        .tensor(name)
        .map_err(|_| err(format!("checkpoint has no tensor {name}")))?;
    if view.shape() != shape {
        return Err(err(format!(
            "{name} has shape {:?}, the base model needs {shape:?}",
            view.shape()
        )));
    }
    let data = view.data();
    Ok(match view.dtype() {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::BF16 => data
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        other => {
            return Err(err(format!(
                "{name} is {other:?}; expected F32, F16 or BF16"
            )))
        }
    })
}

/// Reads `input`, checks it against `base`, and writes a heads file to `output`.
pub fn convert_checkpoint(
    input: &Path,
    base: &BaseIdentity,
    output: &Path,
    tree: Option<TreeSpec>,
    encoding: HeadsEncoding,
    vocab_subset: Option<Vec<TokenId>>,
) -> Result<ConvertReport, EngineError> {
    let bytes = std::fs::read(input).map_err(|e| EngineError::io(input, &e))?;
    let tensors = SafeTensors::deserialize(&bytes).map_err(|e| {
        err(format!(
            "{} is not a safetensors file: {e}",
            input.display()
        ))
    })?;
    let names: Vec<String> = tensors.names().into_iter().map(str::to_owned).collect();
    let has = |name: &str| names.iter().any(|n| n == name);
    let head_count = (0..)
        .take_while(|h| has(&format!("{h}.0.linear.weight")))
        .count();
    if head_count == 0 {
        return Err(err(
            "no Medusa heads found (expected tensors named like 0.0.linear.weight)",
        ));
    }
    let layers = (0..)
        .take_while(|l| has(&format!("0.{l}.linear.weight")))
        .count();
    let own_projection = has(&format!("0.{layers}.weight"));
    let (n_embd, n_vocab) = (base.n_embd as usize, base.n_vocab as usize);

    let mut blocks = Vec::with_capacity(head_count);
    let mut projections = own_projection.then(Vec::new);
    for h in 0..head_count {
        let head_blocks = (0..layers)
            .map(|l| {
                Ok((
                    to_f32(
                        &tensors,
                        &format!("{h}.{l}.linear.weight"),
                        &[n_embd, n_embd],
                    )?,
                    to_f32(&tensors, &format!("{h}.{l}.linear.bias"), &[n_embd])?,
                ))
            })
            .collect::<Result<Vec<_>, EngineError>>()?;
        blocks.push(head_blocks);
        if let Some(p) = projections.as_mut() {
            p.push(to_f32(
                &tensors,
                &format!("{h}.{layers}.weight"),
                &[n_vocab, n_embd],
            )?);
        }
    }
    let tree = tree.unwrap_or_else(|| {
        if head_count >= 4 {
            TreeSpec::mc_sim_7b_63()
        } else {
            TreeSpec::chain(head_count)
        }
    });
    let vocab_subset_size = vocab_subset.as_ref().map(Vec::len);
    let weights = HeadsWeights {
        blocks,
        root: None,
        path: None,
        projections,
        vocab_subset,
        training: None,
    };
    write_heads(output, base, &weights, &tree, encoding)?;
    Ok(ConvertReport {
        heads: head_count,
        layers_per_head: layers,
        shared_projection: !own_projection,
        vocab_subset: vocab_subset_size,
        output_bytes: std::fs::metadata(output).map_or(0, |m| m.len()),
    })
}

/// The identity of the model at `model_path`.
pub fn base_identity(model_path: &Path) -> Result<BaseIdentity, EngineError> {
    Ok(BaseIdentity::of(&open_base(model_path)?))
}

/// The `n` tokens most frequent in `corpus` under the model's tokenizer, most frequent first
/// (ties by id): the vocabulary FR-Spec keeps for the heads.
pub fn frequent_tokens(
    model_path: &Path,
    corpus: &str,
    n: usize,
) -> Result<Vec<TokenId>, EngineError> {
    let model = open_base(model_path)?;
    let n_vocab = model.n_vocab().max(0) as usize;
    if !(1..=n_vocab).contains(&n) {
        return Err(EngineError::InvalidParameter {
            name: "vocab_subset",
            message: format!("must be between 1 and the vocabulary size {n_vocab}, got {n}"),
        });
    }
    let mut counts = vec![0u64; n_vocab];
    for line in corpus.lines() {
        for token in model.vocab().tokenize(line.as_bytes(), false, false) {
            if let Some(c) = counts.get_mut(token.0 as usize) {
                *c += 1;
            }
        }
    }
    let mut ids: Vec<TokenId> = (0..n_vocab as TokenId).collect();
    ids.sort_by(|a, b| counts[*b as usize].cmp(&counts[*a as usize]).then(a.cmp(b)));
    ids.truncate(n);
    Ok(ids)
}

/// Opens a model for its vocabulary and shape. The weights are memory-mapped, not read; a
/// vocabulary-only load would not know the embedding size.
fn open_base(model_path: &Path) -> Result<llama_cpp_2::model::LlamaModel, EngineError> {
    crate::weights::model_file::inspect(model_path)?;
    let backend = crate::llama_process::backend()?;
    let params = llama_cpp_2::model::params::LlamaModelParams::default().with_n_gpu_layers(0);
    llama_cpp_2::model::LlamaModel::load_from_file(backend, model_path, &params)
        .map_err(|e| EngineError::Heads(format!("cannot read {}: {e}", model_path.display())))
}
