//! The drafters this engine hands out. A request gets its drafters when it is admitted, as its
//! draft was decided when it was accepted (`request::draft`); the batcher sees only the
//! [`Drafter`] and [`StepDrafter`] traits and what verification made of its tree. Adding a
//! drafter means a mode in `request/mod.rs`, a decision in `request/draft.rs`, its
//! registration where the engine loads and a line here.

use std::collections::HashMap;
use std::sync::Arc;

use crate::medusa::heads::MedusaHeads;
use crate::medusa::heads_drafter::HeadsDrafter;
use crate::medusa::plan::MedusaPlan;
use crate::request::draft::RequestDraft;
use crate::speculative::budget::AcceptanceStats;
use crate::speculative::drafter::{Drafter, StepDrafter, StepDrafterHandle, StepDrafters};
use crate::speculative::drafter_kind::DrafterKind;
use crate::speculative::lookup::LookupDrafter;
use crate::speculative::lookup_memory::LookupMemory;
use crate::speculative::model_drafter::Agreement;
use crate::token::TokenId;

/// The loaded heads and the tree Medusa mode drafts with on this machine.
pub(crate) struct MedusaSetup {
    pub(crate) heads: Arc<MedusaHeads>,
    pub(crate) plan: MedusaPlan,
}

impl MedusaSetup {
    pub(crate) fn new(heads: Arc<MedusaHeads>, plan: MedusaPlan) -> Self {
        Self { heads, plan }
    }
}

/// Where the heads' acceptance starts, and the time they take here to draft the plan's tree.
/// The budget prices a draft of n tokens as a chain whose token at depth d is accepted with
/// probability r^d; r is set so that the plan's tree yields what the plan forecast from the
/// heads' held-out accuracy (the budget and the plan then agree before any evidence), or, for
/// plans without a forecast, the first head's held-out top-1 accuracy. Without it the budget
/// would take the heads' drafts for free until timed, and explore them from an even start.
fn heldout_prior(heads: &MedusaHeads, plan: &MedusaPlan) -> Option<AcceptanceStats> {
    let info = heads.info();
    let top1 = *info.training.as_ref()?.heldout_top1.first()?;
    // Priced for the tree the plan drafts (the heads were timed when they loaded).
    let tree = plan.tree.as_ref()?;
    let head_cost = info.head_cost(heads.draft_ms_per_head());
    let draft_ms = head_cost.draft_ms(tree);
    let rate = plan
        .expected_tokens_per_step
        .map_or(top1, |tokens| chain_rate(tokens - 1.0, tree.len()));
    Some(AcceptanceStats::with_rate(rate, PRIOR_WEIGHT, draft_ms))
}

/// Where the feature drafter's acceptance starts: the rate of a chain that yields what its trees
/// of 8 (or the first size `measured`) yielded along held-out answers in training, `(nodes,
/// tokens per step)`, at the `draft_ms` such a tree took to grow here.
pub(crate) fn eagle_prior(measured: &[(usize, f64)], draft_ms: f64) -> Option<AcceptanceStats> {
    let &(nodes, tokens) = measured
        .iter()
        .find(|(n, _)| *n == 8)
        .or(measured.first())?;
    Some(AcceptanceStats::with_rate(
        chain_rate(tokens - 1.0, nodes),
        PRIOR_WEIGHT,
        draft_ms,
    ))
}

/// The r in [0, 1] for which a chain of `nodes` tokens, the one at depth d accepted with
/// probability r^d, yields `accepted` tokens on average.
fn chain_rate(accepted: f64, nodes: usize) -> f64 {
    let yield_of = |r: f64| (1..=nodes as i32).map(|d| r.powi(d)).sum::<f64>();
    if accepted <= 0.0 || nodes == 0 {
        return 0.0;
    }
    if yield_of(1.0) <= accepted {
        return 1.0;
    }
    let (mut low, mut high) = (0.0, 1.0);
    for _ in 0..50 {
        let mid = (low + high) / 2.0;
        if yield_of(mid) < accepted {
            low = mid;
        } else {
            high = mid;
        }
    }
    (low + high) / 2.0
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

pub(crate) struct DrafterPool<'m> {
    medusa: Option<MedusaSetup>,
    /// The drafters that work for every request of a step together.
    step_drafters: StepDrafters<'m>,
    /// What is known of each drafter whose acceptance carries over from one request to the
    /// next, by evidence class: its measurement when it loaded (the heads' held-out accuracy,
    /// the draft model's agreement), with what finished requests learnt added to it. A request
    /// that learnt nothing (its drafter was never asked to draft) leaves it as it was.
    known: HashMap<DrafterKind, Vec<AcceptanceStats>>,
    /// See [`EngineConfig::draft_confidence`](crate::EngineConfig::draft_confidence).
    confidence_z: f64,
    /// Finished requests' text, for lookup; none when the engine remembers nothing.
    memory: Option<LookupMemory>,
}

