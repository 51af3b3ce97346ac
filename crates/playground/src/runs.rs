//! The one path every generation takes: a task that owns the engine's stream, records the run in
//! the history and forwards the events to the adapter. The task outlives the adapter's handler,
//! so a client that goes away cancels the run but never loses its record.

use chrono::Utc;
use engine::{GenerationEvent, GenerationMode, Prompt, RunSummary, StepEvent, StopReason};
use futures_util::stream::{self, Stream};
use store::{HeadsRef, MessageRecord, ModelRef, NewRun, PromptRecord, RunOutcome, StepRecord};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tracing::Instrument;

use crate::error::AppError;
use crate::events::RunEvent;
use crate::model_host::HostedModel;
use crate::playground::{CheckedRequest, Playground};
use crate::requests::PlaygroundRequest;

/// Steps are written to the history in batches of this many, so that a long run costs few writes.
const STEP_BATCH: usize = 32;

/// A run in progress, seen from the adapter.
pub struct RunHandle {
    pub run_id: i64,
    events: UnboundedReceiver<GenerationEvent>,
}

/// A run that ended normally, with what the adapters report about it.
pub struct Collected {
    pub run_id: i64,
    pub summary: RunSummary,
    pub stats: DraftStats,
}

/// Drafted tokens on the verified path and how many of them were accepted, over all steps.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
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
    pub async fn first(&mut self) -> Result<GenerationEvent, AppError> {
        match self.next().await {
            Some(GenerationEvent::Failed(err)) => Err(err.into()),
            Some(event) => Ok(event),
            None => Err(engine::EngineError::EngineStopped.into()),
        }
    }

    /// Waits for the end of the run.
    pub async fn collect(mut self) -> Result<Collected, AppError> {
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

    /// `first`, then the rest of the run's events as the UI receives them, ending with the
    /// terminal one. Dropping the stream drops the handle, which cancels the run (it is still
    /// recorded).
    fn into_events(self, first: GenerationEvent) -> impl Stream<Item = RunEvent> + Send {
        stream::unfold(
            (self, Some(first), false),
            |(mut handle, pending, done)| async move {
                if done {
                    return None;
                }
                let event = match pending {
                    Some(event) => event,
                    None => handle
                        .next()
                        .await
                        .unwrap_or(GenerationEvent::Failed(engine::EngineError::EngineStopped)),
                };
                let event = RunEvent::new(handle.run_id, event);
                let terminal = event.is_terminal();
                Some((event, (handle, None, terminal)))
            },
        )
    }
}

impl Playground {
    /// Starts a run from the UI (over HTTP or IPC alike): its id and its events, ending with
    /// the terminal one. A refusal before the first event (such as a prompt longer than the
    /// context) is an error here, since nothing has reached the client yet.
    pub async fn start_run(
        &self,
        request: PlaygroundRequest,
    ) -> Result<(i64, impl Stream<Item = RunEvent> + Send), AppError> {
        let checked = self.check(request.into_request()?)?;
        let mut handle = start(self, checked, None).await?;
        let first = handle.first().await?;
        Ok((handle.run_id, handle.into_events(first)))
    }
}

/// Queues a checked request on its engine, records the run and starts its recording task.
/// Requests the engine refuses at once (queue full) are answered with an error and not recorded.
pub async fn start(
    playground: &Playground,
    checked: CheckedRequest,
    comparison_id: Option<i64>,
) -> Result<RunHandle, AppError> {
    let CheckedRequest { model, request } = checked;
    let new_run = new_run(&model, request.get(), comparison_id);
    let mode = request.get().mode;
    let stream = model.engine.submit(request)?;
    // Dropping `stream` on a store error cancels the queued request.
    let run_id = playground.store().begin_run(&new_run).await?;
    playground.register_run(run_id, stream.canceller());
    let (tx, rx) = mpsc::unbounded_channel();
    let span = tracing::info_span!("run", run_id, mode = %mode);
    tokio::spawn(record(playground.clone(), run_id, mode, stream, tx).instrument(span));
    Ok(RunHandle { run_id, events: rx })
}

