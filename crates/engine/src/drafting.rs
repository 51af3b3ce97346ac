//! A request's drafters at work: each step, how many tokens each one proposes (the draft
//! budget), their proposals merged into one tree, and after the verification what each learnt.

use std::time::Instant;

use crate::clock::ms_since;
use crate::drafters::DraftSetup;
use crate::events::{DraftSkip, DraftSkipReason};
use crate::speculative::budget::{
    choose_draft_lens, shortest_draft, AcceptanceStats, BatchLoad, CostModel, DraftOption,
    ShortestDraft,
};
use crate::speculative::drafter::{DraftInput, Drafter};
use crate::speculative::tree::{DraftTree, TokenSource, TreeLayout};

/// One drafter and what this run learnt about its guesses.
struct Proposer {
    drafter: Box<dyn Drafter>,
    /// Acceptance by the evidence class of the proposals (see [`Drafter::evidence_class`]).
    acceptance: Vec<AcceptanceStats>,
    /// What it started from (learnt by earlier requests), in every class.
    start: AcceptanceStats,
    /// The class of this step's proposal.
    class: usize,
}

/// A step's proposal.
#[derive(Default)]
pub(crate) struct Draft {
    pub(crate) tree: DraftTree,
    pub(crate) draft_ms: f64,
    /// Why nothing was drafted.
    pub(crate) skip: Option<DraftSkip>,
}

pub(crate) struct Drafting {
    proposers: Vec<Proposer>,
    /// Most tokens drafted per step, all drafters together.
    max_draft: usize,
    /// Every drafter proposes all it has at every step, whatever it costs.
    fixed: bool,
}

impl Drafting {
    /// `None` when the request decodes plainly.
    pub(crate) fn new(setup: DraftSetup) -> Option<Self> {
        if setup.drafters.is_empty() {
            return None;
        }
        Some(Self {
            proposers: setup
                .drafters
                .into_iter()
                .map(|(drafter, prior)| Proposer {
                    drafter,
                    acceptance: vec![prior.clone()],
                    start: prior,
                    class: 0,
                })
                .collect(),
            max_draft: setup.max_draft,
            fixed: setup.fixed,
        })
    }

    /// This step's tree, at most `max_nodes` tokens. The budget weighs each drafter's expected
    /// accepted tokens against the time they add to a step that also decodes `batch`.
    pub(crate) fn draft(
        &mut self,
        input: &DraftInput<'_>,
        cost: Option<&CostModel>,
        batch: BatchLoad,
        max_nodes: usize,
    ) -> Draft {
        let started = Instant::now();
        let limit = max_nodes.min(self.max_draft);
        if limit == 0 {
            return skipped(no_room());
        }
        let trees = if self.fixed {
            // The user asked to see the whole draft, whatever it costs here.
            self.proposers
                .iter_mut()
                .map(|p| p.propose(input, limit))
                .collect()
        } else {
            let Some(cost) = cost else {
                return skipped(DraftSkip::new(
                    DraftSkipReason::CostsUnknown,
                    "auto drafting waits for this machine's decode costs to be measured",
                ));
            };
            match self.budgeted(input, cost, batch, limit) {
                Ok(trees) => trees,
                Err(skip) => {
                    return Draft {
                        draft_ms: ms_since(started),
                        ..skipped(skip)
                    }
                }
            }
        };
        let mut tree = DraftTree::default();
        for proposal in &trees {
            tree.merge(proposal, limit);
        }
        let skip = tree.is_empty().then(|| self.no_candidates());
        Draft {
            tree,
            draft_ms: ms_since(started),
            skip,
        }
    }

