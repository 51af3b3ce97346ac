//! OpenAI-compatible endpoints: chat completions, completions and the model list, streamed as
//! server-sent events when asked, so that OpenAI clients work unchanged. Defaults: normal mode,
//! the engine's sampling defaults (llama.cpp's), and no token limit but the context, as with
//! OpenAI.

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use engine::{
    ChatMessage, GenerateRequest, GenerationMode, LookupMemoryUse, Prompt, SamplingParams,
};
use openai_wire::{ModelCard, ModelList};
use serde::Deserialize;

use playground::{DraftFields, Playground, RunHandle, RunTarget};

use crate::error::ApiError;
use crate::extract::JsonBody;

mod answer;
mod embeddings;
mod logprobs;
mod output_fields;
mod refusals;
mod responses;
mod stream;
mod token_ids;
mod tools;

use crate::sampling::SamplingFields;
use answer::{Echoed, Envelope, Flavor};
pub use embeddings::embeddings;
use output_fields::{NotYetSupported, OutputFields};
use refusals::invalid;
pub use responses::responses;
use stream::complete;
pub use token_ids::EmbeddingTokenIds;
use tools::{InToolCall, ToolFields, ToolPlan};

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
    /// Not part of OpenAI's API: whether lookup drafts from its memory of earlier requests'
    /// text and adds this one's (`read_write`, the default), only drafts (`read_only`), or
    /// neither (`off`).
    #[serde(default)]
    lookup_memory: Option<LookupMemoryUse>,
    #[serde(flatten)]
    output: OutputFields,
    #[serde(flatten)]
    tools: ToolFields,
    #[serde(flatten)]
    not_yet: NotYetSupported,
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

/// A prompt longer than the context, by OpenAI's code (`context_length_exceeded`) and field; a
/// grammar the engine could not parse, by its field.
fn openai_error(err: ApiError, prompt_field: &str) -> ApiError {
    let mut err = err.0;
    match err.code {
        "prompt_too_long" => {
            err.code = "context_length_exceeded";
            err.param = Some(prompt_field.to_owned());
        }
        "empty_prompt" if err.param.is_none() => err.param = Some(prompt_field.to_owned()),
        "invalid_grammar" | "grammar_too_complex" if err.param.is_none() => {
            err.param = Some("grammar".to_owned())
        }
        _ => {}
    }
    ApiError(err)
}

/// The highest temperature OpenAI's API takes.
const MAX_OPENAI_TEMPERATURE: f32 = 2.0;

/// Most choices one request may ask for (`n`); each is a run of its own in the batch.
const MAX_CHOICES: u32 = 8;

/// Tokens a remote engine's run may generate when the request sets no limit: its context is
/// not known here.
const REMOTE_MAX_TOKENS: u32 = 4096;

impl Common {
    /// The tools the answer may call (chat completions only).
    fn tool_plan(&self, flavor: Flavor) -> Result<Option<ToolPlan>, ApiError> {
        if flavor == Flavor::Completion && self.tools.given() {
            return Err(invalid(
                "tools",
                "tools are for /v1/chat/completions; a text completion cannot call them",
            ));
        }
        self.tools.plan()
    }

