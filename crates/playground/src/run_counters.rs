//! Counts of ended runs, kept for the metrics an adapter exposes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Runs ended, tokens generated and the last acceptance per speculative mode.
#[derive(Debug, Default)]
pub struct RunCounters {
    tokens_generated: AtomicU64,
    /// Runs ended, by status (finished, failed, cancelled).
    runs: Mutex<BTreeMap<&'static str, u64>>,
    /// Mode -> mean accepted length of its last finished speculative run.
    last_mean_accepted: Mutex<BTreeMap<&'static str, f64>>,
}

/// The counters at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunCountsSnapshot {
    pub tokens_generated: u64,
    pub runs: BTreeMap<&'static str, u64>,
    pub last_mean_accepted: BTreeMap<&'static str, f64>,
}

impl RunCounters {
    pub(crate) fn record_run(&self, status: &'static str, tokens: usize) {
        self.tokens_generated
            .fetch_add(tokens as u64, Ordering::Relaxed);
        *self
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(status)
            .or_default() += 1;
    }

    pub(crate) fn record_mean_accepted(&self, mode: &'static str, mean_accepted: f64) {
        self.last_mean_accepted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(mode, mean_accepted);
    }

    pub fn snapshot(&self) -> RunCountsSnapshot {
        RunCountsSnapshot {
            tokens_generated: self.tokens_generated.load(Ordering::Relaxed),
            runs: self
                .runs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            last_mean_accepted: self
                .last_mean_accepted
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}
