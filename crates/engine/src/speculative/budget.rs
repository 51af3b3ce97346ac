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
mod tests;
