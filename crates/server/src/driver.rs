//! The one path every generation takes: a task that owns the engine's stream, records the run in
//! the history and forwards the events to the handler. The task outlives the handler, so a client
//! that goes away cancels the run but never loses its record.

use chrono::Utc;
use engine::{
    GenerateRequest, GenerationEvent, GenerationMode, Prompt, RunSummary, StepEvent, StopReason,
    TokenSource,
};
use store::{HeadsRef, MessageRecord, ModelRef, NewRun, PromptRecord, RunOutcome, StepRecord};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tracing::Instrument;

use crate::error::ApiError;
use crate::model_slot::LoadedModel;
use crate::state::AppState;

/// Steps are written to the history in batches of this many, so that a long run costs few writes.
const STEP_BATCH: usize = 32;

/// A run in progress, seen from the handler.
pub struct RunHandle {
    pub run_id: i64,
    events: UnboundedReceiver<GenerationEvent>,
}

/// A run that ended normally, with what the handlers report about it.
pub struct Collected {
    pub run_id: i64,
    pub summary: RunSummary,
    pub stats: DraftStats,
}

/// Drafted tokens on the verified path and how many of them were accepted, over all steps.
#[derive(Debug, Clone, Copy, Default)]
pub struct DraftStats {
    pub accepted: usize,
    pub drafted: usize,
}

impl DraftStats {
    pub fn add(&mut self, step: &StepEvent) {
        self.accepted += step.accepted_len.saturating_sub(1);
        self.drafted += step.tree_depth;
    }

    /// Percent of drafted tokens accepted; `None` when nothing was drafted.
    pub fn acceptance_rate(&self) -> Option<f64> {
        (self.drafted > 0).then(|| 100.0 * self.accepted as f64 / self.drafted as f64)
    }
}

impl RunHandle {
    pub async fn next(&mut self) -> Option<GenerationEvent> {
        self.events.recv().await
    }

    /// The first event; a failure here (such as a prompt longer than the context) becomes an
    /// error answer, since nothing has been sent to the client yet.
    pub async fn first(&mut self) -> Result<GenerationEvent, ApiError> {
        match self.next().await {
            Some(GenerationEvent::Failed(err)) => Err(err.into()),
            Some(event) => Ok(event),
            None => Err(engine::EngineError::EngineStopped.into()),
        }
    }

    /// Waits for the end of the run.
    pub async fn collect(mut self) -> Result<Collected, ApiError> {
        let mut stats = DraftStats::default();
        while let Some(event) = self.next().await {
            match event {
                GenerationEvent::Step(step) => stats.add(&step),
                GenerationEvent::Finished(summary) => {
                    return Ok(Collected {
                        run_id: self.run_id,
                        summary,
                        stats,
                    })
                }
                GenerationEvent::Failed(err) => return Err(err.into()),
                GenerationEvent::Started { .. } | GenerationEvent::Text { .. } => {}
            }
        }
        Err(engine::EngineError::EngineStopped.into())
    }
}

/// Queues `request` on the engine, records the run and starts its driver task. Requests the
/// engine refuses at once (invalid, queue full) are answered with an error and not recorded.
pub async fn start(
    state: &AppState,
    request: GenerateRequest,
    comparison_id: Option<i64>,
) -> Result<RunHandle, ApiError> {
    request.validate()?;
    let model = state.model()?;
    if request.mode == GenerationMode::Medusa && !model.has_heads() {
        return Err(engine::EngineError::NoMedusaHeads.into());
    }
    let new_run = new_run(&model, &request, comparison_id);
    let mode = request.mode;
    let stream = model.engine.generate(request)?;
    // Dropping `stream` on a store error cancels the queued request.
    let run_id = state.store().begin_run(&new_run).await?;
    state.register_run(run_id, stream.canceller());
    let (tx, rx) = mpsc::unbounded_channel();
    let span = tracing::info_span!("run", run_id, mode = %mode);
    tokio::spawn(drive(state.clone(), run_id, mode, stream, tx).instrument(span));
    Ok(RunHandle { run_id, events: rx })
}

