//! Medusa heads as trainable candle tensors: per head, residual blocks `x + SiLU(W x + b)`
//! (W and b start at zero, so an untrained head repeats the base model's next-token guess),
//! then the base model's frozen output projection. Heads that read the root token add `R e`
//! to the first block, `e` the root's frozen embedding at unit RMS (R starts at zero too).
//! Heads that read the drafted path also add `P_j e_j` for each token between the root and the
//! one they guess (head k reads the tokens at depths 1..=k), trained with the true tokens there
//! (teacher forcing): at inference they read the tokens drafted on the node's path.

use candle_core::{DType, Device, Tensor, Var};

use crate::dataset::{Dataset, NO_TARGET};
use crate::vocab::HeadVocabulary;

/// Per head, per block: (W row-major, b), as the heads file takes them.
pub type BlockWeights = Vec<Vec<(Vec<f32>, Vec<f32>)>>;

pub struct TrainableHeads {
    /// Per head, per block: (W as `[n_embd, n_embd]`, b as `[n_embd]`).
    blocks: Vec<Vec<(Var, Var)>>,
    /// When the heads read the root token.
    root: Option<RootInput>,
    /// The projection transposed, `[n_embd, rows]`, frozen.
    projection_t: Tensor,
    device: Device,
}

struct RootInput {
    /// Token embeddings at unit RMS, `[n_vocab, n_embd]`, frozen.
    embedding: Tensor,
    /// Per head, R as `[n_embd, n_embd]`.
    weights: Vec<Var>,
    /// Per head k, when the heads read the drafted path: `P_j` for the token at depth j + 1,
    /// j < k, each `[n_embd, n_embd]`.
    path: Vec<Vec<Var>>,
}

/// One minibatch as tensors.
pub struct Batch {
    pub hidden: Tensor,
    /// The root token of each position, `[B]` u32.
    pub roots: Tensor,
    /// Per depth j + 1 below the root (the first `heads - 1`), the true token there (0 where
    /// the answer ended), `[B]` u32: what heads that read the drafted path see.
    pub path: Vec<Tensor>,
    /// Per head: projection row of the target (0 where there is none), `[B, 1]` u32.
    pub rows: Vec<Tensor>,
    /// Per head: 1 where the target is a token the heads can propose, else 0, `[B, 1]`.
    pub mask: Vec<Tensor>,
    /// Per head: positions that have a target at all (proposable or not).
    pub with_target: Vec<usize>,
}

