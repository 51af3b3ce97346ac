//! Continuous batching: every step, one decode carries the next token (or draft tree) of every
//! running request plus prompt chunks of new ones. Requests join at the next step and leave as
//! soon as they end, freeing their KV cells and their slot. It sees the model only through
//! [`Decoder`] and the drafters only through the drafter traits. The batcher runs the step's
//! phases; the requests waiting for a slot are the [`WaitingQueue`]'s and the sequence ids and
//! kept cells the [`KvLedger`]'s.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use crate::clock::ms_since;
use crate::engine_metrics::{Shared, StepCount};
use crate::error::EngineError;
use crate::events::{GenerationEvent, StopReason};
use crate::grammar::trial::GRAMMAR_STEP_LIMIT;
use crate::output::OutputSink;
use crate::sampling::rng::random_seed;
use crate::speculative::budget::BatchLoad;
use crate::speculative::costs::CostModel;
use crate::speculative::drafter::DraftAsk;
use crate::step::active_request::{ActiveRequest, NewActiveRequest, StepPlan};
use crate::step::admission::{QueuedRequest, WaitingQueue};
use crate::step::batch::{add_tree, fit_leaves, StepBatch};
use crate::step::decoder::Decoder;
use crate::step::drafter_pool::DrafterPool;
use crate::step::drafting::no_room;
use crate::step::kv_ledger::{KvLedger, SequenceIds};
use crate::token::TokenId;
use crate::token::Vocabulary;

/// Prompt tokens per step while other requests are decoding, so that a long prompt does not
/// stall them for a whole batch.
const PREFILL_CHUNK_WHEN_BUSY: usize = 64;
/// Prompt tokens per step while nothing decodes: a request that arrives meanwhile waits for at
/// most one such step before its own prompt is read (with exact kernels a prompt token costs
/// about what a decoded one does on a CPU, so a smaller chunk costs the prompt little).
const PREFILL_CHUNK_ALONE: usize = 256;

pub(crate) struct Batcher<'m, B: Decoder> {
    model: B,
    vocabulary: &'m dyn Vocabulary,
    slots: Vec<Option<ActiveRequest<'m>>>,
    waiting: WaitingQueue,
    panic_in_next_step: bool,
    kv: KvLedger,
    drafters: DrafterPool<'m>,
    shared: Arc<Shared>,
    /// The version of the decode costs last published to `shared`.
    published_costs: Option<u64>,
}

impl<'m, B: Decoder> Batcher<'m, B> {
    pub(crate) fn new(
        model: B,
        vocabulary: &'m dyn Vocabulary,
        drafters: DrafterPool<'m>,
        ids: SequenceIds,
        shared: Arc<Shared>,
    ) -> Self {
        shared.set_capacity(ids.slots, ids.slots * model.n_ctx_seq());
        let mut batcher = Self {
            model,
            vocabulary,
            slots: (0..ids.slots).map(|_| None).collect(),
            waiting: WaitingQueue::default(),
            panic_in_next_step: false,
            kv: KvLedger::new(&ids),
            drafters,
            shared,
            published_costs: None,
        };
        batcher.publish_costs();
        batcher
    }

    /// Adds earlier text (an earlier request's prompt and answer) to lookup's memory.
    pub(crate) fn remember(&mut self, history: &[TokenId]) {
        self.drafters.remember(history);
    }

    pub(crate) fn model(&self) -> &B {
        &self.model
    }

    pub(crate) fn model_mut(&mut self) -> &mut B {
        &mut self.model
    }

