//! One request while it runs: its place in the KV cache, sampler, drafter, output and
//! statistics, and what it does before and after each batched decode.

use super::recent_states::RecentStates;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::clock::ms_since;
use crate::error::EngineError;
use crate::events::{
    tokens_per_second, DraftDecision, DraftNode, DraftSkip, GenerationEvent, RunSummary, StepEvent,
    StepToken, StepTree, StopReason,
};
use crate::grammar::Grammar;
use crate::output::OutputSink;
use crate::request::GenerateRequest;
use crate::request::MAX_DRAFT_TOKENS;
use crate::sampling::sampler::Sampler;
use crate::sampling::token_choice::{self, TokenLogprobs};
use crate::speculative::budget::{AcceptanceStats, BatchLoad};
use crate::speculative::costs::CostModel;
use crate::speculative::drafter::{DraftAsk, DraftInput, Drafter, StepDrafter, StepDrafters};
use crate::speculative::lookup_memory::LookupMemory;
use crate::speculative::tree::{DraftTree, TokenSource, TreeLayout};
use crate::step::decoder::Decoder;
use crate::step::drafter_pool::DraftSetup;
use crate::step::drafting::{Draft, Drafting};
use crate::step::verify::{verify, Verdict};
use crate::step_profile::StepProfile;
use crate::token::TokenId;

pub(crate) struct ActiveRequest<'m> {
    /// Main sequence id in the KV cache (the slot).
    pub(crate) id: i32,
    pub(crate) request: GenerateRequest,
    cancel: Arc<AtomicBool>,
    pub(crate) prompt: Vec<TokenId>,
    /// Prompt tokens already decoded.
    pub(crate) prefilled: usize,
    /// Cells this sequence holds in the KV cache: the position of its next token.
    pub(crate) pos: usize,
    sampler: Sampler,
    seed: u64,
    pub(crate) out: OutputSink<'m>,
    /// `None` decodes plainly.
    drafting: Option<Drafting>,
    stats: StepStats,
    /// The final hidden states behind the latest tokens (the drafters' input).
    recent_states: RecentStates,
    /// Every hidden state behind an emitted token, when the request asked for them.
    recorded: Vec<f32>,
    /// Values per recorded state (the model's embedding size).
    recorded_width: usize,
    queued_at: Instant,
    queue_ms: f64,
    ttft_ms: Option<f64>,
    /// Leading prompt tokens whose cells came from the prompt cache.
    cached_prompt_tokens: usize,
    pub(crate) ending: Option<StopReason>,
}

/// What a sequence put into the current batch.
pub(crate) struct StepPlan {
    /// Batch index of the root (the last emitted token, decoded now).
    pub(crate) root_index: i32,
    pub(crate) tree: DraftTree,
    pub(crate) layout: TreeLayout,
    /// ActiveRequest id of each leaf, borrowed from the scheduler's pool for this step.
    pub(crate) leaf_seqs: Vec<i32>,
    pub(crate) draft_ms: f64,
    /// Why nothing was drafted.
    pub(crate) skip: Option<DraftSkip>,
    /// What the draft budget weighed.
    pub(crate) decision: Option<DraftDecision>,
    pub(crate) started: Instant,
}

pub(crate) struct NewActiveRequest<'m> {
    pub(crate) id: i32,
    pub(crate) request: GenerateRequest,
    pub(crate) out: OutputSink<'m>,
    pub(crate) cancel: Arc<AtomicBool>,
    pub(crate) prompt: Vec<TokenId>,
    pub(crate) seed: u64,
    pub(crate) draft: DraftSetup,
    pub(crate) grammar: Option<Grammar>,
    pub(crate) queued_at: Instant,
}

