//! Continuous batching: every step, one llama.cpp decode carries the next token (or draft tree)
//! of every running request plus prompt chunks of new ones. Requests join at the next step and
//! leave as soon as they end, freeing their KV cells and their slot.

use std::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc};
use std::time::Instant;

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::clock::ms_since;
use crate::diagnostics::Diagnostic;
use crate::draft_model::DraftModel;
use crate::drafter_pool::DrafterPool;
use crate::embeddings::{EmbeddingJob, RunningEmbedding};
use crate::engine_metrics::{Shared, StepCount};
use crate::error::EngineError;
use crate::events::GenerationEvent;
use crate::grammar::Grammar;
use crate::grammar_prep::GRAMMAR_STEP_LIMIT;
use crate::llama_runtime::{random_seed, LlamaRuntime};
use crate::medusa::heads_drafter::{draft_trees, HeadsAsk};
use crate::output::OutputSink;
use crate::prompt::RenderedPrompt;
use crate::prompt_cache::PromptCache;
use crate::request::Prompt;
use crate::request_drafting::no_room;
use crate::sequence::{NewSequence, Sequence, StepPlan};
use crate::speculative::budget::BatchLoad;
use crate::speculative::costs::CostModel;
use crate::speculative::drafter::{DraftAsk, ModelProposer, PreparedTree, PreparedTrees};
use crate::step_batch::{add_tree, fit_leaves, StepBatch};
use crate::token::TokenId;
use crate::valid_request::ValidRequest;

pub(crate) enum Command {
    Generate {
        /// Boxed: a request with its draft is much larger than the other commands.
        request: Box<ValidRequest>,
        /// The request's grammar, compiled and tried before it queued.
        grammar: Option<Grammar>,
        events: UnboundedSender<GenerationEvent>,
        cancel: Arc<AtomicBool>,
        queued_at: Instant,
    },
    RenderPrompt {
        prompt: Prompt,
        reply: std_mpsc::Sender<Result<RenderedPrompt, EngineError>>,
    },
    /// Read a chunk at a time between steps, in a context of its own.
    Embed(EmbeddingJob),
    /// Waits until nothing is decoding.
    Diagnostic(Diagnostic),
    /// A fault for tests: the next step panics after its decode.
    PanicInNextStep,
    Shutdown,
}

/// Prompt tokens per step while other requests are decoding, so that a long prompt does not
/// stall them for a whole batch.
const PREFILL_CHUNK_WHEN_BUSY: usize = 64;

pub(crate) struct Scheduler<'m> {
    runtime: LlamaRuntime<'m>,
    slots: Vec<Option<Sequence<'m>>>,
    waiting: VecDeque<Command>,
    /// Diagnostics need the whole context (they clear the KV cache): run when idle.
    diagnostics: VecDeque<Diagnostic>,
    /// Embedding calls waiting, and the one being read (a chunk between two steps).
    embeddings: VecDeque<EmbeddingJob>,
    embedding: Option<RunningEmbedding<'m>>,
    panic_in_next_step: bool,
    /// Free sequence ids for tree leaves, and all of them.
    leaf_pool: Vec<i32>,
    leaf_seqs: Vec<i32>,
    n_seq_max: usize,
    /// Finished requests' cells, for later requests that start with the same tokens.
    cache: PromptCache,
    drafters: DrafterPool,
    /// The draft model, in its own context, when one is loaded.
    draft_model: Option<RefCell<DraftModel<'m>>>,
    shared: Arc<Shared>,
    /// The version of the decode costs last published to `shared`.
    published_costs: Option<u64>,
}

