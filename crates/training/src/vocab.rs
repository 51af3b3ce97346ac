//! Which tokens the heads can propose: the whole vocabulary, or the ones most often seen as
//! targets (a smaller projection makes heads cheaper to run and to train).

use std::path::Path;

use engine::matrix::QuantMatrix;
use engine::medusa::heads::{base_projection, base_token_embedding, scale_to_unit_rms};
use engine::{EngineError, TokenId};

#[derive(Debug, Clone)]
pub struct HeadVocabulary {
    /// Projection row of each token id, `None` for tokens the heads cannot propose.
    row_of: Vec<Option<u32>>,
    /// Token id of each projection row, when restricted.
    pub subset: Option<Vec<TokenId>>,
}

impl HeadVocabulary {
    pub fn full(n_vocab: usize) -> Self {
        Self {
            row_of: (0..n_vocab as u32).map(Some).collect(),
            subset: None,
        }
    }

    /// The `size` most frequent tokens by `counts` (ties by id); the full vocabulary when `size`
    /// covers it.
    pub fn most_frequent(counts: &[u64], size: usize) -> Self {
        if size >= counts.len() {
            return Self::full(counts.len());
        }
        let mut ids: Vec<usize> = (0..counts.len()).collect();
        ids.sort_by(|&a, &b| counts[b].cmp(&counts[a]).then(a.cmp(&b)));
        ids.truncate(size);
        let mut row_of = vec![None; counts.len()];
        for (row, &id) in ids.iter().enumerate() {
            row_of[id] = Some(row as u32);
        }
        Self {
            row_of,
            subset: Some(ids.into_iter().map(|id| id as TokenId).collect()),
        }
    }

    /// The model's output projection, kept to the rows of the tokens it can propose.
    pub fn projection(
        &self,
        model_path: &Path,
        n_vocab: usize,
        n_embd: usize,
    ) -> Result<QuantMatrix, EngineError> {
        let full = base_projection(model_path, n_vocab, n_embd)?;
        match &self.subset {
            Some(ids) => full.gather_rows(&ids.iter().map(|&t| t as usize).collect::<Vec<_>>()),
            None => Ok(full),
        }
    }

    pub fn rows(&self) -> usize {
        self.subset.as_ref().map_or(self.row_of.len(), Vec::len)
    }

    pub fn row(&self, token: TokenId) -> Option<u32> {
        usize::try_from(token)
            .ok()
            .and_then(|t| self.row_of.get(t).copied().flatten())
    }

    /// Share of the counted targets the heads can propose at all.
    pub fn coverage(&self, counts: &[u64]) -> f64 {
        let total: u64 = counts.iter().sum();
        let covered: u64 = counts
            .iter()
            .enumerate()
            .filter(|(id, _)| self.row_of.get(*id).copied().flatten().is_some())
            .map(|(_, c)| c)
            .sum();
        if total == 0 {
            0.0
        } else {
            covered as f64 / total as f64
        }
    }
}

/// Every token's input embedding at unit RMS, row-major `[n_vocab, n_embd]`: how the heads and
/// the feature drafter read a token.
pub fn unit_rms_embedding(
    model_path: &Path,
    n_vocab: usize,
    n_embd: usize,
) -> Result<Vec<f32>, EngineError> {
    let mut rows = base_token_embedding(model_path, n_vocab, n_embd)?.to_f32()?;
    rows.chunks_mut(n_embd).for_each(scale_to_unit_rms);
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_most_frequent_tokens_in_order() {
        let vocab = HeadVocabulary::most_frequent(&[5, 0, 9, 5, 1], 3);
        assert_eq!(vocab.subset, Some(vec![2, 0, 3]));
        assert_eq!(vocab.rows(), 3);
        assert_eq!(vocab.row(2), Some(0));
        assert_eq!(vocab.row(3), Some(2));
        assert_eq!(vocab.row(4), None);
        assert_eq!(vocab.row(-1), None);
        assert!((vocab.coverage(&[5, 0, 9, 5, 1]) - 19.0 / 20.0).abs() < 1e-12);
    }

    #[test]
    fn a_size_covering_everything_is_the_full_vocabulary() {
        let vocab = HeadVocabulary::most_frequent(&[1, 2], 2);
        assert!(vocab.subset.is_none());
        assert_eq!(vocab.row(1), Some(1));
    }
}