async fn drive(
    state: AppState,
    run_id: i64,
    mode: GenerationMode,
    mut stream: engine::GenerationStream,
    tx: UnboundedSender<GenerationEvent>,
) {
    let store = state.store();
    let mut steps: Vec<StepRecord> = Vec::new();
    let mut client_gone = false;
    // Unregisters the run however this task ends.
    let _registration = RunRegistration {
        state: &state,
        run_id,
    };
    loop {
        let Some(event) = stream.next().await else {
            flush_steps(&state, run_id, &mut steps).await;
            log_store(store.fail_run(run_id, "the engine stopped").await);
            state.metrics().record_run("failed", 0);
            if !client_gone {
                let _ = tx.send(GenerationEvent::Failed(engine::EngineError::EngineStopped));
            }
            return;
        };
        let terminal = match &event {
            GenerationEvent::Step(step) => {
                steps.push(step_record(step));
                if steps.len() >= STEP_BATCH {
                    flush_steps(&state, run_id, &mut steps).await;
                }
                false
            }
            GenerationEvent::Finished(summary) => {
                flush_steps(&state, run_id, &mut steps).await;
                let outcome = outcome(summary);
                if summary.stop_reason == StopReason::Cancelled {
                    log_store(store.cancel_run(run_id, Some(&outcome)).await);
                    state
                        .metrics()
                        .record_run("cancelled", summary.tokens_generated);
                } else {
                    log_store(store.finish_run(run_id, &outcome).await);
                    state
                        .metrics()
                        .record_run("finished", summary.tokens_generated);
                    if mode != GenerationMode::Normal {
                        state
                            .metrics()
                            .record_mean_accepted(mode.as_str(), summary.mean_accepted);
                    }
                }
                tracing::info!(
                    tokens = summary.tokens_generated,
                    stop_reason = stop_reason_name(summary.stop_reason),
                    tokens_per_second = summary.tokens_per_second,
                    "run ended"
                );
                true
            }
            GenerationEvent::Failed(err) => {
                flush_steps(&state, run_id, &mut steps).await;
                log_store(store.fail_run(run_id, &err.to_string()).await);
                state.metrics().record_run("failed", 0);
                tracing::info!(code = err.code(), "run failed");
                true
            }
            GenerationEvent::Started { .. } | GenerationEvent::Text { .. } => false,
        };
        if !client_gone && tx.send(event).is_err() {
            // The handler is gone (client disconnected): stop generating, but keep draining so
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

struct RunRegistration<'a> {
    state: &'a AppState,
    run_id: i64,
}

impl Drop for RunRegistration<'_> {
    fn drop(&mut self) {
        self.state.unregister_run(self.run_id);
    }
}

async fn flush_steps(state: &AppState, run_id: i64, steps: &mut Vec<StepRecord>) {
    if steps.is_empty() {
        return;
    }
    log_store(state.store().append_steps(run_id, steps).await);
    steps.clear();
}

fn log_store(result: store::Result<()>) {
    if let Err(err) = result {
        tracing::warn!(error = %err, "could not record the run");
    }
}

fn new_run(loaded: &LoadedModel, request: &GenerateRequest, comparison_id: Option<i64>) -> NewRun {
    let info = loaded.engine.info();
    let model = ModelRef {
        name: info.name.clone(),
        path: info.path.display().to_string(),
        file_type: info.file_type.clone(),
        identity: String::new(),
    };
    let sampling = serde_json::to_value(&request.sampling).unwrap_or(serde_json::Value::Null);
    let mut run = NewRun::new(
        request.mode.as_str(),
        model,
        prompt_record(&request.prompt),
        sampling,
        request.max_tokens,
    );
    run.stop = request.stop.clone();
    run.comparison_id = comparison_id;
    if request.mode == GenerationMode::Medusa {
        run.heads = loaded.heads_path.as_ref().map(|p| HeadsRef {
            path: p.display().to_string(),
            identity: String::new(),
        });
        run.tree = info
            .medusa_tree
            .as_ref()
            .and_then(|t| serde_json::to_value(t).ok());
    }
    run
}

pub fn prompt_record(prompt: &Prompt) -> PromptRecord {
    match prompt {
        Prompt::Text(text) => PromptRecord::Text(text.clone()),
        Prompt::Chat(messages) => PromptRecord::Chat(
            messages
                .iter()
                .map(|m| MessageRecord {
                    role: m.role.clone(),
                    content: m.content.clone(),
                })
                .collect(),
        ),
    }
}

fn outcome(summary: &RunSummary) -> RunOutcome {
    RunOutcome {
        output: summary.text.clone(),
        stop_reason: stop_reason_name(summary.stop_reason).to_owned(),
        prompt_tokens: summary.prompt_tokens as i64,
        tokens_generated: summary.tokens_generated as i64,
        ttft_ms: summary.ttft_ms,
        total_ms: summary.total_ms,
        tokens_per_second: summary.tokens_per_second,
        steps: summary.steps as i64,
        mean_accepted: summary.mean_accepted,
        acceptance_by_head: summary.acceptance_by_head.clone(),
        seed: summary.seed,
        finished_at: Utc::now(),
    }
}

fn step_record(step: &StepEvent) -> StepRecord {
    StepRecord {
        step_index: step.index as i64,
        tree_size: step.tree_size as i64,
        tree_depth: step.tree_depth as i64,
        accepted_len: step.accepted_len as i64,
        tokens: step.tokens.clone(),
        sources: step.sources.iter().map(|s| source_name(*s)).collect(),
        depth_hits: step.depth_hits.clone(),
        draft_ms: step.draft_ms,
        verify_ms: step.verify_ms,
    }
}

pub fn source_name(source: TokenSource) -> String {
    match source {
        TokenSource::Base => "model".to_owned(),
        TokenSource::Head(k) => format!("medusa_head_{k}"),
        TokenSource::Lookup => "lookup".to_owned(),
    }
}

pub fn stop_reason_name(reason: StopReason) -> &'static str {
    match reason {
        StopReason::EndOfGeneration => "end_of_generation",
        StopReason::MaxTokens => "max_tokens",
        StopReason::StopString => "stop_string",
        StopReason::ContextFull => "context_full",
        StopReason::Cancelled => "cancelled",
    }
}