impl<'m> DrafterPool<'m> {
    pub(crate) fn new(
        medusa: Option<MedusaSetup>,
        draft_model: Option<Agreement>,
        confidence_z: f64,
    ) -> Self {
        let mut known = HashMap::new();
        if let Some(prior) = medusa
            .as_ref()
            .and_then(|m| heldout_prior(&m.heads, &m.plan))
        {
            known.insert(DrafterKind::Medusa, vec![prior]);
        }
        // Priced per token by the drafting that takes it up, as the drafter says.
        if let Some(agreement) = draft_model {
            known.insert(
                DrafterKind::DraftModel,
                vec![AcceptanceStats::with_rate(
                    agreement.rate,
                    PRIOR_WEIGHT,
                    agreement.ms_per_token,
                )],
            );
        }
        let heads = medusa.as_ref().map(|setup| setup.heads.clone());
        let pool = Self {
            medusa,
            step_drafters: StepDrafters::default(),
            known,
            confidence_z,
            memory: None,
        };
        match heads {
            Some(heads) => pool.with_step_drafter(Box::new(HeadsDrafter::new(heads))),
            None => pool,
        }
    }

    /// Adds a drafter that works for every request of a step together (the heads, the draft
    /// model).
    pub(crate) fn with_step_drafter(mut self, drafter: Box<dyn StepDrafter + 'm>) -> Self {
        // What it evaluated when it loaded is not a request's.
        drafter.take_counts();
        self.step_drafters.add(drafter);
        self
    }

    /// Starts `kind`'s acceptance from `prior` (its measurement when it loaded), if any.
    pub(crate) fn with_prior(mut self, kind: DrafterKind, prior: Option<AcceptanceStats>) -> Self {
        if let Some(prior) = prior {
            self.known.insert(kind, vec![prior]);
        }
        self
    }

