//! OpenAI's Responses API (`/v1/responses`), plain and streamed. A request is read into a chat
//! completion request (its input items become messages, `text.format` the response format, its
//! flat function tools chat's tools) and runs the chat path; the answer is written back as a
//! response's output items and, streamed, as the typed events OpenAI's clients read.

use std::convert::Infallible;
use std::fmt;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::{GenerationEvent, Prompt, RunSummary, StopReason};
use futures_util::stream::{self, Stream, StreamExt};
use openai_wire::{
    IncompleteDetails, OutputItem, OutputText, Response as ResponseObject, ResponseError,
    ResponseEvent, ResponseStreamEvent, ResponseUsage, RESPONSE,
};
use playground::{AppError, Playground, RunHandle};
use serde::de::value::SeqAccessDeserializer;
use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::answer::{timings, Envelope, Flavor};
use super::output_fields::ResponseFormat;
use super::refusals::{invalid, unsupported};
use super::tools::{FunctionSpec, InFunctionCall, InToolCall, ToolChoice, ToolSpec};
use super::{chat_messages, openai_error, ChatRequest, Common, Content, InMessage};
use crate::error::ApiError;
use crate::extract::JsonBody;

/// This API's fields; the rest (sampling, `stream`, `mode`, ...) are chat's.
#[derive(Debug, Deserialize)]
pub struct ResponsesRequest {
    #[serde(default)]
    input: Option<Input>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    max_output_tokens: Option<u32>,
    #[serde(default)]
    text: Option<Repeated<TextSettings>>,
    #[serde(default)]
    tools: Option<Vec<Repeated<ToolType>>>,
    #[serde(default)]
    tool_choice: Option<Repeated<ResponsesToolChoice>>,
    /// The client's own labels, repeated in the response whatever they hold.
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(flatten)]
    not_kept: NotKept,
    #[serde(flatten)]
    common: Common,
}

/// A field the response repeats as the request gave it (as OpenAI's does), and what it says.
#[derive(Debug)]
struct Repeated<T> {
    given: Value,
    read: T,
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Repeated<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let given = Value::deserialize(deserializer)?;
        let read = T::deserialize(&given).map_err(de::Error::custom)?;
        Ok(Self { given, read })
    }
}

/// `input`: the user's text, or the conversation as items.
#[derive(Debug)]
enum Input {
    Text(String),
    Items(Vec<InputItem>),
}

/// Read by its JSON type rather than untagged, so that a bad item is refused with its reason.
impl<'de> Deserialize<'de> for Input {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextOrItems;

        impl<'de> Visitor<'de> for TextOrItems {
            type Value = Input;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("text or a list of items")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Input, E> {
                Ok(Input::Text(text.to_owned()))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, items: A) -> Result<Input, A::Error> {
                Vec::deserialize(SeqAccessDeserializer::new(items)).map(Input::Items)
            }
        }

        deserializer.deserialize_any(TextOrItems)
    }
}

/// One item of the input, by its `type`.
#[derive(Debug, Deserialize)]
#[serde(try_from = "ItemFields")]
enum InputItem {
    /// `message`, or no type (OpenAI's short form). Its role and content are checked when it
    /// is translated, so that a bad one is refused by name.
    Message {
        role: Option<String>,
        content: Option<MessageContent>,
    },
    /// A call the model made, sent back with the conversation: chat's assistant tool call.
    FunctionCall(InToolCall),
    /// A call's result: chat's tool message.
    FunctionCallOutput {
        call_id: Option<String>,
        output: Option<Content>,
    },
    /// Any other type (images, files, reasoning, ...), refused by its name.
    Other(String),
}

/// An input item's fields, whichever its type; [`InputItem`] keeps those of its type.
#[derive(Debug, Deserialize)]
struct ItemFields {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<MessageContent>,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    /// JSON text, as the model wrote it.
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    output: Option<Content>,
}

