//! The recording task of a run: it owns the engine's stream, keeps the history up to date as the
//! run goes (steps in batches, the output so far every two seconds) and records how it ended,
//! passing every event on to the adapter.
//!
//! When the history cannot be written (a full disk), the client is told instead of getting an
//! answer that was never kept, and the run's ending is written again until it sticks, so that no
//! run stays `running` once the storage is back.

use std::time::{Duration, Instant};

use chrono::Utc;
use engine::{
    DraftDecision, GenerationEvent, GenerationMode, RunSummary, StepEvent, StepToken, StepTree,
    StopReason,
};
use store::{
    DraftDecisionRecord, DraftNodeRecord, DraftSkipRecord, DrafterEvidenceRecord, RunOutcome,
    StepRecord, StepTokenRecord, StepTreeRecord, Store, TokenLogprobRecord, TopLogprobRecord,
};
use tokio::sync::mpsc::UnboundedSender;

use crate::error::AppError;
use crate::playground::Playground;

/// Steps are written to the history in batches of this many, so that a long run costs few writes.
const STEP_BATCH: usize = 32;
/// How often a running run's output so far is written, so that a killed process keeps it.
const PARTIAL_OUTPUT_EVERY: Duration = Duration::from_secs(2);
/// Waits between attempts to record an ending the history refused, doubling up to the last.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// An event of the run, or the news that its end could not be recorded in the history.
pub type RecordedEvent = Result<GenerationEvent, AppError>;

/// How a run ended, as the history records it.
#[derive(Debug, Clone)]
enum Ending {
    Finished(RunOutcome),
    Cancelled(RunOutcome),
    Failed(String),
}

impl Ending {
    async fn write(&self, store: &Store, run_id: i64) -> store::Result<()> {
        match self {
            Self::Finished(outcome) => store.finish_run(run_id, outcome).await,
            Self::Cancelled(outcome) => store.cancel_run(run_id, Some(outcome)).await,
            Self::Failed(error) => store.fail_run(run_id, error).await,
        }
    }
}

/// What the run has produced so far, and when that was last written.
struct Progress {
    steps: Vec<StepRecord>,
    output: String,
    tokens: i64,
    saved_at: Instant,
    saved_tokens: i64,
}

impl Progress {
    fn new() -> Self {
        Self {
            steps: Vec::new(),
            output: String::new(),
            tokens: 0,
            saved_at: Instant::now(),
            saved_tokens: 0,
        }
    }

    async fn flush_steps(&mut self, store: &Store, run_id: i64) {
        if self.steps.is_empty() {
            return;
        }
        log_store(store.append_steps(run_id, &self.steps).await);
        self.steps.clear();
    }

    /// Writes the steps and the output so far when the last write is old enough.
    async fn save_if_due(&mut self, store: &Store, run_id: i64) {
        if self.steps.len() >= STEP_BATCH {
            self.flush_steps(store, run_id).await;
        }
        if self.saved_at.elapsed() < PARTIAL_OUTPUT_EVERY || self.tokens == self.saved_tokens {
            return;
        }
        self.flush_steps(store, run_id).await;
        log_store(
            store
                .save_partial_output(run_id, &self.output, self.tokens)
                .await,
        );
        self.saved_at = Instant::now();
        self.saved_tokens = self.tokens;
    }
}