impl<'m> Scheduler<'m> {
    /// Sequence ids: `0..slots` for requests, the next `cache_seqs` for the prompt cache, the
    /// rest up to `n_seq_max` for tree leaves.
    pub(crate) fn new(
        runtime: LlamaRuntime<'m>,
        drafters: DrafterPool,
        draft_model: Option<DraftModel<'m>>,
        slots: usize,
        cache_seqs: usize,
        n_seq_max: usize,
        shared: Arc<Shared>,
    ) -> Self {
        let leaves_from = slots + cache_seqs;
        shared.set_capacity(slots, slots * runtime.n_ctx_seq());
        let mut scheduler = Self {
            runtime,
            slots: (0..slots).map(|_| None).collect(),
            waiting: VecDeque::new(),
            diagnostics: VecDeque::new(),
            embeddings: VecDeque::new(),
            embedding: None,
            panic_in_next_step: false,
            leaf_pool: (leaves_from..n_seq_max).map(|s| s as i32).rev().collect(),
            leaf_seqs: (leaves_from..n_seq_max).map(|s| s as i32).rev().collect(),
            n_seq_max,
            cache: PromptCache::new((slots..leaves_from).map(|s| s as i32)),
            drafters,
            // What it decoded when it loaded is not a request's.
            draft_model: draft_model.map(|mut model| {
                model.take_counts();
                RefCell::new(model)
            }),
            shared,
            published_costs: None,
        };
        // What the heads evaluated when they loaded is not a request's.
        if let Some(heads) = scheduler.drafters.heads() {
            heads.take_counts();
        }
        scheduler.publish_costs();
        scheduler
    }

    /// Publishes the decode costs when they are new or changed, for the drafting outlook.
    fn publish_costs(&mut self) {
        let version = self.runtime.cost_version();
        if self.published_costs == Some(version) {
            return;
        }
        if let Some(costs) = self.runtime.cost_model() {
            self.shared.set_decode_costs(costs.points().to_vec());
            self.published_costs = Some(version);
        }
    }

    fn active(&self) -> usize {
        self.slots.iter().flatten().count()
    }

    /// No request decoding or waiting.
    fn idle(&self) -> bool {
        self.active() == 0 && self.waiting.is_empty()
    }

    fn embedding_work(&self) -> bool {
        self.embedding.is_some() || !self.embeddings.is_empty()
    }

    pub(crate) fn run(mut self, commands: &mut UnboundedReceiver<Command>) {
        loop {
            self.publish_costs();
            if self.idle() && !self.embedding_work() {
                while let Some(diagnostic) = self.diagnostics.pop_front() {
                    self.run_diagnostic(diagnostic);
                }
                // A diagnostic may have measured them; the loop now waits for a command.
                self.publish_costs();
                self.count_idle_kv();
                // Nothing holds cells now: start the next requests at the front of the cache,
                // where attention scans the fewest cells.
                if self.cache.len() == 0 {
                    self.runtime.clear_kv();
                }
                match commands.blocking_recv() {
                    None | Some(Command::Shutdown) => break,
                    Some(command) => self.accept(command),
                }
            }
            loop {
                match commands.try_recv() {
                    Ok(Command::Shutdown) | Err(TryRecvError::Disconnected) => {
                        self.shut_down();
                        return;
                    }
                    Ok(command) => self.accept(command),
                    Err(TryRecvError::Empty) => break,
                }
            }
            self.admit();
            if self.active() > 0 {
                self.guarded_step();
            }
            if self.embedding_work() {
                self.guarded_embedding_chunk();
            }
        }
        self.shut_down();
    }

    /// A step under `catch_unwind`: a panic in it (a bug, or llama-cpp-2 refusing an index)
    /// fails the requests that were in it, and the engine starts afresh for the next ones.
    fn guarded_step(&mut self) {
        let stepped = panic::catch_unwind(AssertUnwindSafe(|| self.step()));
        if let Err(payload) = stepped {
            let message = panic_message(payload.as_ref());
            let requests: Vec<i32> = self.slots.iter().flatten().map(|s| s.id).collect();
            tracing::error!(panic = %message, slots = ?requests, "a step panicked; its requests fail");
            for slot in 0..self.slots.len() {
                self.fail_slot(slot, EngineError::StepFailed(message.clone()));
            }
            self.reset_kv();
        }
    }

    /// Forgets every cell and gives every leaf sequence back: after a panic, nothing the step
    /// left half-done can be trusted.
    fn reset_kv(&mut self) {
        self.drop_prompt_cache();
        self.runtime.clear_kv();
        self.runtime.clear_batch();
        self.leaf_pool.clone_from(&self.leaf_seqs);
        self.update_queue_metrics();
    }

