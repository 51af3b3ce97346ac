//! What a drafter sees and what it must do. The verifier does not care who drafted.
//!
//! Drafters have two roles. A [`Drafter`] belongs to one request and proposes its tree at each
//! step. A [`StepDrafter`] is loaded once and works for every request of a step together (the
//! heads, the draft model): the batcher hands it every request's [`DraftAsk`] before any
//! request drafts, and each request's drafter then takes what was made for it. Adding a
//! drafter of either kind touches its own module and the drafter pool, not the batcher.

use std::cell::RefCell;
use std::collections::HashMap;

use super::drafter_kind::DrafterKind;
use super::lookup_memory::LookupMemory;
use super::tree::{DraftTree, TreeSpec};
use crate::token::TokenId;

pub struct DraftInput<'a> {
    /// The request's sequence id.
    pub sequence: usize,
    /// Prompt and output so far, ending with the root token the tree will hang from.
    pub history: &'a [TokenId],
    /// The base model's final hidden state at the last accepted position, when the context
    /// computes it (Medusa heads read it).
    pub hidden_state: Option<&'a [f32]>,
    /// The final hidden states behind the history's last few tokens, row-major, oldest first
    /// (the last is `hidden_state`); empty when the context does not compute them (the
    /// feature drafter reads them).
    pub recent_states: &'a [f32],
    /// The drafters loaded for every request.
    pub step_drafters: &'a StepDrafters<'a>,
    /// What earlier requests' text says follows, when the request may read it.
    pub memory: Option<&'a LookupMemory>,
}

impl DraftInput<'_> {
    /// This request's ask of a step drafter: `max_nodes` tokens, in `tree`'s shape if given.
    pub fn ask<'t>(&'t self, tree: Option<&'t TreeSpec>, max_nodes: usize) -> DraftAsk<'t> {
        DraftAsk {
            sequence: self.sequence,
            history: self.history,
            hidden_state: self.hidden_state,
            recent_states: self.recent_states,
            tree,
            max_nodes,
        }
    }
}

/// What one request asks of a step drafter.
pub struct DraftAsk<'a> {
    pub sequence: usize,
    /// Prompt and output so far, ending with the root token.
    pub history: &'a [TokenId],
    /// See [`DraftInput::hidden_state`].
    pub hidden_state: Option<&'a [f32]>,
    /// See [`DraftInput::recent_states`].
    pub recent_states: &'a [f32],
    /// The shape the request drafts in, where it fixes one (the heads' tree).
    pub tree: Option<&'a TreeSpec>,
    /// Most tokens wanted.
    pub max_nodes: usize,
}

/// A drafter loaded once that drafts for every request of a step together: one evaluation (a
/// head's product, a draft decode) per depth for all of them instead of one per request.
pub trait StepDrafter {
    fn kind(&self) -> DrafterKind;

    fn traits(&self) -> DrafterTraits;