#[derive(Debug, thiserror::Error)]
#[error("a function_call item needs {0}")]
struct MissingCallField(&'static str);

impl TryFrom<ItemFields> for InputItem {
    type Error = MissingCallField;

    fn try_from(fields: ItemFields) -> Result<Self, Self::Error> {
        Ok(match fields.kind.as_deref() {
            None | Some("message") => Self::Message {
                role: fields.role,
                content: fields.content,
            },
            Some("function_call") => Self::FunctionCall(InToolCall {
                id: fields.call_id,
                function: InFunctionCall {
                    name: fields.name.ok_or(MissingCallField("name"))?,
                    arguments: fields.arguments.ok_or(MissingCallField("arguments"))?,
                },
            }),
            Some("function_call_output") => Self::FunctionCallOutput {
                call_id: fields.call_id,
                output: fields.output,
            },
            Some(other) => Self::Other(other.to_owned()),
        })
    }
}

/// A message item's content: text, or a list of parts.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum MessageContent {
    Text(String),
    Parts(Vec<MessagePart>),
    /// Anything else, refused by name when the message is read.
    Other(IgnoredAny),
}

/// A content part; only text is taken, and any other part is refused by its type.
#[derive(Debug, Deserialize)]
struct MessagePart {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
}

/// `text`: the answer's format.
#[derive(Debug, Deserialize)]
struct TextSettings {
    #[serde(default, deserialize_with = "even_null")]
    format: Option<TextFormat>,
}

/// `text.format`: a JSON schema, its fields beside `type` as this API writes them, or any other
/// format, which chat's `response_format` reads as it reads its own.
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
enum TextFormat {
    #[serde(rename = "json_schema")]
    JsonSchema {
        /// The answer's JSON schema, which is JSON whatever it says.
        #[serde(default, deserialize_with = "even_null")]
        schema: Option<Value>,
    },
    #[serde(untagged)]
    Chat(Value),
}

/// A field given as null is still given: chat judges a null format or schema as it judges its
/// own.
fn even_null<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// A tool's `type`; a function's own fields are chat's, read once the type says it is one.
#[derive(Debug, Deserialize)]
struct ToolType {
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

/// `tool_choice`: a function as this API names it, `{"type": "function", "name": ...}`, or as
/// chat takes it (`none`, `auto`, `required`, ...).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum ResponsesToolChoice {
    Function { name: String },
    Chat(ToolChoice),
}

impl From<ResponsesToolChoice> for ToolChoice {
    fn from(choice: ResponsesToolChoice) -> Self {
        match choice {
            ResponsesToolChoice::Function { name } => ToolChoice::function(name),
            ResponsesToolChoice::Chat(choice) => choice,
        }
    }
}

/// Fields that ask for what is not kept or done here; refused by name.
#[derive(Debug, Default, Deserialize)]
struct NotKept {
    #[serde(default)]
    previous_response_id: Option<Setting>,
    #[serde(default)]
    conversation: Option<Setting>,
    #[serde(default)]
    background: Option<Setting>,
    #[serde(default)]
    include: Option<Setting>,
}

/// A refused field's value, whatever it is: `false` and `[]` ask for nothing (as null does).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Setting {
    Flag(bool),
    List(Vec<IgnoredAny>),
    Other(IgnoredAny),
}

impl Setting {
    fn asks(&self) -> bool {
        match self {
            Self::Flag(on) => *on,
            Self::List(items) => !items.is_empty(),
            Self::Other(_) => true,
        }
    }
}

impl NotKept {
    fn check(&self) -> Result<(), ApiError> {
        let refused = [
            (
                "previous_response_id",
                &self.previous_response_id,
                "responses are not stored for later turns; send the whole conversation in input",
            ),
            (
                "conversation",
                &self.conversation,
                "conversations are not stored here; send the whole conversation in input",
            ),
            (
                "background",
                &self.background,
                "background responses are not supported",
            ),
            (
                "include",
                &self.include,
                "no extra output can be included yet",
            ),
        ];
        match refused
            .into_iter()
            .find(|(_, value, _)| value.as_ref().is_some_and(Setting::asks))
        {
            Some((field, _, why)) => Err(unsupported(field, format!("{field}: {why}"))),
            None => Ok(()),
        }
    }
}

impl ResponsesRequest {
    /// Takes out the equivalent chat completion request; what the response repeats stays.
    fn take_chat(&mut self) -> Result<ChatRequest, ApiError> {
        self.not_kept.check()?;
        let messages = input_messages(self.instructions.as_deref(), self.input.take())?;
        let mut common = std::mem::take(&mut self.common);
        if let Some(max) = self.max_output_tokens {
            common.max_tokens = Some(max);
        }
        if let Some(format) = self
            .text
            .as_ref()
            .and_then(|text| text.read.format.as_ref())
        {
            common.output.response_format = Some(chat_response_format(format)?);
        }
        if let Some(tools) = &self.tools {
            common.tools.tools = Some(tools.iter().map(chat_tool).collect::<Result<_, _>>()?);
        }
        if let Some(choice) = &self.tool_choice {
            common.tools.tool_choice = Some(choice.read.clone().into());
        }
        Ok(ChatRequest { messages, common })
    }

