//! The draft model as a drafter: a chain of its guesses, as long as the budget asks for, and
//! where it was torn between a few tokens after the chain, those few as branches.

use super::drafter::{DraftAsk, DrafterTraits, Proposal, StepDrafter};
use super::drafter_kind::DrafterKind;
use super::tree::{DraftTree, TokenSource};
use crate::error::EngineError;
use crate::token::TokenId;

/// A model that continues sequences' text: the draft model, in its own context.
pub trait ModelProposer {
    /// Guesses for every ask at once, decoded together and kept for [`Self::propose`].
    fn prepare(&self, asks: &[DraftAsk<'_>]);

    /// Up to `n` tokens expected after `history` in sequence `seq`: what [`Self::prepare`]
    /// made for it, decoded further only when more are asked for.
    fn propose(&self, seq: usize, history: &[TokenId], n: usize) -> Result<Guesses, EngineError>;

    /// Decodes, and the tokens in them, since the last call.
    fn take_counts(&self) -> (u64, u64);
}

/// A model's guesses: a chain of its top tokens, and where it was torn between a few at the
/// place after the chain, those few, as branches.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Guesses {
    pub tokens: Vec<TokenId>,
    pub branches: Vec<TokenId>,
    /// Time spent first reading text it had not seen (see [`Proposal::reading_ms`]).
    pub reading_ms: f64,
    /// Time spent on them before they were asked for (see [`Proposal::prepared_ms`]).
    pub prepared_ms: f64,
}

impl Guesses {
    pub fn len(&self) -> usize {
        self.tokens.len() + self.branches.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps the first `n` guesses, the chain's first.
    pub fn truncate(&mut self, n: usize) {
        self.tokens.truncate(n);
        self.branches.truncate(n - self.tokens.len());
    }
}

/// How well a draft model guesses the served model's answers, measured when it loads: the
/// starting point of its acceptance before any request has drafted with it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Agreement {
    /// Of the draft model's confident guesses along the served model's greedy answer, the
    /// share that was the served model's token.
    pub(crate) rate: f64,
    /// Confident guesses behind the rate.
    pub(crate) guesses: usize,
    /// One draft decode of a single token.
    pub(crate) ms_per_token: f64,
}

pub struct DraftModelDrafter<M> {
    model: M,
}

impl<M: ModelProposer> DraftModelDrafter<M> {
    pub fn new(model: M) -> Self {
        Self { model }
    }
}

impl<M: ModelProposer> StepDrafter for DraftModelDrafter<M> {
    fn kind(&self) -> DrafterKind {
        DrafterKind::DraftModel
    }

    /// How often a draft model is right is its own property (and the served model's); each
    /// guess takes a draft decode.
    fn traits(&self) -> DrafterTraits {
        DrafterTraits {
            acceptance_carries_over: true,
            drafts_cheaply: false,
            priced_per_token: true,
            reads_hidden_state: false,
        }
    }

    fn prepare(&self, asks: &[DraftAsk<'_>]) {
        self.model.prepare(asks);
    }

    fn propose(&self, ask: &DraftAsk<'_>) -> Proposal {
        let guesses = match self.model.propose(ask.sequence, ask.history, ask.max_nodes) {
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

    fn take_counts(&self) -> (u64, u64) {
        self.model.take_counts()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guesses the history's next integers, or fails.
    struct Counting(bool);

    impl ModelProposer for Counting {
        fn prepare(&self, _asks: &[DraftAsk<'_>]) {}

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

        fn take_counts(&self) -> (u64, u64) {
            (0, 0)
        }
    }

    fn ask(history: &[TokenId], n: usize) -> DraftAsk<'_> {
        DraftAsk {
            sequence: 0,
            history,
            hidden_state: None,
            recent_states: &[],
            tree: None,
            max_nodes: n,
        }
    }

    fn draft(model: Counting, n: usize) -> DraftTree {
        DraftModelDrafter::new(model).propose(&ask(&[3, 4], n)).tree
    }

    #[test]
    fn the_guesses_hang_in_one_chain_below_the_root_and_branch_at_its_end() {
        let tree = draft(Counting(true), 4);
        assert_eq!(tree.tokens, vec![5, 6, 7, 8]);
        assert_eq!(tree.parents, vec![None, Some(0), Some(1), Some(1)]);
        assert_eq!(tree.ranks, vec![0, 0, 0, 1]);
        assert_eq!(tree.sources, vec![TokenSource::DraftModel; 4]);
        let torn_at_once = draft(Counting(true), 2);
        assert_eq!(torn_at_once.tokens, vec![5, 6]);
        assert_eq!(torn_at_once.parents, vec![None, None]);
    }

    #[test]
    fn its_time_is_priced_per_token_without_the_reading() {
        let drafter = DraftModelDrafter::new(Counting(true));
        assert!(drafter.traits().priced_per_token);
        let proposal = drafter.propose(&ask(&[3], 2));
        assert_eq!(proposal.reading_ms, 2.5);
        assert_eq!(proposal.prepared_ms, 4.0);
    }

    #[test]
    fn a_failed_draft_model_drafts_nothing() {
        assert!(draft(Counting(false), 3).is_empty());
    }
}
