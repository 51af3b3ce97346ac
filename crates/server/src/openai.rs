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
use openai_wire::{
    ChatChoice, ChatChunkChoice, Completion, Delta, Message, ModelCard, ModelList, TextChoice,
    Timings, Usage, CHAT_COMPLETION, CHAT_COMPLETION_CHUNK, TEXT_COMPLETION,
};
use serde::{Deserialize, Serialize};

use playground::{AppError, Collected, DraftFields, Playground, RunHandle, RunTarget};

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

impl Common {
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
        let target = playground.target_named(self.model.as_deref()).await?;
        let (model, max_tokens) = match &target {
            // Without a limit the run may fill its context, as with OpenAI.
            RunTarget::Local => {
                let info = playground.model_info()?;
                (info.name, info.n_ctx)
            }
            RunTarget::Remote { model, .. } => {
                (model.clone().unwrap_or_default(), REMOTE_MAX_TOKENS)
            }
        };
        let request = self.request(prompt, max_tokens)?;
        let handle = playground.start(request, target, None).await?;
        Ok((handle, Envelope::new(flavor, model, self.include_usage())))
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

    /// The envelope around `choices`; `usage` as a chunk carries it (absent unless asked for).
    fn completion<C>(&self, object: &str, choices: Vec<C>, usage: Option<Usage>) -> Completion<C> {
        Completion {
            id: self.id.clone(),
            object: object.to_owned(),
            created: self.created,
            model: self.model.clone(),
            system_fingerprint: None,
            choices,
            usage: self.include_usage.then_some(usage),
            timings: None,
            run_id: None,
        }
    }

    /// A stream chunk: its text, the assistant's role on the first, the finish reason and
    /// llama-server's timings on the last.
    fn chunk(
        &self,
        text: Option<&str>,
        first: bool,
        finish: Option<&str>,
        timings: Option<Timings>,
    ) -> Event {
        let finish_reason = finish.map(str::to_owned);
        match self.flavor {
            Flavor::Chat => {
                let delta = Delta {
                    role: first.then(|| "assistant".to_owned()),
                    content: text.map(str::to_owned),
                };
                let choice = ChatChunkChoice {
                    index: 0,
                    delta,
                    logprobs: None,
                    finish_reason,
                };
                let mut chunk = self.completion(CHAT_COMPLETION_CHUNK, vec![choice], None);
                chunk.timings = timings;
                data(&chunk)
            }
            Flavor::Completion => {
                let choice = TextChoice {
                    index: 0,
                    text: text.unwrap_or_default().to_owned(),
                    logprobs: None,
                    finish_reason,
                };
                let mut chunk = self.completion(TEXT_COMPLETION, vec![choice], None);
                chunk.timings = timings;
                data(&chunk)
            }
        }
    }

    /// The last chunk: no text, the finish reason and llama-server's timings.
    fn last_chunk(&self, summary: &RunSummary) -> Event {
        let reason = finish_reason(summary.stop_reason);
        self.chunk(None, false, Some(reason), Some(timings(summary)))
    }

    /// OpenAI sends usage as one more chunk, with no choices, after the last one.
    fn usage_chunk(&self, summary: &RunSummary) -> Event {
        let object = match self.flavor {
            Flavor::Chat => CHAT_COMPLETION_CHUNK,
            Flavor::Completion => TEXT_COMPLETION,
        };
        let mut chunk: Completion<TextChoice> =
            self.completion(object, Vec::new(), Some(usage(summary)));
        chunk.timings = Some(timings(summary));
        data(&chunk)
    }

    /// The whole answer.
    fn answer(&self, run: &Collected) -> Response {
        let summary = &run.summary;
        let text = summary.text.clone();
        let finish_reason = Some(finish_reason(summary.stop_reason).to_owned());
        match self.flavor {
            Flavor::Chat => {
                let choice = ChatChoice {
                    index: 0,
                    message: Message {
                        role: "assistant".into(),
                        content: text,
                    },
                    logprobs: None,
                    finish_reason,
                };
                whole(self.completion(CHAT_COMPLETION, vec![choice], None), run)
            }
            Flavor::Completion => {
                let choice = TextChoice {
                    index: 0,
                    text,
                    logprobs: None,
                    finish_reason,
                };
                whole(self.completion(TEXT_COMPLETION, vec![choice], None), run)
            }
        }
    }
}

/// A whole answer with the run's usage, timings and id.
fn whole<C: Serialize>(mut answer: Completion<C>, run: &Collected) -> Response {
    answer.usage = Some(Some(usage(&run.summary)));
    answer.timings = Some(timings(&run.summary));
    answer.run_id = Some(run.run_id);
    Json(answer).into_response()
}

fn finish_reason(reason: StopReason) -> &'static str {
    match reason {
        StopReason::MaxTokens | StopReason::ContextFull => "length",
        StopReason::EndOfGeneration | StopReason::StopString | StopReason::Cancelled => "stop",
    }
}

/// llama-server's `timings`, so that clients written for it show these figures unchanged.
fn timings(summary: &RunSummary) -> Timings {
    let prompt_n = summary
        .prompt_tokens
        .saturating_sub(summary.cached_prompt_tokens);
    let prompt_ms = (summary.ttft_ms - summary.queue_ms).max(0.0);
    Timings {
        cache_n: Some(summary.cached_prompt_tokens),
        prompt_n: Some(prompt_n),
        prompt_ms: Some(prompt_ms),
        prompt_per_second: Some(engine::tokens_per_second(prompt_n, prompt_ms)),
        predicted_n: Some(summary.tokens_generated),
        predicted_ms: Some((summary.total_ms - summary.ttft_ms).max(0.0)),
        predicted_per_second: Some(summary.decode_tokens_per_second),
        draft_n: Some(summary.draft_tokens.unwrap_or(0)),
        draft_n_accepted: Some(summary.accepted_draft_tokens.unwrap_or(0)),
    }
}

/// OpenAI's `usage`, with the prompt tokens reused from the prompt cache.
fn usage(summary: &RunSummary) -> Usage {
    Usage::counted(
        summary.prompt_tokens,
        summary.tokens_generated,
        summary.cached_prompt_tokens,
    )
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
        return Ok(envelope.answer(&run));
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

/// One server-sent event of JSON.
fn data(value: &impl Serialize) -> Event {
    match serde_json::to_string(value) {
        Ok(json) => Event::default().data(json),
        // Plain structs of strings and numbers always serialize; should one not, the client
        // still gets an error event rather than a silent gap.
        Err(err) => data(&ApiError(AppError::internal("serialization", err.to_string())).body()),
    }
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
                    vec![st.envelope.chunk(Some(""), true, None, None)]
                } else {
                    Vec::new()
                }
            }
            Some(Ok(GenerationEvent::Text { text, .. })) => {
                let first = !st.sent_role && st.envelope.flavor == Flavor::Chat;
                st.sent_role = true;
                vec![st.envelope.chunk(Some(&text), first, None, None)]
            }
            Some(Ok(GenerationEvent::Step(_))) => Vec::new(),
            Some(Ok(GenerationEvent::Finished(summary))) => {
                st.done = true;
                let mut events = vec![st.envelope.last_chunk(&summary)];
                if st.envelope.include_usage {
                    events.push(st.envelope.usage_chunk(&summary));
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

pub async fn models(State(playground): State<Playground>) -> Result<Json<ModelList>, ApiError> {
    let info = playground.model_info()?;
    let created = std::fs::metadata(&info.path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    Ok(Json(ModelList::new(vec![ModelCard::new(
        info.name,
        created,
        "medusa-playground",
    )])))
}
