//! Prompt lookup: guesses that text seen earlier (in the prompt or the output) repeats, and
//! where the request's own text has no match, that what followed its last tokens in earlier
//! requests' text follows them again (the [`LookupMemory`]). Drafting costs nothing but a scan
//! of the token history and a few table reads.

use super::drafter::{DraftInput, Drafter, DrafterTraits, Proposal};
use super::drafter_kind::DrafterKind;
use super::lookup_memory::{Evidence, LookupMemory};
use super::tree::{DraftTree, TokenSource};
use crate::token::TokenId;

#[derive(Debug, Clone)]
pub struct LookupDrafter {
    /// Longest suffix n-gram to match first; shorter ones are tried after it.
    pub max_ngram: usize,
    pub min_ngram: usize,
    /// Most tokens in one continuation.
    pub max_len: usize,
    /// Distinct continuations merged into the tree.
    pub max_branches: usize,
    /// Least share, by the memory's counts, of the times a remembered path went this way, for
    /// it to be drafted (a path that parted often is not).
    pub min_share: f64,
}

impl Default for LookupDrafter {
    fn default() -> Self {
        Self {
            max_ngram: 3,
            // A single matching token is too weak a signal to spend a decode on.
            min_ngram: 2,
            max_len: 16,
            max_branches: 1,
            min_share: DEFAULT_MIN_SHARE,
        }
    }
}

/// Matches longer than this are all alike: the text is being copied.
const LONGEST_MATCH_COUNTED: usize = 32;

/// Chosen on `bench/tuning/repetitive.txt` (docs/BENCHMARKS.md, "Lookup that remembers").
const DEFAULT_MIN_SHARE: f64 = 0.3;

impl Drafter for LookupDrafter {
    fn kind(&self) -> DrafterKind {
        DrafterKind::Lookup
    }

    /// By the length of its match, how often a continuation is right says more about text in
    /// general than about one text: a long match is text being copied, a short one is chance.
    fn traits(&self) -> DrafterTraits {
        DrafterTraits {
            acceptance_carries_over: true,
            drafts_cheaply: true,
            priced_per_token: false,
            reads_hidden_state: false,
        }
    }

    fn propose(&mut self, input: &DraftInput<'_>, max_nodes: usize) -> Proposal {
        let (continuations, match_len) = self.continuations_with_match(input.history);
        if continuations.is_empty() {
            if let Some(remembered) = input
                .memory
                .and_then(|memory| self.remembered(memory, input.history, max_nodes))
            {
                return remembered;
            }
        }
        Proposal {
            tree: merge_into_tree(&continuations, max_nodes),
            evidence_class: evidence_class(match_len),
            ..Proposal::default()
        }
    }
}

/// The first class of remembered proposals, after the classes of the request's own matches:
/// the budget learns apart how often each is right.
const FIRST_REMEMBERED_CLASS: usize = 5;

/// Times a context was seen from which its followers are more than chance.
const SEEN_OFTEN: u32 = 3;

/// A remembered proposal's class by the evidence behind its first token: after the short or
/// the long context, seen fewer than [`SEEN_OFTEN`] times or more.
fn remembered_class(evidence: Evidence) -> usize {
    FIRST_REMEMBERED_CLASS
        + 2 * usize::from(evidence.long_context())
        + usize::from(evidence.seen >= SEEN_OFTEN)
}

impl LookupDrafter {
    /// What the memory drafts after `history`, if it remembers anything there.
    fn remembered(
        &self,
        memory: &LookupMemory,
        history: &[TokenId],
        max_nodes: usize,
    ) -> Option<Proposal> {
        let (tree, evidence) = memory.draft(history, max_nodes, self.min_share);
        Some(Proposal {
            evidence_class: remembered_class(evidence?),
            tree,
            ..Proposal::default()
        })
        .filter(|proposal| !proposal.tree.is_empty())
    }
}

/// The matched length in doubling classes: 2, 3-4, 5-8, 9-16, 17 and more tokens. A match of a
/// few common tokens often parts at once; a long one means text is being copied.
fn evidence_class(match_len: usize) -> usize {
    match match_len {
        0..=2 => 0,
        n => ((n - 1).ilog2() as usize).min(4),
    }
}

impl LookupDrafter {
    /// Continuations after the most recent earlier occurrences of the longest matching suffix.
    pub fn continuations(&self, history: &[TokenId]) -> Vec<Vec<TokenId>> {
        self.continuations_with_match(history).0
    }

