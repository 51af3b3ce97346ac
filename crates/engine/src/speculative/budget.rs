//! How many tokens to draft in a step: enough to pay, never so many that the step costs more
//! than the tokens it is expected to yield.
//!
//! A step that verifies `n` drafted tokens costs `t(n + 1)`, measured on this machine; it is
//! expected to yield `1 + sum_{d <= n} prod_{j <= d} a_j` tokens, where `a_j` is how often a drafted
//! token at depth j is accepted once depth j-1 was. Both sides are taken cautiously: acceptance at
//! a lower confidence bound of what was seen (little evidence, little drafting), and the step's
//! time at the top of its measured band ([`CostModel::cautious_cost`]), against plain decoding at
//! its central figure.

use super::costs::CostModel;

/// Acceptance seen so far in a run, as one per-token rate: how often a drafted token is
/// accepted once its parent was.
#[derive(Debug, Clone)]
pub struct AcceptanceStats {
    tried: u32,
    accepted: u32,
    steps: u32,
    /// Time a draft takes to make (heads are not free), smoothed; 0 until one was made. Per
    /// drafted token where `per_token`.
    draft_ms: f64,
    /// Drafting time grows with the draft's length (a draft model decodes once per token).
    per_token: bool,
    /// Longest draft currently allowed: starts short, doubles after a fully accepted draft and
    /// falls back to just past the accepted part after a miss, so that a guess which turns out
    /// wrong costs little before the rate estimate has learnt anything.
    window: usize,
}

const INITIAL_WINDOW: usize = 4;

impl Default for AcceptanceStats {
    fn default() -> Self {
        Self {
            tried: 0,
            accepted: 0,
            steps: 0,
            draft_ms: 0.0,
            per_token: false,
            window: INITIAL_WINDOW,
        }
    }
}

impl AcceptanceStats {
    /// Records a step: `depth_hits[d]` tells whether the token at depth d+1 was accepted.
    /// Depths below the first miss were never really tried and are not counted.
    pub fn record(&mut self, depth_hits: &[bool]) {
        self.steps += 1;
        if depth_hits.is_empty() {
            return;
        }
        let mut run = 0;
        for &hit in depth_hits {
            self.tried += 1;
            if !hit {
                break;
            }
            self.accepted += 1;
            run += 1;
        }
        self.window = if run == depth_hits.len() {
            (self.window * 2).max(run * 2)
        } else {
            (run + 1).max(2)
        };
    }

    /// Records how long making a draft of `drafted` tokens took (per token where drafts are
    /// priced so).
    pub fn record_draft(&mut self, ms: f64, drafted: usize) {
        let per = if self.per_token { drafted.max(1) } else { 1 };
        self.record_draft_time(ms / per as f64);
    }

    /// Records how long making a draft took.
    pub fn record_draft_time(&mut self, ms: f64) {
        if ms.is_finite() && ms >= 0.0 {
            self.draft_ms = if self.draft_ms == 0.0 {
                ms
            } else {
                0.8 * self.draft_ms + 0.2 * ms
            };
        }
    }

    /// A starting point from an acceptance rate and a drafting time known beforehand (held-out
    /// and timing measurements), weighing as `weight` tries.
    pub fn with_rate(rate: f64, weight: u32, draft_ms: f64) -> Self {
        let accepted = (rate.clamp(0.0, 1.0) * f64::from(weight)).round() as u32;
        Self {
            tried: weight,
            accepted,
            steps: weight,
            draft_ms: draft_ms.max(0.0),
            ..Self::default()
        }
    }

    /// What earlier requests learnt, as a starting point for a new one: the acceptance rate is
    /// kept but weighs as at most `weight` tries, so the new request can still prove it wrong.
    pub fn as_prior(&self, weight: u32) -> Self {
        let scale = if self.tried > weight {
            f64::from(weight) / f64::from(self.tried)
        } else {
            1.0
        };
        Self {
            tried: (f64::from(self.tried) * scale).round() as u32,
            accepted: (f64::from(self.accepted) * scale).round() as u32,
            steps: (f64::from(self.steps) * scale).round() as u32,
            draft_ms: self.draft_ms,
            per_token: self.per_token,
            window: INITIAL_WINDOW,
        }
    }

