//! The one path every generation takes: queued on the engine, recorded in the history by its
//! recording task (see `recording`), its events handed to the adapter. The task outlives the
//! adapter's handler, so a client that goes away cancels the run but never loses its record.

use engine::{
    ChatMessage, DraftPolicy, GenerateRequest, GenerationEvent, GenerationMode, GenerationStream,
    Prompt, RunSummary, ValidRequest,
};
use futures_util::stream::{self, Stream, StreamExt};
use store::{ConversationTurn, HeadsRef, MessageRecord, ModelRef, NewRun, PromptRecord};
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tracing::Instrument;

use crate::error::AppError;
use crate::events::RunEvent;
use crate::model_host::HostedModel;
use crate::playground::{CheckedRequest, Playground};
use crate::recording;
pub use crate::recording::RecordedEvent;
use crate::requests::PlaygroundRequest;
use crate::targets::RunTarget;

/// A run in progress, seen from the adapter.
pub struct RunHandle {
    pub run_id: i64,
    events: UnboundedReceiver<RecordedEvent>,
}

/// A run that ended normally, with what the adapters report about it.
pub struct Collected {
    pub run_id: i64,
    pub summary: RunSummary,
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
        while let Some(event) = self.next().await {
            match event? {
                GenerationEvent::Finished(summary) => {
                    return Ok(Collected {
                        run_id: self.run_id,
                        summary,
                    })
                }
                GenerationEvent::Failed(err) => return Err(err.into()),
                GenerationEvent::Started { .. }
                | GenerationEvent::Text { .. }
                | GenerationEvent::Step(_) => {}
            }
        }
        Err(engine::EngineError::EngineStopped.into())
    }

    /// `first`, then the run's later events, ending with its terminal one (a failure when the
    /// engine went away). Dropping the stream drops the handle, which cancels the run (it is
    /// still recorded).
    pub fn events_from(self, first: GenerationEvent) -> impl Stream<Item = RecordedEvent> + Send {
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
                let terminal = !matches!(
                    event,
                    Ok(GenerationEvent::Started { .. }
                        | GenerationEvent::Text { .. }
                        | GenerationEvent::Step(_))
                );
                Some((event, (handle, None, terminal)))
            },
        )
    }

    /// [`RunHandle::events_from`] as the UI receives them.
    fn into_events(self, first: GenerationEvent) -> impl Stream<Item = RunEvent> + Send {
        let run_id = self.run_id;
        self.events_from(first).map(move |event| match event {
            Ok(event) => RunEvent::new(run_id, event),
            Err(err) => RunEvent::failed(run_id, &err),
        })
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
        let (engine, model) = (request.engine.clone(), request.model.clone());
        let request = request.into_request()?;
        let conversation = conversation_id.map(|conversation_id| ConversationTurn {
            conversation_id,
            continues: request.continue_final_message,
        });
        let target = match engine.filter(|name| !name.is_empty()) {
            Some(engine) => RunTarget::Remote { engine, model },
            None if model.is_some() => return Err(AppError::invalid_parameter(
                "model names a remote engine's model; the model served here is chosen in Settings",
            )),
            None => RunTarget::Local,
        };
        let mut handle = self.start(request, target, conversation).await?;
        let first = handle.first().await?;
        Ok((handle.run_id, handle.into_events(first)))
    }

    /// The one way a generation starts, whichever adapter asks: checked against the model that
    /// will run it, queued where `target` says and recorded (in `conversation`, when it answers
    /// one) by its own task.
    pub async fn start(
        &self,
        request: GenerateRequest,
        target: RunTarget,
        conversation: Option<ConversationTurn>,
    ) -> Result<RunHandle, AppError> {
        match target {
            RunTarget::Local => start(self, self.check(request)?, conversation).await,
            RunTarget::Remote { .. } if request.logprobs.is_some() => Err(AppError::new(
                crate::ErrorKind::Invalid,
                "unsupported_parameter",
                "log-probabilities come from the model served here; a remote engine's are not read",
            )
            .with_param("logprobs")),
            RunTarget::Remote { engine, model } => {
                start_remote(self, &engine, model, request, conversation).await
            }
        }
    }

    /// A run of the model served here, waited for to its end.
    pub async fn run_to_end(&self, request: GenerateRequest) -> Result<Collected, AppError> {
        self.start(request, RunTarget::Local, None)
            .await?
            .collect()
            .await
    }
}

/// Queues a checked request on its engine, records the run (in `conversation`, when it answers
/// one) and starts its recording task. Requests the engine refuses at once (queue full) are
/// answered with an error and not recorded.
async fn start(
    playground: &Playground,
    checked: CheckedRequest,
    conversation: Option<ConversationTurn>,
) -> Result<RunHandle, AppError> {
    let CheckedRequest { model, request } = checked;
    remember_history(playground, &model).await;
    let mut new_run = new_run(&model, &request);
    new_run.conversation = conversation;
    let mode = request.get().mode;
    let stream = model.engine.submit(request)?;
    record(playground, new_run, Some(mode), stream).await
}

