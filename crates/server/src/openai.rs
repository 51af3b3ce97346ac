//! OpenAI-compatible endpoints: chat completions, completions and the model list, streamed as
//! server-sent events when asked, so that OpenAI clients work unchanged. Defaults: normal mode,
//! the engine's sampling defaults (llama.cpp's), and no token limit but the context, as with
//! OpenAI.

use std::convert::Infallible;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::{
    ChatMessage, GenerateRequest, GenerationEvent, GenerationMode, Prompt, RunSummary,
    SamplingParams, StopReason,
};
use futures_util::stream::{self, Stream, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};

use playground::runs::{self, RunHandle};
use playground::{AppError, DraftFields, ErrorKind, Playground};

use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::sampling::SamplingFields;

/// Sampling and stopping fields shared by both completion endpoints.
#[derive(Debug, Default, Deserialize)]
pub struct Common {
    /// The model served here (its name in `/v1/models`) or a remote engine's name; none or
    /// empty means the model served here.
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(flatten)]
    sampling: SamplingFields,
    #[serde(default)]
    stop: Option<StopField>,
    #[serde(default)]
    n: Option<u32>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    /// Not part of OpenAI's API: how to decode (`normal`, `medusa` or `lookup`).
    #[serde(default)]
    mode: Option<String>,
    /// Not part of OpenAI's API: `tree` (Medusa mode) and `draft_length` (lookup mode).
    #[serde(flatten)]
    draft: DraftFields,
    /// Not part of OpenAI's API (llama-server's): `false` reads the whole prompt, reusing no
    /// cached cells and keeping none.
    #[serde(default)]
    cache_prompt: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum StopField {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// Tokens a remote engine's run may generate when the request sets no limit: its context is
/// not known here.
const REMOTE_MAX_TOKENS: u32 = 4096;

/// Where a request runs.
enum Target {
    Local,
    /// A remote engine (by name) and its model.
    Remote {
        engine: String,
        model: String,
    },
}

impl Common {
    /// Where `model` says to run: the model served here when it names it (or nothing), a
    /// remote engine when it names one; any other name is 404 `model_not_found`, as with
    /// OpenAI, rather than an answer from another model than asked.
    async fn target(&self, playground: &Playground) -> Result<Target, ApiError> {
        let Some(name) = self
            .model
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty())
        else {
            return Ok(Target::Local);
        };
        let local = playground.model();
        if local
            .as_ref()
            .is_ok_and(|model| model.engine.info().name == name)
        {
            return Ok(Target::Local);
        }
        let remotes = playground.remotes().list();
        if remotes.iter().any(|remote| remote.name == name) {
            let (_, model) = playground.remotes().target(name, None).await?;
            return Ok(Target::Remote {
                engine: name.to_owned(),
                model,
            });
        }
        // While no model is loaded, say so rather than that the name is unknown.
        let served = local?.engine.info().name.clone();
        let mut message = format!(
            "the model {name:?} does not exist here: this server serves {served:?} (see /v1/models)"
        );
        if !remotes.is_empty() {
            let names: Vec<_> = remotes.iter().map(|r| format!("{:?}", r.name)).collect();
            message.push_str(&format!(", and the remote engines {}", names.join(", ")));
        }
        Err(ApiError(AppError::new(
            ErrorKind::NotFound,
            "model_not_found",
            message,
        )))
    }

    /// The request, with no token limit but `default_max_tokens` unless one is given.
    fn request(
        &self,
        prompt: Prompt,
        default_max_tokens: u32,
    ) -> Result<GenerateRequest, ApiError> {
        if let Some(n) = self.n.filter(|&n| n != 1) {
            return Err(ApiError::invalid_parameter(format!(
                "n must be 1 (one choice per request), got {n}"
            )));
        }
        let mode = match &self.mode {
            Some(name) => name.parse()?,
            None => GenerationMode::Normal,
        };
        let sampling = self.sampling.over(SamplingParams::default());
        let stop = match &self.stop {
            None => Vec::new(),
            Some(StopField::One(s)) => vec![s.clone()],
            Some(StopField::Many(list)) => list.clone(),
        };
        let max_tokens = self
            .max_completion_tokens
            .or(self.max_tokens)
            .unwrap_or(default_max_tokens);
        let mut request = GenerateRequest::new(prompt, max_tokens)
            .with_sampling(sampling)
            .with_stop(stop)
            .with_mode(mode)
            .with_draft(self.draft.policy(mode)?);
        request.cache_prompt = self.cache_prompt.unwrap_or(true);
        Ok(request)
    }

    /// Starts the run where `model` says, and the envelope its answer goes in.
    async fn start(
        &self,
        playground: &Playground,
        flavor: Flavor,
        prompt: Prompt,
    ) -> Result<(RunHandle, Envelope), ApiError> {
        let include_usage = self.include_usage();
        match self.target(playground).await? {
            Target::Local => {
                let local = playground.model()?;
                let (model, n_ctx) = (local.engine.info().name.clone(), local.engine.info().n_ctx);
                // Without a limit the run may fill its context, as with OpenAI.
                let request = playground.check(self.request(prompt, n_ctx)?)?;
                let handle = runs::start(playground, request, None).await?;
                Ok((handle, Envelope::new(flavor, model, include_usage)))
            }
            Target::Remote { engine, model } => {
                let request = self.request(prompt, REMOTE_MAX_TOKENS)?;
                let handle =
                    runs::start_remote(playground, &engine, Some(model.clone()), request, None)
                        .await?;
                Ok((handle, Envelope::new(flavor, model, include_usage)))
            }
        }
    }

    fn streamed(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage)
    }
}

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    #[serde(default)]
    messages: Vec<InMessage>,
    #[serde(flatten)]
    common: Common,
}