    /// The request, with no token limit but `default_max_tokens` unless one is given. With
    /// tools, the prompt describes them and the answer is held to their grammar.
    fn request(
        &self,
        flavor: Flavor,
        mut prompt: Prompt,
        default_max_tokens: u32,
        tools: Option<&ToolPlan>,
    ) -> Result<GenerateRequest, ApiError> {
        self.not_yet.check()?;
        self.output.echo(flavor)?;
        if let (Some(plan), Prompt::Chat(messages)) = (tools, &mut prompt) {
            plan.instruct(messages);
        }
        if let Some(n) = self.n.filter(|n| !(1..=MAX_CHOICES).contains(n)) {
            return Err(invalid(
                "n",
                format!("n must be between 1 and {MAX_CHOICES}, got {n}"),
            ));
        }
        let mode = match &self.mode {
            Some(name) => name.parse()?,
            None => GenerationMode::Normal,
        };
        let sampling = self.sampling.over(SamplingParams::default())?;
        // OpenAI's range; the engine itself takes any temperature from 0.
        if !(0.0..=MAX_OPENAI_TEMPERATURE).contains(&sampling.temperature) {
            return Err(invalid(
                "temperature",
                format!(
                    "temperature must be between 0 and {MAX_OPENAI_TEMPERATURE}, got {}",
                    sampling.temperature
                ),
            ));
        }
        let stop = match &self.stop {
            None => Vec::new(),
            Some(StopField::One(s)) => vec![s.clone()],
            Some(StopField::Many(list)) => list.clone(),
        };
        let max_tokens = self.asked_max_tokens().unwrap_or(default_max_tokens);
        let mut request = GenerateRequest::new(prompt, max_tokens)
            .with_sampling(sampling)
            .with_stop(stop)
            .with_mode(mode)
            .with_draft(self.draft.policy(mode)?);
        request.cache_prompt = self.cache_prompt.unwrap_or(true);
        request.lookup_memory = self.lookup_memory.unwrap_or_default();
        request.grammar = match tools {
            None => self.output.grammar()?,
            Some(plan) => Some(output_fields::schema_grammar(
                &plan.schema(self.output.reply_schema()?)?,
                "tools",
            )?),
        };
        request.logprobs = self.output.logprobs(flavor)?;
        Ok(request)
    }

    /// Starts the runs where `model` says, one per choice (`n`), and the envelope their answer
    /// goes in. The choices run side by side in the batch; with a seed, choice i draws from
    /// seed + i, so that they differ.
    async fn start(
        &self,
        playground: &Playground,
        flavor: Flavor,
        prompt: Prompt,
    ) -> Result<(Vec<RunHandle>, Envelope), ApiError> {
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
        let tools = self.tool_plan(flavor)?;
        let request = self.request(flavor, prompt, max_tokens, tools.as_ref())?;
        let logprobs = request.logprobs.is_some();
        let mut handles = Vec::new();
        for choice in 0..self.n.unwrap_or(1) {
            let mut request = request.clone();
            if let Some(seed) = request.sampling.seed.as_mut() {
                *seed = seed.wrapping_add(u64::from(choice));
            }
            handles.push(playground.start(request, target.clone(), None).await?);
        }
        Ok((
            handles,
            Envelope::new(
                flavor,
                model,
                self.include_usage(),
                logprobs,
                tools.is_some(),
            ),
        ))
    }

