//! A request's drafters at work: each step, how many tokens each one proposes (the draft
//! budget), their proposals merged into one tree, and after the verification what each learnt.

use std::time::Instant;

use crate::clock::ms_since;
use crate::events::{DraftDecision, DraftSkip, DraftSkipReason, DrafterEvidence};
use crate::speculative::budget::{
    choose_draft_lens, shortest_draft, AcceptanceStats, BatchLoad, DraftChoice, DraftOption,
    ShortestDraft,
};
use crate::speculative::costs::CostModel;
use crate::speculative::drafter::{DraftInput, Drafter};
use crate::speculative::drafter_kind::DrafterKind;
use crate::speculative::tree::{DraftTree, TokenSource, TreeLayout, TreeSpec};
use crate::step::drafter_pool::DraftSetup;
use crate::token::TokenId;

/// One drafter and what this run learnt about its guesses.
struct Proposer {
    drafter: Box<dyn Drafter>,
    /// Acceptance by the evidence class of the proposals (see [`Proposal::evidence_class`]).
    acceptance: Vec<AcceptanceStats>,
    /// What each class started from (learnt by earlier requests); a class beyond them starts
    /// with no evidence.
    start: Vec<AcceptanceStats>,
    /// The class of this step's proposal.
    class: usize,
    /// Time this step's proposal took before it was asked for (see [`Proposal::prepared_ms`]).
    prepared_ms: f64,
}

/// A cheap drafter's guess that the budget did not draft, checked against the tokens that
/// follow: evidence of its acceptance that costs no decode.
struct Shadow {
    proposer: usize,
    class: usize,
    /// The guess's first continuation.
    tokens: Vec<TokenId>,
    /// How many of them the output has matched so far.
    matched: usize,
}

impl Shadow {
    /// Follows the output's new tokens; once the guess is settled, what a draft of it would
    /// have had accepted, depth by depth.
    fn follow(&mut self, emitted: &[TokenId]) -> Option<Vec<bool>> {
        for &token in emitted {
            if self.tokens[self.matched] != token {
                let mut hits = vec![true; self.matched];
                hits.push(false);
                return Some(hits);
            }
            self.matched += 1;
            if self.matched == self.tokens.len() {
                return Some(vec![true; self.matched]);
            }
        }
        None
    }
}

/// A step's proposal.
#[derive(Default)]
pub(crate) struct Draft {
    pub(crate) tree: DraftTree,
    pub(crate) draft_ms: f64,
    /// Why nothing was drafted.
    pub(crate) skip: Option<DraftSkip>,
    /// What the budget weighed, where it decided.
    pub(crate) decision: Option<DraftDecision>,
}

pub(crate) struct Drafting {
    proposers: Vec<Proposer>,
    /// Most tokens drafted per step, all drafters together.
    max_draft: usize,
    /// Every drafter proposes all it has at every step, whatever it costs.
    fixed: bool,
    /// A guess not drafted, being checked against the output.
    shadow: Option<Shadow>,
    /// Standard deviations below the observed acceptance the budget plans with.
    confidence_z: f64,
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
                .map(|(drafter, mut priors)| {
                    if priors.is_empty() {
                        priors.push(AcceptanceStats::default());
                    }
                    if drafter.traits().priced_per_token {
                        priors = priors
                            .into_iter()
                            .map(AcceptanceStats::priced_per_token)
                            .collect();
                    }
                    Proposer {
                        drafter,
                        acceptance: priors.clone(),
                        start: priors,
                        class: 0,
                        prepared_ms: 0.0,
                    }
                })
                .collect(),
            max_draft: setup.max_draft,
            fixed: setup.fixed,
            shadow: None,
            confidence_z: setup.confidence_z,
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
        for p in &mut self.proposers {
            p.prepared_ms = 0.0;
        }
        let limit = max_nodes.min(self.max_draft);
        if limit == 0 {
            return skipped(no_room());
        }
        let mut decision = None;
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
                Ok((trees, weighed)) => {
                    decision = Some(weighed);
                    trees
                }
                Err((skip, weighed)) => {
                    return Draft {
                        draft_ms: self.drafting_ms(started),
                        decision: weighed,
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
            draft_ms: self.drafting_ms(started),
            skip,
            decision,
        }
    }