    /// [`Self::continuations`], and how far back the newest occurrence matches the history
    /// (counted up to [`LONGEST_MATCH_COUNTED`] tokens).
    fn continuations_with_match(&self, history: &[TokenId]) -> (Vec<Vec<TokenId>>, usize) {
        let len = history.len();
        for n in (self.min_ngram.max(1)..=self.max_ngram).rev() {
            if len <= n {
                continue;
            }
            let suffix = &history[len - n..];
            let mut found: Vec<Vec<TokenId>> = Vec::new();
            let mut match_len = 0;
            // Newest first: recent text is the better predictor. `start + n < len` leaves at
            // least one token after the match, and excludes the suffix itself.
            for start in (0..len - n).rev() {
                if &history[start..start + n] != suffix {
                    continue;
                }
                let from = start + n;
                if found.is_empty() {
                    match_len = n
                        + (1..=start.min(LONGEST_MATCH_COUNTED - n))
                            .take_while(|&back| history[start - back] == history[len - n - back])
                            .count();
                }
                let continuation = history[from..(from + self.max_len).min(len)].to_vec();
                if !found.iter().any(|c| c.starts_with(&continuation)) {
                    found.push(continuation);
                }
                if found.len() == self.max_branches {
                    break;
                }
            }
            if !found.is_empty() {
                return (found, match_len);
            }
        }
        (Vec::new(), 0)
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
    use crate::speculative::drafter::StepDrafters;

    fn drafter() -> LookupDrafter {
        LookupDrafter {
            max_ngram: 2,
            min_ngram: 1,
            max_len: 3,
            max_branches: 2,
            min_share: DEFAULT_MIN_SHARE,
        }
    }

    fn propose(history: &[TokenId], memory: Option<&LookupMemory>) -> Proposal {
        drafter().propose(
            &DraftInput {
                sequence: 0,
                history,
                hidden_state: None,
                recent_states: &[],
                step_drafters: &StepDrafters::default(),
                memory,
            },
            8,
        )
    }

    #[test]
    fn the_memory_drafts_where_the_requests_own_text_has_no_match() {
        let mut memory = LookupMemory::new(64);
        for _ in 0..4 {
            memory.add(&[20, 21, 22, 23, 24, 25]);
        }
        // No earlier 23 in its own text: the memory's continuation (24 after 22, 23 four times),
        // in a class of its own.
        let remembered = propose(&[1, 2, 22, 23], Some(&memory));
        assert_eq!(remembered.tree.tokens, vec![24, 25]);
        assert_eq!(remembered.evidence_class, FIRST_REMEMBERED_CLASS + 1);
        // Its own match comes first.
        let own = propose(&[23, 7, 1, 2, 22, 23], Some(&memory));
        assert_eq!(own.tree.tokens, vec![7, 1, 2]);
        assert!(own.evidence_class < FIRST_REMEMBERED_CLASS);
        // Without the memory (a request that may not read it), nothing.
        assert!(propose(&[1, 2, 22, 23], None).tree.is_empty());
        // Where the memory knows nothing either, an empty proposal of the own-match class 0.
        assert_eq!(propose(&[1, 2, 3, 4], Some(&memory)), Proposal::default());
    }

    #[test]
    fn a_remembered_proposals_class_follows_the_evidence_behind_its_first_token() {
        let class = |context_len, seen| remembered_class(Evidence { context_len, seen });
        assert_eq!(class(2, 1), FIRST_REMEMBERED_CLASS);
        assert_eq!(class(2, 3), FIRST_REMEMBERED_CLASS + 1);
        assert_eq!(class(4, 2), FIRST_REMEMBERED_CLASS + 2);
        assert_eq!(class(4, 40), FIRST_REMEMBERED_CLASS + 3);
    }

    fn drafted_class(history: &[TokenId]) -> (usize, usize) {
        let d = LookupDrafter::default();
        let (_, match_len) = d.continuations_with_match(history);
        (match_len, evidence_class(match_len))
    }

    #[test]
    fn the_match_behind_a_proposal_is_measured_back_to_where_it_parts() {
        // [1, 7, 8] occurred at 1; before it 0 != 5: three tokens match.
        assert_eq!(drafted_class(&[0, 1, 7, 8, 9, 5, 1, 7, 8]), (3, 1));
        // Only the suffix itself: two tokens.
        assert_eq!(drafted_class(&[0, 4, 7, 8, 9, 5, 1, 7, 8]), (2, 0));
        // A copy of 10 tokens: class 9-16.
        let text: Vec<TokenId> = (10..20).collect();
        let copied: Vec<TokenId> = text
            .iter()
            .chain([99].iter())
            .chain(&text)
            .copied()
            .collect();
        assert_eq!(drafted_class(&copied), (10, 3));
        // The whole history repeating: counted up to the cap.
        let long: Vec<TokenId> = (0..100).map(|i| i % 40).collect();
        assert_eq!(drafted_class(&long), (LONGEST_MATCH_COUNTED, 4));
        // No match: no evidence.
        assert_eq!(drafted_class(&[1, 2, 3]), (0, 0));
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
            .propose(
                &DraftInput {
                    sequence: 0,
                    history: &history,
                    hidden_state: None,
                    recent_states: &[],
                    step_drafters: &StepDrafters::default(),
                    memory: None,
                },
                8
            )
            .tree
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