    pub(crate) fn drafters(&self) -> &DrafterPool<'m> {
        &self.drafters
    }

    pub(crate) fn queue(&mut self, request: QueuedRequest) {
        self.waiting.push(request);
    }

    /// A fault for tests: the next step panics after its decode.
    pub(crate) fn panic_in_next_step(&mut self) {
        self.panic_in_next_step = true;
    }

    /// Takes a fault injected for the next step, for a diagnostic that runs first.
    pub(crate) fn take_injected_panic(&mut self) -> bool {
        std::mem::take(&mut self.panic_in_next_step)
    }

    /// Publishes the decode costs when they are new or changed, for the drafting outlook.
    pub(crate) fn publish_costs(&mut self) {
        let version = self.model.cost_version();
        if self.published_costs == Some(version) {
            return;
        }
        if let Some(costs) = self.model.cost_model() {
            self.shared.set_decode_costs(costs.points().to_vec());
            self.published_costs = Some(version);
        }
    }

    pub(crate) fn active(&self) -> usize {
        self.slots.iter().flatten().count()
    }

    /// No request decoding or waiting.
    pub(crate) fn idle(&self) -> bool {
        self.active() == 0 && self.waiting.is_empty()
    }

    /// With nothing running: counts the sequences that still hold cells (none should), and
    /// when nothing is cached, starts the next requests at the front of the cache, where
    /// attention scans the fewest cells.
    pub(crate) fn settle_idle(&mut self) {
        let in_use = self.kv.sequences_holding_cells(&self.model);
        self.shared.set_idle_sequences(in_use);
        if self.kv.cached_prompts() == 0 {
            self.model.clear_cells();
        }
    }

    /// A step under `catch_unwind`: a panic in it (a bug, or llama-cpp-2 refusing an index)
    /// fails the requests that were in it, and the batcher starts afresh for the next ones.
    pub(crate) fn guarded_step(&mut self) {
        let stepped = panic::catch_unwind(AssertUnwindSafe(|| self.step()));
        if let Err(payload) = stepped {
            let message = panic_message(payload.as_ref());
            let requests: Vec<i32> = self.slots.iter().flatten().map(|s| s.id).collect();
            tracing::error!(panic = %message, slots = ?requests, "a step panicked; its requests fail");
            for slot in 0..self.slots.len() {
                self.fail_slot(slot, EngineError::StepFailed(message.clone()));
            }
            self.reset_cells();
        }
    }

    /// Frees every cell and gives every leaf sequence back: after a panic, nothing the step
    /// left half-done can be trusted.
    pub(crate) fn reset_cells(&mut self) {
        self.kv.reset(&mut self.model);
        self.update_cache_metrics();
        self.model.clear_batch();
        self.update_load();
    }

    pub(crate) fn drop_prompt_cache(&mut self) {
        self.kv.drop_prompt_cache(&mut self.model);
        self.update_cache_metrics();
    }

    /// Frees cached cells until every active request (and `more` about to start) can have its
    /// whole share of the KV cache.
    fn fit_prompt_cache(&mut self, more: usize) {
        let room = self.slots.len().saturating_sub(self.active() + more);
        self.kv.fit_prompt_cache(&mut self.model, room);
        self.update_cache_metrics();
    }

    /// Moves waiting requests into free slots.
    pub(crate) fn admit(&mut self) {
        while let Some(slot) = self.slots.iter().position(Option::is_none) {
            let Some(queued) = self.waiting.next_wanted(&self.shared) else {
                break;
            };
            let failures = queued.events.clone();
            match self.start(slot, queued) {
                Ok(running) => self.slots[slot] = Some(running),
                Err(err) => {
                    tracing::warn!(error = %err, "request refused");
                    let _ = failures.send(GenerationEvent::Failed(err));
                    self.shared.count_failed();
                }
            }
        }
        self.update_load();
    }

    fn start(
        &mut self,
        slot: usize,
        queued: QueuedRequest,
    ) -> Result<ActiveRequest<'m>, EngineError> {
        let (request, draft) = queued.request.into_parts();
        let draft = self.drafters.for_request(&draft);
        let prompt = self
            .model
            .prompt_tokens(&request.prompt, request.continue_final_message)?;
        // Measuring decode costs clears the KV cache, so it only happens with nothing running.
        if !draft.drafters.is_empty() && self.model.cost_model().is_none() && self.active() == 0 {
            self.drop_prompt_cache();
            self.model.ensure_cost_model()?;
        }
        // Cells of an earlier request starting the same way: copied, not decoded again. The
        // last prompt token is always decoded, as its logits give the first token.
        let reused = if request.cache_prompt {
            let limit = prompt.len().saturating_sub(1);
            self.kv
                .reuse_prompt(&mut self.model, &prompt, limit, slot as i32)?
        } else {
            None
        };
        self.fit_prompt_cache(1);
        let out = OutputSink::new(
            self.vocabulary,
            queued.events,
            &prompt,
            request.max_tokens as usize,
            &request.stop,
        );
        let seed = request.sampling.seed.unwrap_or_else(random_seed);
        let mut running = ActiveRequest::new(NewActiveRequest {
            id: slot as i32,
            request,
            out,
            cancel: queued.cancel,
            prompt,
            seed,
            draft,
            grammar: queued.grammar,
            queued_at: queued.queued_at,
        });
        if let Some(tokens) = reused {
            running.reuse_cells(tokens);
        }
        Ok(running)
    }

    /// One decode for every active request, in phases: each running request drafts its tree
    /// into the batch, prompt chunks fill what is left, one decode, then each request verifies
    /// and commits its tree (or samples its first token).
    fn step(&mut self) {
        let _span = tracing::debug_span!("step", active = self.active()).entered();
        for running in self.slots.iter_mut().flatten() {
            running.check_cancelled();
        }
        self.keep_cell_order();
        self.model.clear_batch();
        let mut batch = StepBatch::default();
        self.draft_into(&mut batch);
        self.add_prompt_chunks(&mut batch);
        if let Err(err) = self.decode(&mut batch) {
            // The decode failed as a whole: every request in it fails, the others go on.
            for (slot, plan) in batch.trees {
                self.kv.give_back_leaves(&mut self.model, &plan.leaf_seqs);
                self.fail_slot(slot, err.clone());
            }
            for (slot, _) in batch.prefills {
                self.fail_slot(slot, err.clone());
            }
            self.retire();
            return;
        }
        if std::mem::take(&mut self.panic_in_next_step) {
            panic!("a fault injected into this step");
        }
        let profiled = batch.decodes_drafts_only();
        let emitted = self.commit(&mut batch);
        self.fail_slow_grammars();
        self.shared.record_step(StepCount {
            batch_tokens: batch.tokens,
            emitted,
            active: self.active(),
            kv_cells_used: self.kv_cells_used(),
        });
        if profiled {
            batch.profile.steps = 1;
            batch.profile.batch_tokens = batch.tokens as u64;
            self.shared.profile_step(&batch.profile);
        }
        self.retire();
    }

    /// Running requests first: each gets its root, and a tree where it pays.
    fn draft_into(&mut self, batch: &mut StepBatch) {
        let n_batch = self.model.n_batch();
        let n_ctx_seq = self.model.n_ctx_seq();
        let decoding: Vec<usize> = (0..self.slots.len())
            .filter(|&s| {
                self.slots[s]
                    .as_ref()
                    .is_some_and(|q| q.prefill_done() && q.ending.is_none())
            })
            .collect();
        let cost = self.model.cost_model().cloned();
        self.prepare_step_drafters(&decoding, cost.as_ref());
        for (k, &slot) in decoding.iter().enumerate() {
            let reserved_for_others = decoding.len() - k - 1;
            let Some(running) = self.slots[slot].as_mut() else {
                continue;
            };
            if running.pos + 1 >= n_ctx_seq {
                running.ending = Some(StopReason::ContextFull);
                continue;
            }
            let room = draft_room(
                running,
                n_ctx_seq,
                n_batch,
                batch.tokens + 1 + reserved_for_others,
            );
            // Whatever this request drafts, the step decodes the trees of the requests before
            // it and the roots of those after it, and yields each of them at least a token.
            let load = BatchLoad {
                tokens: batch.tokens + reserved_for_others,
                requests: decoding.len() - 1,
            };
            let draft = running.draft(
                cost.as_ref(),
                load,
                room,
                self.drafters.step_drafters(),
                self.drafters.memory(),
            );
            batch.profile.draft_ms += draft.draft_ms;
            let drafted = !draft.tree.is_empty();
            let tree = fit_leaves(draft.tree, self.kv.free_leaves());
            // Every leaf sequence id is taken by other requests' trees.
            let skip = match draft.skip {
                None if drafted && tree.is_empty() => Some(no_room()),
                skip => skip,
            };
            let layout = tree.layout();
            let leaf_seqs = self.kv.take_leaves(layout.leaves.len());
            let plan = StepPlan {
                root_index: batch.tokens as i32,
                tree,
                layout,
                leaf_seqs,
                draft_ms: draft.draft_ms,
                skip,
                decision: draft.decision,
                started: Instant::now(),
            };
            let adding = Instant::now();
            let added = add_tree(&mut self.model, running, &plan);
            batch.profile.batch_ms += ms_since(adding);
            if let Err(err) = added {
                self.kv.give_back_leaves(&mut self.model, &plan.leaf_seqs);
                self.fail_slot(slot, err);
                continue;
            }
            batch.tokens += 1 + plan.tree.len();
            batch.trees.push((slot, plan));
        }
        for drafter in self.drafters.step_drafters().iter() {
            let (work, items) = drafter.take_counts();
            self.shared.count_drafter_work(drafter.kind(), work, items);
        }
    }

    /// The load a request's ask is weighed beside before any request drafts: the others'
    /// roots.
    fn ask_load(decoding: &[usize]) -> BatchLoad {
        let others = decoding.len().saturating_sub(1);
        BatchLoad {
            tokens: others,
            requests: others,
        }
    }

    /// The decoding requests in `decoding` with room to draft, and that room.
    fn with_room<'a>(
        &'a self,
        decoding: &'a [usize],
    ) -> impl Iterator<Item = (&'a ActiveRequest<'m>, usize)> {
        let (n_ctx_seq, n_batch) = (self.model.n_ctx_seq(), self.model.n_batch());
        decoding.iter().filter_map(move |&slot| {
            let running = self.slots[slot].as_ref()?;
            (running.pos + 1 < n_ctx_seq).then(|| {
                (
                    running,
                    draft_room(running, n_ctx_seq, n_batch, decoding.len()),
                )
            })
        })
    }

    /// Each step drafter's work for every decoding request that may draft with it, done
    /// together (one evaluation or decode per depth for all of them), each ask as large as the
    /// request would draft beside the others' roots. Each request's share of the time is in
    /// its draft's time.
    fn prepare_step_drafters(&self, decoding: &[usize], cost: Option<&CostModel>) {
        let load = Self::ask_load(decoding);
        for drafter in self.drafters.step_drafters().iter() {
            let asks: Vec<DraftAsk<'_>> = self
                .with_room(decoding)
                .filter_map(|(running, room)| running.ask_of(drafter, cost, load, room))
                .collect();
            drafter.prepare(&asks);
        }
    }

    /// Then prompt chunks in what is left of the batch, the request with the least of its
    /// prompt left first: a short prompt does not wait behind a long one, and starts decoding
    /// (which then holds the long one to a small chunk a step).
    fn add_prompt_chunks(&mut self, batch: &mut StepBatch) {
        let n_batch = self.model.n_batch();
        let prefill_limit = if batch.trees.is_empty() {
            PREFILL_CHUNK_ALONE
        } else {
            PREFILL_CHUNK_WHEN_BUSY
        };
        let mut prefilling: Vec<(usize, usize)> = (0..self.slots.len())
            .filter_map(|slot| {
                let running = self.slots[slot].as_ref()?;
                let wants = !running.prefill_done() && running.ending.is_none();
                wants.then(|| (running.cells_wanted(), slot))
            })
            .collect();
        prefilling.sort_unstable();
        for (_, slot) in prefilling {
            let space = n_batch
                .saturating_sub(batch.tokens)
                .min(prefill_limit.saturating_sub(batch.prompt_tokens));
            if space == 0 {
                break;
            }
            let Some(running) = self.slots[slot].as_mut() else {
                continue;
            };
            match running.add_prompt_chunk(&mut self.model, space) {
                Ok((added, completes)) => {
                    let last_index = (batch.tokens + added - 1) as i32;
                    batch.prefills.push((slot, completes.then_some(last_index)));
                    batch.tokens += added;
                    batch.prompt_tokens += added;
                }
                Err(err) => self.fail_slot(slot, err),
            }
        }
    }

    /// The step's one decode; decodes without prompt tokens teach the cost model what draft
    /// tokens cost.
    fn decode(&mut self, batch: &mut StepBatch) -> Result<(), EngineError> {
        if batch.tokens == 0 {
            return Ok(());
        }
        let times = self.model.decode()?;
        if batch.prompt_tokens == 0 {
            self.model.observe_decode(batch.tokens, times.total_ms());
            batch.profile.decode_ms = times.submit_ms;
            batch.profile.wait_ms = times.wait_ms;
        }
        Ok(())
    }

    /// Each running request verifies and commits its tree, each completed prompt gets its
    /// first token; the tokens emitted.
    fn commit(&mut self, batch: &mut StepBatch) -> u64 {
        let mut emitted = 0;
        for (slot, plan) in std::mem::take(&mut batch.trees) {
            let outcome = match self.slots[slot].as_mut() {
                Some(running) => running.commit_step(&mut self.model, &plan, &mut batch.profile),
                None => Ok(0),
            };
            let freeing = Instant::now();
            self.kv.give_back_leaves(&mut self.model, &plan.leaf_seqs);
            batch.profile.kv_ms += ms_since(freeing);
            match outcome {
                Ok(n) => emitted += n,
                Err(err) => self.fail_slot(slot, err),
            }
        }
        for (slot, last_index) in std::mem::take(&mut batch.prefills) {
            let Some(index) = last_index else { continue };
            let Some(running) = self.slots[slot].as_mut() else {
                continue;
            };
            match running.first_token(&self.model, index) {
                Ok(()) => emitted += 1,
                Err(err) => self.fail_slot(slot, err),
            }
        }
        emitted
    }

    /// Ends requests whose grammar cost this step more than a step may spend on one: the others
    /// would wait that long at every step.
    fn fail_slow_grammars(&mut self) {
        for slot in 0..self.slots.len() {
            let Some(spent) = self.slots[slot]
                .as_mut()
                .map(ActiveRequest::take_grammar_time)
            else {
                continue;
            };
            if spent > GRAMMAR_STEP_LIMIT {
                let err = EngineError::GrammarTooComplex(format!(
                    "following it took {} ms in one step; a step may spend at most {} ms on \
                     a request's grammar",
                    spent.as_millis(),
                    GRAMMAR_STEP_LIMIT.as_millis()
                ));
                tracing::warn!(slot, error = %err, "grammar too slow");
                self.fail_slot(slot, err);
            }
        }
    }

    fn fail_slot(&mut self, slot: usize, err: EngineError) {
        if let Some(running) = self.slots[slot].take() {
            let _ = self.model.remove_cells(running.id);
            running.fail(err);
            self.shared.count_failed();
        }
    }

    /// Ends finished requests and frees their cells and slots at once.
    fn retire(&mut self) {
        for slot in 0..self.slots.len() {
            if self.slots[slot]
                .as_ref()
                .is_some_and(|s| s.ending.is_some())
            {
                if let Some(running) = self.slots[slot].take() {
                    self.keep_cells(&running);
                    let _ = self.model.remove_cells(running.id);
                    for (drafter, learnt) in running.learnt() {
                        self.drafters.absorb(drafter, &learnt);
                    }
                    if running.request.lookup_memory.writes() {
                        self.drafters.remember(&running.out.history);
                    }
                    running.finish();
                    self.shared.count_finished();
                }
            }
        }
        self.update_load();
    }

    /// Moves a finished request's cells into the prompt cache, when it may keep them.
    fn keep_cells(&mut self, running: &ActiveRequest<'_>) {
        if !running.request.cache_prompt {
            return;
        }
        let tokens = running.cached_tokens().to_vec();
        self.kv.keep_prompt(&mut self.model, running.id, tokens);
        self.fit_prompt_cache(0);
    }

    /// Fails every running and waiting request: the engine is stopping.
    pub(crate) fn shut_down(&mut self) {
        for slot in 0..self.slots.len() {
            self.fail_slot(slot, EngineError::EngineStopped);
        }
        self.waiting.fail_all(&EngineError::EngineStopped);
    }

    /// In exact mode, leaves room for this step's batch after every taken cell. Cached prompts
    /// that no longer fit after a compaction are dropped.
    fn keep_cell_order(&mut self) {
        let wanted: usize = self
            .slots
            .iter()
            .flatten()
            .map(ActiveRequest::cells_wanted)
            .sum();
        let incoming = wanted.min(self.model.n_batch());
        let requests = self.slots.len();
        if let Err(err) = self.kv.keep_cell_order(&mut self.model, incoming, requests) {
            for slot in 0..self.slots.len() {
                self.fail_slot(slot, err.clone());
            }
        }
        self.update_cache_metrics();
    }

    fn update_cache_metrics(&self) {
        self.shared
            .set_cache(self.kv.cached_prompts(), self.kv_cells_used());
    }

    /// Cells held by the requests decoding and by the prompt cache. A request's cells copied
    /// from the cache count for both, as each holds a slot's share.
    fn kv_cells_used(&self) -> usize {
        let requests: usize = self
            .slots
            .iter()
            .flatten()
            .map(|seq| seq.cached_tokens().len())
            .sum();
        requests + self.kv.cached_tokens()
    }

    fn update_load(&self) {
        self.shared.set_load(self.active());
    }
}

/// What a panic said, for the error and the log.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".into())
}

#[cfg(test)]
mod tests;

/// Most tokens a request at `running.pos` may draft in a step whose batch already holds
/// `taken` tokens (its own root and the others' included): within its context, its token
/// limit and the batch.
fn draft_room(
    running: &ActiveRequest<'_>,
    n_ctx_seq: usize,
    n_batch: usize,
    taken: usize,
) -> usize {
    (n_ctx_seq - running.pos - 2)
        .min(running.out.remaining().saturating_sub(1))
        .min(n_batch.saturating_sub(taken))
}