    /// What was learnt after `start`: these counts less the ones it began with.
    pub fn since(&self, start: &Self) -> Self {
        Self {
            tried: self.tried.saturating_sub(start.tried),
            accepted: self.accepted.saturating_sub(start.accepted),
            steps: self.steps.saturating_sub(start.steps),
            draft_ms: self.draft_ms,
            per_token: self.per_token,
            window: self.window,
        }
    }

    /// Adds another run's counts to this summary.
    pub fn absorb(&mut self, other: &Self) {
        self.tried += other.tried;
        self.accepted += other.accepted;
        self.steps += other.steps;
        if other.draft_ms > 0.0 {
            self.record_draft_time(other.draft_ms);
        }
    }

    /// Time a draft takes to make, as known so far (per token where it is priced so).
    pub fn draft_ms(&self) -> f64 {
        self.draft_ms
    }

    /// Prices drafts per drafted token from here on (see [`Self::draft_cost`]).
    pub fn priced_per_token(mut self) -> Self {
        self.per_token = true;
        self
    }

    /// No evidence yet, but this one's drafting time and pricing (a new evidence class of the
    /// same drafter).
    pub fn without_evidence(&self) -> Self {
        Self {
            draft_ms: self.draft_ms,
            per_token: self.per_token,
            ..Self::default()
        }
    }

    /// What a draft of `len` tokens is expected to take to make.
    pub fn draft_cost(&self, len: usize) -> f64 {
        if self.per_token {
            self.draft_ms * len as f64
        } else {
            self.draft_ms
        }
    }

    /// Drafted tokens judged so far, and how many of them were accepted.
    pub fn evidence(&self) -> (u32, u32) {
        (self.accepted, self.tried)
    }

    /// A cautious acceptance rate: the lower end of the Wilson score interval at `z` standard
    /// deviations. Nothing seen gives 0, and the bound rises toward the observed rate as
    /// evidence accumulates.
    pub fn cautious_rate(&self, z: f64) -> f64 {
        if self.tried == 0 {
            return 0.0;
        }
        let n = f64::from(self.tried);
        let p = f64::from(self.accepted) / n;
        let z2 = z * z;
        let centre = p + z2 / (2.0 * n);
        let margin = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
        ((centre - margin) / (1.0 + z2 / n)).clamp(0.0, 1.0)
    }
}

/// How many standard deviations below the observed acceptance the budget plans with by
/// default: the usual one-sided 90% bound (the sweep on `bench/tuning/` is in BENCHMARKS).
pub const CONFIDENCE_Z: f64 = 1.28;

/// What the other requests put in a step's batch, whatever one request drafts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchLoad {
    /// Their tokens in the decode (roots and trees).
    pub tokens: usize,
    /// The requests themselves: each yields at least its model token from the step.
    pub requests: usize,
}

/// The draft length in `0..=max_len` with the best expected tokens per millisecond for a
/// sequence decoding alone.
pub fn choose_draft_len(cost: &CostModel, stats: &AcceptanceStats, max_len: usize) -> usize {
    choose_draft_len_in_batch(cost, stats, max_len, BatchLoad::default())
}

/// The same in a batch that others share: what counts is the whole step's tokens per
/// millisecond, so a request drafts only where its guesses add more tokens than the time they
/// add would give the batch anyway, and trees shrink as the batch grows (on hardware where a
/// bigger batch costs more).
pub fn choose_draft_len_in_batch(
    cost: &CostModel,
    stats: &AcceptanceStats,
    max_len: usize,
    batch: BatchLoad,
) -> usize {
    choose_draft_lens(
        cost,
        &[DraftOption {
            stats,
            cap: max_len,
            confidence_z: CONFIDENCE_Z,
        }],
        max_len,
        batch,
    )
    .lens[0]
}

/// A drafter the budget may draw on in a step: what the run learnt about it, and the most
/// tokens it can propose now.
#[derive(Debug, Clone, Copy)]
pub struct DraftOption<'a> {
    pub stats: &'a AcceptanceStats,
    pub cap: usize,
    /// Standard deviations below the observed acceptance the budget plans with.
    pub confidence_z: f64,
}

