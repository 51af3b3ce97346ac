//! Prompt lookup: guesses that text seen earlier (in the prompt or the output) repeats.
//! Drafting costs nothing but a scan of the token history.

use super::drafter::{DraftInput, Drafter};
use super::tree::{DraftTree, TokenSource};
use crate::sampler::TokenId;

#[derive(Debug, Clone)]
pub struct LookupDrafter {
    /// Longest suffix n-gram to match first; shorter ones are tried after it.
    pub max_ngram: usize,
    pub min_ngram: usize,
    /// Most tokens in one continuation.
    pub max_len: usize,
    /// Distinct continuations merged into the tree.
    pub max_branches: usize,
}

impl Default for LookupDrafter {
    fn default() -> Self {
        Self {
            max_ngram: 3,
            // A single matching token is too weak a signal to spend a decode on.
            min_ngram: 2,
            max_len: 16,
            max_branches: 1,
        }
    }
}

impl Drafter for LookupDrafter {
    fn name(&self) -> &'static str {
        "lookup"
    }

    fn drafts_cheaply(&self) -> bool {
        true
    }

    fn draft(&mut self, input: &DraftInput<'_>, max_nodes: usize) -> DraftTree {
        let continuations = self.continuations(input.history);
        merge_into_tree(&continuations, max_nodes)
    }
}

impl LookupDrafter {
    /// Continuations after the most recent earlier occurrences of the longest matching suffix.
    pub fn continuations(&self, history: &[TokenId]) -> Vec<Vec<TokenId>> {
        let len = history.len();
        for n in (self.min_ngram.max(1)..=self.max_ngram).rev() {
            if len <= n {
                continue;
            }
            let suffix = &history[len - n..];
            let mut found: Vec<Vec<TokenId>> = Vec::new();
            // Newest first: recent text is the better predictor. `start + n < len` leaves at
            // least one token after the match, and excludes the suffix itself.
            for start in (0..len - n).rev() {
                if &history[start..start + n] != suffix {
                    continue;
                }
                let from = start + n;
                let continuation = history[from..(from + self.max_len).min(len)].to_vec();
                if !found.iter().any(|c| c.starts_with(&continuation)) {
                    found.push(continuation);
                }
                if found.len() == self.max_branches {
                    break;
                }
            }
            if !found.is_empty() {
                return found;
            }
        }
        Vec::new()
    }
}

/// Builds a trie of the continuations (shared prefixes become one path), at most `max_nodes`.
fn merge_into_tree(continuations: &[Vec<TokenId>], max_nodes: usize) -> DraftTree {
    let mut tree = DraftTree::default();
    for (rank, continuation) in continuations.iter().enumerate() {
        let mut parent = None;
        for &token in continuation {
            parent = Some(match tree.child(parent, token) {
                Some(node) => node,
                None if tree.len() < max_nodes => {
                    tree.push(token, parent, TokenSource::Lookup, rank)
                }
                None => break,
            });
        }
    }
    tree
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drafter() -> LookupDrafter {
        LookupDrafter {
            max_ngram: 2,
            min_ngram: 1,
            max_len: 3,
            max_branches: 2,
        }
    }

    #[test]
    fn longest_suffix_match_wins() {
        // Suffix [1, 2] occurred at 0: continuation [3, 4, 5].
        let history = [1, 2, 3, 4, 5, 9, 2, 7, 1, 2];
        assert_eq!(drafter().continuations(&history), vec![vec![3, 4, 5]]);
    }

    #[test]
    fn falls_back_to_shorter_ngrams_and_newest_first() {
        // [8, 2] never occurred before; [2] did, at 1 (-> 3, 4, 5) and at 6 (-> 7, 8, 2).
        let history = [1, 2, 3, 4, 5, 9, 2, 7, 8, 2];
        assert_eq!(
            drafter().continuations(&history),
            vec![vec![7, 8, 2], vec![3, 4, 5]]
        );
    }

    #[test]
    fn no_match_drafts_nothing() {
        let mut d = drafter();
        let history = [1, 2, 3];
        assert!(d
            .draft(
                &DraftInput {
                    history: &history,
                    hidden_state: None
                },
                8
            )
            .is_empty());
    }

    #[test]
    fn continuations_merge_into_a_trie_within_budget() {
        let tree = merge_into_tree(&[vec![5, 6, 7], vec![5, 8]], 10);
        assert_eq!(tree.tokens, vec![5, 6, 7, 8]);
        assert_eq!(tree.parents, vec![None, Some(0), Some(1), Some(0)]);
        let small = merge_into_tree(&[vec![5, 6, 7], vec![9]], 2);
        assert_eq!(small.tokens, vec![5, 6]);
    }
}