    /// This step's drafting time: since `started`, and what its proposals took before.
    fn drafting_ms(&self, started: Instant) -> f64 {
        ms_since(started) + self.proposers.iter().map(|p| p.prepared_ms).sum::<f64>()
    }

    /// What this step may ask of the step drafter `kind` (the heads, the draft model): how
    /// many guesses, in what tree shape if the request fixes one. All it may draft when every
    /// drafter proposes in full, else what the budget would let it draft were it the only
    /// drafter (beside others it is given at most that). Asked before any request drafts, so
    /// that the drafter's work for every request runs together; a request that asks for more
    /// when it drafts gets them then. `None` when it asks nothing.
    pub(crate) fn ask_of(
        &self,
        kind: DrafterKind,
        cost: Option<&CostModel>,
        batch: BatchLoad,
        max_nodes: usize,
    ) -> Option<(usize, Option<&TreeSpec>)> {
        let limit = max_nodes.min(self.max_draft);
        let p = self.proposers.iter().find(|p| p.drafter.kind() == kind)?;
        let n = if self.fixed {
            limit
        } else {
            let option = DraftOption {
                stats: p.stats(),
                cap: limit,
                confidence_z: self.confidence_z,
            };
            choose_draft_lens(cost?, &[option], limit, batch).lens[0]
        };
        (n > 0).then(|| (n, p.drafter.tree()))
    }

    /// Each drafter's proposal cut to what the budget expects to pay, with the figures it
    /// weighed. Cheap drafters propose first, so that the budget knows how much they have; the
    /// others only draft what it asks. A cheap guess the budget declines is followed as a
    /// [`Shadow`].
    #[allow(clippy::type_complexity)]
    fn budgeted(
        &mut self,
        input: &DraftInput<'_>,
        cost: &CostModel,
        batch: BatchLoad,
        limit: usize,
    ) -> Result<(Vec<DraftTree>, DraftDecision), (DraftSkip, Option<DraftDecision>)> {
        let mut early: Vec<Option<DraftTree>> = self
            .proposers
            .iter_mut()
            .map(|p| {
                p.drafter
                    .traits()
                    .drafts_cheaply
                    .then(|| p.propose(input, limit))
            })
            .collect();
        let caps: Vec<usize> = early
            .iter()
            .map(|tree| tree.as_ref().map_or(limit, DraftTree::len))
            .collect();
        if caps.iter().all(|&cap| cap == 0) {
            return Err((self.no_candidates(), None));
        }
        let options: Vec<DraftOption<'_>> = self
            .proposers
            .iter()
            .zip(&caps)
            .map(|(p, &cap)| DraftOption {
                stats: p.stats(),
                cap,
                confidence_z: self.confidence_z,
            })
            .collect();
        let choice = choose_draft_lens(cost, &options, limit, batch);
        let decision = self.decision(&choice, &caps);
        if !choice.drafts() {
            // The figures of the first drafter that had something to propose.
            let first = caps.iter().position(|&cap| cap > 0).expect("a candidate");
            let shortest = shortest_draft(
                cost,
                self.proposers[first].stats(),
                self.confidence_z,
                batch,
            );
            self.follow_declined(&early);
            return Err((not_worth_it(shortest), Some(decision)));
        }
        // A real draft judges the drafter better than a shadow would.
        self.shadow = None;
        let trees = self
            .proposers
            .iter_mut()
            .zip(early.iter_mut())
            .zip(choice.lens)
            .filter(|(_, len)| *len > 0)
            .map(|((p, early), len)| {
                let mut tree = early.take().unwrap_or_else(|| p.propose(input, len));
                tree.truncate(len);
                tree
            })
            .collect();
        Ok((trees, decision))
    }

    fn decision(&self, choice: &DraftChoice, caps: &[usize]) -> DraftDecision {
        DraftDecision {
            expected_tokens: choice.expected_tokens,
            step_ms: choice.step_ms,
            plain_ms: choice.plain_ms,
            evidence: self
                .proposers
                .iter()
                .zip(caps.iter().zip(&choice.lens))
                .map(|(p, (&proposed, &drafted))| {
                    let (accepted, tried) = p.stats().evidence();
                    DrafterEvidence {
                        drafter: p.drafter.kind().name().to_owned(),
                        class: p.class,
                        accepted,
                        tried,
                        cautious_rate: p.stats().cautious_rate(self.confidence_z),
                        proposed,
                        drafted,
                    }
                })
                .collect(),
        }
    }