    /// The response as it starts: no output yet, and the request's settings (`common`: chat's
    /// fields, taken out with [`Self::take_chat`]).
    fn skeleton(&self, common: &Common, envelope: &Envelope, id: &str) -> ResponseObject {
        ResponseObject {
            id: id.to_owned(),
            object: RESPONSE.into(),
            created_at: envelope.created,
            status: "in_progress".into(),
            model: envelope.model.clone(),
            output: Vec::new(),
            usage: None,
            error: None,
            incomplete_details: None,
            instructions: self.instructions.clone(),
            max_output_tokens: self.max_output_tokens,
            temperature: common.sampling.temperature(),
            top_p: common.sampling.top_p(),
            parallel_tool_calls: common.tools.parallel_tool_calls.unwrap_or(false),
            tool_choice: self
                .tool_choice
                .as_ref()
                .map_or_else(ResponseObject::default_tool_choice, |c| c.given.clone()),
            tools: self
                .tools
                .iter()
                .flatten()
                .map(|t| t.given.clone())
                .collect(),
            text: self
                .text
                .as_ref()
                .map_or_else(ResponseObject::default_text, |t| t.given.clone()),
            metadata: self.metadata.clone().unwrap_or_default(),
            timings: None,
            run_id: None,
        }
    }
}

/// The input as chat messages: instructions first, then its items (messages, function
/// calls and their outputs).
fn input_messages(
    instructions: Option<&str>,
    input: Option<Input>,
) -> Result<Vec<InMessage>, ApiError> {
    let mut messages = Vec::new();
    if let Some(instructions) = instructions {
        messages.push(text_message("system", instructions.to_owned()));
    }
    let items = match input {
        None => {
            return Err(invalid(
                "input",
                "input is required: text or a list of items",
            ))
        }
        Some(Input::Text(text)) => {
            messages.push(text_message("user", text));
            return Ok(messages);
        }
        Some(Input::Items(items)) => items,
    };
    for item in items {
        match item {
            InputItem::Message { role, content } => {
                let role = chat_role(role.as_deref())?;
                messages.push(text_message(role, message_text(content)?));
            }
            // Calls made together are one assistant message.
            InputItem::FunctionCall(call) => match messages.last_mut() {
                Some(InMessage {
                    tool_calls: Some(calls),
                    ..
                }) => calls.push(call),
                _ => messages.push(InMessage {
                    role: "assistant".into(),
                    content: None,
                    tool_calls: Some(vec![call]),
                    tool_call_id: None,
                }),
            },
            InputItem::FunctionCallOutput { call_id, output } => messages.push(InMessage {
                role: "tool".into(),
                content: output,
                tool_calls: None,
                tool_call_id: call_id,
            }),
            InputItem::Other(kind) => {
                return Err(unsupported(
                    "input",
                    format!("input items of type '{kind}' are not supported; send messages, function calls and their outputs"),
                ))
            }
        }
    }
    Ok(messages)
}

fn text_message(role: &str, text: String) -> InMessage {
    InMessage {
        role: role.to_owned(),
        content: Some(Content::Text(text)),
        tool_calls: None,
        tool_call_id: None,
    }
}

/// A message item's role as chat's: a developer message is a system one.
fn chat_role(role: Option<&str>) -> Result<&str, ApiError> {
    match role {
        Some("developer") => Ok("system"),
        Some(role @ ("system" | "user" | "assistant")) => Ok(role),
        other => Err(invalid(
            "input",
            format!("a message's role must be user, assistant, system or developer, got {other:?}"),
        )),
    }
}

/// A message item's text: a string, or its text parts joined.
fn message_text(content: Option<MessageContent>) -> Result<String, ApiError> {
    match content {
        Some(MessageContent::Text(text)) => Ok(text),
        Some(MessageContent::Parts(parts)) => parts.into_iter().map(part_text).collect(),
        None | Some(MessageContent::Other(_)) => Err(invalid(
            "input",
            "a message needs content: text or a list of text parts",
        )),
    }
}