impl<'m> ActiveRequest<'m> {
    pub(crate) fn new(new: NewActiveRequest<'m>) -> Self {
        let queue_ms = ms_since(new.queued_at);
        new.out.send(GenerationEvent::Started {
            prompt_tokens: new.prompt.len(),
        });
        Self {
            id: new.id,
            sampler: Sampler::new(new.request.sampling.clone(), new.seed).with_grammar(new.grammar),
            request: new.request,
            cancel: new.cancel,
            prompt: new.prompt,
            prefilled: 0,
            pos: 0,
            seed: new.seed,
            out: new.out,
            drafting: Drafting::new(new.draft),
            stats: StepStats::default(),
            recent_states: RecentStates::default(),
            recorded: Vec::new(),
            recorded_width: 0,
            queued_at: new.queued_at,
            queue_ms,
            ttft_ms: None,
            cached_prompt_tokens: 0,
            ending: None,
        }
    }

    /// The first `tokens` prompt tokens already have cells (shared from the prompt cache).
    pub(crate) fn reuse_cells(&mut self, tokens: usize) {
        self.cached_prompt_tokens = tokens.min(self.prompt.len().saturating_sub(1));
        self.prefilled = self.cached_prompt_tokens;
    }

    /// The tokens whose cells this sequence holds, position by position.
    pub(crate) fn cached_tokens(&self) -> &[TokenId] {
        let decoded = if self.prefill_done() {
            self.pos
        } else {
            self.prefilled
        };
        &self.out.history[..decoded.min(self.out.history.len())]
    }

    /// The most cells this sequence's next step can take: the rest of its prompt, or a root and
    /// the largest draft.
    pub(crate) fn cells_wanted(&self) -> usize {
        if self.prefill_done() {
            1 + MAX_DRAFT_TOKENS
        } else {
            self.prompt.len() - self.prefilled
        }
    }

    pub(crate) fn prefill_done(&self) -> bool {
        self.prefilled == self.prompt.len()
    }

    /// Time spent following the request's grammar since the last call.
    pub(crate) fn take_grammar_time(&mut self) -> std::time::Duration {
        self.sampler.take_grammar_time()
    }

    /// Stops the run when the caller cancelled or went away.
    pub(crate) fn check_cancelled(&mut self) {
        if self.ending.is_none() && (self.cancel.load(Ordering::Relaxed) || self.out.is_closed()) {
            self.ending = Some(StopReason::Cancelled);
        }
    }

    /// The first token, from the logits of the last prompt token at batch index `index`.
    pub(crate) fn first_token(
        &mut self,
        runtime: &impl Decoder,
        index: i32,
    ) -> Result<(), EngineError> {
        let token = self
            .sampler
            .sample(runtime.logits(index)?, &self.out.history);
        self.sampler.accept(token);
        let logprobs = self.logprobs(runtime, index, token)?;
        // From its turn: the wait for a slot is `queue_ms`, apart.
        self.ttft_ms = Some(ms_since(self.queued_at) - self.queue_ms);
        self.keep_recent(runtime, [index])?;
        self.record_hidden(runtime, [index])?;
        // Reading the prompt is not a step: the summary's steps and tokens per step count the
        // decode steps after it, as the step events do.
        self.pos = self.prompt.len();
        self.ending = self.out.push(token, TokenSource::Base, logprobs);
        Ok(())
    }

    /// `token`'s log-probabilities from the logits at batch `index` it was chosen from, when the
    /// request asked for them: the served model's own figures, whoever drafted the token.
    fn logprobs(
        &self,
        runtime: &impl Decoder,
        index: i32,
        token: TokenId,
    ) -> Result<Option<TokenLogprobs>, EngineError> {
        let Some(top) = self.request.logprobs else {
            return Ok(None);
        };
        Ok(Some(token_choice::logprobs(
            runtime.logits(index)?,
            token,
            top,
            |t| self.out.token_bytes(t),
        )))
    }

    /// Drafts this step's tree, at most `max_nodes` tokens; the budget weighs the expected
    /// accepted tokens against the time they add to a step that also decodes `batch`.
    pub(crate) fn draft(
        &mut self,
        cost: Option<&CostModel>,
        batch: BatchLoad,
        max_nodes: usize,
        step_drafters: &StepDrafters<'_>,
        memory: Option<&LookupMemory>,
    ) -> Draft {
        let Some(drafting) = self.drafting.as_mut() else {
            return Draft::default();
        };
        let input = DraftInput {
            sequence: self.id as usize,
            history: &self.out.history,
            hidden_state: self.recent_states.last(),
            recent_states: self.recent_states.all(),
            step_drafters,
            memory: memory.filter(|_| self.request.lookup_memory.reads()),
        };
        drafting.draft(&input, cost, batch, max_nodes)
    }