/// What the budget chose for a step, with the figures it weighed.
#[derive(Debug, Clone, PartialEq)]
pub struct DraftChoice {
    /// Tokens each drafter drafts; all zeros to decode plainly.
    pub lens: Vec<usize>,
    /// Tokens this request was expected to yield with those drafts (1 without).
    pub expected_tokens: f64,
    /// The step's expected time with them, drafting included (cautiously priced), and a plain
    /// step's.
    pub step_ms: f64,
    pub plain_ms: f64,
}

impl DraftChoice {
    pub fn drafts(&self) -> bool {
        self.lens.iter().any(|&len| len > 0)
    }
}

/// How many tokens each drafter proposes this step, at most `max_total` together, for the best
/// expected tokens per millisecond of the step (`batch`'s included); all zeros when plain
/// decoding is expected to be faster.
///
/// Drafts merged into one tree yield as far as the farthest accepted one reaches. Taking the
/// drafters' guesses as independent, depth d is reached unless every drafter misses it, so a
/// second drafter adds `p_2(d) * P(the others miss d)` at each depth it covers. Each drafter
/// that drafts adds its own drafting time.
pub fn choose_draft_lens(
    cost: &CostModel,
    options: &[DraftOption<'_>],
    max_total: usize,
    batch: BatchLoad,
) -> DraftChoice {
    let plain_ms = cost.cost(batch.tokens + 1).max(1e-6);
    let mut best = DraftChoice {
        lens: vec![0; options.len()],
        expected_tokens: 1.0,
        step_ms: plain_ms,
        plain_ms,
    };
    let Some((last, others)) = options.split_last() else {
        return best;
    };
    let caps: Vec<usize> = options
        .iter()
        .map(|o| o.cap.min(o.stats.window).min(max_total))
        .collect();
    // reach[i][d]: how likely drafter i's token at depth d + 1 is accepted.
    let reach: Vec<Vec<f64>> = options
        .iter()
        .zip(&caps)
        .map(|(o, &cap)| {
            let rate = o.stats.cautious_rate(o.confidence_z);
            (1..=cap as i32).map(|d| rate.powi(d)).collect()
        })
        .collect();
    let depth = caps.iter().copied().max().unwrap_or(0);
    // A drafting step's time with this request's `tokens` in it.
    let step_ms = |tokens: usize| cost.cautious_cost(batch.tokens + tokens).max(1e-6);
    let others_yield = batch.requests as f64;
    let mut best_rate = (others_yield + 1.0) / plain_ms;
    // Every length of the other drafters; the last one's lengths are added one depth at a time.
    let mut lens = vec![0; others.len()];
    loop {
        let used: usize = lens.iter().sum();
        if used <= max_total {
            let miss: Vec<f64> = (0..depth)
                .map(|d| {
                    lens.iter()
                        .zip(&reach)
                        .filter(|(&len, _)| d < len)
                        .map(|(_, r)| 1.0 - r[d])
                        .product()
                })
                .collect();
            let mut expected = 1.0 + miss.iter().map(|m| 1.0 - m).sum::<f64>();
            let draft_ms: f64 = lens
                .iter()
                .zip(others)
                .filter(|(&len, _)| len > 0)
                .map(|(&len, o)| o.stats.draft_cost(len))
                .sum();
            let mut consider = |last_len: usize, expected: f64, draft_ms: f64| {
                if used + last_len == 0 {
                    return;
                }
                let ms = step_ms(1 + used + last_len) + draft_ms;
                let tokens_per_ms = (others_yield + expected) / ms;
                if tokens_per_ms > best_rate {
                    let mut chosen = lens.clone();
                    chosen.push(last_len);
                    best_rate = tokens_per_ms;
                    best = DraftChoice {
                        lens: chosen,
                        expected_tokens: expected,
                        step_ms: ms,
                        plain_ms,
                    };
                }
            };
            consider(0, expected, draft_ms);
            let last_cap = caps[others.len()].min(max_total - used);
            for len in 1..=last_cap {
                expected += reach[others.len()][len - 1] * miss[len - 1];
                consider(len, expected, draft_ms + last.stats.draft_cost(len));
            }
        }
        // The next combination of the other drafters' lengths, if any is left.
        let Some(i) = (0..lens.len()).find(|&i| lens[i] < caps[i]) else {
            break;
        };
        lens[i] += 1;
        lens[..i].iter_mut().for_each(|len| *len = 0);
    }
    best
}

/// What the shortest draft was expected to do when the budget chose none: the tokens one drafted
/// token would yield, the step's time with it, and a plain step's time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShortestDraft {
    pub expected_tokens: f64,
    pub step_ms: f64,
    pub plain_ms: f64,
}

