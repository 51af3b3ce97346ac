//! Counts of ended runs and of speculative steps, kept for the metrics an adapter exposes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use engine::{RunSummary, StepEvent};

/// Runs ended, tokens generated, speculative steps and latencies per mode.
#[derive(Debug, Default)]
pub struct RunCounters {
    tokens_generated: AtomicU64,
    /// Runs ended, by status (finished, failed, cancelled).
    runs: Mutex<BTreeMap<&'static str, u64>>,
    /// Mode -> mean accepted length of its last finished speculative run.
    last_mean_accepted: Mutex<BTreeMap<&'static str, f64>>,
    spec_decode: Mutex<BTreeMap<&'static str, SpecDecodeCounts>>,
    latencies: Mutex<BTreeMap<&'static str, RunLatencies>>,
}

/// What one mode's speculative steps drafted and the model accepted, in the terms vLLM and
/// llama-server count them. A step's drafted tokens are its tree's depth (what could be
/// accepted); its nodes are counted apart.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecDecodeCounts {
    /// Steps that drafted something.
    pub drafts: u64,
    pub draft_tokens: u64,
    pub accepted_tokens: u64,
    /// Index k: steps whose drafted token at depth k + 1 was accepted.
    pub accepted_per_position: Vec<u64>,
    /// Nodes of all drafted trees (all of them verified).
    pub tree_nodes: u64,
}

/// Histograms of finished runs' latencies, in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct RunLatencies {
    pub time_to_first_token: Histogram,
    /// Per generated token after the first.
    pub time_per_output_token: Histogram,
    /// From submission to the end.
    pub request_latency: Histogram,
}

impl Default for RunLatencies {
    fn default() -> Self {
        // vLLM's buckets, so that dashboards made for it read these alike.
        Self {
            time_to_first_token: Histogram::new(&[
                0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0,
            ]),
            time_per_output_token: Histogram::new(&[
                0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
            ]),
            request_latency: Histogram::new(&[
                0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                120.0, 240.0, 480.0,
            ]),
        }
    }
}

/// Observations counted by upper bound (`le`), with their sum.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    pub bounds: &'static [f64],
    /// Per bound: observations at most that bound but above the one before.
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, value: f64) {
        if !value.is_finite() {
            return;
        }
        if let Some(i) = self.bounds.iter().position(|&b| value <= b) {
            self.counts[i] += 1;
        }
        self.sum += value;
        self.count += 1;
    }

    /// Per bound: the observations at most that bound, as Prometheus's `_bucket` counts them.
    pub fn cumulative(&self) -> Vec<u64> {
        self.counts
            .iter()
            .scan(0, |total, n| {
                *total += n;
                Some(*total)
            })
            .collect()
    }
}

/// The counters at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunCountsSnapshot {
    pub tokens_generated: u64,
    pub runs: BTreeMap<&'static str, u64>,
    pub last_mean_accepted: BTreeMap<&'static str, f64>,
    pub spec_decode: BTreeMap<&'static str, SpecDecodeCounts>,
    pub latencies: BTreeMap<&'static str, RunLatencies>,
}

impl RunCounters {
    pub(crate) fn record_run(&self, status: &'static str, tokens: usize) {
        self.tokens_generated
            .fetch_add(tokens as u64, Ordering::Relaxed);
        *lock(&self.runs).entry(status).or_default() += 1;
    }

    pub(crate) fn record_mean_accepted(&self, mode: &'static str, mean_accepted: f64) {
        lock(&self.last_mean_accepted).insert(mode, mean_accepted);
    }

    pub(crate) fn record_step(&self, mode: &'static str, step: &StepEvent) {
        if step.tree_size == 0 {
            return;
        }
        let mut counts = lock(&self.spec_decode);
        let counts = counts.entry(mode).or_default();
        counts.drafts += 1;
        counts.draft_tokens += step.tree_depth as u64;
        counts.accepted_tokens += step.accepted_len.saturating_sub(1) as u64;
        counts.tree_nodes += step.tree_size as u64;
        if counts.accepted_per_position.len() < step.depth_hits.len() {
            counts
                .accepted_per_position
                .resize(step.depth_hits.len(), 0);
        }
        for (position, hit) in step.depth_hits.iter().enumerate() {
            counts.accepted_per_position[position] += u64::from(*hit);
        }
    }

    /// A finished run's time to its first token, per later token, and in all.
    pub(crate) fn record_latencies(&self, mode: &'static str, summary: &RunSummary) {
        let mut latencies = lock(&self.latencies);
        let latencies = latencies.entry(mode).or_default();
        if summary.tokens_generated > 0 {
            latencies
                .time_to_first_token
                .observe(summary.ttft_ms / 1000.0);
        }
        if summary.tokens_generated > 1 {
            let per_token = (summary.total_ms - summary.ttft_ms)
                / 1000.0
                / (summary.tokens_generated - 1) as f64;
            latencies.time_per_output_token.observe(per_token);
        }
        latencies.request_latency.observe(summary.total_ms / 1000.0);
    }

    pub fn snapshot(&self) -> RunCountsSnapshot {
        RunCountsSnapshot {
            tokens_generated: self.tokens_generated.load(Ordering::Relaxed),
            runs: lock(&self.runs).clone(),
            last_mean_accepted: lock(&self.last_mean_accepted).clone(),
            spec_decode: lock(&self.spec_decode).clone(),
            latencies: lock(&self.latencies).clone(),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_count_each_value_under_its_first_bound() {
        let mut histogram = Histogram::new(&[0.1, 1.0]);
        for value in [0.05, 0.1, 0.5, 3.0, f64::NAN] {
            histogram.observe(value);
        }
        assert_eq!(histogram.counts, [2, 1]);
        assert_eq!(histogram.cumulative(), [2, 3]);
        assert_eq!(histogram.count, 4, "NaN is not an observation");
        assert!((histogram.sum - 3.65).abs() < 1e-12);
    }
}