fn part_text(part: MessagePart) -> Result<String, ApiError> {
    match (part.kind.as_deref(), part.text) {
        (Some("input_text" | "output_text" | "text"), Some(text)) => Ok(text),
        (kind, _) => Err(unsupported(
            "input",
            format!(
                "content parts of type {} are not supported; send text",
                kind.unwrap_or("(none)")
            ),
        )),
    }
}

/// `text.format` as chat's `response_format`.
fn chat_response_format(format: &TextFormat) -> Result<ResponseFormat, ApiError> {
    match format {
        TextFormat::JsonSchema {
            schema: Some(schema),
        } => Ok(ResponseFormat::JsonSchema(schema.clone())),
        TextFormat::JsonSchema { schema: None } => Err(invalid(
            "text.format",
            "text.format json_schema needs schema",
        )),
        TextFormat::Chat(format) => Ok(ResponseFormat::Given(format.clone())),
    }
}

/// A flat function tool (`{"type": "function", "name": ...}`) as chat's.
fn chat_tool(tool: &Repeated<ToolType>) -> Result<ToolSpec, ApiError> {
    match tool.read.kind.as_deref() {
        Some("function") => FunctionSpec::deserialize(&tool.given)
            .map(ToolSpec::function)
            .map_err(|err| ApiError::invalid_parameter(err.to_string())),
        other => Err(unsupported(
            "tools",
            format!(
                "tools of type {} are not supported; send function tools",
                other.unwrap_or("(none)")
            ),
        )),
    }
}

/// Chat's field names as the Responses API calls them.
fn responses_error(err: ApiError) -> ApiError {
    let mut err = openai_error(err, "messages").0;
    err.param = err.param.map(|param| {
        match param.as_str() {
            "messages" => "input",
            "max_tokens" => "max_output_tokens",
            "response_format" => "text.format",
            other => other,
        }
        .to_owned()
    });
    ApiError(err)
}

fn short_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

