//! The engine's counters, shared between its handle and its thread: what the UI and `/metrics`
//! show (slots, requests, steps, tokens, KV cells) and where the steps' time went. The engine
//! thread reports events here; the handle reads copies.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::Serialize;

use crate::speculative::costs::CostPoint;
use crate::speculative::drafter_kind::DrafterKind;
use crate::step_profile::StepProfile;

/// Engine-wide counters, for the UI and the server's metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ts_rs::TS)]
pub struct EngineMetrics {
    /// Most requests decoding at once.
    pub slots: usize,
    /// Requests decoding now.
    pub active: usize,
    /// Requests and embedding calls waiting for the engine (a request with a grammar while
    /// its grammar is compiled, too).
    pub queued: usize,
    pub steps: u64,
    /// Tokens in all decodes so far (prompt chunks, roots and draft trees).
    pub batch_tokens: u64,
    /// Tokens emitted to requests so far.
    pub tokens_emitted: u64,
    /// Tokens in the last decode.
    pub last_batch_tokens: usize,
    /// Requests in the last decode over the slots.
    pub last_occupancy: f64,
    pub requests_finished: u64,
    pub requests_failed: u64,
    /// Sequences holding KV cells, counted when the engine last went idle (0 when nothing leaked);
    /// the prompt cache's are not counted.
    pub idle_sequences_in_kv: usize,
    /// Finished requests whose cells the prompt cache keeps.
    pub cached_sequences: usize,
    /// KV cells held by requests and the prompt cache, after the last step.
    pub kv_cells_used: usize,
    /// KV cells in all (every slot's share).
    pub kv_cells: usize,
    /// Decodes of the draft model, and the tokens in them: it reads and guesses for every
    /// drafting request in the same decodes, so tokens per decode grow with the requests.
    pub draft_model_decodes: u64,
    pub draft_model_tokens: u64,
    /// Evaluations of a Medusa head while drafting, and the questions in them: each step asks a
    /// head once per depth for every request drafting with the heads, so questions per
    /// evaluation grow with the requests.
    pub heads_evaluations: u64,
    pub heads_queries: u64,
    /// Evaluations of the feature drafter's layer while drafting (one per depth for every
    /// request growing a tree), and the tree nodes in them.
    pub eagle_evaluations: u64,
    pub eagle_queries: u64,
    /// Embedding calls the engine holds, waiting or being read (those waiting also count in
    /// `queued`).
    pub embedding_calls: usize,
    /// Tokens read for embedding calls so far.
    pub embedding_tokens: u64,
}

/// One decoding step, as the counters take it.
pub(crate) struct StepCount {
    pub(crate) batch_tokens: usize,
    pub(crate) emitted: u64,
    pub(crate) active: usize,
    pub(crate) kv_cells_used: usize,
}

/// Shared between the engine handle and its thread.
#[derive(Default)]
pub(crate) struct Shared {
    /// Requests sent to the thread and not yet admitted (the handle refuses past its limit).
    pub(crate) queued: AtomicUsize,
    metrics: Mutex<EngineMetrics>,
    step_profile: Mutex<StepProfile>,
    /// The decode costs the engine drafts by, once known.
    decode_costs: Mutex<Option<Vec<CostPoint>>>,
}

impl Shared {
    pub(crate) fn metrics(&self) -> EngineMetrics {
        self.counters().clone()
    }