    /// The token limit the request gives, if any (`max_completion_tokens` first).
    fn asked_max_tokens(&self) -> Option<u32> {
        self.max_completion_tokens.or(self.max_tokens)
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
    /// An assistant message's calls.
    #[serde(default)]
    tool_calls: Option<Vec<InToolCall>>,
    /// A tool message's call.
    #[serde(default)]
    tool_call_id: Option<String>,
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

/// The conversation as the engine takes it. Earlier tool calls and their results are written
/// in the format the model is asked to answer in (see [`tools`]); a result is a user message,
/// which every chat template knows.
fn chat_messages(messages: &[InMessage]) -> Result<Vec<ChatMessage>, ApiError> {
    let mut tool_names = std::collections::HashMap::new();
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
            match (m.role.as_str(), &m.tool_calls) {
                ("assistant", Some(calls)) if !calls.is_empty() => {
                    for call in calls {
                        if let Some(id) = &call.id {
                            tool_names.insert(id.clone(), call.function.name.clone());
                        }
                    }
                    Ok(ChatMessage::new("assistant", tools::calls_text(calls)))
                }
                ("tool", _) => {
                    let name = m.tool_call_id.as_ref().and_then(|id| tool_names.get(id));
                    let result = tools::response_text(name.map(String::as_str), &content);
                    Ok(ChatMessage::new("user", result))
                }
                _ => Ok(ChatMessage::new(m.role.clone(), content)),
            }
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

#[tracing::instrument(skip_all)]
pub async fn chat_completions(
    State(playground): State<Playground>,
    JsonBody(body): JsonBody<ChatRequest>,
) -> Result<Response, ApiError> {
    let messages = chat_messages(&body.messages)?;
    let (handles, envelope) = body
        .common
        .start(&playground, Flavor::Chat, Prompt::Chat(messages))
        .await
        .map_err(|e| openai_error(e, "messages"))?;
    complete(handles, envelope, body.common.streamed())
        .await
        .map_err(|e| openai_error(e, "messages"))
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
    let common = &body.common;
    let echo = echoed(&playground, common, &prompt)
        .await
        .map_err(|e| openai_error(e, "prompt"))?;
    if echo.is_some() && common.asked_max_tokens() == Some(0) {
        // Scoring a given text: the prompt and its figures are the whole answer.
        let model = playground.model_info()?.name;
        let mut envelope = Envelope::new(
            Flavor::Completion,
            model,
            common.include_usage(),
            common.output.logprobs(Flavor::Completion)?.is_some(),
            false,
        );
        envelope.echo = echo;
        return Ok(envelope.echo_only(common.n.unwrap_or(1), common.streamed()));
    }
    let (handles, mut envelope) = common
        .start(&playground, Flavor::Completion, Prompt::Text(prompt))
        .await
        .map_err(|e| openai_error(e, "prompt"))?;
    envelope.echo = echo;
    complete(handles, envelope, common.streamed())
        .await
        .map_err(|e| openai_error(e, "prompt"))
}

/// The prompt a text completion echoes, with its tokens' log-probabilities when asked for
/// (from the model served here, decoded alone before the answer is generated).
async fn echoed(
    playground: &Playground,
    common: &Common,
    prompt: &str,
) -> Result<Option<Echoed>, ApiError> {
    if !common.output.echo(Flavor::Completion)? {
        return Ok(None);
    }
    let top = common.output.logprobs(Flavor::Completion)?;
    // Without generation the count of prompt tokens comes from the scoring too.
    if top.is_none() && common.asked_max_tokens() != Some(0) {
        return Ok(Some(Echoed {
            text: prompt.to_owned(),
            logprobs: None,
            tokens: 0,
        }));
    }
    let target = playground.target_named(common.model.as_deref()).await?;
    let scored = playground
        .prompt_logprobs(&target, Prompt::Text(prompt.to_owned()), top.unwrap_or(0))
        .await?;
    Ok(Some(Echoed {
        text: prompt.to_owned(),
        tokens: scored.rest.len() + 1,
        logprobs: top.map(|_| logprobs::echoed(&scored)),
    }))
}

pub async fn models(State(playground): State<Playground>) -> Result<Json<ModelList>, ApiError> {
    Ok(Json(ModelList::new(vec![served_model(&playground)?])))
}

/// `GET /v1/models/{id}`: the served model's card when `id` names it (as `client.models.retrieve`
/// asks), else 404 `model_not_found`.
pub async fn model(
    State(playground): State<Playground>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    let card = served_model(&playground)?;
    if card.id == id {
        return Ok(Json(card));
    }
    Err(ApiError(playground.model_not_found(&id, &card.id)))
}

/// The card of the model served here.
fn served_model(playground: &Playground) -> Result<ModelCard, ApiError> {
    let info = playground.model_info()?;
    let created = std::fs::metadata(&info.path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    // The modes tell another playground that this is a `medusa serve`, which takes `mode`.
    let modes = playground
        .modes()
        .into_iter()
        .map(|m| m.as_str().to_owned())
        .collect();
    Ok(ModelCard::new(info.name, created, "medusa-playground").with_modes(modes))
}
