//! What a drafter sees and what it must do. The verifier does not care who drafted.

use super::tree::DraftTree;
use crate::token::TokenId;

pub struct DraftInput<'a> {
    /// Prompt and output so far, ending with the root token the tree will hang from.
    pub history: &'a [TokenId],
    /// The base model's final hidden state at the last accepted position, when the context
    /// computes it (Medusa heads read it).
    pub hidden_state: Option<&'a [f32]>,
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

    /// Candidate tokens after the root, at most `max_nodes` of them.
    fn draft(&mut self, input: &DraftInput<'_>, max_nodes: usize) -> DraftTree;

    /// How strong the evidence behind the last proposal was, as a small class number (0 for
    /// drafters that make no such distinction). The budget learns acceptance per class, so a
    /// drafter that is right in some places and wrong in others drafts where it is right.
    fn evidence_class(&self) -> usize {
        0
    }
}
