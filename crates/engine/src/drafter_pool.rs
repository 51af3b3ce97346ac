//! The drafters this engine hands out. A request gets its drafters when it is admitted, as its
//! draft was decided when it was accepted (`request_draft`); the scheduler sees only the
//! [`Drafter`] trait and what verification made of its tree. Adding a drafter means a mode in
//! `request.rs`, a decision in `request_draft.rs` and a line here.

use std::collections::HashMap;
use std::sync::Arc;

use crate::draft_model::Agreement;
use crate::medusa::heads::MedusaHeads;
use crate::medusa::heads_drafter::MedusaDrafter;
use crate::medusa::plan::MedusaPlan;
use crate::request_draft::RequestDraft;
use crate::speculative::budget::AcceptanceStats;
use crate::speculative::drafter::Drafter;
use crate::speculative::lookup::LookupDrafter;
use crate::speculative::model_drafter::DraftModelDrafter;
use crate::speculative::tree::DRAFT_MODEL;

/// The loaded heads and the tree Medusa mode drafts with on this machine.
pub(crate) struct MedusaSetup {
    pub(crate) heads: Arc<MedusaHeads>,
    pub(crate) plan: MedusaPlan,
    /// Where the heads' acceptance starts before any request has drafted with them.
    heldout_prior: Option<AcceptanceStats>,
}

impl MedusaSetup {
    pub(crate) fn new(heads: Arc<MedusaHeads>, plan: MedusaPlan) -> Self {
        let heldout_prior = heldout_prior(&heads, &plan);
        Self {
            heads,
            plan,
            heldout_prior,
        }
    }
}

/// The first head's held-out top-1 accuracy, when the heads record it, and the time they take
/// here to draft the plan's tree. Without it the budget would take the heads' drafts for free
/// until timed, and explore them from an even start.
fn heldout_prior(heads: &MedusaHeads, plan: &MedusaPlan) -> Option<AcceptanceStats> {
    let info = heads.info();
    let top1 = *info.training.as_ref()?.heldout_top1.first()?;
    // Priced for the tree the plan drafts (the heads were timed when they loaded).
    let tree = plan.tree.as_ref()?;
    let head_cost = info.head_cost(heads.draft_ms_per_head());
    let draft_ms = head_cost.draft_ms(tree);
    Some(AcceptanceStats::with_rate(top1, PRIOR_WEIGHT, draft_ms))
}

/// A request's drafters, each with where its draft budget starts.
pub(crate) struct DraftSetup {
    /// Each drafter and what earlier requests learnt about it by evidence class, when that
    /// carries over. Empty decodes plainly; several have their proposals merged into one tree.
    pub(crate) drafters: Vec<(Box<dyn Drafter>, Vec<AcceptanceStats>)>,
    /// Most tokens drafted per step.
    pub(crate) max_draft: usize,
    /// Draft all they have at every step whatever it costs, instead of what the budget expects
    /// to pay.
    pub(crate) fixed: bool,
    /// Standard deviations below the observed acceptance the budget plans with.
    pub(crate) confidence_z: f64,
}

pub(crate) struct DrafterPool {
    medusa: Option<MedusaSetup>,
    /// Where the draft model's acceptance starts before any request has drafted with it.
    draft_model_prior: Option<AcceptanceStats>,
    /// What finished requests learnt, by drafter name and evidence class, for drafters whose
    /// acceptance carries over from one request to the next.
    learnt: HashMap<&'static str, Vec<AcceptanceStats>>,
    /// See [`EngineConfig::draft_confidence`](crate::EngineConfig::draft_confidence).
    confidence_z: f64,
}

impl DrafterPool {
    pub(crate) fn new(
        medusa: Option<MedusaSetup>,
        draft_model: Option<Agreement>,
        confidence_z: f64,
    ) -> Self {
        Self {
            medusa,
            // Priced per token by the drafting that takes it up, as the drafter says.
            draft_model_prior: draft_model
                .map(|a| AcceptanceStats::with_rate(a.rate, PRIOR_WEIGHT, a.ms_per_token)),
            learnt: HashMap::new(),
            confidence_z,
        }
    }