    /// The next chunk of the embedding call being read (starting the next call if none is);
    /// a call whose caller went away ends here.
    fn guarded_embedding_chunk(&mut self) {
        if self.embedding.is_none() {
            let Some(job) = self.embeddings.pop_front() else {
                return;
            };
            self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            let started = panic::catch_unwind(AssertUnwindSafe(|| {
                RunningEmbedding::start(
                    self.runtime.model(),
                    self.runtime.threads(),
                    self.runtime.is_exact(),
                    job,
                )
            }));
            match started {
                Ok(Ok(running)) => self.embedding = Some(running),
                Ok(Err(err)) => tracing::warn!(error = %err, "embedding call failed"),
                Err(payload) => {
                    tracing::error!(panic = %panic_message(payload.as_ref()), "embedding call panicked")
                }
            }
            self.update_queue_metrics();
            return;
        }
        let Some(mut running) = self.embedding.take() else {
            return;
        };
        if running.is_abandoned() {
            tracing::info!("embedding call abandoned by its caller");
            self.update_queue_metrics();
            return;
        }
        let _span =
            tracing::debug_span!("embedding_chunk", waited_ms = ms_since(running.queued_at()))
                .entered();
        match panic::catch_unwind(AssertUnwindSafe(|| running.read_chunk())) {
            Ok(Ok((done, tokens))) => {
                self.shared.count_embedding_tokens(tokens);
                if done {
                    running.finish(None);
                } else {
                    self.embedding = Some(running);
                }
            }
            Ok(Err(err)) => running.finish(Some(err)),
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                tracing::error!(panic = %message, "an embedding chunk panicked");
                running.finish(Some(EngineError::StepFailed(message)));
            }
        }
        self.update_queue_metrics();
    }

    fn accept(&mut self, command: Command) {
        match command {
            Command::Generate { .. } => self.waiting.push_back(command),
            Command::RenderPrompt { prompt, reply } => {
                let _ = reply.send(self.runtime.render_prompt(&prompt));
            }
            Command::Embed(job) => self.embeddings.push_back(job),
            Command::PanicInNextStep => self.panic_in_next_step = true,
            Command::Diagnostic(diagnostic) if self.idle() => self.run_diagnostic(diagnostic),
            Command::Diagnostic(diagnostic) => self.diagnostics.push_back(diagnostic),
            Command::Shutdown => {}
        }
    }

    /// Diagnostics clear the KV cache, and with it what the prompt cache kept. One that panics
    /// answers nothing (its caller sees the engine stop answering it) and the engine starts
    /// afresh.
    fn run_diagnostic(&mut self, diagnostic: Diagnostic) {
        self.shared.queued.fetch_sub(1, Ordering::Relaxed);
        self.update_queue_metrics();
        self.drop_prompt_cache();
        let heads = self.drafters.heads();
        let runtime = &mut self.runtime;
        let ran = panic::catch_unwind(AssertUnwindSafe(|| diagnostic.run(runtime, heads)));
        if let Some(heads) = heads {
            heads.take_counts();
        }
        if let Err(payload) = ran {
            tracing::error!(panic = %panic_message(payload.as_ref()), "a diagnostic panicked");
            self.reset_kv();
        }
    }

    fn drop_prompt_cache(&mut self) {
        let dropped = self.cache.clear();
        self.forget_cached(dropped);
    }

    /// Forgets cached cells until every active request (and `more` about to start) can have its
    /// whole share of the KV cache.
    fn fit_prompt_cache(&mut self, more: usize) {
        let room = self.slots.len().saturating_sub(self.active() + more);
        let evicted = self.cache.evict_to(room);
        self.forget_cached(evicted);
    }

    /// Frees the cells of sequences the prompt cache let go.
    fn forget_cached(&mut self, seqs: Vec<i32>) {
        for seq in seqs {
            let _ = self.runtime.forget(seq);
        }
        self.update_cache_metrics();
    }

    /// Moves waiting requests into free slots.
    fn admit(&mut self) {
        while let Some(slot) = self.slots.iter().position(Option::is_none) {
            let Some(Command::Generate {
                request,
                grammar,
                events,
                cancel,
                queued_at,
            }) = self.waiting.pop_front()
            else {
                break;
            };
            self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            if cancel.load(Ordering::Relaxed) || events.is_closed() {
                continue;
            }
            let failures = events.clone();
            match self.start(slot, *request, grammar, events, cancel, queued_at) {
                Ok(sequence) => self.slots[slot] = Some(sequence),
                Err(err) => {
                    tracing::warn!(error = %err, "request refused");
                    let _ = failures.send(GenerationEvent::Failed(err));
                    self.shared.count_failed();
                }
            }
        }
        self.update_queue_metrics();
    }

    fn start(
        &mut self,
        slot: usize,
        request: ValidRequest,
        grammar: Option<Grammar>,
        events: UnboundedSender<GenerationEvent>,
        cancel: Arc<AtomicBool>,
        queued_at: Instant,
    ) -> Result<Sequence<'m>, EngineError> {
        let (request, draft) = request.into_parts();
        let draft = self.drafters.for_request(&draft);
        let prompt = self
            .runtime
            .prompt_tokens(&request.prompt, request.continue_final_message)?;
        // Measuring decode costs clears the KV cache, so it only happens with nothing running.
        if !draft.drafters.is_empty() && self.runtime.cost_model().is_none() && self.active() == 0 {
            self.drop_prompt_cache();
            self.runtime.ensure_cost_model()?;
        }
        // Cells of an earlier request starting the same way: shared, not decoded again. The
        // last prompt token is always decoded, as its logits give the first token.
        let hit = if request.cache_prompt {
            let ids: Vec<TokenId> = prompt.iter().map(|t| t.0).collect();
            self.cache.lookup(&ids, prompt.len().saturating_sub(1))
        } else {
            None
        };
        if let Some(hit) = hit {
            self.runtime
                .share_cells(hit.seq, slot as i32, Some(0), Some(hit.tokens as u32))?;
        }
        self.fit_prompt_cache(1);
        let out = OutputSink::new(
            self.runtime.model(),
            events,
            &prompt,
            request.max_tokens as usize,
            &request.stop,
        );
        let seed = request.sampling.seed.unwrap_or_else(random_seed);
        let mut sequence = Sequence::new(NewSequence {
            id: slot as i32,
            request,
            out,
            cancel,
            prompt,
            seed,
            draft,
            grammar,
            queued_at,
        });
        if let Some(hit) = hit {
            sequence.reuse_cells(hit.tokens);
        }
        Ok(sequence)
    }

    /// One decode for every active request, in phases: each running request drafts its tree
    /// into the batch, prompt chunks fill what is left, one decode, then each request verifies
    /// and commits its tree (or samples its first token).
    fn step(&mut self) {
        let _span = tracing::debug_span!("step", active = self.active()).entered();
        for sequence in self.slots.iter_mut().flatten() {
            sequence.check_cancelled();
        }
        self.keep_cell_order();
        self.runtime.clear_batch();
        let mut batch = StepBatch::default();
        self.draft_into(&mut batch);
        self.add_prompt_chunks(&mut batch);
        if let Err(err) = self.decode(&mut batch) {
            // The decode failed as a whole: every request in it fails, the others go on.
            for (slot, plan) in batch.trees {
                self.leaf_pool.extend(&plan.leaf_seqs);
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
        let n_batch = self.runtime.n_batch();
        let n_ctx_seq = self.runtime.n_ctx_seq();
        let decoding: Vec<usize> = (0..self.slots.len())
            .filter(|&s| {
                self.slots[s]
                    .as_ref()
                    .is_some_and(|q| q.prefill_done() && q.ending.is_none())
            })
            .collect();
        let cost = self.runtime.cost_model().cloned();
        self.prepare_draft_model(&decoding, cost.as_ref());
        let heads_trees = self.prepare_heads(&decoding, cost.as_ref());
        for (k, &slot) in decoding.iter().enumerate() {
            let reserved_for_others = decoding.len() - k - 1;
            let Some(sequence) = self.slots[slot].as_mut() else {
                continue;
            };
            if sequence.pos + 1 >= n_ctx_seq {
                sequence.ending = Some(crate::events::StopReason::ContextFull);
                continue;
            }
            let room = draft_room(
                sequence,
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
            let draft_model = self.draft_model.as_ref().map(|m| m as &dyn ModelProposer);
            let draft = sequence.draft(cost.as_ref(), load, room, draft_model, &heads_trees);
            batch.profile.draft_ms += draft.draft_ms;
            let drafted = !draft.tree.is_empty();
            let tree = fit_leaves(draft.tree, self.leaf_pool.len());
            // Every leaf sequence id is taken by other requests' trees.
            let skip = match draft.skip {
                None if drafted && tree.is_empty() => Some(no_room()),
                skip => skip,
            };
            let layout = tree.layout();
            let leaf_seqs: Vec<i32> = (0..layout.leaves.len())
                .filter_map(|_| self.leaf_pool.pop())
                .collect();
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
            let added = add_tree(&mut self.runtime, sequence, &plan);
            batch.profile.batch_ms += ms_since(adding);
            if let Err(err) = added {
                self.leaf_pool.extend(&plan.leaf_seqs);
                self.fail_slot(slot, err);
                continue;
            }
            batch.tokens += 1 + plan.tree.len();
            batch.trees.push((slot, plan));
        }
        if let Some(draft_model) = &self.draft_model {
            let (decodes, tokens) = draft_model.borrow_mut().take_counts();
            self.shared.count_draft_model(decodes, tokens);
        }
        if let Some(heads) = self.drafters.heads() {
            let (evaluations, queries) = heads.take_counts();
            self.shared.count_heads(evaluations, queries);
        }
    }

    /// The draft model's guesses for every decoding request that may draft with it, made
    /// together (one decode per depth for all of them), as the first request would weigh them:
    /// beside the others' roots.
    fn prepare_draft_model(&self, decoding: &[usize], cost: Option<&CostModel>) {
        let Some(draft_model) = self.draft_model.as_ref() else {
            return;
        };
        let (n_ctx_seq, n_batch) = (self.runtime.n_ctx_seq(), self.runtime.n_batch());
        let others = decoding.len().saturating_sub(1);
        let load = BatchLoad {
            tokens: others,
            requests: others,
        };
        let asks: Vec<DraftAsk<'_>> = decoding
            .iter()
            .filter_map(|&slot| {
                let sequence = self.slots[slot].as_ref()?;
                if sequence.pos + 1 >= n_ctx_seq {
                    return None;
                }
                let room = draft_room(sequence, n_ctx_seq, n_batch, decoding.len());
                sequence.draft_model_ask(cost, load, room)
            })
            .collect();
        // Each request's share of this time is in its draft's time.
        draft_model.borrow_mut().prepare(&asks);
    }

    /// The heads' trees for every decoding request that may draft with them, made together
    /// (each head evaluated once per depth for all of them), each as large as the request
    /// would draft beside the others' roots.
    fn prepare_heads(&self, decoding: &[usize], cost: Option<&CostModel>) -> PreparedTrees {
        let mut prepared = PreparedTrees::default();
        let Some(heads) = self.drafters.heads() else {
            return prepared;
        };
        let (n_ctx_seq, n_batch) = (self.runtime.n_ctx_seq(), self.runtime.n_batch());
        let others = decoding.len().saturating_sub(1);
        let load = BatchLoad {
            tokens: others,
            requests: others,
        };
        let asks: Vec<HeadsAsk<'_>> = decoding
            .iter()
            .filter_map(|&slot| {
                let sequence = self.slots[slot].as_ref()?;
                if sequence.pos + 1 >= n_ctx_seq {
                    return None;
                }
                let room = draft_room(sequence, n_ctx_seq, n_batch, decoding.len());
                sequence.heads_ask(cost, load, room)
            })
            .collect();
        if asks.is_empty() {
            return prepared;
        }
        let _span = tracing::debug_span!("heads", requests = asks.len()).entered();
        let started = Instant::now();
        let trees = draft_trees(heads, &asks);
        // Each request's share of the time is in its draft's time.
        let share = ms_since(started) / asks.len() as f64;
        for (ask, tree) in asks.iter().zip(trees) {
            let max_nodes = ask.max_nodes;
            prepared.insert(
                ask.sequence,
                PreparedTree {
                    tree,
                    max_nodes,
                    ms: share,
                },
            );
        }
        prepared
    }

    /// Then prompt chunks, oldest request first, in what is left of the batch.
    fn add_prompt_chunks(&mut self, batch: &mut StepBatch) {
        let n_batch = self.runtime.n_batch();
        let prefill_limit = if batch.trees.is_empty() {
            n_batch
        } else {
            PREFILL_CHUNK_WHEN_BUSY
        };
        for slot in 0..self.slots.len() {
            let space = (n_batch - batch.tokens).min(prefill_limit - batch.prompt_tokens);
            let Some(sequence) = self.slots[slot].as_mut() else {
                continue;
            };
            if sequence.prefill_done() || sequence.ending.is_some() || space == 0 {
                continue;
            }
            match sequence.add_prompt_chunk(&mut self.runtime, space) {
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
        let times = self.runtime.decode()?;
        if batch.prompt_tokens == 0 {
            self.runtime.observe_decode(batch.tokens, times.total_ms());
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
                Some(sequence) => {
                    sequence.commit_step(&mut self.runtime, &plan, &mut batch.profile)
                }
                None => Ok(0),
            };
            self.leaf_pool.extend(&plan.leaf_seqs);
            match outcome {
                Ok(n) => emitted += n,
                Err(err) => self.fail_slot(slot, err),
            }
        }
        for (slot, last_index) in std::mem::take(&mut batch.prefills) {
            let Some(index) = last_index else { continue };
            let Some(sequence) = self.slots[slot].as_mut() else {
                continue;
            };
            match sequence.first_token(&self.runtime, index) {
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
            let Some(spent) = self.slots[slot].as_mut().map(Sequence::take_grammar_time) else {
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
        if let Some(sequence) = self.slots[slot].take() {
            let _ = self.runtime.forget(sequence.id);
            sequence.fail(err);
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
                if let Some(sequence) = self.slots[slot].take() {
                    self.keep_cells(&sequence);
                    let _ = self.runtime.forget(sequence.id);
                    for (drafter, learnt) in sequence.learnt() {
                        self.drafters.absorb(drafter, &learnt);
                    }
                    sequence.finish();
                    self.shared.count_finished();
                }
            }
        }
        self.update_queue_metrics();
    }

    /// Moves a finished request's cells into the prompt cache, when it may keep them.
    fn keep_cells(&mut self, sequence: &Sequence<'_>) {
        if !sequence.request.cache_prompt {
            return;
        }
        if let Some((seq, forgotten)) = self.cache.store(sequence.cached_tokens().to_vec()) {
            self.forget_cached(forgotten);
            if self
                .runtime
                .share_cells(sequence.id, seq, None, None)
                .is_err()
            {
                self.cache.remove(seq);
                let _ = self.runtime.forget(seq);
            }
        }
        self.fit_prompt_cache(0);
    }

    fn shut_down(&mut self) {
        for slot in 0..self.slots.len() {
            self.fail_slot(slot, EngineError::EngineStopped);
        }
        while let Some(command) = self.waiting.pop_front() {
            if let Command::Generate { events, .. } = command {
                let _ = events.send(GenerationEvent::Failed(EngineError::EngineStopped));
            }
        }
        if let Some(running) = self.embedding.take() {
            running.finish(Some(EngineError::EngineStopped));
        }
        for job in self.embeddings.drain(..) {
            let _ = job.reply.send(Err(EngineError::EngineStopped));
        }
    }

    /// In exact mode, leaves room for this step's batch after every taken cell. Cached prompts
    /// that no longer fit after a compaction are forgotten.
    fn keep_cell_order(&mut self) {
        let wanted: usize = self
            .slots
            .iter()
            .flatten()
            .map(Sequence::cells_wanted)
            .sum();
        let incoming = wanted.min(self.runtime.n_batch());
        match self.runtime.keep_cell_order(incoming, self.slots.len()) {
            Ok(dropped) => {
                for seq in dropped {
                    self.cache.remove(seq);
                }
                self.update_cache_metrics();
            }
            Err(err) => {
                for slot in 0..self.slots.len() {
                    self.fail_slot(slot, err.clone());
                }
                for seq in self.cache.clear() {
                    let _ = self.runtime.forget(seq);
                }
            }
        }
    }

    fn count_idle_kv(&self) {
        let in_use = (0..self.n_seq_max as i32)
            .filter(|&seq| !self.cache.holds(seq) && self.runtime.holds_cells(seq))
            .count();
        self.shared.set_idle_sequences(in_use);
    }

    fn update_cache_metrics(&self) {
        self.shared
            .set_cache(self.cache.len(), self.kv_cells_used());
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
        requests + self.cache.tokens_held()
    }

    fn update_queue_metrics(&self) {
        self.shared.set_load(self.active());
        self.shared
            .set_embedding_calls(self.embeddings.len() + usize::from(self.embedding.is_some()));
    }
}
/// What a panic said, for the error and the log.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".into())
}

/// Most tokens a request at `sequence.pos` may draft in a step whose batch already holds
/// `taken` tokens (its own root and the others' included): within its context, its token
/// limit and the batch.
fn draft_room(sequence: &Sequence<'_>, n_ctx_seq: usize, n_batch: usize, taken: usize) -> usize {
    (n_ctx_seq - sequence.pos - 2)
        .min(sequence.out.remaining().saturating_sub(1))
        .min(n_batch.saturating_sub(taken))
}