/// Records the run's events and passes them on, until the run ends.
async fn record(
    playground: Playground,
    run_id: i64,
    mode: GenerationMode,
    mut stream: engine::GenerationStream,
    tx: UnboundedSender<GenerationEvent>,
) {
    let store = playground.store();
    let counters = playground.counters();
    let mut steps: Vec<StepRecord> = Vec::new();
    let mut client_gone = false;
    // Unregisters the run however this task ends.
    let _registration = RunRegistration {
        playground: &playground,
        run_id,
    };
    loop {
        let Some(event) = stream.next().await else {
            flush_steps(&playground, run_id, &mut steps).await;
            log_store(store.fail_run(run_id, "the engine stopped").await);
            counters.record_run("failed", 0);
            if !client_gone {
                let _ = tx.send(GenerationEvent::Failed(engine::EngineError::EngineStopped));
            }
            return;
        };
        let terminal = match &event {
            GenerationEvent::Step(step) => {
                steps.push(step_record(step));
                if steps.len() >= STEP_BATCH {
                    flush_steps(&playground, run_id, &mut steps).await;
                }
                false
            }
            GenerationEvent::Finished(summary) => {
                flush_steps(&playground, run_id, &mut steps).await;
                let outcome = outcome(summary);
                if summary.stop_reason == StopReason::Cancelled {
                    log_store(store.cancel_run(run_id, Some(&outcome)).await);
                    counters.record_run("cancelled", summary.tokens_generated);
                } else {
                    log_store(store.finish_run(run_id, &outcome).await);
                    counters.record_run("finished", summary.tokens_generated);
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
                true
            }
            GenerationEvent::Failed(err) => {
                flush_steps(&playground, run_id, &mut steps).await;
                log_store(store.fail_run(run_id, &err.to_string()).await);
                counters.record_run("failed", 0);
                tracing::info!(code = err.code(), "run failed");
                true
            }
            GenerationEvent::Started { .. } | GenerationEvent::Text { .. } => false,
        };
        if !client_gone && tx.send(event).is_err() {
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

struct RunRegistration<'a> {
    playground: &'a Playground,
    run_id: i64,
}

impl Drop for RunRegistration<'_> {
    fn drop(&mut self) {
        self.playground.unregister_run(self.run_id);
    }
}

async fn flush_steps(playground: &Playground, run_id: i64, steps: &mut Vec<StepRecord>) {
    if steps.is_empty() {
        return;
    }
    log_store(playground.store().append_steps(run_id, steps).await);
    steps.clear();
}

fn log_store(result: store::Result<()>) {
    if let Err(err) = result {
        tracing::warn!(error = %err, "could not record the run");
    }
}

fn new_run(
    hosted: &HostedModel,
    request: &engine::GenerateRequest,
    comparison_id: Option<i64>,
) -> NewRun {
    let info = hosted.engine.info();
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
        run.heads = hosted.heads_path.as_ref().map(|p| HeadsRef {
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

/// How the history keeps a prompt.
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
        stop_reason: summary.stop_reason.as_str().to_owned(),
        prompt_tokens: summary.prompt_tokens as i64,
        tokens_generated: summary.tokens_generated as i64,
        ttft_ms: summary.ttft_ms,
        total_ms: summary.total_ms,
        tokens_per_second: summary.tokens_per_second,
        steps: summary.steps as i64,
        mean_accepted: summary.mean_accepted,
        acceptance_by_depth: summary.acceptance_by_depth.clone(),
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
        sources: step.sources.iter().map(ToString::to_string).collect(),
        depth_hits: step.depth_hits.clone(),
        draft_ms: step.draft_ms,
        verify_ms: step.verify_ms,
    }
}