    pub(crate) fn heads(&self) -> Option<&MedusaHeads> {
        self.medusa.as_ref().map(|m| m.heads.as_ref())
    }

    /// The drafters of a request that is being admitted, as its draft was decided (see
    /// [`RequestDraft::resolve`]).
    pub(crate) fn for_request(&self, draft: &RequestDraft) -> DraftSetup {
        let mut drafters: Vec<Box<dyn Drafter>> = Vec::new();
        if draft.lookup {
            drafters.push(Box::new(LookupDrafter::default()));
        }
        // A tree is only decided where heads are loaded.
        if let (Some(tree), Some(setup)) = (&draft.tree, &self.medusa) {
            drafters.push(Box::new(MedusaDrafter::new(
                setup.heads.clone(),
                tree.clone(),
            )));
        }
        if draft.draft_model {
            drafters.push(Box::new(DraftModelDrafter::default()));
        }
        DraftSetup {
            drafters: drafters
                .into_iter()
                .map(|drafter| {
                    let prior = self.prior(drafter.as_ref());
                    (drafter, prior)
                })
                .collect(),
            max_draft: draft.max_draft,
            fixed: draft.fixed,
            confidence_z: self.confidence_z,
        }
    }

    /// What earlier requests learnt about this drafter by evidence class, when that carries
    /// over; for heads no request has drafted with yet, their held-out accuracy.
    fn prior(&self, drafter: &dyn Drafter) -> Vec<AcceptanceStats> {
        if !drafter.acceptance_carries_over() {
            return Vec::new();
        }
        match self.learnt.get(drafter.name()) {
            Some(learnt) => learnt.iter().map(|s| s.as_prior(PRIOR_WEIGHT)).collect(),
            None => match drafter.name() {
                "medusa" => self.medusa.as_ref().and_then(|m| m.heldout_prior.clone()),
                DRAFT_MODEL => self.draft_model_prior.clone(),
                _ => None,
            }
            .into_iter()
            .collect(),
        }
    }

    /// Keeps what a finished request learnt about its drafter, class by class, when that
    /// carries over.
    pub(crate) fn absorb(&mut self, drafter: &dyn Drafter, learnt: &[AcceptanceStats]) {
        if !drafter.acceptance_carries_over() {
            return;
        }
        let kept = self.learnt.entry(drafter.name()).or_default();
        if kept.len() < learnt.len() {
            kept.resize(learnt.len(), AcceptanceStats::default());
        }
        for (kept, learnt) in kept.iter_mut().zip(learnt) {
            kept.absorb(learnt);
        }
    }
}

/// How many tries what earlier requests learnt counts as when a new request starts.
const PRIOR_WEIGHT: u32 = 32;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::speculative::budget::CONFIDENCE_Z;

    #[test]
    fn what_requests_learnt_carries_over_by_class_and_weighs_as_a_few_tries() {
        let mut drafters = DrafterPool::new(None, None, CONFIDENCE_Z);
        let lookup = LookupDrafter::default();
        assert!(drafters.prior(&lookup).is_empty(), "nothing learnt yet");
        let mut copying = AcceptanceStats::default();
        for _ in 0..100 {
            copying.record(&[true]);
        }
        drafters.absorb(&lookup, &[AcceptanceStats::default(), copying.clone()]);
        drafters.absorb(&lookup, &[AcceptanceStats::default()]);
        let prior = drafters.prior(&lookup);
        assert_eq!(prior.len(), 2);
        assert_eq!(prior[0].evidence(), (0, 0));
        assert_eq!(prior[1].evidence(), (PRIOR_WEIGHT, PRIOR_WEIGHT));
    }
}