pub fn shortest_draft(
    cost: &CostModel,
    stats: &AcceptanceStats,
    confidence_z: f64,
    batch: BatchLoad,
) -> ShortestDraft {
    ShortestDraft {
        expected_tokens: 1.0 + stats.cautious_rate(confidence_z),
        step_ms: cost.cautious_cost(batch.tokens + 2) + stats.draft_cost(1),
        plain_ms: cost.cost(batch.tokens + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats_with(tried: u32, accepted: u32) -> AcceptanceStats {
        AcceptanceStats {
            tried,
            accepted,
            steps: tried,
            draft_ms: 0.0,
            per_token: false,
            window: usize::MAX,
        }
    }

    #[test]
    fn free_tokens_draft_everything() {
        // A GPU-like cost: extra tokens nearly free.
        let flat = CostModel::new(vec![(1, 10.0), (64, 10.5)]);
        assert_eq!(choose_draft_len(&flat, &stats_with(100, 60), 8), 8);
    }

    #[test]
    fn a_drafter_priced_per_token_drafts_shorter() {
        // Extra tokens are free to verify, but each costs 2 ms to draft: flat, 8 tokens cost
        // 2 ms in all; per token, 16 ms, and the deep guesses (0.6^d) do not pay for theirs.
        let flat = CostModel::new(vec![(1, 10.0), (64, 10.5)]);
        let mut guesses = stats_with(1000, 600);
        guesses.record_draft_time(2.0);
        assert_eq!(guesses.draft_cost(8), 2.0);
        assert_eq!(choose_draft_len(&flat, &guesses, 8), 8);
        let per_token = guesses.priced_per_token();
        assert_eq!(per_token.draft_cost(8), 16.0);
        let len = choose_draft_len(&flat, &per_token, 8);
        assert!((1..8).contains(&len), "{len}");
        // A 4-token draft that took 8 ms: 2 ms a token where priced so, 8 ms a draft otherwise.
        let mut timed = AcceptanceStats::default().priced_per_token();
        timed.record_draft(8.0, 4);
        assert_eq!(timed.draft_ms(), 2.0);
        let mut flat_priced = AcceptanceStats::default();
        flat_priced.record_draft(8.0, 4);
        assert_eq!(flat_priced.draft_ms(), 8.0);
    }

    #[test]
    fn expensive_tokens_with_poor_acceptance_draft_nothing() {
        // Each extra token costs 80% of a step and only 30% are accepted: plain decoding wins.
        let steep = CostModel::new(vec![(1, 10.0), (2, 18.0), (9, 74.0)]);
        assert_eq!(choose_draft_len(&steep, &stats_with(1000, 300), 8), 0);
    }

    #[test]
    fn expensive_tokens_with_near_certain_acceptance_still_pay() {
        let steep = CostModel::new(vec![(1, 10.0), (2, 18.0), (9, 74.0)]);
        assert!(choose_draft_len(&steep, &stats_with(1000, 990), 8) >= 4);
    }

    #[test]
    fn heads_draft_where_extra_tokens_are_cheap_and_not_where_they_cost_nearly_full_price() {
        // Decode costs (ms by tokens in the batch) of the default model widened 4x: on a CPU
        // where 4 tokens cost 1.40x one, and on this 2-core one, where 2 cost 1.81x.
        let flat = CostModel::new(vec![
            (1, 155.0),
            (2, 217.0),
            (4, 217.0),
            (8, 403.0),
            (32, 1193.0),
        ]);
        let steep = CostModel::new(vec![
            (1, 27.1),
            (2, 49.2),
            (4, 77.1),
            (8, 148.9),
            (32, 488.2),
        ]);
        // The heads' held-out prior (a 3-node tree forecast at 1.80 tokens per step) and
        // their time for the tree.
        let heads = AcceptanceStats::with_rate(0.45, 128, 6.0);
        assert_eq!(choose_draft_len(&flat, &heads, 3), 3);
        let heads_here = AcceptanceStats::with_rate(0.45, 128, 3.0);
        assert_eq!(choose_draft_len(&steep, &heads_here, 3), 0);
    }

    #[test]
    fn without_evidence_nothing_is_drafted_where_tokens_cost_something() {
        let steep = CostModel::new(vec![(1, 10.0), (2, 18.0), (9, 74.0)]);
        assert_eq!(choose_draft_len(&steep, &AcceptanceStats::default(), 8), 0);
    }

    #[test]
    fn the_cautious_rate_rises_toward_the_observed_one_with_evidence() {
        assert_eq!(AcceptanceStats::default().cautious_rate(CONFIDENCE_Z), 0.0);
        let rates: Vec<f64> = [10, 100, 1000, 100_000]
            .iter()
            .map(|&n| stats_with(n, n * 7 / 10).cautious_rate(CONFIDENCE_Z))
            .collect();
        assert!(rates.windows(2).all(|w| w[0] < w[1]), "{rates:?}");
        assert!(rates.iter().all(|&r| r < 0.7), "{rates:?}");
        assert!(rates[3] > 0.69, "{rates:?}");
        // 7 of 10 is weak evidence: about 0.5 at 1.28 standard deviations.
        assert!((rates[0] - 0.4976).abs() < 1e-3, "{rates:?}");
        assert!(stats_with(50, 50).cautious_rate(CONFIDENCE_Z) < 1.0);
    }

    #[test]
    fn drafting_starts_once_the_evidence_is_strong_enough() {
        // Each extra token costs 60% of a step: a rate of 0.75 pays, if it is sure.
        let cost = CostModel::new(vec![(1, 10.0), (2, 16.0), (9, 58.0)]);
        assert_eq!(choose_draft_len(&cost, &stats_with(4, 3), 8), 0);
        assert!(choose_draft_len(&cost, &stats_with(400, 300), 8) > 0);
    }

    #[test]
    fn a_higher_confidence_waits_for_more_evidence() {
        // 30 of 40 accepted: the bound is 0.68 at 1 standard deviation, 0.59 at 2; a second token
        // pays from 0.6.
        let cost = CostModel::new(vec![(1, 10.0), (2, 16.0), (9, 58.0)]);
        let stats = stats_with(40, 30);
        let len_at = |confidence_z| {
            choose_draft_lens(
                &cost,
                &[DraftOption {
                    stats: &stats,
                    cap: 8,
                    confidence_z,
                }],
                8,
                BatchLoad::default(),
            )
            .lens[0]
        };
        assert_eq!(len_at(2.0), 0);
        assert_eq!(len_at(1.0), 1);
        assert_eq!(len_at(0.0), 1);
    }

    #[test]
    fn a_wide_cost_band_keeps_a_draft_from_paying_on_hope() {
        use super::super::costs::{CostPoint, CostSource};
        // Centrally a second token costs 10%, but it has been seen costing 100%.
        let point = |tokens, low_ms, ms, high_ms| CostPoint {
            tokens,
            ms,
            low_ms,
            high_ms,
        };
        let unsure = CostModel::with_bands(
            vec![point(1, 10.0, 10.0, 10.0), point(2, 10.5, 11.0, 20.0)],
            CostSource::Measured,
            None,
        );
        let stats = stats_with(1000, 600);
        assert_eq!(choose_draft_len(&unsure, &stats, 1), 0);
        let sure = CostModel::new(vec![(1, 10.0), (2, 11.0)]);
        assert_eq!(choose_draft_len(&sure, &stats, 1), 1);
    }

    #[test]
    fn the_choice_says_what_it_expected() {
        let flat = CostModel::new(vec![(1, 10.0), (64, 10.0)]);
        let stats = stats_with(1000, 1000);
        let choice = choose_draft_lens(
            &flat,
            &[DraftOption {
                stats: &stats,
                cap: 2,
                confidence_z: CONFIDENCE_Z,
            }],
            2,
            BatchLoad::default(),
        );
        assert_eq!(choice.lens, vec![2]);
        assert!(choice.drafts());
        assert!(choice.expected_tokens > 2.9 && choice.expected_tokens < 3.0);
        assert_eq!((choice.step_ms, choice.plain_ms), (10.0, 10.0));
    }

    #[test]
    fn window_grows_on_full_acceptance_and_shrinks_on_a_miss() {
        let mut s = AcceptanceStats::default();
        s.record(&[true; 4]);
        assert_eq!(s.window, 8);
        s.record(&[true, true, true, false, false]);
        assert_eq!(s.window, 4);
        s.record(&[false]);
        assert_eq!(s.window, 2);
    }

    #[test]
    fn trees_shrink_when_the_batch_is_already_busy() {
        // Cheap while the batch is small, each token a full step's cost beyond 8 tokens.
        let knee = CostModel::new(vec![(1, 10.0), (8, 12.0), (16, 28.0), (32, 60.0)]);
        let stats = stats_with(100, 70);
        let alone = choose_draft_len_in_batch(&knee, &stats, 8, BatchLoad::default());
        let busy = choose_draft_len_in_batch(
            &knee,
            &stats,
            8,
            BatchLoad {
                tokens: 16,
                requests: 16,
            },
        );
        assert!(alone > busy, "alone {alone}, busy {busy}");
        assert_eq!(busy, 0);
    }

    /// Draft lengths of `streams` requests as the scheduler fills one batch: each sees the
    /// trees of those before it and the roots of those after it.
    fn fill_batch(cost: &CostModel, stats: &AcceptanceStats, streams: usize) -> Vec<usize> {
        let mut tokens = 0;
        (0..streams)
            .map(|k| {
                let batch = BatchLoad {
                    tokens: tokens + streams - k - 1,
                    requests: streams - 1,
                };
                let len = choose_draft_len_in_batch(cost, stats, 64, batch);
                tokens += 1 + len;
                len
            })
            .collect()
    }

    #[test]
    fn on_a_gpu_trees_stay_large_alone_and_shrink_as_streams_fill_the_batch() {
        // GPU-shaped: up to 64 tokens cost about one; beyond, each token adds its share.
        let gpu = CostModel::new(vec![
            (1, 1.40),
            (16, 1.45),
            (64, 1.60),
            (128, 2.70),
            (256, 4.90),
            (512, 9.30),
        ]);
        let stats = stats_with(1000, 700);
        let mean = |lens: &[usize]| lens.iter().sum::<usize>() as f64 / lens.len() as f64;
        let alone = fill_batch(&gpu, &stats, 1);
        let eight = fill_batch(&gpu, &stats, 8);
        let thirty_two = fill_batch(&gpu, &stats, 32);
        assert!(alone[0] >= 8, "alone {alone:?}");
        assert!(eight.iter().all(|&len| len > 0), "8 streams {eight:?}");
        assert!(mean(&eight) < alone[0] as f64, "8 streams {eight:?}");
        assert!(
            mean(&thirty_two) < mean(&eight),
            "32 streams {thirty_two:?}"
        );
        assert!(mean(&thirty_two) <= alone[0] as f64 / 2.0, "{thirty_two:?}");
        // Where every token costs its share of a step (a compute-bound batch), guesses right
        // 70% of the time add less than the same time gives the other requests.
        let linear = CostModel::new(vec![(1, 0.5), (512, 256.0)]);
        assert!(fill_batch(&linear, &stats, 32).iter().all(|&len| len == 0));
    }

    #[test]
    fn slow_drafts_must_pay_for_themselves() {
        let flat = CostModel::new(vec![(1, 10.0), (64, 10.5)]);
        let mut stats = stats_with(100, 30);
        assert!(choose_draft_len(&flat, &stats, 8) > 0);
        // A draft that takes as long as a step, guessing right 30% of the time, does not pay.
        stats.record_draft_time(10.0);
        assert_eq!(choose_draft_len(&flat, &stats, 8), 0);
    }

    #[test]
    fn priors_keep_the_rate_but_not_the_weight() {
        let mut learnt = stats_with(1000, 10);
        learnt.record_draft_time(4.0);
        let prior = learnt.as_prior(20);
        assert_eq!((prior.tried, prior.accepted, prior.steps), (20, 0, 20));
        assert_eq!(prior.window, INITIAL_WINDOW);
        assert_eq!(prior.draft_ms, 4.0);
        let mut total = AcceptanceStats::default();
        total.absorb(&stats_with(10, 5));
        total.absorb(&stats_with(10, 1));
        assert_eq!((total.tried, total.accepted), (20, 6));
    }

    #[test]
    fn record_counts_depths_up_to_the_first_miss() {
        let mut s = AcceptanceStats::default();
        s.record(&[true, false, false]);
        s.record(&[true, true]);
        assert_eq!((s.tried, s.accepted, s.steps), (4, 3, 2));
    }

    #[test]
    fn misses_stop_drafting() {
        let steep = CostModel::new(vec![(1, 10.0), (2, 18.0), (9, 74.0)]);
        let mut s = stats_with(40, 36);
        assert!(choose_draft_len(&steep, &s, 8) > 0);
        for _ in 0..30 {
            s.record(&[false]);
        }
        assert_eq!(choose_draft_len(&steep, &s, 8), 0);
    }

    fn both<'a>(
        lookup: (&'a AcceptanceStats, usize),
        medusa: &'a AcceptanceStats,
    ) -> [DraftOption<'a>; 2] {
        [
            DraftOption {
                stats: lookup.0,
                cap: lookup.1,
                confidence_z: CONFIDENCE_Z,
            },
            DraftOption {
                stats: medusa,
                cap: 16,
                confidence_z: CONFIDENCE_Z,
            },
        ]
    }

    #[test]
    fn merged_drafting_decodes_plainly_when_every_draft_costs_more_than_it_yields() {
        // This CPU: each extra token costs about a whole step.
        let steep = CostModel::new(vec![(1, 10.0), (2, 19.0), (9, 85.0), (17, 170.0)]);
        let (lookup, medusa) = (stats_with(1000, 600), stats_with(1000, 450));
        assert_eq!(
            choose_draft_lens(
                &steep,
                &both((&lookup, 8), &medusa),
                16,
                BatchLoad::default()
            )
            .lens,
            vec![0, 0]
        );
    }

    #[test]
    fn merged_drafting_takes_lookup_alone_on_repeated_text() {
        let steep = CostModel::new(vec![(1, 10.0), (2, 11.0), (9, 30.0), (17, 170.0)]);
        let lookup = stats_with(1000, 990);
        let mut medusa = stats_with(1000, 300);
        medusa.record_draft_time(3.0);
        let lens = choose_draft_lens(
            &steep,
            &both((&lookup, 8), &medusa),
            16,
            BatchLoad::default(),
        )
        .lens;
        assert!(lens[0] >= 4 && lens[1] == 0, "{lens:?}");
        // Without a match lookup has nothing to add, and Medusa still does not pay.
        assert_eq!(
            choose_draft_lens(
                &steep,
                &both((&lookup, 0), &medusa),
                16,
                BatchLoad::default()
            )
            .lens,
            vec![0, 0]
        );
    }

    #[test]
    fn merged_drafting_uses_both_where_tokens_are_cheap() {
        let flat = CostModel::new(vec![(1, 10.0), (64, 10.5)]);
        let (lookup, medusa) = (stats_with(100, 60), stats_with(100, 60));
        let lens = choose_draft_lens(
            &flat,
            &both((&lookup, 6), &medusa),
            16,
            BatchLoad::default(),
        )
        .lens;
        assert!(lens[0] > 0 && lens[1] > 0, "{lens:?}");
        assert!(lens.iter().sum::<usize>() <= 16);
        assert!(lens[0] <= 6, "lookup drafts no more than it found");
        // A tight total budget is shared, never exceeded.
        let lens =
            choose_draft_lens(&flat, &both((&lookup, 6), &medusa), 3, BatchLoad::default()).lens;
        assert!(lens.iter().sum::<usize>() <= 3, "{lens:?}");
    }

    #[test]
    fn a_second_drafter_adds_only_where_the_first_would_miss() {
        // Lookup nearly always right: a Medusa guess at the same depths adds almost nothing,
        // so where extra tokens cost something, Medusa does not draft beside it.
        let gentle = CostModel::new(vec![(1, 10.0), (32, 20.0)]);
        let lookup = stats_with(10_000, 9_990);
        let medusa = stats_with(10_000, 5_000);
        let lens = choose_draft_lens(
            &gentle,
            &both((&lookup, 16), &medusa),
            32,
            BatchLoad::default(),
        )
        .lens;
        assert_eq!(lens[1], 0, "{lens:?}");
        assert!(lens[0] > 8, "{lens:?}");
    }
}