/// Earlier answers of one model that lookup's memory is given from the history.
const REMEMBERED_ANSWERS: i64 = 256;

/// Before a model's first run, gives lookup's memory that model's newest answers from the
/// history, so that a restart does not forget what it was asked. The engine takes them before
/// the run, in order; a history that cannot be read leaves the memory as it is.
async fn remember_history(playground: &Playground, model: &HostedModel) {
    model
        .remembered
        .get_or_init(|| async {
            let path = model.engine.info().path.display().to_string();
            let answers = match playground.store().recent_answers(&path, REMEMBERED_ANSWERS).await {
                Ok(answers) => answers,
                Err(err) => {
                    tracing::warn!(error = %err, "the history's answers could not be read for lookup");
                    return;
                }
            };
            let mut remembered = 0;
            // Oldest first, as they were answered.
            for (prompt, answer) in answers.into_iter().rev() {
                match model.engine.remember(prompt_from_record(prompt), answer) {
                    Ok(()) => remembered += 1,
                    Err(err) => tracing::debug!(error = %err, "an earlier answer not remembered"),
                }
            }
            tracing::info!(remembered, "lookup remembers answers from the history");
        })
        .await;
}

/// Starts a run on the remote engine named `engine` (its `model`, else the first it lists) and
/// records it like a local one, the engine named. Fields only the model served here can honour
/// (a tree, a draft length, hidden states) are refused, and so are modes and fields the engine
/// does not take (see [`remote::RemoteKind::prepare`]).
async fn start_remote(
    playground: &Playground,
    engine: &str,
    model: Option<String>,
    request: GenerateRequest,
    conversation: Option<ConversationTurn>,
) -> Result<RunHandle, AppError> {
    request.validate()?;
    if request.draft != DraftPolicy::Auto || request.max_draft_tokens.is_some() {
        return Err(AppError::invalid_parameter(
            "trees and draft lengths are for the model served here; a remote engine drafts as it was started",
        ));
    }
    if request.record_hidden_states {
        return Err(AppError::invalid_parameter(
            "a remote engine does not return hidden states",
        ));
    }
    let (remote, model, kind) = playground.remotes().target(engine, model).await?;
    // What the engine can run: auto is normal decoding on an engine that cannot draft for us, and
    // the run is recorded in the mode that really ran.
    let request = kind
        .prepare(remote.name(), request)
        .map_err(AppError::from)?;
    let mut new_run = NewRun::new(
        request.mode.as_str(),
        ModelRef {
            name: model.clone(),
            path: remote.spec().url.clone(),
            file_type: String::new(),
            identity: String::new(),
        },
        prompt_record(&request.prompt),
        serde_json::to_value(&request.sampling).unwrap_or(serde_json::Value::Null),
        request.max_tokens,
    );
    new_run.stop = request.stop.clone();
    new_run.engine = Some(remote.name().to_owned());
    new_run.conversation = conversation;
    let stream = remote.generate(remote::RemoteRequest {
        model,
        request,
        kind,
    });
    // The local engine's figures (`/metrics`, the draft budget) leave remote runs out.
    record(playground, new_run, None, stream).await
}

/// Records the run's start and starts its recording task. Dropping `stream` on a store error
/// cancels the run.
async fn record(
    playground: &Playground,
    new_run: NewRun,
    counted_mode: Option<GenerationMode>,
    stream: GenerationStream,
) -> Result<RunHandle, AppError> {
    let run_id = playground.store().begin_run(&new_run).await?;
    playground.register_run(run_id, stream.canceller());
    let (tx, rx) = mpsc::unbounded_channel();
    let span = tracing::info_span!("run", run_id, mode = %new_run.mode, engine = new_run.engine.as_deref().unwrap_or("local"));
    let task = recording::record(playground.clone(), run_id, counted_mode, stream, tx);
    tokio::spawn(task.instrument(span));
    Ok(RunHandle { run_id, events: rx })
}

fn new_run(hosted: &HostedModel, valid: &ValidRequest) -> NewRun {
    let request = valid.get();
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
    if valid.draft().draft_model {
        run.draft_model = info.draft_model.as_ref().map(|d| ModelRef {
            name: d.name.clone(),
            path: d.path.display().to_string(),
            file_type: d.file_type.clone(),
            identity: String::new(),
        });
    }
    if request.mode.drafts_trees() && hosted.heads_path.is_some() {
        run.heads = hosted.heads_path.as_ref().map(|p| HeadsRef {
            path: p.display().to_string(),
            identity: String::new(),
        });
        run.tree = valid
            .draft()
            .tree
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

/// The prompt a run was asked, from its record.
fn prompt_from_record(record: PromptRecord) -> Prompt {
    match record {
        PromptRecord::Text(text) => Prompt::Text(text),
        PromptRecord::Chat(messages) => Prompt::Chat(
            messages
                .into_iter()
                .map(|m| ChatMessage {
                    role: m.role,
                    content: m.content,
                })
                .collect(),
        ),
    }
}
