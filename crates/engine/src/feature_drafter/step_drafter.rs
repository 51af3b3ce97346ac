//! The feature drafter as a step drafter: at the start of a step every request drafting with it
//! has its tree grown together, one product per matrix and depth for all of them; each request
//! then takes its own.

use std::sync::Arc;
use std::time::Instant;

use super::load::FeatureDrafterModel;
use super::tree::{FeatureAsk, GrownTree};
use crate::clock::ms_since;
use crate::speculative::drafter::{DraftAsk, DrafterTraits, PreparedTrees, Proposal, StepDrafter};
use crate::speculative::drafter_kind::DrafterKind;
use crate::speculative::tree::{DraftTree, TokenSource};

pub struct EagleDrafter {
    model: Arc<FeatureDrafterModel>,
    prepared: PreparedTrees,
}

impl EagleDrafter {
    pub fn new(model: Arc<FeatureDrafterModel>) -> Self {
        Self {
            model,
            prepared: PreparedTrees::default(),
        }
    }

    /// What the drafter reads of an ask: its window of recent states and their tokens.
    fn feature_ask<'a>(&self, ask: &DraftAsk<'a>) -> Option<FeatureAsk<'a>> {
        let width = self.model.shape().n_embd;
        let rows = (ask.recent_states.len() / width)
            .min(self.model.shape().window)
            .min(ask.history.len());
        if rows == 0 || ask.max_nodes == 0 {
            return None;
        }
        let states = &ask.recent_states[ask.recent_states.len() - rows * width..];
        let tokens = &ask.history[ask.history.len() - rows..];
        Some(FeatureAsk {
            window: states.chunks(width).zip(tokens.iter().copied()).collect(),
            max_nodes: ask.max_nodes,
        })
    }
}

fn draft_tree(grown: GrownTree) -> DraftTree {
    let mut tree = DraftTree::default();
    for ((token, parent), rank) in grown.tokens.into_iter().zip(grown.parents).zip(grown.ranks) {
        tree.push(token, parent, TokenSource::Eagle, rank);
    }
    tree
}

impl StepDrafter for EagleDrafter {
    fn kind(&self) -> DrafterKind {
        DrafterKind::Eagle
    }

    /// How often it is right is its own (and the model's); it reads the hidden states.
    fn traits(&self) -> DrafterTraits {
        DrafterTraits {
            acceptance_carries_over: true,
            reads_hidden_state: true,
            ..DrafterTraits::default()
        }
    }

    fn prepare(&self, asks: &[DraftAsk<'_>]) {
        let (sequences, feature_asks): (Vec<usize>, Vec<FeatureAsk<'_>>) = asks
            .iter()
            .filter_map(|ask| Some((ask.sequence, self.feature_ask(ask)?)))
            .unzip();
        if feature_asks.is_empty() {
            self.prepared.replace(Vec::new(), 0.0);
            return;
        }
        let _span = tracing::debug_span!("eagle", requests = feature_asks.len()).entered();
        let started = Instant::now();
        let trees = self.model.grow(&feature_asks);
        let grown = sequences
            .into_iter()
            .zip(&feature_asks)
            .zip(trees)
            .map(|((sequence, ask), tree)| (sequence, draft_tree(tree), ask.max_nodes))
            .collect();
        self.prepared.replace(grown, ms_since(started));
    }

    /// The tree grown for this request with every other's, else its own (a request that asks
    /// for more than was grown).
    fn propose(&self, ask: &DraftAsk<'_>) -> Proposal {
        if let Some(prepared) = self.prepared.proposal(ask) {
            return prepared;
        }
        let Some(feature_ask) = self.feature_ask(ask) else {
            return Proposal::default();
        };
        self.model
            .grow(&[feature_ask])
            .pop()
            .map(draft_tree)
            .unwrap_or_default()
            .into()
    }

    fn take_counts(&self) -> (u64, u64) {
        self.model.take_counts()
    }
}
