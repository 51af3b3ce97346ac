//! What a drafter sees and what it must do. The verifier does not care who drafted.

use std::collections::HashMap;

use super::lookup_memory::LookupMemory;
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
    /// What earlier requests' text says follows, when the request may read it.
    pub memory: Option<&'a LookupMemory>,
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

/// A model that drafts for every request together: a step's asks are decoded at once before
/// any request drafts, and each request then reads its guesses through [`ModelProposer`].
pub(crate) trait BatchedProposer: ModelProposer {
    fn prepare(&self, asks: &[DraftAsk<'_>]);

    /// Decodes, and the tokens in them, since the last call.
    fn take_counts(&self) -> (u64, u64);
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
    fn name(&self) -> &'static str;

    fn traits(&self) -> DrafterTraits;

    /// Candidate tokens after the root, at most `max_nodes` of them.
    fn propose(&mut self, input: &DraftInput<'_>, max_nodes: usize) -> Proposal;
}