impl TrainableHeads {
    /// `projection` holds the vocabulary's rows, row-major `[rows, n_embd]`; `root_embedding`,
    /// when the heads are to read the root token, every token's embedding at unit RMS;
    /// `path_input`: the heads read the drafted path too (only with `root_embedding`).
    pub fn new(
        heads: usize,
        layers: usize,
        n_embd: usize,
        projection: Vec<f32>,
        root_embedding: Option<Vec<f32>>,
        path_input: bool,
        device: &Device,
    ) -> candle_core::Result<Self> {
        if path_input && (root_embedding.is_none() || layers == 0) {
            return Err(candle_core::Error::Msg(
                "heads that read the drafted path read the root token too, in a first block".into(),
            ));
        }
        let square = || Var::zeros((n_embd, n_embd), DType::F32, device);
        let rows = projection.len() / n_embd.max(1);
        let projection_t = Tensor::from_vec(projection, (rows, n_embd), device)?
            .t()?
            .contiguous()?;
        let blocks = (0..heads)
            .map(|_| {
                (0..layers)
                    .map(|_| {
                        Ok((
                            Var::zeros((n_embd, n_embd), DType::F32, device)?,
                            Var::zeros(n_embd, DType::F32, device)?,
                        ))
                    })
                    .collect::<candle_core::Result<Vec<_>>>()
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let root = root_embedding
            .map(|e| {
                let rows = e.len() / n_embd.max(1);
                Ok::<_, candle_core::Error>(RootInput {
                    embedding: Tensor::from_vec(e, (rows, n_embd), device)?,
                    weights: (0..heads)
                        .map(|_| square())
                        .collect::<candle_core::Result<Vec<_>>>()?,
                    path: (0..heads)
                        .map(|k| {
                            (0..if path_input { k } else { 0 })
                                .map(|_| square())
                                .collect::<candle_core::Result<Vec<_>>>()
                        })
                        .collect::<candle_core::Result<Vec<_>>>()?,
                })
            })
            .transpose()?;
        Ok(Self {
            blocks,
            root,
            projection_t,
            device: device.clone(),
        })
    }

    pub fn vars(&self) -> Vec<Var> {
        self.blocks
            .iter()
            .flatten()
            .flat_map(|(w, b)| [w.clone(), b.clone()])
            .chain(self.root.iter().flat_map(|r| r.weights.iter().cloned()))
            .chain(
                self.root
                    .iter()
                    .flat_map(|r| r.path.iter().flatten().cloned()),
            )
            .collect()
    }

    /// Logits over the vocabulary's rows, per head, `[B, rows]`.
    pub fn forward(&self, batch: &Batch) -> candle_core::Result<Vec<Tensor>> {
        // Per head, what its first block adds: `R e_root + sum_j P_j e_j`.
        let token_terms = match &self.root {
            Some(root) => {
                let embed = |tokens: &Tensor| root.embedding.index_select(tokens, 0);
                let e_root = embed(&batch.roots)?;
                let depth = root.path.iter().map(Vec::len).max().unwrap_or(0);
                let e_path = batch.path[..depth]
                    .iter()
                    .map(embed)
                    .collect::<candle_core::Result<Vec<_>>>()?;
                root.weights
                    .iter()
                    .zip(&root.path)
                    .map(|(r, path)| {
                        let mut term = e_root.matmul(&r.as_tensor().t()?)?;
                        for (p, e) in path.iter().zip(&e_path) {
                            term = (term + e.matmul(&p.as_tensor().t()?)?)?;
                        }
                        Ok(Some(term))
                    })
                    .collect::<candle_core::Result<Vec<_>>>()?
            }
            None => vec![None; self.blocks.len()],
        };
        self.blocks
            .iter()
            .zip(token_terms)
            .map(|(blocks, token_term)| {
                let mut x = batch.hidden.clone();
                for (layer, (w, b)) in blocks.iter().enumerate() {
                    let mut z = x.matmul(&w.as_tensor().t()?)?;
                    if let (0, Some(term)) = (layer, &token_term) {
                        z = (z + term)?;
                    }
                    let z = z.broadcast_add(b.as_tensor())?;
                    x = (x + candle_nn::ops::silu(&z)?)?;
                }
                x.matmul(&self.projection_t)
            })
            .collect()
    }

    /// Gathers `positions` of `data` into tensors.
    pub fn batch(
        &self,
        data: &Dataset,
        positions: &[usize],
        vocab: &HeadVocabulary,
    ) -> candle_core::Result<Batch> {
        let n = positions.len();
        let mut hidden = Vec::with_capacity(n * data.n_embd);
        for &p in positions {
            hidden.extend_from_slice(data.hidden(p));
        }
        let mut rows = Vec::with_capacity(data.heads);
        let mut mask = Vec::with_capacity(data.heads);
        let mut with_target = Vec::with_capacity(data.heads);
        for head in 0..data.heads {
            let targets: Vec<_> = positions.iter().map(|&p| data.target(p, head)).collect();
            let head_rows: Vec<Option<u32>> = targets.iter().map(|&t| vocab.row(t)).collect();
            with_target.push(targets.iter().filter(|&&t| t != NO_TARGET).count());
            rows.push(Tensor::from_vec(
                head_rows
                    .iter()
                    .map(|r| r.unwrap_or(0))
                    .collect::<Vec<u32>>(),
                (n, 1),
                &self.device,
            )?);
            mask.push(Tensor::from_vec(
                head_rows
                    .iter()
                    .map(|r| if r.is_some() { 1f32 } else { 0.0 })
                    .collect::<Vec<f32>>(),
                (n, 1),
                &self.device,
            )?);
        }
        let token_ids = |token: &dyn Fn(usize) -> engine::TokenId| -> Vec<u32> {
            positions
                .iter()
                .map(|&p| u32::try_from(token(p)).unwrap_or(0))
                .collect()
        };
        let path = (0..data.heads.saturating_sub(1))
            .map(|j| Tensor::from_vec(token_ids(&|p| data.target(p, j)), n, &self.device))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Batch {
            hidden: Tensor::from_vec(hidden, (n, data.n_embd), &self.device)?,
            roots: Tensor::from_vec(token_ids(&|p| data.root(p)), n, &self.device)?,
            path,
            rows,
            mask,
            with_target,
        })
    }

    /// Per head, R as plain rows, when the heads read the root token.
    pub fn root_weights(&self) -> candle_core::Result<Option<Vec<Vec<f32>>>> {
        self.root
            .as_ref()
            .map(|root| {
                root.weights
                    .iter()
                    .map(|r| r.as_tensor().flatten_all()?.to_vec1::<f32>())
                    .collect()
            })
            .transpose()
    }

    /// Per head, its `P_j` as plain rows, when the heads read the drafted path.
    pub fn path_weights(&self) -> candle_core::Result<Option<Vec<Vec<Vec<f32>>>>> {
        let Some(root) = self
            .root
            .as_ref()
            .filter(|r| r.path.iter().any(|p| !p.is_empty()))
        else {
            return Ok(None);
        };
        root.path
            .iter()
            .map(|path| {
                path.iter()
                    .map(|p| p.as_tensor().flatten_all()?.to_vec1::<f32>())
                    .collect()
            })
            .collect::<candle_core::Result<Vec<_>>>()
            .map(Some)
    }

    /// The weights as plain rows, for the heads file.
    pub fn weights(&self) -> candle_core::Result<BlockWeights> {
        self.blocks
            .iter()
            .map(|blocks| {
                blocks
                    .iter()
                    .map(|(w, b)| {
                        Ok((
                            w.as_tensor().flatten_all()?.to_vec1::<f32>()?,
                            b.as_tensor().to_vec1::<f32>()?,
                        ))
                    })
                    .collect()
            })
            .collect()
    }
}