    pub(crate) fn step_drafters(&self) -> &StepDrafters<'m> {
        &self.step_drafters
    }

    /// Drops the step drafters' counts of work done outside a request's step (a diagnostic's).
    pub(crate) fn forget_work(&self) {
        for drafter in self.step_drafters.iter() {
            drafter.take_counts();
        }
    }

    /// Lookup remembers `buckets` contexts of each length of finished requests' text (none
    /// when 0).
    pub(crate) fn with_lookup_memory(mut self, buckets: usize) -> Self {
        self.memory = (buckets > 0).then(|| LookupMemory::new(buckets));
        self
    }

    pub(crate) fn memory(&self) -> Option<&LookupMemory> {
        self.memory.as_ref()
    }

    /// Adds a finished request's text (prompt and answer) to lookup's memory.
    pub(crate) fn remember(&mut self, history: &[TokenId]) {
        if let Some(memory) = &mut self.memory {
            memory.add(history);
        }
    }

    pub(crate) fn heads(&self) -> Option<&Arc<MedusaHeads>> {
        self.medusa.as_ref().map(|m| &m.heads)
    }

    /// The drafters of a request that is being admitted, as its draft was decided (see
    /// [`RequestDraft::resolve`]).
    pub(crate) fn for_request(&self, draft: &RequestDraft) -> DraftSetup {
        let mut drafters: Vec<Box<dyn Drafter>> = Vec::new();
        if draft.lookup {
            drafters.push(Box::new(LookupDrafter::default()));
        }
        // A tree is only decided where heads are loaded.
        if let (Some(tree), Some(heads)) =
            (&draft.tree, self.step_drafters.get(DrafterKind::Medusa))
        {
            drafters.push(Box::new(StepDrafterHandle::new(heads, Some(tree.clone()))));
        }
        for (kind, wanted) in [
            (DrafterKind::DraftModel, draft.draft_model),
            (DrafterKind::Eagle, draft.eagle),
        ] {
            if let Some(drafter) = self.step_drafters.get(kind).filter(|_| wanted) {
                drafters.push(Box::new(StepDrafterHandle::new(drafter, None)));
            }
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

    /// What is known of this drafter by evidence class, weighing as a few tries, when its
    /// acceptance carries over.
    fn prior(&self, drafter: &dyn Drafter) -> Vec<AcceptanceStats> {
        if !drafter.traits().acceptance_carries_over {
            return Vec::new();
        }
        self.known
            .get(&drafter.kind())
            .map(|known| known.iter().map(|s| s.as_prior(PRIOR_WEIGHT)).collect())
            .unwrap_or_default()
    }

    /// Adds what a finished request learnt about its drafter, class by class, when that
    /// carries over.
    pub(crate) fn absorb(&mut self, drafter: &dyn Drafter, learnt: &[AcceptanceStats]) {
        if !drafter.traits().acceptance_carries_over {
            return;
        }
        let kept = self.known.entry(drafter.kind()).or_default();
        if kept.len() < learnt.len() {
            kept.resize(learnt.len(), AcceptanceStats::default());
        }
        for (kept, learnt) in kept.iter_mut().zip(learnt) {
            kept.absorb(learnt);
        }
    }
}

/// How many tries what is known of a drafter (measured when it loaded, and learnt by earlier
/// requests) counts as when a new request starts: enough that the budget's caution (a lower
/// confidence bound) leaves a measured rate nearly whole, few enough that a request whose text
/// the drafter guesses badly proves it wrong within a few dozen steps.
const PRIOR_WEIGHT: u32 = 128;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::EngineError;
    use crate::speculative::budget::CONFIDENCE_Z;
    use crate::speculative::drafter::DraftAsk;
    use crate::speculative::model_drafter::{DraftModelDrafter, Guesses, ModelProposer};

    /// A draft model with no guesses.
    struct Silent;

    impl ModelProposer for Silent {
        fn prepare(&self, _asks: &[DraftAsk<'_>]) {}

        fn propose(&self, _: usize, _: &[TokenId], _: usize) -> Result<Guesses, EngineError> {
            Ok(Guesses::default())
        }

        fn take_counts(&self) -> (u64, u64) {
            (0, 0)
        }
    }

    #[test]
    fn what_requests_learnt_carries_over_by_class_and_weighs_as_a_few_tries() {
        let mut drafters = DrafterPool::new(None, None, CONFIDENCE_Z);
        let lookup = LookupDrafter::default();
        assert!(drafters.prior(&lookup).is_empty(), "nothing learnt yet");
        let mut copying = AcceptanceStats::default();
        for _ in 0..200 {
            copying.record(&[true]);
        }
        drafters.absorb(&lookup, &[AcceptanceStats::default(), copying.clone()]);
        drafters.absorb(&lookup, &[AcceptanceStats::default()]);
        let prior = drafters.prior(&lookup);
        assert_eq!(prior.len(), 2);
        assert_eq!(prior[0].evidence(), (0, 0));
        assert_eq!(prior[1].evidence(), (PRIOR_WEIGHT, PRIOR_WEIGHT));
    }

    #[test]
    fn the_chain_rate_yields_what_was_forecast() {
        let r = chain_rate(0.8, 3);
        assert!((r + r * r + r * r * r - 0.8).abs() < 1e-9, "{r}");
        assert_eq!(chain_rate(0.0, 3), 0.0);
        assert_eq!(chain_rate(3.5, 3), 1.0);
        assert!((chain_rate(0.5, 1) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_request_that_never_drafted_leaves_the_measured_prior_as_it_was() {
        let agreement = Agreement {
            rate: 0.5,
            guesses: 200,
            ms_per_token: 1.0,
        };
        let mut drafters = DrafterPool::new(None, Some(agreement), CONFIDENCE_Z);
        let model = StepDrafterHandle::new(&DraftModelDrafter::new(Silent), None);
        let measured = drafters.prior(&model);
        assert_eq!(measured[0].evidence(), (64, PRIOR_WEIGHT));
        // Its drafter was declined at every step (e.g. auto drafted with lookup only).
        drafters.absorb(&model, &[AcceptanceStats::default()]);
        assert_eq!(drafters.prior(&model)[0].evidence(), (64, PRIOR_WEIGHT));
        // What a request saw is added to the measurement, not put in its place.
        let mut missed = AcceptanceStats::default();
        for _ in 0..4 {
            missed.record(&[false]);
        }
        drafters.absorb(&model, &[missed]);
        assert_eq!(drafters.prior(&model)[0].evidence(), (62, PRIOR_WEIGHT));
    }
}
