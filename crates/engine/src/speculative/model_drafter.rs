//! The draft model as a drafter: a chain of its guesses, as long as the budget asks for, and
//! where it was torn between a few tokens after the chain, those few as branches.

use super::drafter::{DraftInput, Drafter, DrafterTraits, Guesses, Proposal};
use super::tree::{DraftTree, TokenSource, DRAFT_MODEL};

#[derive(Debug, Default)]
pub struct DraftModelDrafter;

impl Drafter for DraftModelDrafter {
    fn name(&self) -> &'static str {
        DRAFT_MODEL
    }

    /// How often a draft model is right is its own property (and the served model's); each
    /// guess takes a draft decode.
    fn traits(&self) -> DrafterTraits {
        DrafterTraits {
            acceptance_carries_over: true,
            drafts_cheaply: false,
            priced_per_token: true,
        }
    }

    fn propose(&mut self, input: &DraftInput<'_>, max_nodes: usize) -> Proposal {
        let Some(model) = input.draft_model else {
            return Proposal::default();
        };
        let guesses = match model.propose(input.sequence, input.history, max_nodes) {
            Ok(guesses) => guesses,
            Err(err) => {
                // The served model decodes on; this step drafts nothing.
                tracing::warn!(%err, "the draft model failed to propose");
                Guesses::default()
            }
        };
        let mut tree = DraftTree::default();
        let mut parent = None;
        for token in guesses.tokens {
            parent = Some(tree.push(token, parent, TokenSource::DraftModel, 0));
        }
        for (rank, token) in guesses.branches.into_iter().enumerate() {
            tree.push(token, parent, TokenSource::DraftModel, rank);
        }
        Proposal {
            tree,
            evidence_class: 0,
            reading_ms: guesses.reading_ms,
            prepared_ms: guesses.prepared_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::EngineError;
    use crate::speculative::drafter::ModelProposer;
    use crate::token::TokenId;

    /// Guesses the history's next integers, or fails.
    struct Counting(bool);

    impl ModelProposer for Counting {
        fn propose(
            &self,
            _seq: usize,
            history: &[TokenId],
            n: usize,
        ) -> Result<Guesses, EngineError> {
            if !self.0 {
                return Err(EngineError::Decode("draft model: out of cells".into()));
            }
            let last = *history.last().unwrap();
            // The last place torn between two tokens.
            let chain = n.saturating_sub(2) as TokenId;
            Ok(Guesses {
                tokens: (1..=chain).map(|i| last + i).collect(),
                branches: vec![last + chain + 1, last + chain + 2][..n.min(2)].to_vec(),
                reading_ms: 2.5,
                prepared_ms: 4.0,
            })
        }
    }

    fn draft(model: Option<&dyn ModelProposer>, n: usize) -> DraftTree {
        DraftModelDrafter
            .propose(
                &DraftInput {
                    sequence: 0,
                    history: &[3, 4],
                    hidden_state: None,
                    draft_model: model,
                    heads_trees: None,
                    memory: None,
                },
                n,
            )
            .tree
    }

    #[test]
    fn the_guesses_hang_in_one_chain_below_the_root_and_branch_at_its_end() {
        let tree = draft(Some(&Counting(true)), 4);
        assert_eq!(tree.tokens, vec![5, 6, 7, 8]);
        assert_eq!(tree.parents, vec![None, Some(0), Some(1), Some(1)]);
        assert_eq!(tree.ranks, vec![0, 0, 0, 1]);
        assert_eq!(tree.sources, vec![TokenSource::DraftModel; 4]);
        let torn_at_once = draft(Some(&Counting(true)), 2);
        assert_eq!(torn_at_once.tokens, vec![5, 6]);
        assert_eq!(torn_at_once.parents, vec![None, None]);
    }

    #[test]
    fn its_time_is_priced_per_token_without_the_reading() {
        let mut drafter = DraftModelDrafter;
        assert!(drafter.traits().priced_per_token);
        let input = DraftInput {
            sequence: 0,
            history: &[3],
            hidden_state: None,
            draft_model: Some(&Counting(true)),
            heads_trees: None,
            memory: None,
        };
        let proposal = drafter.propose(&input, 2);
        assert_eq!(proposal.reading_ms, 2.5);
        assert_eq!(proposal.prepared_ms, 4.0);
    }

    #[test]
    fn a_failed_or_missing_draft_model_drafts_nothing() {
        assert!(draft(Some(&Counting(false)), 3).is_empty());
        assert!(draft(None, 3).is_empty());
    }
}
