//! A feature drafter loaded beside its base model, which lends it its token embeddings and its
//! output projection.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::format::{keys, FeatureShape, ARCH, MATRICES, NORMS};
use super::layer::FeatureLayer;
use super::write::FeatureTrainingRecord;
use crate::error::EngineError;
use crate::medusa::heads::{
    base_projection, base_token_embedding, scale_to_unit_rms, top_indices, BaseIdentity,
};
use crate::token::{is_vocabulary_subset, token_rows, TokenId};
use crate::weights::gguf_file::GgufFile;
use crate::weights::matrix::QuantMatrix;

pub struct FeatureDrafterModel {
    layer: FeatureLayer,
    /// The base model's token embeddings.
    embedding: Arc<QuantMatrix>,
    /// The base model's output projection, the subset's rows when it keeps one.
    projection: QuantMatrix,
    /// Token id of each projection row, when the vocabulary is restricted.
    row_tokens: Option<Vec<TokenId>>,
    training: Option<FeatureTrainingRecord>,
    /// The threads its products are split over, kept between steps.
    pool: rayon::ThreadPool,
    /// Evaluations (one depth of every request's trees) and their queries since last taken.
    evaluations: AtomicU64,
    queries: AtomicU64,
}

fn invalid(message: impl Into<String>) -> EngineError {
    EngineError::FeatureDrafter(message.into())
}

impl FeatureDrafterModel {
    /// Loads the drafter at `path` for the model at `model_path`, whose identity is `base`.
    pub fn load(
        path: &Path,
        base: &BaseIdentity,
        model_path: &Path,
        threads: usize,
    ) -> Result<Self, EngineError> {
        let file = GgufFile::open(path)?;
        if file.string(keys::ARCH).as_deref() != Some(ARCH) {
            return Err(invalid(format!(
                "{} is a GGUF file but not a feature drafter",
                path.display()
            )));
        }
        let shape = FeatureShape {
            n_embd: file.required_u32(keys::N_EMBD)? as usize,
            heads: file.required_u32(keys::HEADS)? as usize,
            ff: file.required_u32(keys::FF)? as usize,
            window: file.required_u32(keys::WINDOW)? as usize,
        };
        shape.check()?;
        let n_vocab = file.required_u32(keys::N_VOCAB)?;
        let tokenizer = file.string(keys::TOKENIZER).unwrap_or_default();
        if shape.n_embd != base.n_embd as usize
            || n_vocab != base.n_vocab
            || tokenizer != base.tokenizer_sha256
        {
            return Err(invalid(format!(
                "{} was made for another model (width {}, vocabulary {})",
                path.display(),
                shape.n_embd,
                n_vocab
            )));
        }
        let matrices = MATRICES
            .iter()
            .zip(shape.matrix_dims())
            .map(|(name, (rows, cols))| file.matrix(name, rows, cols))
            .collect::<Result<Vec<_>, _>>()?;
        let norm = |i: usize| file.vector(NORMS[i], shape.n_embd);
        let layer = FeatureLayer::from_matrices(shape, matrices, [norm(0)?, norm(1)?, norm(2)?])?;
        let training = file
            .string(keys::TRAINING)
            .map(|json| serde_json::from_str(&json))
            .transpose()
            .map_err(|e| invalid(format!("training record: {e}")))?;
        let (n_vocab, n_embd) = (base.n_vocab as usize, shape.n_embd);
        let row_tokens = if file.has_tensor(keys::VOCAB_SUBSET) {
            let ids = file.token_ids(keys::VOCAB_SUBSET)?;
            if !is_vocabulary_subset(&ids, n_vocab) {
                return Err(invalid(
                    "its vocabulary subset holds ids outside the vocabulary",
                ));
            }
            Some(ids)
        } else {
            None
        };
        let full = base_projection(model_path, n_vocab, n_embd)?;
        let projection = match &row_tokens {
            Some(ids) => full.gather_rows(&token_rows(ids))?,
            None => full,
        };
        let embedding = Arc::new(base_token_embedding(model_path, n_vocab, n_embd)?);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.clamp(1, 16))
            .thread_name(|i| format!("feature-drafter-{i}"))
            .build()
            .map_err(|e| {
                EngineError::Context(format!("could not start the drafter's threads: {e}"))
            })?;
        Ok(Self {
            layer,
            embedding,
            projection,
            row_tokens,
            training,
            pool,
            evaluations: AtomicU64::new(0),
            queries: AtomicU64::new(0),
        })
    }

    /// A drafter from its parts, as a test makes one.
    #[cfg(test)]
    pub(super) fn from_parts(
        layer: FeatureLayer,
        embedding: QuantMatrix,
        projection: QuantMatrix,
    ) -> Self {
        Self {
            layer,
            embedding: Arc::new(embedding),
            projection,
            row_tokens: None,
            training: None,
            pool: rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .unwrap(),
            evaluations: AtomicU64::new(0),
            queries: AtomicU64::new(0),
        }
    }

    pub fn shape(&self) -> FeatureShape {
        self.layer.shape()
    }

    /// Tokens it can propose, when its vocabulary is restricted.
    pub fn vocab_rows(&self) -> Option<usize> {
        self.row_tokens.as_ref().map(Vec::len)
    }

    pub fn training(&self) -> Option<&FeatureTrainingRecord> {
        self.training.as_ref()
    }

    /// Evaluations and their queries since the last call.
    pub fn take_counts(&self) -> (u64, u64) {
        (
            self.evaluations.swap(0, Ordering::Relaxed),
            self.queries.swap(0, Ordering::Relaxed),
        )
    }

    pub(super) fn count(&self, evaluations: u64, queries: usize) {
        self.evaluations.fetch_add(evaluations, Ordering::Relaxed);
        self.queries.fetch_add(queries as u64, Ordering::Relaxed);
    }

    pub(super) fn layer(&self) -> &FeatureLayer {
        &self.layer
    }

    pub(super) fn pool(&self) -> &rayon::ThreadPool {
        &self.pool
    }

    /// `token`'s embedding at unit RMS (zeros for a token outside the vocabulary).
    pub(super) fn embed(&self, token: TokenId) -> Vec<f32> {
        let mut e = vec![0.0; self.embedding.cols];
        if let Some(row) = usize::try_from(token)
            .ok()
            .filter(|&r| r < self.embedding.rows)
        {
            // A row that cannot be decoded reads as no token.
            let _ = self.embedding.decode_row(row, &mut e);
        }
        scale_to_unit_rms(&mut e);
        e
    }

    /// For each predicted feature, its `wanted` likeliest next tokens with their
    /// log-probabilities, best first.
    pub(super) fn children(
        &self,
        features: &[&[f32]],
        wanted: impl Iterator<Item = usize>,
    ) -> Vec<Vec<(TokenId, f32)>> {
        let logits = self.projection.matmul(features);
        logits
            .into_iter()
            .zip(wanted)
            .map(|(logits, wanted)| {
                let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let log_sum = logits.iter().map(|l| (l - max).exp()).sum::<f32>().ln() + max;
                top_indices(&logits, wanted)
                    .into_iter()
                    .map(|row| {
                        let token = match &self.row_tokens {
                            Some(ids) => ids[row],
                            None => row as TokenId,
                        };
                        (token, logits[row] - log_sum)
                    })
                    .collect()
            })
            .collect()
    }
}