/// Records the run's events and passes them on, until the run ends. `counted_mode`: the mode
/// the engine's figures count it under; `None` for a remote engine's run.
pub(crate) async fn record(
    playground: Playground,
    run_id: i64,
    counted_mode: Option<GenerationMode>,
    mut stream: engine::GenerationStream,
    tx: UnboundedSender<RecordedEvent>,
) {
    let store = playground.store().clone();
    let counters = playground.counters();
    let mut progress = Progress::new();
    let mut client_gone = false;
    // Unregisters the run however this task ends.
    let _registration = RunRegistration {
        playground: &playground,
        run_id,
    };
    loop {
        let event = tokio::select! {
            event = stream.next() => {
                event.unwrap_or(GenerationEvent::Failed(engine::EngineError::EngineStopped))
            }
            // Noticed while the run has nothing to send (a long prompt being read), not only
            // when its next event finds nobody to take it.
            () = tx.closed(), if !client_gone => {
                client_gone = true;
                stream.cancel();
                tracing::info!("client went away; cancelling the run");
                continue;
            }
        };
        let ending = match &event {
            GenerationEvent::Text {
                text, token_ids, ..
            } => {
                progress.output.push_str(text);
                // A remote engine's text comes without token ids: a piece counts as one.
                progress.tokens += token_ids.len().max(1) as i64;
                progress.save_if_due(&store, run_id).await;
                None
            }
            GenerationEvent::Step(step) => {
                if let Some(mode) = counted_mode {
                    counters.record_step(mode.as_str(), step);
                }
                progress.steps.push(step_record(step));
                progress.save_if_due(&store, run_id).await;
                None
            }
            GenerationEvent::Finished(summary) => {
                let outcome = outcome(summary);
                let cancelled = summary.stop_reason == StopReason::Cancelled;
                let status = if cancelled { "cancelled" } else { "finished" };
                counters.record_run(status, summary.tokens_generated);
                if let Some(mode) = counted_mode.filter(|_| !cancelled) {
                    counters.record_latencies(mode.as_str(), summary);
                    if mode != GenerationMode::Normal {
                        counters.record_mean_accepted(mode.as_str(), summary.mean_accepted);
                    }
                }
                tracing::info!(
                    tokens = summary.tokens_generated,
                    stop_reason = summary.stop_reason.as_str(),
                    tokens_per_second = summary.tokens_per_second,
                    "run ended"
                );
                Some(if cancelled {
                    Ending::Cancelled(outcome)
                } else {
                    Ending::Finished(outcome)
                })
            }
            GenerationEvent::Failed(err) => {
                counters.record_run("failed", 0);
                tracing::info!(code = err.code(), "run failed");
                Some(Ending::Failed(err.to_string()))
            }
            GenerationEvent::Started { .. } => None,
        };
        let terminal = ending.is_some();
        let mut forwarded = Ok(event);
        if let Some(ending) = ending {
            progress.flush_steps(&store, run_id).await;
            if let Err(err) = record_ending(&store, run_id, ending).await {
                // A failure stays the engine's; an answer that could not be kept says so.
                if matches!(forwarded, Ok(GenerationEvent::Finished(_))) {
                    forwarded = Err(err);
                }
            }
        }
        if !client_gone && tx.send(forwarded).is_err() {
            // The adapter is gone (client disconnected): stop generating, but keep draining so
            // the run is recorded with what it produced.
            client_gone = true;
            stream.cancel();
            tracing::info!("client went away; cancelling the run");
        }
        if terminal {
            return;
        }
    }
}

/// Writes the ending; when the history refuses it for want of storage, keeps trying in the
/// background and answers why the run is not recorded yet.
async fn record_ending(store: &Store, run_id: i64, ending: Ending) -> Result<(), AppError> {
    let Err(err) = ending.write(store, run_id).await else {
        return Ok(());
    };
    tracing::warn!(error = %err, "could not record the run's end");
    if err.is_storage_failure() {
        let store = store.clone();
        let ending = ending.clone();
        tokio::spawn(async move { retry_ending(store, run_id, ending).await });
    }
    Err(AppError::from(err))
}

async fn retry_ending(store: Store, run_id: i64, ending: Ending) {
    let mut wait = RETRY_FIRST;
    loop {
        tokio::time::sleep(wait).await;
        match ending.write(&store, run_id).await {
            Ok(()) => {
                tracing::info!(run_id, "the run's end is recorded after all");
                return;
            }
            Err(err) if err.is_storage_failure() => wait = (wait * 2).min(RETRY_MAX),
            Err(err) => {
                tracing::warn!(run_id, error = %err, "gave up recording the run's end");
                return;
            }
        }
    }
}

struct RunRegistration<'a> {
    playground: &'a Playground,
    run_id: i64,
}

impl Drop for RunRegistration<'_> {
    fn drop(&mut self) {
        self.playground.unregister_run(self.run_id);
    }
}