#[tracing::instrument(skip_all)]
pub async fn responses(
    State(playground): State<Playground>,
    JsonBody(mut body): JsonBody<ResponsesRequest>,
) -> Result<Response, ApiError> {
    let chat = body.take_chat().map_err(responses_error)?;
    let messages = chat_messages(&chat.messages).map_err(responses_error)?;
    if chat.common.n.is_some_and(|n| n != 1) {
        return Err(invalid("n", "a response has one answer"));
    }
    let (mut handles, envelope) = chat
        .common
        .start(&playground, Flavor::Chat, Prompt::Chat(messages))
        .await
        .map_err(responses_error)?;
    let mut handle = handles
        .pop()
        .ok_or_else(|| ApiError(AppError::internal("no_run", "no run was started")))?;
    let builder = Builder {
        response: body.skeleton(&chat.common, &envelope, &short_id("resp")),
        envelope,
    };
    if !chat.common.streamed() {
        let run = handle
            .collect()
            .await
            .map_err(|e| responses_error(e.into()))?;
        let mut response = builder.finished(&run.summary);
        response.run_id = Some(run.run_id);
        return Ok(Json(response).into_response());
    }
    // The first event decides the status: a prompt too long for the context is still a 400.
    let first = handle
        .first()
        .await
        .map_err(|e| responses_error(e.into()))?;
    Ok(Sse::new(events(handle, first, builder))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// Writes the response from the run.
struct Builder {
    response: ResponseObject,
    envelope: Envelope,
}

impl Builder {
    /// The whole response of a finished run.
    fn finished(&self, summary: &RunSummary) -> ResponseObject {
        let mut response = self.response.clone();
        let cut = matches!(
            summary.stop_reason,
            StopReason::MaxTokens | StopReason::ContextFull
        );
        // The items end as the response does: a cut one is incomplete.
        let status = if cut { "incomplete" } else { "completed" };
        let (content, calls) = self.envelope.read(&summary.text);
        response.output = if calls.is_empty() {
            vec![message_item(
                &short_id("msg"),
                status,
                Some(content.unwrap_or_default()),
            )]
        } else {
            calls
                .into_iter()
                .map(|call| OutputItem::FunctionCall {
                    id: short_id("fc"),
                    call_id: call.id,
                    name: call.function.name,
                    arguments: call.function.arguments,
                    status: status.into(),
                })
                .collect()
        };
        response.status = status.into();
        response.incomplete_details = cut.then(|| IncompleteDetails {
            reason: "max_output_tokens".into(),
        });
        response.usage = Some(ResponseUsage::counted(
            summary.prompt_tokens as u64,
            summary.tokens_generated as u64,
            summary.cached_prompt_tokens as u64,
        ));
        response.timings = Some(timings(summary));
        response
    }
}

/// A message item; `text` is `None` while it is in progress (its text then comes as deltas).
fn message_item(id: &str, status: &str, text: Option<String>) -> OutputItem {
    OutputItem::Message {
        id: id.to_owned(),
        status: status.into(),
        role: "assistant".into(),
        content: text.map(OutputText::new).into_iter().collect(),
    }
}

/// A streamed response's progress.
struct StreamState {
    builder: Builder,
    sequence: u64,
    /// The message item streaming its text, once the first text came (none under tools,
    /// whose answer is read whole at the end).
    message_id: Option<String>,
    text: String,
}

impl StreamState {
    fn event(&mut self, event: ResponseEvent) -> Event {
        let name = event.kind();
        let numbered = ResponseStreamEvent {
            event,
            sequence_number: self.sequence,
        };
        self.sequence += 1;
        match Event::default().event(name).json_data(&numbered) {
            Ok(event) => event,
            // Plain structs of strings and numbers always serialize; should one not, the client
            // still gets an error event rather than a silent gap.
            Err(err) => self.event(ResponseEvent::Error {
                code: "serialization".into(),
                message: err.to_string(),
                param: None,
            }),
        }
    }

    /// The events opening the message item and its text part.
    fn open_message(&mut self) -> Vec<Event> {
        let id = short_id("msg");
        self.message_id = Some(id.clone());
        let item = message_item(&id, "in_progress", None);
        vec![
            self.event(ResponseEvent::OutputItemAdded {
                output_index: 0,
                item,
            }),
            self.event(ResponseEvent::ContentPartAdded {
                item_id: id,
                output_index: 0,
                content_index: 0,
                part: OutputText::new(String::new()),
            }),
        ]
    }

    fn on(&mut self, event: Result<GenerationEvent, AppError>) -> Vec<Event> {
        let failure = match event {
            Ok(GenerationEvent::Started { .. } | GenerationEvent::Step(_)) => return Vec::new(),
            Ok(GenerationEvent::Text { .. }) if self.builder.envelope.tools => return Vec::new(),
            Ok(GenerationEvent::Text { text, .. }) => {
                let mut events = Vec::new();
                if self.message_id.is_none() {
                    events = self.open_message();
                }
                self.text.push_str(&text);
                let item_id = self.message_id.clone().unwrap_or_default();
                events.push(self.event(ResponseEvent::OutputTextDelta {
                    item_id,
                    output_index: 0,
                    content_index: 0,
                    delta: text,
                    logprobs: Vec::new(),
                }));
                return events;
            }
            Ok(GenerationEvent::Finished(summary)) => return self.finish(&summary),
            Ok(GenerationEvent::Failed(err)) => AppError::from(err),
            Err(err) => err,
        };
        let mut response = self.builder.response.clone();
        response.status = "failed".into();
        response.error = Some(ResponseError {
            code: failure.code.to_owned(),
            message: failure.message.clone(),
        });
        vec![self.event(ResponseEvent::Failed { response })]
    }

    /// The items' closing events (under tools, the whole items), then the whole response.
    fn finish(&mut self, summary: &RunSummary) -> Vec<Event> {
        let mut response = self.builder.finished(summary);
        let mut events = Vec::new();
        if !self.builder.envelope.tools {
            if self.message_id.is_none() {
                events.extend(self.open_message());
            }
            events.extend(self.close_message(&mut response));
        } else {
            for (index, item) in (0u32..).zip(response.output.clone()) {
                match item {
                    OutputItem::FunctionCall { .. } => events.extend(self.call_events(index, item)),
                    // A reply under tools, read whole: one delta.
                    OutputItem::Message { content, .. } => {
                        events.extend(self.open_message());
                        self.text = content.into_iter().map(|c| c.text).collect();
                        let item_id = self.message_id.clone().unwrap_or_default();
                        let delta = self.text.clone();
                        events.push(self.event(ResponseEvent::OutputTextDelta {
                            item_id,
                            output_index: 0,
                            content_index: 0,
                            delta,
                            logprobs: Vec::new(),
                        }));
                        events.extend(self.close_message(&mut response));
                    }
                }
            }
        }
        let event = if response.status == "incomplete" {
            ResponseEvent::Incomplete { response }
        } else {
            ResponseEvent::Completed { response }
        };
        events.push(self.event(event));
        events
    }

    /// A whole function call's events: added, its arguments, done.
    fn call_events(&mut self, index: u32, item: OutputItem) -> Vec<Event> {
        let OutputItem::FunctionCall {
            id,
            call_id,
            name,
            arguments,
            ..
        } = item.clone()
        else {
            return Vec::new();
        };
        let added = OutputItem::FunctionCall {
            id: id.clone(),
            call_id,
            name,
            arguments: String::new(),
            status: "in_progress".into(),
        };
        vec![
            self.event(ResponseEvent::OutputItemAdded {
                output_index: index,
                item: added,
            }),
            self.event(ResponseEvent::FunctionCallArgumentsDelta {
                item_id: id.clone(),
                output_index: index,
                delta: arguments.clone(),
            }),
            self.event(ResponseEvent::FunctionCallArgumentsDone {
                item_id: id,
                output_index: index,
                arguments,
            }),
            self.event(ResponseEvent::OutputItemDone {
                output_index: index,
                item,
            }),
        ]
    }

    /// The streamed message's closing events; the response's item takes the streamed id.
    fn close_message(&mut self, response: &mut ResponseObject) -> Vec<Event> {
        let id = self.message_id.clone().unwrap_or_default();
        let text = std::mem::take(&mut self.text);
        let item = message_item(&id, &response.status, Some(text.clone()));
        response.output = vec![item.clone()];
        vec![
            self.event(ResponseEvent::OutputTextDone {
                item_id: id.clone(),
                output_index: 0,
                content_index: 0,
                text: text.clone(),
                logprobs: Vec::new(),
            }),
            self.event(ResponseEvent::ContentPartDone {
                item_id: id,
                output_index: 0,
                content_index: 0,
                part: OutputText::new(text),
            }),
            self.event(ResponseEvent::OutputItemDone {
                output_index: 0,
                item,
            }),
        ]
    }
}

fn events(
    handle: RunHandle,
    first: GenerationEvent,
    builder: Builder,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let mut state = StreamState {
        builder,
        sequence: 0,
        message_id: None,
        text: String::new(),
    };
    let opening = vec![
        state.event(ResponseEvent::Created {
            response: state.builder.response.clone(),
        }),
        state.event(ResponseEvent::InProgress {
            response: state.builder.response.clone(),
        }),
    ];
    let rest = handle.events_from(first).scan(state, |state, event| {
        std::future::ready(Some(state.on(event)))
    });
    stream::iter(opening.into_iter().map(Ok))
        .chain(rest.flat_map(|events| stream::iter(events.into_iter().map(Ok))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::parse_json;

    fn request(body: &str) -> ResponsesRequest {
        parse_json(body.as_bytes()).unwrap()
    }

    fn translate(body: &str) -> Result<ChatRequest, ApiError> {
        request(body).take_chat().map_err(responses_error)
    }

    /// The refusal's code, field and message.
    fn refusal(body: &str) -> (&'static str, Option<String>, String) {
        let err = parse_json::<ResponsesRequest>(body.as_bytes())
            .and_then(|mut request| request.take_chat())
            .map_err(responses_error)
            .unwrap_err()
            .0;
        (err.code, err.param, err.message)
    }

    #[test]
    fn input_items_become_the_conversation_and_calls_made_together_one_message() {
        let chat = translate(
            r#"{"instructions": "Be brief.", "input": [
                {"role": "developer", "content": "Use metric units."},
                {"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": "Weather in "}, {"type": "input_text", "text": "Oslo?"}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"},
                {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "4 C"}
            ]}"#,
        )
        .unwrap();
        let messages = chat_messages(&chat.messages).unwrap();
        let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "system", "user", "assistant", "user"]);
        assert_eq!(messages[2].content, "Weather in Oslo?");
        assert_eq!(
            messages[3].content,
            r#"{"tool_calls":[{"name":"get_weather","arguments":{"city":"Oslo"}},{"name":"get_time","arguments":{}}]}"#
        );
        assert_eq!(
            messages[4].content,
            r#"{"tool_response":{"name":"get_weather","content":"4 C"}}"#
        );
    }

    #[test]
    fn flat_tools_a_named_choice_and_text_format_become_chats() {
        let chat = translate(
            r#"{"input": "Weather in Oslo?", "max_output_tokens": 9, "max_tokens": 5,
                "tools": [{"type": "function", "name": "get_weather",
                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
                "tool_choice": {"type": "function", "name": "get_weather"},
                "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "string"}}}}"#,
        )
        .unwrap();
        assert_eq!(chat.common.asked_max_tokens(), Some(9));
        assert!(chat.common.tools.plan().unwrap().is_some());
        assert!(matches!(
            chat.common.output.constraint().unwrap(),
            Some(super::super::output_fields::Constraint::Schema(
                _,
                "response_format"
            ))
        ));
        // A chat-style choice passes as it is.
        let chat = translate(
            r#"{"input": "Hi", "tools": [{"type": "function", "name": "f"}],
                "tool_choice": {"type": "function", "function": {"name": "f"}}}"#,
        )
        .unwrap();
        assert!(chat.common.tools.plan().unwrap().is_some());
    }

    #[test]
    fn the_response_repeats_the_settings_as_given() {
        let mut request = request(
            r#"{"input": "Hi", "temperature": 0.5, "metadata": {"k": "v"},
                "tools": [{"type": "function", "name": "f", "strict": true}]}"#,
        );
        let chat = request.take_chat().unwrap();
        let envelope = Envelope::new(Flavor::Chat, "m".into(), false, false, true);
        let response = request.skeleton(&chat.common, &envelope, "resp_1");
        assert_eq!(response.temperature, Some(0.5));
        assert_eq!(response.tools[0].get("strict"), Some(&Value::Bool(true)));
        assert_eq!(response.tool_choice, ResponseObject::default_tool_choice());
        assert_eq!(response.text, ResponseObject::default_text());
        assert_eq!(response.metadata.get("k"), Some(&Value::from("v")));
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        let unsupported = "unsupported_parameter";
        let invalid = "invalid_parameter";
        let cases = [
            (r#"{}"#, invalid, "input"),
            (
                r#"{"input": "Hi", "previous_response_id": "resp_1"}"#,
                unsupported,
                "previous_response_id",
            ),
            (
                r#"{"input": "Hi", "include": ["x"]}"#,
                unsupported,
                "include",
            ),
            (
                r#"{"input": [{"role": "robot", "content": "Hi"}]}"#,
                invalid,
                "input",
            ),
            (r#"{"input": [{"role": "user"}]}"#, invalid, "input"),
            (
                r#"{"input": [{"role": "user", "content": {"text": "Hi"}}]}"#,
                invalid,
                "input",
            ),
            (
                r#"{"input": [{"role": "user", "content": [{"type": "input_image"}]}]}"#,
                unsupported,
                "input",
            ),
            (
                r#"{"input": [{"type": "input_image", "image_url": "x"}]}"#,
                unsupported,
                "input",
            ),
            (
                r#"{"input": "Hi", "tools": [{"type": "web_search"}]}"#,
                unsupported,
                "tools",
            ),
            (
                r#"{"input": "Hi", "text": {"format": {"type": "json_schema", "name": "x"}}}"#,
                invalid,
                "text.format",
            ),
        ];
        for (body, code, param) in cases {
            let (got_code, got_param, message) = refusal(body);
            assert_eq!(
                (got_code, got_param.as_deref()),
                (code, Some(param)),
                "{body}: {message}"
            );
        }
        let (_, _, message) = refusal(r#"{"input": [{"role": "robot", "content": "Hi"}]}"#);
        assert!(message.ends_with(r#"got Some("robot")"#), "{message}");
        // What asks for nothing passes.
        assert!(translate(
            r#"{"input": "Hi", "background": false, "include": [], "conversation": null}"#
        )
        .is_ok());
        // A call without its name is malformed, and named by its place.
        let (code, param, message) =
            refusal(r#"{"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}"#);
        assert_eq!((code, param.as_deref()), (invalid, Some("input.[0]")));
        assert!(
            message.contains("a function_call item needs name"),
            "{message}"
        );
    }
}
