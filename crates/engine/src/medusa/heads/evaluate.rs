//! Loaded heads and their evaluation: each head's best guesses from a hidden state, on the
//! engine's thread pool or a ggml backend.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::device::DeviceHeads;
use super::info::HeadsInfo;
use super::weights::Head;
use crate::token::TokenId;
use crate::weights::matrix::QuantMatrix;

/// One question to a head: its best `k` tokens from `hidden`, the base model's final hidden
/// state at one request's last accepted position, given that request's
/// [`MedusaHeads::token_inputs`].
pub struct HeadQuery<'a> {
    pub hidden: &'a [f32],
    pub inputs: Vec<Vec<f32>>,
    pub k: usize,
}

pub struct MedusaHeads {
    pub(super) info: HeadsInfo,
    pub(super) heads: Vec<Head>,
    pub(super) shared_projection: Option<Arc<QuantMatrix>>,
    /// The base model's token embeddings, when the heads read the root token (and the path).
    pub(super) token_embedding: Option<Arc<QuantMatrix>>,
    /// Token id of each projection row, when the vocabulary is restricted.
    pub(super) row_tokens: Option<Vec<TokenId>>,
    /// The threads the heads' products are split over, kept between steps.
    pub(super) pool: rayon::ThreadPool,
    /// The heads' weights on a ggml backend, when they run there.
    pub(super) on_backend: Option<Mutex<DeviceHeads>>,
    /// Evaluations (of one head, for any number of queries) and queries since last taken.
    pub(super) evaluations: AtomicU64,
    pub(super) queries: AtomicU64,
}

impl MedusaHeads {
    pub fn info(&self) -> &HeadsInfo {
        &self.info
    }

    pub fn head_count(&self) -> usize {
        self.heads.len()
    }

    /// Evaluations and their queries since the last call.
    pub fn take_counts(&self) -> (u64, u64) {
        (
            self.evaluations.swap(0, Ordering::Relaxed),
            self.queries.swap(0, Ordering::Relaxed),
        )
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
        let query = HeadQuery {
            hidden,
            inputs: inputs.to_vec(),
            k,
        };
        self.top_k_each(head, &[query]).pop().unwrap_or_default()
    }

    /// [`Self::top_k`] for several queries at once (the nodes of one depth, of one request or
    /// of every request drafting this step): every matrix is read once for all of them.
    pub fn top_k_each(&self, head: usize, queries: &[HeadQuery<'_>]) -> Vec<Vec<TokenId>> {
        self.evaluations.fetch_add(1, Ordering::Relaxed);
        self.queries
            .fetch_add(queries.len() as u64, Ordering::Relaxed);
        let rows = match &self.on_backend {
            Some(backend) => match lock(backend).top_k_each(head, queries) {
                Ok(candidates) => candidates
                    .into_iter()
                    .zip(queries)
                    .map(|(mut found, query)| {
                        found.sort_unstable_by(best_first);
                        found
                            .into_iter()
                            .take(query.k)
                            .map(|(row, _)| row)
                            .collect()
                    })
                    .collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "heads on the ggml backend failed; this step uses the thread pool");
                    self.thread_pool_rows(head, queries)
                }
            },
            None => self.thread_pool_rows(head, queries),
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
    pub(super) fn thread_pool_rows(
        &self,
        head: usize,
        queries: &[HeadQuery<'_>],
    ) -> Vec<Vec<usize>> {
        let head = &self.heads[head];
        let projection = head
            .projection
            .as_ref()
            .or(self.shared_projection.as_deref())
            .expect("a head has its own projection or shares the base one");
        let mut xs: Vec<Vec<f32>> = queries.iter().map(|q| q.hidden.to_vec()).collect();
        let width = xs.first().map_or(0, Vec::len);
        let logits = self.pool.install(|| {
            // `R e_root + sum_j P_j e_j`, added to the first block's product: the m-th matrix
            // applies to each query's m-th input.
            let mut token_terms: Vec<Vec<f32>> = vec![vec![0.0; width]; queries.len()];
            for (m, matrix) in head.root.iter().chain(&head.path).enumerate() {
                let reading: Vec<usize> = (0..queries.len())
                    .filter(|&q| queries[q].inputs.len() > m)
                    .collect();
                let inputs: Vec<&[f32]> = reading
                    .iter()
                    .map(|&q| queries[q].inputs[m].as_slice())
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
            .map(|(logits, query)| top_indices(logits, query.k))
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

pub(super) fn lock(backend: &Mutex<DeviceHeads>) -> std::sync::MutexGuard<'_, DeviceHeads> {
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
pub(crate) fn top_indices(values: &[f32], k: usize) -> Vec<usize> {
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
