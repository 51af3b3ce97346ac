//! The token id every part of the engine speaks, and what text tokens stand for: their own
//! module, at the bottom of the crate, so that drafting, sampling, requests and output can name a
//! token without importing one another.

/// A token of the model's vocabulary, as llama.cpp numbers it.
pub type TokenId = i32;

/// What text the model's tokens stand for.
pub(crate) trait Vocabulary {
    /// Whether `token` ends a generation (end of turn, end of text).
    fn ends_generation(&self, token: TokenId) -> bool;

    /// Appends `token`'s bytes to `out`; special tokens by name when `special`, else as nothing.
    fn piece_into(&self, token: TokenId, special: bool, out: &mut Vec<u8>);
}

/// Whether `ids` name some of the `n_vocab` tokens and nothing else: a drafter's vocabulary
/// subset, as its file holds it.
pub(crate) fn is_vocabulary_subset(ids: &[TokenId], n_vocab: usize) -> bool {
    !ids.is_empty() && ids.iter().all(|&t| t >= 0 && (t as usize) < n_vocab)
}

/// The matrix rows of the tokens `ids` (a projection's rows are in token order).
pub(crate) fn token_rows(ids: &[TokenId]) -> Vec<usize> {
    ids.iter().map(|&t| t as usize).collect()
}

/// How many tokens `a` and `b` start with alike.
pub(crate) fn common_prefix(a: &[TokenId], b: &[TokenId]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_prefix_is_what_both_start_with() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4, 5]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
        assert_eq!(common_prefix(&[1, 2], &[1, 2]), 2);
    }
}