    /// Does the step's work for every ask at once, before any request drafts.
    fn prepare(&self, asks: &[DraftAsk<'_>]);

    /// One request's proposal: what [`Self::prepare`] made for it when that covers the ask,
    /// else its own.
    fn propose(&self, ask: &DraftAsk<'_>) -> Proposal;

    /// Its work since the last call, as two counts for the metrics: evaluations (or decodes)
    /// and the queries (or tokens) in them.
    fn take_counts(&self) -> (u64, u64);
}

/// The trees a step drafter made for each request at the start of a step, kept until each
/// request takes its own.
#[derive(Default)]
pub struct PreparedTrees(RefCell<HashMap<usize, PreparedTree>>);

/// A tree made for a request at the start of a step.
struct PreparedTree {
    tree: DraftTree,
    /// The most nodes it was made for: a request that wants more makes its own.
    max_nodes: usize,
    /// This request's share of the time the trees took.
    ms: f64,
}

impl PreparedTrees {
    /// Forgets the last step's trees and keeps these, `(sequence, tree, most nodes)`, which
    /// took `ms` together: each request is charged an equal share.
    pub fn replace(&self, trees: Vec<(usize, DraftTree, usize)>, ms: f64) {
        let mut prepared = self.0.borrow_mut();
        prepared.clear();
        let share = ms / trees.len().max(1) as f64;
        for (sequence, tree, max_nodes) in trees {
            prepared.insert(
                sequence,
                PreparedTree {
                    tree,
                    max_nodes,
                    ms: share,
                },
            );
        }
    }

    /// The tree made for `ask`'s request, cut to what it asks, when it was made for as many
    /// nodes.
    pub fn proposal(&self, ask: &DraftAsk<'_>) -> Option<Proposal> {
        let prepared = self.0.borrow();
        let prepared = prepared
            .get(&ask.sequence)
            .filter(|p| p.max_nodes >= ask.max_nodes)?;
        let mut tree = prepared.tree.clone();
        tree.truncate(ask.max_nodes);
        Some(Proposal {
            tree,
            prepared_ms: prepared.ms,
            ..Proposal::default()
        })
    }
}

/// The step drafters loaded, at most one of each kind.
#[derive(Default)]
pub struct StepDrafters<'m> {
    drafters: Vec<Box<dyn StepDrafter + 'm>>,
}

impl<'m> StepDrafters<'m> {
    pub fn add(&mut self, drafter: Box<dyn StepDrafter + 'm>) {
        self.drafters.retain(|d| d.kind() != drafter.kind());
        self.drafters.push(drafter);
    }

    pub fn get(&self, kind: DrafterKind) -> Option<&(dyn StepDrafter + 'm)> {
        self.drafters
            .iter()
            .find(|d| d.kind() == kind)
            .map(|d| d.as_ref())
    }

    pub fn iter(&self) -> impl Iterator<Item = &(dyn StepDrafter + 'm)> {
        self.drafters.iter().map(|d| d.as_ref())
    }
}

/// A request's drafter that takes its proposals from a step drafter.
pub struct StepDrafterHandle {
    kind: DrafterKind,
    traits: DrafterTraits,
    tree: Option<TreeSpec>,
}

impl StepDrafterHandle {
    /// For `drafter`, drafting in `tree`'s shape if given.
    pub fn new(drafter: &dyn StepDrafter, tree: Option<TreeSpec>) -> Self {
        Self {
            kind: drafter.kind(),
            traits: drafter.traits(),
            tree,
        }
    }
}

impl Drafter for StepDrafterHandle {
    fn kind(&self) -> DrafterKind {
        self.kind
    }

    fn traits(&self) -> DrafterTraits {
        self.traits
    }

    fn tree(&self) -> Option<&TreeSpec> {
        self.tree.as_ref()
    }

    fn propose(&mut self, input: &DraftInput<'_>, max_nodes: usize) -> Proposal {
        input
            .step_drafters
            .get(self.kind)
            .map(|drafter| drafter.propose(&input.ask(self.tree.as_ref(), max_nodes)))
            .unwrap_or_default()
    }
}

/// How the draft budget treats a drafter's proposals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrafterTraits {
    /// How often its guesses are accepted, in each evidence class, is its own property rather
    /// than one of each text, so that later requests may start from what earlier ones learnt
    /// (capped, so a new text can still prove it wrong).
    pub acceptance_carries_over: bool,
    /// A proposal costs next to nothing (a scan of the history), so that it can be made before
    /// the budget decides how much of it to verify.
    pub drafts_cheaply: bool,
    /// Making a draft takes time in proportion to its length (a model's decodes), so that the
    /// budget prices each drafted token, not the draft.
    pub priced_per_token: bool,
    /// It drafts from the hidden state behind the last token (the heads), so that a request
    /// without one asks nothing of it.
    pub reads_hidden_state: bool,
}

/// A drafter's proposal for one step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Proposal {
    /// Candidate tokens after the root.
    pub tree: DraftTree,
    /// How strong the evidence behind it is, as a small class number (0 for drafters that make
    /// no such distinction). The budget learns acceptance per class, so a drafter that is right
    /// in some places and wrong in others drafts where it is right.
    pub evidence_class: usize,
    /// Time spent reading text the drafter had not seen yet beyond a step's worth (a new
    /// prompt): paid once per request, not by each step that drafts.
    pub reading_ms: f64,
    /// Time spent on it before it was asked for: the heads' and the draft model's work runs for
    /// every request together at the start of the step, each request paying its share.
    pub prepared_ms: f64,
}