    /// Starts following the first cheap guess the budget declined, unless one is followed.
    fn follow_declined(&mut self, early: &[Option<DraftTree>]) {
        if self.shadow.is_some() {
            return;
        }
        let guess = early
            .iter()
            .enumerate()
            .find_map(|(i, tree)| Some((i, tree.as_ref()?.first_path())))
            .filter(|(_, tokens)| !tokens.is_empty());
        if let Some((proposer, tokens)) = guess {
            self.shadow = Some(Shadow {
                proposer,
                class: self.proposers[proposer].class,
                tokens,
                matched: 0,
            });
        }
    }

    fn no_candidates(&self) -> DraftSkip {
        let names: Vec<&str> = self
            .proposers
            .iter()
            .map(|p| p.drafter.kind().name())
            .collect();
        let message = match names.as_slice() {
            [one] => format!("the {one} drafter had no guess"),
            many => format!("the {} drafters had no guess", many.join(" and ")),
        };
        DraftSkip::new(DraftSkipReason::NoCandidates, message)
    }

    /// Records what verification made of the step's tree: each drafter is judged on the nodes it
    /// proposed (shared ones included), depth by depth along the accepted path. A followed
    /// guess is checked against the step's `emitted` tokens.
    pub(crate) fn record(
        &mut self,
        tree: &DraftTree,
        layout: &TreeLayout,
        accepted: &[usize],
        emitted: &[TokenId],
    ) {
        if let Some(shadow) = self.shadow.as_mut() {
            if let Some(hits) = shadow.follow(emitted) {
                let proposer = &mut self.proposers[shadow.proposer];
                proposer.acceptance[shadow.class].record(&hits);
                self.shadow = None;
            }
        }
        for p in &mut self.proposers {
            let kind = Some(p.drafter.kind());
            let proposed = |n: usize| {
                tree.sources[n].drafter() == kind
                    || tree.also[n].and_then(TokenSource::drafter) == kind
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

    /// Each drafter, and what this run learnt about it beyond what it started from, by
    /// evidence class.
    pub(crate) fn learnt(&self) -> impl Iterator<Item = (&dyn Drafter, Vec<AcceptanceStats>)> {
        self.proposers.iter().map(|p| {
            let learnt = p
                .acceptance
                .iter()
                .enumerate()
                .map(|(class, stats)| match p.start.get(class) {
                    Some(start) => stats.since(start),
                    None => stats.clone(),
                })
                .collect();
            (p.drafter.as_ref(), learnt)
        })
    }
}

impl Proposer {
    /// The drafter's proposal, its time kept for the budget when it proposed anything. Its
    /// evidence class says which acceptance figures judge it (a new class starts with no
    /// evidence, but the drafting time known so far).
    fn propose(&mut self, input: &DraftInput<'_>, max_nodes: usize) -> DraftTree {
        let started = Instant::now();
        let proposal = self.drafter.propose(input, max_nodes);
        let mut tree = proposal.tree;
        tree.truncate(max_nodes);
        self.prepared_ms = proposal.prepared_ms;
        self.class = proposal.evidence_class;
        if self.acceptance.len() <= self.class {
            let fresh = self.acceptance[0].without_evidence();
            self.acceptance.resize(self.class + 1, fresh);
        }
        if !tree.is_empty() {
            let ms = (ms_since(started) + self.prepared_ms - proposal.reading_ms).max(0.0);
            self.stats_mut().record_draft(ms, tree.len());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn shadow(tokens: &[TokenId]) -> Shadow {
        Shadow {
            proposer: 0,
            class: 0,
            tokens: tokens.to_vec(),
            matched: 0,
        }
    }

    #[test]
    fn a_shadow_settles_at_its_first_miss() {
        let mut guess = shadow(&[5, 6, 7, 8]);
        assert_eq!(guess.follow(&[5]), None, "one token of four matched");
        assert_eq!(guess.follow(&[6, 9, 10]), Some(vec![true, true, false]));
        let mut wrong = shadow(&[5, 6]);
        assert_eq!(wrong.follow(&[4]), Some(vec![false]));
    }

    #[test]
    fn a_shadow_matched_in_full_is_all_hits() {
        let mut guess = shadow(&[5, 6, 7]);
        assert_eq!(guess.follow(&[5, 6]), None);
        assert_eq!(guess.follow(&[7, 1]), Some(vec![true, true, true]));
    }
}