    pub(crate) fn step_profile(&self) -> StepProfile {
        *self
            .step_profile
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn decode_costs(&self) -> Option<Vec<CostPoint>> {
        self.decode_costs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set_decode_costs(&self, points: Vec<CostPoint>) {
        *self
            .decode_costs
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(points);
    }

    fn counters(&self) -> MutexGuard<'_, EngineMetrics> {
        self.metrics.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The engine's size, once it has loaded.
    pub(crate) fn set_capacity(&self, slots: usize, kv_cells: usize) {
        let mut m = self.counters();
        m.slots = slots;
        m.kv_cells = kv_cells;
    }

    pub(crate) fn record_step(&self, step: StepCount) {
        let mut m = self.counters();
        m.kv_cells_used = step.kv_cells_used;
        m.steps += 1;
        m.batch_tokens += step.batch_tokens as u64;
        m.tokens_emitted += step.emitted;
        m.last_batch_tokens = step.batch_tokens;
        m.last_occupancy = step.active as f64 / m.slots.max(1) as f64;
    }

    /// Adds a step's timings to the profile (steps that decoded drafts only: prompt chunks
    /// would blur what a draft costs).
    pub(crate) fn profile_step(&self, profile: &StepProfile) {
        self.step_profile
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(profile);
    }

    /// A step drafter's work in a step: the draft model's decodes and their tokens, the
    /// heads' and the feature drafter's evaluations and the questions in them.
    pub(crate) fn count_drafter_work(&self, drafter: DrafterKind, work: u64, items: u64) {
        let mut m = self.counters();
        match drafter {
            DrafterKind::DraftModel => {
                m.draft_model_decodes += work;
                m.draft_model_tokens += items;
            }
            DrafterKind::Medusa => {
                m.heads_evaluations += work;
                m.heads_queries += items;
            }
            DrafterKind::Eagle => {
                m.eagle_evaluations += work;
                m.eagle_queries += items;
            }
            // Lookup works for one request at a time.
            DrafterKind::Lookup => {}
        }
    }

    /// Embedding calls waiting or being read.
    pub(crate) fn set_embedding_calls(&self, calls: usize) {
        self.counters().embedding_calls = calls;
    }

    pub(crate) fn count_embedding_tokens(&self, tokens: usize) {
        self.counters().embedding_tokens += tokens as u64;
    }

    pub(crate) fn count_finished(&self) {
        self.counters().requests_finished += 1;
    }

    pub(crate) fn count_failed(&self) {
        self.counters().requests_failed += 1;
    }

    /// Requests decoding now and waiting.
    pub(crate) fn set_load(&self, active: usize) {
        let queued = self.queued.load(Ordering::Relaxed);
        let mut m = self.counters();
        m.active = active;
        m.queued = queued;
    }

    pub(crate) fn set_cache(&self, cached_sequences: usize, kv_cells_used: usize) {
        let mut m = self.counters();
        m.cached_sequences = cached_sequences;
        m.kv_cells_used = kv_cells_used;
    }

    /// Sequences still holding cells while nothing runs: leaked ones.
    pub(crate) fn set_idle_sequences(&self, sequences: usize) {
        self.counters().idle_sequences_in_kv = sequences;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_add_up_and_occupancy_is_over_the_slots() {
        let shared = Shared::default();
        shared.set_capacity(4, 4096);
        for emitted in [3, 1] {
            shared.record_step(StepCount {
                batch_tokens: 5,
                emitted,
                active: 2,
                kv_cells_used: 100,
            });
        }
        shared.count_finished();
        shared.count_failed();
        shared.count_drafter_work(DrafterKind::DraftModel, 3, 7);
        shared.count_drafter_work(DrafterKind::DraftModel, 1, 2);
        shared.count_embedding_tokens(64);
        shared.count_embedding_tokens(10);
        shared.set_embedding_calls(2);
        let m = shared.metrics();
        assert_eq!((m.steps, m.batch_tokens, m.tokens_emitted), (2, 10, 4));
        assert_eq!((m.last_batch_tokens, m.last_occupancy), (5, 0.5));
        assert_eq!((m.requests_finished, m.requests_failed), (1, 1));
        assert_eq!((m.slots, m.kv_cells, m.kv_cells_used), (4, 4096, 100));
        assert_eq!((m.draft_model_decodes, m.draft_model_tokens), (4, 9));
        assert_eq!((m.embedding_calls, m.embedding_tokens), (2, 74));
    }
}
