//! What a drafter sees and what it must do. The verifier does not care who drafted.

use std::collections::HashMap;

use super::tree::DraftTree;
use crate::error::EngineError;
use crate::token::TokenId;

pub struct DraftInput<'a> {
    /// The request's sequence id.
    pub sequence: usize,
    /// Prompt and output so far, ending with the root token the tree will hang from.
    pub history: &'a [TokenId],
    /// The base model's final hidden state at the last accepted position, when the context
    /// computes it (Medusa heads read it).
    pub hidden_state: Option<&'a [f32]>,
    /// The draft model, when one is loaded.
    pub draft_model: Option<&'a dyn ModelProposer>,
    /// The heads' trees for every request that drafts with them this step, made together.
    pub heads_trees: Option<&'a PreparedTrees>,
}

/// Trees a drafter made for every request at once at the start of a step (one batched
/// evaluation instead of one per request), by sequence id.
#[derive(Debug, Default)]
pub struct PreparedTrees {
    by_sequence: HashMap<usize, PreparedTree>,
}

#[derive(Debug)]
pub struct PreparedTree {
    pub tree: DraftTree,
    /// The most nodes it was made for: a request that wants more makes its own.
    pub max_nodes: usize,
    /// This request's share of the time the trees took.
    pub ms: f64,
}

impl PreparedTrees {
    pub fn insert(&mut self, sequence: usize, tree: PreparedTree) {
        self.by_sequence.insert(sequence, tree);
    }

    /// The tree made for `sequence`, if it was made for at least `max_nodes` nodes.
    pub fn get(&self, sequence: usize, max_nodes: usize) -> Option<&PreparedTree> {
        self.by_sequence
            .get(&sequence)
            .filter(|prepared| prepared.max_nodes >= max_nodes)
    }
}

/// A model that continues a sequence's text: the draft model, in its own context.
pub trait ModelProposer {
    /// Up to `n` tokens expected after `history` in sequence `seq`.
    fn propose(&self, seq: usize, history: &[TokenId], n: usize) -> Result<Guesses, EngineError>;
}

/// A request's ask of the draft model for this step: up to `n` guesses after `history` in
/// sequence `seq`.
pub struct DraftAsk<'h> {
    pub seq: usize,
    pub history: &'h [TokenId],
    pub n: usize,
}

/// A model's guesses: a chain of its top tokens, and where it was torn between a few at the
/// place after the chain, those few, as branches.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Guesses {
    pub tokens: Vec<TokenId>,
    pub branches: Vec<TokenId>,
    /// Time spent first reading text it had not seen (see [`Drafter::reading_ms`]).
    pub reading_ms: f64,
    /// Time spent on them before they were asked for (see [`Drafter::prepared_ms`]).
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

pub trait Drafter: Send {
    fn name(&self) -> &'static str;

    /// Whether how often this drafter's guesses are accepted, in each evidence class, is its
    /// own property rather than one of each text, so that later requests may start from what
    /// earlier ones learnt (capped, so a new text can still prove it wrong).
    fn acceptance_carries_over(&self) -> bool {
        false
    }

    /// Whether a proposal costs next to nothing (a scan of the history), so that it can be made
    /// before the budget decides how much of it to verify.
    fn drafts_cheaply(&self) -> bool {
        false
    }

    /// Whether making a draft takes time in proportion to its length (a model's decodes), so
    /// that the budget prices each drafted token, not the draft.
    fn priced_per_token(&self) -> bool {
        false
    }

    /// Time the last draft spent reading text the drafter had not seen yet beyond a step's
    /// worth (a new prompt): paid once per request, not by each step that drafts.
    fn reading_ms(&self) -> f64 {
        0.0
    }

    /// Time the last draft took before it was asked for: a draft model's decodes run for
    /// every request together at the start of the step, each request paying its share.
    fn prepared_ms(&self) -> f64 {
        0.0
    }

    /// Candidate tokens after the root, at most `max_nodes` of them.
    fn draft(&mut self, input: &DraftInput<'_>, max_nodes: usize) -> DraftTree;

    /// How strong the evidence behind the last proposal was, as a small class number (0 for
    /// drafters that make no such distinction). The budget learns acceptance per class, so a
    /// drafter that is right in some places and wrong in others drafts where it is right.
    fn evidence_class(&self) -> usize {
        0
    }
}
