//! The drafters this engine hands out. A request gets its drafter when it is admitted; the
//! scheduler sees only the [`Drafter`] trait and what verification made of its tree. Adding a
//! drafter means a mode in `request.rs` and an arm here.

use std::collections::HashMap;
use std::sync::Arc;

use crate::medusa::drafter::MedusaDrafter;
use crate::medusa::heads::MedusaHeads;
use crate::medusa::plan::{MedusaPlan, TreeOrigin};
use crate::request::{DraftPolicy, GenerateRequest, GenerationMode, MAX_DRAFT_TOKENS};
use crate::speculative::budget::AcceptanceStats;
use crate::speculative::drafter::Drafter;
use crate::speculative::lookup::LookupDrafter;
use crate::speculative::tree::TreeSpec;

/// The loaded heads and the tree Medusa mode drafts with on this machine.
pub(crate) struct MedusaSetup {
    pub(crate) heads: Arc<MedusaHeads>,
    pub(crate) plan: MedusaPlan,
}

/// A request's drafter and where its draft budget starts.
pub(crate) struct DraftSetup {
    /// `None` decodes plainly.
    pub(crate) drafter: Option<Box<dyn Drafter>>,
    /// Most tokens drafted per step.
    pub(crate) max_draft: usize,
    /// Draft `max_draft` tokens at every step whatever they cost, instead of what the budget
    /// expects to pay.
    pub(crate) fixed: bool,
    /// What earlier requests learnt about this drafter, when that carries over.
    pub(crate) prior: AcceptanceStats,
}

pub(crate) struct Drafters {
    medusa: Option<MedusaSetup>,
    /// What finished requests learnt, by drafter name, for drafters whose acceptance carries
    /// over from one request to the next.
    learnt: HashMap<&'static str, AcceptanceStats>,
}

impl Drafters {
    pub(crate) fn new(medusa: Option<MedusaSetup>) -> Self {
        Self {
            medusa,
            learnt: HashMap::new(),
        }
    }

    pub(crate) fn heads(&self) -> Option<&MedusaHeads> {
        self.medusa.as_ref().map(|m| m.heads.as_ref())
    }

    /// The drafter for a request that is being admitted.
    pub(crate) fn for_request(&self, request: &GenerateRequest) -> DraftSetup {
        let lookup = || Some(Box::new(LookupDrafter::default()) as Box<dyn Drafter>);
        let medusa = |setup: &MedusaSetup, tree: &TreeSpec| {
            Some(
                Box::new(MedusaDrafter::new(setup.heads.clone(), tree.clone())) as Box<dyn Drafter>,
            )
        };
        // `Engine::validate` refuses Medusa mode without heads, and trees deeper than the heads.
        let (drafter, default_max_draft, fixed) = match (request.mode, &request.draft, &self.medusa)
        {
            (GenerationMode::Normal, _, _) | (GenerationMode::Medusa, _, None) => (None, 0, false),
            (GenerationMode::Lookup, DraftPolicy::Length(n), _) => (lookup(), *n, true),
            (GenerationMode::Lookup, _, _) => (lookup(), DEFAULT_MAX_DRAFT_TOKENS, false),
            (GenerationMode::Medusa, DraftPolicy::Tree(tree), Some(setup)) => {
                (medusa(setup, tree), tree.len(), true)
            }
            // The plan's tree; one given at load is drafted in full.
            (GenerationMode::Medusa, _, Some(setup)) => match &setup.plan.tree {
                Some(tree) => (
                    medusa(setup, tree),
                    setup.plan.default_max_draft(DEFAULT_MAX_DRAFT_TOKENS),
                    setup.plan.origin == TreeOrigin::Given,
                ),
                // No tree pays on this machine: Medusa mode decodes plainly.
                None => (None, 0, false),
            },
        };
        let prior = drafter
            .as_deref()
            .filter(|d| d.acceptance_carries_over())
            .and_then(|d| self.learnt.get(d.name()))
            .map(|learnt| learnt.as_prior(PRIOR_WEIGHT))
            .unwrap_or_default();
        let max_draft = if fixed {
            default_max_draft
        } else {
            request.max_draft_tokens.unwrap_or(default_max_draft)
        };
        DraftSetup {
            max_draft: max_draft.min(MAX_DRAFT_TOKENS),
            fixed,
            drafter,
            prior,
        }
    }

    /// Keeps what a finished request learnt about its drafter, when that carries over.
    pub(crate) fn absorb(&mut self, drafter: &dyn Drafter, learnt: &AcceptanceStats) {
        if drafter.acceptance_carries_over() {
            self.learnt
                .entry(drafter.name())
                .or_default()
                .absorb(learnt);
        }
    }
}

/// How many tries what earlier requests learnt counts as when a new request starts.
const PRIOR_WEIGHT: u32 = 32;

/// Most drafted tokens per step when the request does not say; the draft budget (measured
/// decode costs, acceptance learnt during the run) usually drafts fewer.
const DEFAULT_MAX_DRAFT_TOKENS: usize = 16;
