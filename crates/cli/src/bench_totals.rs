//! What `medusa bench` sums over the runs of one mode, and the speed-up over normal decoding per
//! round.

use engine::RunSummary;
use store::Spread;

/// Sums over the runs of one mode.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    pub tokens: usize,
    pub ms: f64,
    pub ttft_ms: f64,
    pub runs: usize,
    pub steps: usize,
    /// Per depth: (accepted, steps that reached it), rebuilt from each run's rates.
    pub depth_counts: Vec<(f64, f64)>,
    pub identical_to_normal: usize,
    /// Per round: (tokens, ms) over that round's prompts.
    rounds: Vec<(usize, f64)>,
}

/// Tokens per step over runs that generated `tokens` in all over `steps` decode steps: each
/// run's first token comes from reading its prompt, which is no step. 1.0 with no steps.
pub fn tokens_per_step(tokens: usize, runs: usize, steps: usize) -> f64 {
    if steps == 0 {
        1.0
    } else {
        tokens.saturating_sub(runs) as f64 / steps as f64
    }
}

impl Totals {
    pub fn add(&mut self, tokens: usize, ms: f64, ttft_ms: f64) {
        self.tokens += tokens;
        self.ms += ms;
        self.ttft_ms += ttft_ms;
        self.runs += 1;
    }

    /// One run's tokens and times, counted in all and in its round.
    pub fn add_in_round(&mut self, round: usize, tokens: usize, ms: f64, ttft_ms: f64) {
        self.add(tokens, ms, ttft_ms);
        if self.rounds.len() <= round {
            self.rounds.resize(round + 1, (0, 0.0));
        }
        self.rounds[round].0 += tokens;
        self.rounds[round].1 += ms;
    }

    pub fn add_run(&mut self, round: usize, run: &RunSummary) {
        self.add_in_round(round, run.tokens_generated, run.total_ms, run.ttft_ms);
        self.steps += run.steps;
        if self.depth_counts.len() < run.acceptance_by_depth.len() {
            self.depth_counts
                .resize(run.acceptance_by_depth.len(), (0.0, 0.0));
        }
        // Weight each run's per-depth rate by its step count.
        for (d, rate) in run.acceptance_by_depth.iter().enumerate() {
            self.depth_counts[d].0 += rate * run.steps as f64;
            self.depth_counts[d].1 += run.steps as f64;
        }
    }

    pub fn tokens_per_second(&self) -> f64 {
        if self.ms > 0.0 {
            self.tokens as f64 * 1000.0 / self.ms
        } else {
            0.0
        }
    }

    pub fn round_tokens_per_second(&self) -> Vec<f64> {
        self.rounds
            .iter()
            .map(|&(tokens, ms)| tokens as f64 * 1000.0 / ms.max(1e-9))
            .collect()
    }

    pub fn mean_ttft_ms(&self) -> f64 {
        self.ttft_ms / self.runs.max(1) as f64
    }
}

/// The median and range over rounds of a mode's tokens/s over normal's in the same round.
pub fn round_speedup(rounds: &[f64], normal_rounds: &[f64]) -> Option<Spread> {
    Spread::of(
        rounds
            .iter()
            .zip(normal_rounds)
            .map(|(run, normal)| run / normal.max(1e-9)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_per_step_leaves_out_each_runs_first_token() {
        // Two runs of 11 and 21 tokens over 5 and 10 steps: 30 tokens came from steps.
        assert_eq!(tokens_per_step(32, 2, 15), 2.0);
        assert_eq!(tokens_per_step(1, 1, 0), 1.0);
    }

    #[test]
    fn runs_are_summed_in_all_and_in_their_round() {
        let mut totals = Totals::default();
        totals.add_in_round(1, 10, 500.0, 20.0);
        totals.add_in_round(0, 30, 500.0, 40.0);
        totals.add_in_round(1, 10, 500.0, 30.0);
        assert_eq!((totals.tokens, totals.runs), (50, 3));
        assert_eq!(totals.tokens_per_second(), 50.0 * 1000.0 / 1500.0);
        assert_eq!(totals.round_tokens_per_second(), [60.0, 20.0]);
        assert_eq!(totals.mean_ttft_ms(), 30.0);
    }

    #[test]
    fn speed_ups_pair_each_round_with_normal_in_the_same_round() {
        let spread = round_speedup(&[12.0, 9.0, 10.0], &[10.0, 10.0, 10.0]).unwrap();
        assert_eq!(spread.median, 1.0);
        assert_eq!((spread.min, spread.max), (0.9, 1.2));
        assert!(round_speedup(&[], &[]).is_none());
    }
}
