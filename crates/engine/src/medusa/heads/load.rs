//! Loading heads from a heads file, checked against the base model, with the base model's own
//! matrices (output projection, token embeddings) that the heads share.

use std::path::Path;
use std::sync::Arc;

use llama_cpp_2::model::LlamaModel;

use super::compute::{HeadsCompute, HeadsPlacement};
use super::device::BackendDevice;
use super::evaluate::MedusaHeads;
use super::format::{
    block_bias, block_weight, check_subset, keys, path_weight, projection, root_weight,
};
use super::info::{BaseIdentity, HeadsInfo, TrainingRecord};
use super::weights::Head;
use crate::error::EngineError;
use crate::speculative::tree::TreeSpec;
use crate::token::token_rows;
use crate::weights::gguf_file::GgufFile;
use crate::weights::matrix::{type_name, QuantMatrix};

impl MedusaHeads {
    /// Loads heads for `model` (read from `model_path` when they share its projection) and puts
    /// them where `placement` says: a ggml backend is the GPU when `on_gpu` (the model's layers
    /// went there), else ggml's CPU backend with `threads` threads.
    pub fn load(
        path: &Path,
        model: &LlamaModel,
        model_path: &Path,
        threads: usize,
        placement: HeadsPlacement,
        on_gpu: bool,
    ) -> Result<Self, EngineError> {
        let file = GgufFile::open(path)?;
        if file.string(keys::ARCH).as_deref() != Some("medusa") {
            return Err(EngineError::Heads(format!(
                "{} is a GGUF file but not Medusa heads",
                path.display()
            )));
        }
        let base = BaseIdentity {
            n_embd: file.required_u32(keys::N_EMBD)?,
            n_vocab: file.required_u32(keys::N_VOCAB)?,
            tokenizer_sha256: file.string(keys::TOKENIZER).unwrap_or_default(),
        };
        let actual = BaseIdentity::of(model);
        for (what, theirs, ours) in [
            (
                "embedding size",
                base.n_embd.to_string(),
                actual.n_embd.to_string(),
            ),
            (
                "vocabulary size",
                base.n_vocab.to_string(),
                actual.n_vocab.to_string(),
            ),
            (
                "tokenizer",
                base.tokenizer_sha256.clone(),
                actual.tokenizer_sha256.clone(),
            ),
        ] {
            if theirs != ours {
                return Err(EngineError::HeadsMismatch {
                    what,
                    heads: theirs,
                    model: ours,
                });
            }
        }
        let head_count = file.required_u32(keys::HEADS)? as usize;
        let layers = file.required_u32(keys::LAYERS)? as usize;
        if !(1..=16).contains(&head_count) || layers > 8 {
            return Err(EngineError::Heads(format!(
                "{head_count} heads of {layers} blocks is not a valid Medusa shape"
            )));
        }
        let shared = file.bool(keys::SHARED).unwrap_or(true);
        let root_input = file.bool(keys::ROOT_INPUT).unwrap_or(false);
        if root_input && layers == 0 {
            return Err(EngineError::Heads(
                "heads that read the root token need at least one block".into(),
            ));
        }
        let path_input = file.bool(keys::PATH_INPUT).unwrap_or(false);
        if path_input && !root_input {
            return Err(EngineError::Heads(
                "heads that read the drafted path must read the root token too".into(),
            ));
        }
        let default_tree = match file.string(keys::TREE) {
            Some(json) => serde_json::from_str::<TreeSpec>(&json)
                .map_err(|e| EngineError::Heads(format!("default tree: {e}")))?,
            None => TreeSpec::chain(head_count),
        };
        default_tree
            .check_heads(head_count)
            .map_err(|e| EngineError::Heads(format!("default tree: {e}")))?;

        let training = match file.string(keys::TRAINING) {
            Some(json) => Some(
                serde_json::from_str::<TrainingRecord>(&json)
                    .map_err(|e| EngineError::Heads(format!("training record: {e}")))?,
            ),
            None => None,
        };
        let (n_embd, n_vocab) = (base.n_embd as usize, base.n_vocab as usize);
        let row_tokens = if file.has_tensor(keys::VOCAB_SUBSET) {
            let ids = file.token_ids(keys::VOCAB_SUBSET)?;
            check_subset(&ids, n_vocab)?;
            Some(ids)
        } else {
            None
        };
        let projection_rows = row_tokens.as_ref().map_or(n_vocab, Vec::len);
        let mut heads = Vec::with_capacity(head_count);
        for h in 0..head_count {
            let blocks = (0..layers)
                .map(|l| {
                    Ok((
                        file.matrix(&block_weight(h, l), n_embd, n_embd)?,
                        file.vector(&block_bias(h, l), n_embd)?,
                    ))
                })
                .collect::<Result<Vec<_>, EngineError>>()?;
            let root = if root_input {
                Some(file.matrix(&root_weight(h), n_embd, n_embd)?)
            } else {
                None
            };
            let path = (0..if path_input { h } else { 0 })
                .map(|j| file.matrix(&path_weight(h, j), n_embd, n_embd))
                .collect::<Result<Vec<_>, EngineError>>()?;
            let projection = if shared {
                None
            } else {
                Some(file.matrix(&projection(h), projection_rows, n_embd)?)
            };
            heads.push(Head {
                blocks,
                root,
                path,
                projection,
            });
        }
        let token_embedding = if root_input {
            Some(Arc::new(base_token_embedding(model_path, n_vocab, n_embd)?))
        } else {
            None
        };
        let shared_projection = if shared {
            // A model that ties its output projection to its token embeddings holds one matrix;
            // so do its heads.
            let full = match &token_embedding {
                Some(embedding) if !has_output_projection(model_path)? => Arc::clone(embedding),
                _ => Arc::new(base_projection(model_path, n_vocab, n_embd)?),
            };
            Some(match &row_tokens {
                Some(ids) => Arc::new(full.gather_rows(&token_rows(ids))?),
                None => full,
            })
        } else {
            None
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.clamp(1, 16))
            .thread_name(|i| format!("medusa-heads-{i}"))
            .build()
            .map_err(|e| {
                EngineError::Context(format!("could not start the heads' threads: {e}"))
            })?;
        let projection_type = shared_projection
            .as_deref()
            .or(heads[0].projection.as_ref())
            .map_or_else(String::new, |m| type_name(m.ty));
        let mut loaded = Self {
            info: HeadsInfo {
                head_count,
                layers_per_head: layers,
                shared_projection: shared,
                root_token_input: root_input,
                path_input,
                default_tree,
                base,
                projection_type,
                vocab_subset: row_tokens.as_ref().map(Vec::len),
                training,
                compute: HeadsCompute::default(),
            },
            heads,
            shared_projection,
            token_embedding,
            row_tokens,
            pool,
            on_backend: None,
            evaluations: Default::default(),
            queries: Default::default(),
        };
        let device = if on_gpu {
            BackendDevice::Gpu
        } else {
            BackendDevice::Cpu { threads }
        };
        loaded.place(placement, device);
        tracing::info!(compute = ?loaded.info.compute, "medusa heads placed");
        Ok(loaded)
    }
}

/// The base model's output projection: `output.weight`, or the tied token embedding.
pub fn base_projection(
    model_path: &Path,
    n_vocab: usize,
    n_embd: usize,
) -> Result<QuantMatrix, EngineError> {
    let file = GgufFile::open(model_path)?;
    let name = if file.has_tensor(OUTPUT_PROJECTION) {
        OUTPUT_PROJECTION
    } else {
        TOKEN_EMBEDDING
    };
    file.matrix(name, n_vocab, n_embd)
}

/// False when the model ties its output projection to its token embeddings.
fn has_output_projection(model_path: &Path) -> Result<bool, EngineError> {
    Ok(GgufFile::open(model_path)?.has_tensor(OUTPUT_PROJECTION))
}

const OUTPUT_PROJECTION: &str = "output.weight";
const TOKEN_EMBEDDING: &str = "token_embd.weight";

/// The base model's input token embeddings (`token_embd.weight`).
pub fn base_token_embedding(
    model_path: &Path,
    n_vocab: usize,
    n_embd: usize,
) -> Result<QuantMatrix, EngineError> {
    GgufFile::open(model_path)?.matrix(TOKEN_EMBEDDING, n_vocab, n_embd)
}
