//! The one path every generation takes: queued on the engine, recorded in the history by its
//! recording task (see `recording`), its events handed to the adapter. The task outlives the
//! adapter's handler, so a client that goes away cancels the run but never loses its record.

use engine::{GenerationEvent, Prompt, RunSummary, StepEvent};
use futures_util::stream::{self, Stream};
use store::{ConversationTurn, HeadsRef, MessageRecord, ModelRef, NewRun, PromptRecord};
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tracing::Instrument;

use crate::error::AppError;
use crate::events::RunEvent;
use crate::model_host::HostedModel;
use crate::playground::{CheckedRequest, Playground};
use crate::recording;
use crate::requests::PlaygroundRequest;

/// A run in progress, seen from the adapter.
pub struct RunHandle {
    pub run_id: i64,
    events: UnboundedReceiver<RecordedEvent>,
}

/// An event of the run, or the news that its end could not be recorded in the history.
pub type RecordedEvent = Result<GenerationEvent, AppError>;

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
    pub async fn next(&mut self) -> Option<RecordedEvent> {
        self.events.recv().await
    }

    /// The first event; a failure here (such as a prompt longer than the context) becomes an
    /// error answer, since nothing has been sent to the client yet.
    pub async fn first(&mut self) -> Result<GenerationEvent, AppError> {
        match self.next().await {
            Some(Ok(GenerationEvent::Failed(err))) => Err(err.into()),
            Some(event) => event,
            None => Err(engine::EngineError::EngineStopped.into()),
        }
    }

    /// Waits for the end of the run.
    pub async fn collect(mut self) -> Result<Collected, AppError> {
        let mut stats = DraftStats::default();
        while let Some(event) = self.next().await {
            match event? {
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
                    Some(event) => Ok(event),
                    None => handle.next().await.unwrap_or(Ok(GenerationEvent::Failed(
                        engine::EngineError::EngineStopped,
                    ))),
                };
                let event = match event {
                    Ok(event) => RunEvent::new(handle.run_id, event),
                    Err(err) => RunEvent::failed(handle.run_id, &err),
                };
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
        let conversation_id = request.conversation_id;
        let checked = self.check(request.into_request()?)?;
        let conversation = conversation_id.map(|conversation_id| ConversationTurn {
            conversation_id,
            continues: checked.request().continue_final_message,
        });
        let mut handle = start(self, checked, conversation).await?;
        let first = handle.first().await?;
        Ok((handle.run_id, handle.into_events(first)))
    }
}

/// Queues a checked request on its engine, records the run (in `conversation`, when it answers
/// one) and starts its recording task. Requests the engine refuses at once (queue full) are
/// answered with an error and not recorded.
pub async fn start(
    playground: &Playground,
    checked: CheckedRequest,
    conversation: Option<ConversationTurn>,
) -> Result<RunHandle, AppError> {
    let CheckedRequest { model, request } = checked;
    let mut new_run = new_run(&model, request.get());
    new_run.conversation = conversation;
    let mode = request.get().mode;
    let stream = model.engine.submit(request)?;
    // Dropping `stream` on a store error cancels the queued request.
    let run_id = playground.store().begin_run(&new_run).await?;
    playground.register_run(run_id, stream.canceller());
    let (tx, rx) = mpsc::unbounded_channel();
    let span = tracing::info_span!("run", run_id, mode = %mode);
    tokio::spawn(recording::record(playground.clone(), run_id, mode, stream, tx).instrument(span));
    Ok(RunHandle { run_id, events: rx })
}

fn new_run(hosted: &HostedModel, request: &engine::GenerateRequest) -> NewRun {
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
    if request.mode.drafts_trees() && hosted.heads_path.is_some() {
        run.heads = hosted.heads_path.as_ref().map(|p| HeadsRef {
            path: p.display().to_string(),
            identity: String::new(),
        });
        // The tree this run was asked to draft in full, else the one sized at load.
        let tree = match &request.draft {
            engine::DraftPolicy::Tree(tree) => Some(tree),
            _ => info.medusa_tree.as_ref(),
        };
        run.tree = tree.and_then(|t| serde_json::to_value(t).ok());
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