impl From<DraftTree> for Proposal {
    fn from(tree: DraftTree) -> Self {
        Self {
            tree,
            ..Self::default()
        }
    }
}

pub trait Drafter: Send {
    fn kind(&self) -> DrafterKind;

    fn traits(&self) -> DrafterTraits;

    /// The shape its trees take, where it fixes one.
    fn tree(&self) -> Option<&TreeSpec> {
        None
    }

    /// Candidate tokens after the root, at most `max_nodes` of them.
    fn propose(&mut self, input: &DraftInput<'_>, max_nodes: usize) -> Proposal;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::speculative::tree::TokenSource;

    /// A step drafter that proposes its ask's token count of copies of the root, and counts
    /// its asks.
    struct Echo {
        kind: DrafterKind,
        asked: std::cell::Cell<u64>,
    }

    impl StepDrafter for Echo {
        fn kind(&self) -> DrafterKind {
            self.kind
        }

        fn traits(&self) -> DrafterTraits {
            DrafterTraits::default()
        }

        fn prepare(&self, asks: &[DraftAsk<'_>]) {
            self.asked.set(self.asked.get() + asks.len() as u64);
        }

        fn propose(&self, ask: &DraftAsk<'_>) -> Proposal {
            let mut tree = DraftTree::default();
            let mut parent = None;
            for _ in 0..ask.max_nodes {
                let root = *ask.history.last().unwrap();
                parent = Some(tree.push(root, parent, TokenSource::DraftModel, 0));
            }
            tree.into()
        }

        fn take_counts(&self) -> (u64, u64) {
            (self.asked.replace(0), 0)
        }
    }

    fn echo(kind: DrafterKind) -> Box<Echo> {
        Box::new(Echo {
            kind,
            asked: Default::default(),
        })
    }

    fn input<'a>(history: &'a [TokenId], drafters: &'a StepDrafters<'a>) -> DraftInput<'a> {
        DraftInput {
            sequence: 0,
            history,
            hidden_state: None,
            recent_states: &[],
            step_drafters: drafters,
            memory: None,
        }
    }

    #[test]
    fn a_handle_proposes_through_its_kind_of_step_drafter() {
        let mut drafters = StepDrafters::default();
        drafters.add(echo(DrafterKind::DraftModel));
        let mut handle =
            StepDrafterHandle::new(drafters.get(DrafterKind::DraftModel).unwrap(), None);
        assert_eq!(handle.kind(), DrafterKind::DraftModel);
        let proposal = handle.propose(&input(&[7], &drafters), 3);
        assert_eq!(proposal.tree.tokens, vec![7, 7, 7]);
    }

    #[test]
    fn a_handle_whose_drafter_is_not_loaded_proposes_nothing() {
        let loaded = StepDrafters::default();
        let mut handle = StepDrafterHandle::new(echo(DrafterKind::Medusa).as_ref(), None);
        assert!(handle.propose(&input(&[7], &loaded), 3).tree.is_empty());
    }

    #[test]
    fn one_step_drafter_of_each_kind_is_kept_the_last_added() {
        let mut drafters = StepDrafters::default();
        drafters.add(echo(DrafterKind::DraftModel));
        drafters.add(echo(DrafterKind::Medusa));
        let again = echo(DrafterKind::DraftModel);
        again.asked.set(5);
        drafters.add(again);
        let kinds: Vec<DrafterKind> = drafters.iter().map(|d| d.kind()).collect();
        assert_eq!(kinds, vec![DrafterKind::Medusa, DrafterKind::DraftModel]);
        let model = drafters.get(DrafterKind::DraftModel).unwrap();
        assert_eq!(model.take_counts(), (5, 0), "the one added last");
    }
}