fn log_store(result: store::Result<()>) {
    if let Err(err) = result {
        tracing::warn!(error = %err, "could not record the run");
    }
}

fn outcome(summary: &RunSummary) -> RunOutcome {
    RunOutcome {
        output: summary.text.clone(),
        stop_reason: summary.stop_reason.as_str().to_owned(),
        prompt_tokens: summary.prompt_tokens as i64,
        tokens_generated: summary.tokens_generated as i64,
        queue_ms: Some(summary.queue_ms),
        ttft_ms: summary.ttft_ms,
        total_ms: summary.total_ms,
        tokens_per_second: summary.tokens_per_second,
        decode_tokens_per_second: summary.decode_tokens_per_second,
        steps: summary.steps as i64,
        mean_accepted: summary.mean_accepted,
        acceptance_by_depth: summary.acceptance_by_depth.clone(),
        draft_tokens: summary.draft_tokens.map(|n| n as i64),
        accepted_draft_tokens: summary.accepted_draft_tokens.map(|n| n as i64),
        // A remote engine's summary has no token ids, even when it generated.
        token_ids: (!summary.token_ids.is_empty() || summary.tokens_generated == 0)
            .then(|| summary.token_ids.clone()),
        // Only runs that asked for them carry log-probabilities.
        logprobs: (!summary.logprobs.is_empty())
            .then(|| summary.logprobs.iter().map(logprob_record).collect()),
        seed: summary.seed,
        finished_at: Utc::now(),
    }
}

fn logprob_record(token: &engine::TokenLogprobs) -> TokenLogprobRecord {
    let top = |choice: &engine::TokenChoice| TopLogprobRecord {
        token_id: choice.token_id,
        text: choice.text.clone(),
        logprob: choice.logprob,
    };
    TokenLogprobRecord {
        token_id: token.chosen.token_id,
        text: token.chosen.text.clone(),
        logprob: token.chosen.logprob,
        top: token.top.iter().map(top).collect(),
    }
}

fn step_record(step: &StepEvent) -> StepRecord {
    StepRecord {
        step_index: step.index as i64,
        tree_size: step.tree_size as i64,
        tree_depth: step.tree_depth as i64,
        accepted_len: step.accepted_len as i64,
        tokens: step.tokens.clone(),
        sources: step.sources.iter().map(ToString::to_string).collect(),
        depth_hits: step.depth_hits.clone(),
        draft_ms: step.draft_ms,
        verify_ms: step.verify_ms,
        tree: Some(tree_record(&step.tree)),
        skip: step.skip.as_ref().map(|skip| DraftSkipRecord {
            reason: skip.reason.as_str().to_owned(),
            message: skip.message.clone(),
        }),
        decision: step.decision.as_deref().map(decision_record),
    }
}

fn decision_record(decision: &DraftDecision) -> DraftDecisionRecord {
    DraftDecisionRecord {
        expected_tokens: decision.expected_tokens,
        step_ms: decision.step_ms,
        plain_ms: decision.plain_ms,
        evidence: decision
            .evidence
            .iter()
            .map(|e| DrafterEvidenceRecord {
                drafter: e.drafter.clone(),
                class: e.class as u32,
                accepted: e.accepted,
                tried: e.tried,
                cautious_rate: e.cautious_rate,
                proposed: e.proposed as u32,
                drafted: e.drafted as u32,
            })
            .collect(),
    }
}

fn tree_record(tree: &StepTree) -> StepTreeRecord {
    let token = |t: &StepToken| StepTokenRecord {
        token: t.token,
        text: t.text.clone(),
    };
    StepTreeRecord {
        root: token(&tree.root),
        nodes: tree
            .nodes
            .iter()
            .map(|node| DraftNodeRecord {
                token: node.token,
                text: node.text.clone(),
                parent: node.parent.map(|p| p as u32),
                source: node.source.to_string(),
                rank: node.rank as u32,
                also_proposed_by: node.also_proposed_by.map(|s| s.to_string()),
                accepted: node.accepted,
            })
            .collect(),
        model_token: token(&tree.model_token),
    }
}
