//! Medusa heads: `x + SiLU(W x + b)` blocks on the base model's last hidden state, then a
//! vocabulary projection (the head's own, or the base model's output matrix).
//!
//! Heads may also read the tree's root, the token the base model itself chose from that hidden
//! state: its input embedding (scaled to unit RMS) enters the first block as `+ R e`. Guessing
//! the token two ahead is much easier knowing the one in between, and the root is known before
//! drafting, so this costs one small product per head and no extra pass.
//!
//! Heads that read the drafted path (Hydra's sequentially dependent heads) also add `P_j e_j`
//! for each token between the root and the one they guess: each node's children are guessed
//! knowing the node's whole path, at one head evaluation per node that has children.
//!
//! Heads files are GGUF (`*.medusa.gguf`) and record the base model they were made for, so
//! that heads for another model are refused instead of silently drafting nonsense.

use std::path::Path;
use std::sync::{Arc, Mutex};

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::backend_heads::{BackendDevice, BackendHeads};
use super::gguf_file::{write_gguf, GgufFile, MetaValue, TensorOut};
use super::head::Head;
use super::matrix::{type_name, QuantMatrix, GGML_TYPE_F32, GGML_TYPE_I32};
use crate::error::EngineError;
use crate::speculative::tree::TreeSpec;
use crate::speculative::tree_builder::HeadCost;
use crate::token::TokenId;

mod compute;
mod placement;

pub use compute::{HeadsCompute, HeadsPlacement};

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

pub struct MedusaHeads {
    info: HeadsInfo,
    heads: Vec<Head>,
    shared_projection: Option<Arc<QuantMatrix>>,
    /// The base model's token embeddings, when the heads read the root token (and the path).
    token_embedding: Option<Arc<QuantMatrix>>,
    /// Token id of each projection row, when the vocabulary is restricted.
    row_tokens: Option<Vec<TokenId>>,
    /// The threads the heads' products are split over, kept between steps.
    pool: rayon::ThreadPool,
    /// The heads' weights on a ggml backend, when they run there.
    on_backend: Option<Mutex<BackendHeads>>,
}

mod keys {
    pub const ARCH: &str = "general.architecture";
    pub const HEADS: &str = "medusa.head_count";
    pub const LAYERS: &str = "medusa.layers_per_head";
    pub const SHARED: &str = "medusa.shared_projection";
    pub const ROOT_INPUT: &str = "medusa.root_token_input";
    pub const PATH_INPUT: &str = "medusa.path_input";
    pub const TREE: &str = "medusa.tree";
    pub const N_EMBD: &str = "medusa.base.n_embd";
    pub const N_VOCAB: &str = "medusa.base.n_vocab";
    pub const TOKENIZER: &str = "medusa.base.tokenizer_sha256";
    pub const VOCAB_SUBSET: &str = "medusa.vocab_subset";
    pub const TRAINING: &str = "medusa.training";
}