#[derive(Debug, Deserialize)]
pub struct InMessage {
    role: String,
    #[serde(default)]
    content: Option<Content>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

fn chat_messages(messages: &[InMessage]) -> Result<Vec<ChatMessage>, ApiError> {
    messages
        .iter()
        .map(|m| {
            let content = match &m.content {
                None => String::new(),
                Some(Content::Text(text)) => text.clone(),
                Some(Content::Parts(parts)) => {
                    let mut text = String::new();
                    for part in parts {
                        match (part.kind.as_str(), &part.text) {
                            ("text", Some(t)) => text.push_str(t),
                            (kind, _) => {
                                return Err(ApiError::invalid_parameter(format!(
                                    "content parts of type '{kind}' are not supported; send text"
                                )))
                            }
                        }
                    }
                    text
                }
            };
            Ok(ChatMessage::new(m.role.clone(), content))
        })
        .collect()
}

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    #[serde(default)]
    prompt: Option<PromptField>,
    #[serde(flatten)]
    common: Common,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum PromptField {
    One(String),
    Many(Vec<String>),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavor {
    Chat,
    Completion,
}

/// What every chunk and answer of one request repeats.
struct Envelope {
    flavor: Flavor,
    id: String,
    created: i64,
    model: String,
    include_usage: bool,
}

impl Envelope {
    fn new(flavor: Flavor, model: String, include_usage: bool) -> Self {
        let prefix = match flavor {
            Flavor::Chat => "chatcmpl",
            Flavor::Completion => "cmpl",
        };
        Self {
            flavor,
            id: format!("{prefix}-{}", uuid::Uuid::new_v4().simple()),
            created: chrono::Utc::now().timestamp(),
            model,
            include_usage,
        }
    }

    fn chunk(&self, text: Option<&str>, first: bool, finish: Option<&str>) -> Value {
        let choice = match self.flavor {
            Flavor::Chat => {
                let mut delta = serde_json::Map::new();
                if first {
                    delta.insert("role".into(), "assistant".into());
                }
                if let Some(text) = text {
                    delta.insert("content".into(), text.into());
                }
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
            Flavor::Completion => json!({
                "index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish
            }),
        };
        let object = match self.flavor {
            Flavor::Chat => "chat.completion.chunk",
            Flavor::Completion => "text_completion",
        };
        let mut chunk = json!({
            "id": self.id, "object": object, "created": self.created, "model": self.model,
            "system_fingerprint": null, "choices": [choice],
        });
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    /// OpenAI sends usage as one more chunk, with no choices, after the last one.
    fn usage_chunk(&self, usage: Value) -> Value {
        let mut chunk = self.chunk(None, false, None);
        chunk["choices"] = json!([]);
        chunk["usage"] = usage;
        chunk
    }

    fn answer(&self, run: &runs::Collected) -> Value {
        let summary = &run.summary;
        let text = summary.text.as_str();
        let finish = finish_reason(summary.stop_reason);
        let (object, choice) = match self.flavor {
            Flavor::Chat => (
                "chat.completion",
                json!({
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": null,
                    "finish_reason": finish,
                }),
            ),
            Flavor::Completion => (
                "text_completion",
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish}),
            ),
        };
        json!({
            "id": self.id, "object": object, "created": self.created, "model": self.model,
            "system_fingerprint": null, "choices": [choice],
            "usage": usage(summary.prompt_tokens, summary.tokens_generated),
            "timings": timings(summary), "run_id": run.run_id,
        })
    }
}

fn finish_reason(reason: StopReason) -> &'static str {
    match reason {
        StopReason::MaxTokens | StopReason::ContextFull => "length",
        StopReason::EndOfGeneration | StopReason::StopString | StopReason::Cancelled => "stop",
    }
}

/// llama-server's `timings` object, so that clients written for it show these figures unchanged:
/// prompt tokens decoded (cached ones apart, in `cache_n`) and the time to the first token after
/// the queue; tokens generated, the time from the first to the last and the decode speed; drafted
/// tokens on the verified paths and how many were accepted (as `acceptance_rate` counts them).
fn timings(summary: &RunSummary) -> Value {
    let prompt_n = summary
        .prompt_tokens
        .saturating_sub(summary.cached_prompt_tokens);
    let prompt_ms = (summary.ttft_ms - summary.queue_ms).max(0.0);
    json!({
        "cache_n": summary.cached_prompt_tokens,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_second": engine::tokens_per_second(prompt_n, prompt_ms),
        "predicted_n": summary.tokens_generated,
        "predicted_ms": (summary.total_ms - summary.ttft_ms).max(0.0),
        "predicted_per_second": summary.decode_tokens_per_second,
        "draft_n": summary.draft_tokens.unwrap_or(0),
        "draft_n_accepted": summary.accepted_draft_tokens.unwrap_or(0),
    })
}

fn usage(prompt_tokens: usize, completion_tokens: usize) -> Value {
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    })
}