    /// What this step may ask of `drafter` for this request (see [`Drafting::ask_of`]), if
    /// anything. A drafter that reads hidden states is asked nothing before there is one.
    pub(crate) fn ask_of(
        &self,
        drafter: &dyn StepDrafter,
        cost: Option<&CostModel>,
        batch: BatchLoad,
        max_nodes: usize,
    ) -> Option<DraftAsk<'_>> {
        if drafter.traits().reads_hidden_state && self.recent_states.last().is_none() {
            return None;
        }
        let (n, tree) = self
            .drafting
            .as_ref()?
            .ask_of(drafter.kind(), cost, batch, max_nodes)?;
        Some(DraftAsk {
            sequence: self.id as usize,
            history: &self.out.history,
            hidden_state: self.recent_states.last(),
            recent_states: self.recent_states.all(),
            tree,
            max_nodes: n,
        })
    }

    /// Its drafters, and what this run learnt about each beyond what it started from.
    pub(crate) fn learnt(&self) -> impl Iterator<Item = (&dyn Drafter, Vec<AcceptanceStats>)> {
        self.drafting.iter().flat_map(Drafting::learnt)
    }

    /// The last emitted token: the root of this step's tree.
    pub(crate) fn root(&self) -> TokenId {
        *self.out.history.last().unwrap_or(&0)
    }

    /// Puts the next prompt tokens, at most `space`, into the batch: how many, and whether they
    /// end the prompt (the last one's logits then give the first token).
    pub(crate) fn add_prompt_chunk(
        &mut self,
        runtime: &mut impl Decoder,
        space: usize,
    ) -> Result<(usize, bool), EngineError> {
        let from = self.prefilled;
        let to = (from + space).min(self.prompt.len());
        let completes = to == self.prompt.len();
        for pos in from..to {
            let last = completes && pos + 1 == to;
            runtime.add_to_batch(self.prompt[pos], pos, &[self.id], last)?;
        }
        self.prefilled = to;
        Ok((to - from, completes))
    }

    /// Verifies the decoded tree and commits what it accepted: the accepted path's cells move
    /// from its leaf into this sequence (the batcher then empties the leaves) and the tokens are
    /// emitted.
    /// Returns how many were emitted.
    pub(crate) fn commit_step(
        &mut self,
        runtime: &mut impl Decoder,
        plan: &StepPlan,
        profile: &mut StepProfile,
    ) -> Result<u64, EngineError> {
        let verifying = Instant::now();
        let verdict = self.verify(runtime, plan)?;
        profile.accept_ms += ms_since(verifying);
        let keeping = Instant::now();
        if let Some(&last) = verdict.accepted.last() {
            let first = self.pos as u32 + 1;
            let leaf = plan.leaf_seqs[plan.layout.leaf_below(last)];
            runtime.copy_cells(
                leaf,
                self.id,
                Some(first),
                Some(first + verdict.accepted.len() as u32),
            )?;
        }
        profile.kv_ms += ms_since(keeping);
        let emitting = Instant::now();
        self.finish_step(runtime, plan, &verdict)?;
        profile.emit_ms += ms_since(emitting);
        Ok(1 + verdict.accepted.len() as u64)
    }

    /// Verifies the decoded tree.
    fn verify(&mut self, runtime: &impl Decoder, plan: &StepPlan) -> Result<Verdict, EngineError> {
        // The root's logits, then each node's, in batch order.
        let logits = (0..=plan.tree.len() as i32)
            .map(|i| runtime.logits(plan.root_index + i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(verify(
            &plan.tree,
            &plan.layout,
            |node| logits[node.map_or(0, |i| i + 1)],
            &mut self.sampler,
            &mut self.out.history,
            self.request.acceptance,
        ))
    }

    /// Emits the step's tokens and reports it.
    fn finish_step(
        &mut self,
        runtime: &impl Decoder,
        plan: &StepPlan,
        verdict: &Verdict,
    ) -> Result<(), EngineError> {
        self.pos += 1 + verdict.accepted.len();
        // The next root came from the last accepted node's logits: its hidden state feeds the
        // heads, it and those before it the feature drafter.
        self.keep_recent(runtime, chosen_at(plan, verdict))?;
        self.record_hidden(runtime, chosen_at(plan, verdict))?;
        let tree = &plan.tree;
        let mut tokens: Vec<TokenId> = verdict.accepted.iter().map(|&n| tree.tokens[n]).collect();
        let mut sources: Vec<TokenSource> =
            verdict.accepted.iter().map(|&n| tree.sources[n]).collect();
        tokens.push(verdict.next_token);
        sources.push(TokenSource::Base);
        let depth_hits: Vec<bool> = (1..=plan.layout.depth())
            .map(|d| verdict.accepted.len() >= d)
            .collect();
        let verify_ms = ms_since(plan.started);
        self.stats
            .record(tokens.len(), &depth_hits, plan.draft_ms, verify_ms);
        if let Some(drafting) = self.drafting.as_mut() {
            drafting.record(tree, &plan.layout, &verdict.accepted, &tokens);
            let step_tree = self.step_tree(plan, verdict);
            self.out.send(GenerationEvent::Step(StepEvent {
                index: self.stats.steps,
                tree_size: tree.len(),
                tree_depth: plan.layout.depth(),
                accepted_len: tokens.len(),
                tokens: tokens.clone(),
                sources: sources.clone(),
                depth_hits,
                draft_ms: plan.draft_ms,
                verify_ms,
                tree: step_tree,
                skip: plan.skip.clone(),
                decision: plan.decision.clone().map(Box::new),
            }));
        }
        for ((token, source), index) in tokens
            .into_iter()
            .zip(sources)
            .zip(chosen_at(plan, verdict))
        {
            let logprobs = self.logprobs(runtime, index, token)?;
            if let Some(reason) = self.out.push(token, source, logprobs) {
                self.ending = Some(reason);
                break;
            }
        }
        Ok(())
    }

    /// The step's tree as the inspector shows it: texts, proposers and the verdict per node.
    fn step_tree(&self, plan: &StepPlan, verdict: &Verdict) -> StepTree {
        let tree = &plan.tree;
        let token = |token| StepToken {
            token,
            text: self.out.token_text(token),
        };
        StepTree {
            // Called before the step's tokens are emitted: the history still ends at the root.
            root: token(self.root()),
            nodes: (0..tree.len())
                .map(|n| DraftNode {
                    token: tree.tokens[n],
                    text: self.out.token_text(tree.tokens[n]),
                    parent: tree.parents[n],
                    source: tree.sources[n],
                    rank: tree.ranks[n],
                    also_proposed_by: tree.also[n],
                    accepted: verdict.accepted.contains(&n),
                })
                .collect(),
            model_token: token(verdict.next_token),
        }
    }

    /// Keeps the hidden states at batch `indices` (those behind the tokens emitted) when the
    /// context computes them.
    fn keep_recent(
        &mut self,
        runtime: &impl Decoder,
        indices: impl IntoIterator<Item = i32>,
    ) -> Result<(), EngineError> {
        if runtime.returns_hidden_states() {
            for index in indices {
                self.recent_states.push(runtime.hidden_state(index)?);
            }
        }
        Ok(())
    }

    /// Appends the hidden states at batch `indices` when the request records them.
    fn record_hidden(
        &mut self,
        runtime: &impl Decoder,
        indices: impl IntoIterator<Item = i32>,
    ) -> Result<(), EngineError> {
        if !self.request.record_hidden_states {
            return Ok(());
        }
        for index in indices {
            let hidden = runtime.hidden_state(index)?;
            self.recorded.extend_from_slice(hidden);
            self.recorded_width = hidden.len();
        }
        Ok(())
    }

    /// Ends the run and sends its summary.
    pub(crate) fn finish(mut self) {
        let reason = self.ending.unwrap_or(StopReason::Cancelled);
        let stop_reason = self.out.finish(reason);
        let total_ms = ms_since(self.queued_at);
        let run_ms = total_ms - self.queue_ms;
        let ttft_ms = self.ttft_ms.unwrap_or(run_ms);
        let generated = self.out.generated.len();
        // A stop sequence can end the text before the tokens a step decoded.
        self.recorded.truncate(generated * self.recorded_width);
        let summary = RunSummary {
            text: std::mem::take(&mut self.out.text),
            prompt_tokens: self.prompt.len(),
            tokens_generated: generated,
            queue_ms: self.queue_ms,
            cached_prompt_tokens: self.cached_prompt_tokens,
            ttft_ms,
            total_ms,
            tokens_per_second: tokens_per_second(generated, run_ms),
            decode_tokens_per_second: tokens_per_second(
                generated.saturating_sub(1),
                run_ms - ttft_ms,
            ),
            stop_reason,
            seed: self.seed,
            token_ids: std::mem::take(&mut self.out.generated),
            logprobs: std::mem::take(&mut self.out.logprobs),
            mode: self.request.mode,
            steps: self.stats.steps,
            mean_accepted: self.stats.mean_accepted(),
            acceptance_by_depth: self.stats.acceptance_by_depth(),
            draft_tokens: Some(self.stats.depth_reached.iter().sum()),
            accepted_draft_tokens: Some(self.stats.emitted.saturating_sub(self.stats.steps)),
            draft_ms: self.stats.draft_ms,
            verify_ms: self.stats.verify_ms,
            hidden_states: std::mem::take(&mut self.recorded),
        };
        tracing::info!(
            seq = self.id,
            tokens = summary.tokens_generated,
            tokens_per_second = summary.tokens_per_second,
            mean_accepted = summary.mean_accepted,
            ?stop_reason,
            "generation finished"
        );
        self.out.send(GenerationEvent::Finished(summary));
    }

    pub(crate) fn fail(self, err: EngineError) {
        tracing::warn!(seq = self.id, error = %err, "generation failed");
        self.out.send(GenerationEvent::Failed(err));
    }
}

/// Batch indices of the logits that chose a step's emitted tokens: the root's for the first,
/// each accepted node's for the next (and their hidden states).
fn chosen_at<'v>(plan: &StepPlan, verdict: &'v Verdict) -> impl Iterator<Item = i32> + 'v {
    let root = plan.root_index;
    std::iter::once(root).chain(verdict.accepted.iter().map(move |&n| root + n as i32 + 1))
}