fn block_weight(h: usize, l: usize) -> String {
    format!("medusa.{h}.block.{l}.weight")
}
fn block_bias(h: usize, l: usize) -> String {
    format!("medusa.{h}.block.{l}.bias")
}
fn projection(h: usize) -> String {
    format!("medusa.{h}.proj.weight")
}
fn root_weight(h: usize) -> String {
    format!("medusa.{h}.root.weight")
}
fn path_weight(h: usize, j: usize) -> String {
    format!("medusa.{h}.path.{j}.weight")
}

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
                Some(ids) => Arc::new(full.gather_rows(&as_rows(ids))?),
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

    pub fn info(&self) -> &HeadsInfo {
        &self.info
    }

    pub fn head_count(&self) -> usize {
        self.heads.len()
    }

    /// Milliseconds one head takes to propose its ten best tokens where the heads run, as timed
    /// when they loaded.
    pub fn draft_ms_per_head(&self) -> f64 {
        let compute = &self.info.compute;
        let timed = if self.on_backend.is_some() {
            compute.ggml_ms
        } else {
            compute.thread_pool_ms
        };
        timed.unwrap_or(0.0)
    }

    /// What the heads take from `tokens` (the root, then the tokens drafted below it on one
    /// path): their embeddings at unit RMS, as far as the heads read them (none for heads that
    /// read only the hidden state, the root alone for heads that do not read the path).
    pub fn token_inputs(&self, tokens: &[TokenId]) -> Vec<Vec<f32>> {
        let Some(embedding) = self.token_embedding.as_ref() else {
            return Vec::new();
        };
        let read = if self.info.path_input {
            tokens.len()
        } else {
            1
        };
        tokens
            .iter()
            .take(read)
            .map(|&token| {
                let mut e = vec![0.0; embedding.cols];
                if let Some(row) = usize::try_from(token).ok().filter(|&r| r < embedding.rows) {
                    // A row that cannot be decoded reads as no token.
                    let _ = embedding.decode_row(row, &mut e);
                }
                scale_to_unit_rms(&mut e);
                e
            })
            .collect()
    }

    /// The `k` most likely tokens head `head` proposes from `hidden`, best first. `inputs` is
    /// [`Self::token_inputs`] of the root (the token the base model chose from `hidden`) and,
    /// for heads that read the path, of the tokens drafted at depths 1..=head below it.
    pub fn top_k(
        &self,
        head: usize,
        hidden: &[f32],
        inputs: &[Vec<f32>],
        k: usize,
    ) -> Vec<TokenId> {
        self.top_k_each(head, hidden, &[(inputs.to_vec(), k)])
            .pop()
            .unwrap_or_default()
    }

    /// [`Self::top_k`] for several `(inputs, k)` at once (the nodes of one depth, for heads that
    /// read the path): every matrix is read once for all of them.
    pub fn top_k_each(
        &self,
        head: usize,
        hidden: &[f32],
        queries: &[(Vec<Vec<f32>>, usize)],
    ) -> Vec<Vec<TokenId>> {
        let rows = match &self.on_backend {
            Some(backend) => match lock(backend).top_k_each(head, hidden, queries) {
                Ok(candidates) => candidates
                    .into_iter()
                    .zip(queries)
                    .map(|(mut found, (_, k))| {
                        found.sort_unstable_by(best_first);
                        found.into_iter().take(*k).map(|(row, _)| row).collect()
                    })
                    .collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "heads on the ggml backend failed; this step uses the thread pool");
                    self.thread_pool_rows(head, hidden, queries)
                }
            },
            None => self.thread_pool_rows(head, hidden, queries),
        };
        rows.into_iter()
            .map(|rows| {
                rows.into_iter()
                    .map(|row| match &self.row_tokens {
                        Some(ids) => ids[row],
                        None => row as TokenId,
                    })
                    .collect()
            })
            .collect()
    }

    /// The best projection rows of head `head` for each query, best first, computed on the
    /// thread pool.
    fn thread_pool_rows(
        &self,
        head: usize,
        hidden: &[f32],
        queries: &[(Vec<Vec<f32>>, usize)],
    ) -> Vec<Vec<usize>> {
        let head = &self.heads[head];
        let projection = head
            .projection
            .as_ref()
            .or(self.shared_projection.as_deref())
            .expect("a head has its own projection or shares the base one");
        let mut xs: Vec<Vec<f32>> = vec![hidden.to_vec(); queries.len()];
        let logits = self.pool.install(|| {
            // `R e_root + sum_j P_j e_j`, added to the first block's product: the m-th matrix
            // applies to each query's m-th input.
            let mut token_terms: Vec<Vec<f32>> = vec![vec![0.0; hidden.len()]; queries.len()];
            for (m, matrix) in head.root.iter().chain(&head.path).enumerate() {
                let reading: Vec<usize> = (0..queries.len())
                    .filter(|&q| queries[q].0.len() > m)
                    .collect();
                let inputs: Vec<&[f32]> = reading
                    .iter()
                    .map(|&q| queries[q].0[m].as_slice())
                    .collect();
                for (&q, product) in reading.iter().zip(matrix.matmul(&inputs)) {
                    token_terms[q]
                        .iter_mut()
                        .zip(&product)
                        .for_each(|(t, p)| *t += p);
                }
            }
            for (block, (weight, bias)) in head.blocks.iter().enumerate() {
                let products = weight.matmul(&xs.iter().map(Vec::as_slice).collect::<Vec<_>>());
                for ((x, mut t), term) in xs.iter_mut().zip(products).zip(&token_terms) {
                    if block == 0 {
                        t.iter_mut().zip(term).for_each(|(ti, ei)| *ti += ei);
                    }
                    for ((xi, ti), bi) in x.iter_mut().zip(&t).zip(bias) {
                        let z = ti + bi;
                        *xi += z / (1.0 + (-z).exp());
                    }
                }
            }
            projection.matmul(&xs.iter().map(Vec::as_slice).collect::<Vec<_>>())
        });
        logits
            .iter()
            .zip(queries)
            .map(|(logits, (_, k))| top_indices(logits, *k))
            .collect()
    }
}