#[tracing::instrument(skip_all)]
pub async fn chat_completions(
    State(playground): State<Playground>,
    JsonBody(body): JsonBody<ChatRequest>,
) -> Result<Response, ApiError> {
    let messages = chat_messages(&body.messages)?;
    let (handle, envelope) = body
        .common
        .start(&playground, Flavor::Chat, Prompt::Chat(messages))
        .await?;
    complete(handle, envelope, body.common.streamed()).await
}

#[tracing::instrument(skip_all)]
pub async fn completions(
    State(playground): State<Playground>,
    JsonBody(body): JsonBody<CompletionRequest>,
) -> Result<Response, ApiError> {
    let prompt = match body.prompt {
        None => String::new(),
        Some(PromptField::One(text)) => text,
        Some(PromptField::Many(mut list)) if list.len() <= 1 => list.pop().unwrap_or_default(),
        Some(PromptField::Many(list)) => {
            return Err(ApiError::invalid_parameter(format!(
                "one prompt per request, got {}",
                list.len()
            )))
        }
    };
    let (handle, envelope) = body
        .common
        .start(&playground, Flavor::Completion, Prompt::Text(prompt))
        .await?;
    complete(handle, envelope, body.common.streamed()).await
}

async fn complete(
    mut handle: RunHandle,
    envelope: Envelope,
    streamed: bool,
) -> Result<Response, ApiError> {
    if !streamed {
        let run = handle.collect().await?;
        return Ok(Json(envelope.answer(&run)).into_response());
    }
    // The first event decides the status: a prompt too long for the context is still a 400.
    let first = handle.first().await?;
    let events = sse_events(handle, first, envelope);
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

struct StreamState {
    handle: RunHandle,
    pending: Option<GenerationEvent>,
    envelope: Envelope,
    sent_role: bool,
    done: bool,
}

fn data(value: &Value) -> Event {
    Event::default().data(value.to_string())
}

fn sse_events(
    handle: RunHandle,
    first: GenerationEvent,
    envelope: Envelope,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let state = StreamState {
        handle,
        pending: Some(first),
        envelope,
        sent_role: false,
        done: false,
    };
    stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        let event = match st.pending.take() {
            Some(event) => Some(Ok(event)),
            None => st.handle.next().await,
        };
        let events = match event {
            Some(Ok(GenerationEvent::Started { .. })) => {
                // Chat streams open with the assistant's role, as OpenAI's do.
                if st.envelope.flavor == Flavor::Chat {
                    st.sent_role = true;
                    vec![data(&st.envelope.chunk(Some(""), true, None))]
                } else {
                    Vec::new()
                }
            }
            Some(Ok(GenerationEvent::Text { text, .. })) => {
                let first = !st.sent_role && st.envelope.flavor == Flavor::Chat;
                st.sent_role = true;
                vec![data(&st.envelope.chunk(Some(&text), first, None))]
            }
            Some(Ok(GenerationEvent::Step(_))) => Vec::new(),
            Some(Ok(GenerationEvent::Finished(summary))) => {
                st.done = true;
                let reason = finish_reason(summary.stop_reason);
                let timings = timings(&summary);
                let mut last = st.envelope.chunk(None, false, Some(reason));
                last["timings"] = timings.clone();
                let mut events = vec![data(&last)];
                if st.envelope.include_usage {
                    let usage = usage(summary.prompt_tokens, summary.tokens_generated);
                    let mut chunk = st.envelope.usage_chunk(usage);
                    chunk["timings"] = timings;
                    events.push(data(&chunk));
                }
                events.push(Event::default().data("[DONE]"));
                events
            }
            Some(Ok(GenerationEvent::Failed(err))) => {
                st.done = true;
                vec![data(&ApiError::from(err).body())]
            }
            Some(Err(err)) => {
                st.done = true;
                vec![data(&ApiError(err).body())]
            }
            None => {
                st.done = true;
                vec![data(
                    &ApiError::from(engine::EngineError::EngineStopped).body(),
                )]
            }
        };
        Some((events, st))
    })
    .flat_map(|events| stream::iter(events.into_iter().map(Ok)))
}

pub async fn models(State(playground): State<Playground>) -> Result<Json<Value>, ApiError> {
    let model = playground.model()?;
    let info = model.engine.info();
    let created = std::fs::metadata(&info.path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    Ok(Json(json!({
        "object": "list",
        "data": [{
            "id": info.name,
            "object": "model",
            "created": created,
            "owned_by": "medusa-playground",
        }],
    })))
}