/// Running totals behind a run's mean accepted length and per-depth acceptance, over the decode
/// steps after the prompt (the first token, read with the prompt, is no step).
#[derive(Debug, Default)]
struct StepStats {
    steps: usize,
    /// Tokens the steps yielded, the model's own included (a stop can keep fewer in the output).
    emitted: usize,
    depth_reached: Vec<usize>,
    depth_accepted: Vec<usize>,
    draft_ms: f64,
    verify_ms: f64,
}

impl StepStats {
    fn record(&mut self, emitted: usize, depth_hits: &[bool], draft_ms: f64, verify_ms: f64) {
        self.steps += 1;
        self.emitted += emitted;
        if self.depth_reached.len() < depth_hits.len() {
            self.depth_reached.resize(depth_hits.len(), 0);
            self.depth_accepted.resize(depth_hits.len(), 0);
        }
        for (d, &hit) in depth_hits.iter().enumerate() {
            self.depth_reached[d] += 1;
            self.depth_accepted[d] += usize::from(hit);
        }
        self.draft_ms += draft_ms;
        self.verify_ms += verify_ms;
    }

    /// 1.0 when no step ran (the run ended at its first token): plain decoding's figure.
    fn mean_accepted(&self) -> f64 {
        if self.steps == 0 {
            1.0
        } else {
            self.emitted as f64 / self.steps as f64
        }
    }

    fn acceptance_by_depth(&self) -> Vec<f64> {
        self.depth_accepted
            .iter()
            .zip(&self.depth_reached)
            .map(|(&a, &r)| a as f64 / r.max(1) as f64)
            .collect()
    }
}