/// Scales `values` so that their root mean square is 1 (the root token's embedding enters the
/// heads at this scale, whatever the model's embedding norms).
pub fn scale_to_unit_rms(values: &mut [f32]) {
    let mean_square = values.iter().map(|v| v * v).sum::<f32>() / values.len().max(1) as f32;
    if mean_square > 0.0 {
        let scale = mean_square.sqrt().recip();
        values.iter_mut().for_each(|v| *v *= scale);
    }
}

fn check_subset(ids: &[TokenId], n_vocab: usize) -> Result<(), EngineError> {
    if ids.is_empty() || ids.iter().any(|&t| t < 0 || t as usize >= n_vocab) {
        return Err(EngineError::Heads(
            "the vocabulary subset is empty or holds ids outside the vocabulary".into(),
        ));
    }
    Ok(())
}

fn as_rows(ids: &[TokenId]) -> Vec<usize> {
    ids.iter().map(|&t| t as usize).collect()
}

fn lock(backend: &Mutex<BackendHeads>) -> std::sync::MutexGuard<'_, BackendHeads> {
    // A panic while evaluating leaves nothing half-written that a later evaluation reads.
    backend
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Candidates `(row, logit)` best first: the higher logit, the lower row on ties.
fn best_first(a: &(usize, f32), b: &(usize, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Indices of the `k` largest values, largest first (lowest index on ties).
fn top_indices(values: &[f32], k: usize) -> Vec<usize> {
    let mut order: Vec<(usize, f32)> = values.iter().copied().enumerate().collect();
    let k = k.min(order.len());
    if k == 0 {
        return Vec::new();
    }
    order.select_nth_unstable_by(k - 1, best_first);
    order.truncate(k);
    order.sort_unstable_by(best_first);
    order.into_iter().map(|(row, _)| row).collect()
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
    let mut encoded: Vec<(String, Vec<u64>, llama_cpp_sys_2::ggml_type, Vec<u8>)> = Vec::new();
    let f32_bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    if let Some(ids) = &weights.vocab_subset {
        check_subset(ids, n_vocab)?;
        let bytes = ids.iter().flat_map(|t| t.to_le_bytes()).collect();
        encoded.push((
            keys::VOCAB_SUBSET.into(),
            vec![ids.len() as u64],
            GGML_TYPE_I32,
            bytes,
        ));
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
                Some(ids) => m.gather_rows(&as_rows(ids))?,
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
    let tensors: Vec<TensorOut<'_>> = encoded
        .iter()
        .map(|(name, dims, ty, data)| TensorOut {
            name: name.clone(),
            dims: dims.clone(),
            ty: *ty,
            data,
        })
        .collect();
    write_gguf(path, &meta, &tensors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_rms_scaling() {
        let mut values = [3.0, -4.0, 0.0, 0.0];
        scale_to_unit_rms(&mut values);
        assert_eq!(values, [1.2, -1.6, 0.0, 0.0]);
        let mut zeros = [0.0; 3];
        scale_to_unit_rms(&mut zeros);
        assert_eq!(zeros, [0.0; 3]);
    }

    #[test]
    fn backend_candidates_rank_like_the_thread_pool() {
        let mut found = vec![(7, 0.5), (2, 0.9), (4, 0.9), (1, -1.0)];
        found.sort_unstable_by(best_first);
        assert_eq!(found, vec![(2, 0.9), (4, 0.9), (7, 0.5), (1, -1.0)]);
    }

    #[test]
    fn top_indices_orders_and_breaks_ties_by_index() {
        assert_eq!(top_indices(&[0.1, 0.9, 0.5, 0.9, -1.0], 3), vec![1, 3, 2]);
        assert_eq!(top_indices(&[1.0], 5), vec![0]);
        assert!(top_indices(&[1.0], 0).is_empty());
    }
}