    /// Each drafter's proposal cut to what the budget expects to pay. Cheap drafters propose
    /// first, so that the budget knows how much they have; the others only draft what it asks.
    fn budgeted(
        &mut self,
        input: &DraftInput<'_>,
        cost: &CostModel,
        batch: BatchLoad,
        limit: usize,
    ) -> Result<Vec<DraftTree>, DraftSkip> {
        let mut early: Vec<Option<DraftTree>> = self
            .proposers
            .iter_mut()
            .map(|p| p.drafter.drafts_cheaply().then(|| p.propose(input, limit)))
            .collect();
        let caps: Vec<usize> = early
            .iter()
            .map(|tree| tree.as_ref().map_or(limit, DraftTree::len))
            .collect();
        if caps.iter().all(|&cap| cap == 0) {
            return Err(self.no_candidates());
        }
        let options: Vec<DraftOption<'_>> = self
            .proposers
            .iter()
            .zip(&caps)
            .map(|(p, &cap)| DraftOption {
                stats: p.stats(),
                cap,
            })
            .collect();
        let lens = choose_draft_lens(cost, &options, limit, batch);
        if lens.iter().all(|&len| len == 0) {
            // The figures of the first drafter that had something to propose.
            let (first, _) = self
                .proposers
                .iter()
                .zip(&caps)
                .find(|(_, &cap)| cap > 0)
                .expect("a drafter with candidates");
            return Err(not_worth_it(shortest_draft(cost, first.stats(), batch)));
        }
        Ok(self
            .proposers
            .iter_mut()
            .zip(early.iter_mut())
            .zip(lens)
            .filter(|(_, len)| *len > 0)
            .map(|((p, early), len)| {
                let mut tree = early.take().unwrap_or_else(|| p.propose(input, len));
                tree.truncate(len);
                tree
            })
            .collect())
    }

    fn no_candidates(&self) -> DraftSkip {
        let names: Vec<&str> = self.proposers.iter().map(|p| p.drafter.name()).collect();
        let message = match names.as_slice() {
            [one] => format!("the {one} drafter had no guess"),
            many => format!("the {} drafters had no guess", many.join(" and ")),
        };
        DraftSkip::new(DraftSkipReason::NoCandidates, message)
    }

    /// Records what verification made of the step's tree: each drafter is judged on the nodes it
    /// proposed (shared ones included), depth by depth along the accepted path.
    pub(crate) fn record(&mut self, tree: &DraftTree, layout: &TreeLayout, accepted: &[usize]) {
        for p in &mut self.proposers {
            let name = Some(p.drafter.name());
            let proposed = |n: usize| {
                tree.sources[n].drafter() == name
                    || tree.also[n].and_then(TokenSource::drafter) == name
            };
            let depth = (0..tree.len())
                .filter(|&n| proposed(n))
                .map(|n| layout.depths[n])
                .max()
                .unwrap_or(0);
            let hits: Vec<bool> = (0..depth)
                .map(|d| accepted.get(d).is_some_and(|&n| proposed(n)))
                .collect();
            p.stats_mut().record(&hits);
        }
    }

    /// Each drafter, and what this run learnt about it beyond what it started from.
    pub(crate) fn learnt(&self) -> impl Iterator<Item = (&dyn Drafter, AcceptanceStats)> {
        self.proposers.iter().map(|p| {
            let mut learnt = AcceptanceStats::default();
            for class in &p.acceptance {
                learnt.absorb(&class.since(&p.start));
            }
            (p.drafter.as_ref(), learnt)
        })
    }
}

impl Proposer {
    /// The drafter's proposal, its time kept for the budget when it proposed anything. Its
    /// evidence class says which acceptance figures judge it (a new class starts from what the
    /// drafter started the run with).
    fn propose(&mut self, input: &DraftInput<'_>, max_nodes: usize) -> DraftTree {
        let started = Instant::now();
        let mut tree = self.drafter.draft(input, max_nodes);
        tree.truncate(max_nodes);
        self.class = self.drafter.evidence_class();
        if self.acceptance.len() <= self.class {
            self.acceptance.resize(self.class + 1, self.start.clone());
        }
        if !tree.is_empty() {
            self.stats_mut().record_draft_time(ms_since(started));
        }
        tree
    }

    fn stats(&self) -> &AcceptanceStats {
        &self.acceptance[self.class]
    }

    fn stats_mut(&mut self) -> &mut AcceptanceStats {
        &mut self.acceptance[self.class]
    }
}

fn skipped(skip: DraftSkip) -> Draft {
    Draft {
        skip: Some(skip),
        ..Draft::default()
    }
}

pub(crate) fn no_room() -> DraftSkip {
    DraftSkip::new(
        DraftSkipReason::NoRoom,
        "no room to draft: the context is full, the run is at its last token, or the batch and its sequences are taken",
    )
}

fn not_worth_it(shortest: ShortestDraft) -> DraftSkip {
    DraftSkip::new(
        DraftSkipReason::NotWorthIt,
        format!(
            "auto drafting found nothing that pays here: one drafted token was expected to yield {:.2} tokens in {:.1} ms, against 1 token in {:.1} ms without drafting",
            shortest.expected_tokens, shortest.step_ms, shortest.plain_ms
        ),
    )
}
