//! OpenAI's Responses API (`/v1/responses`), plain and streamed. A request is read into a chat
//! completion request (its input items become messages, `text.format` the response format, its
//! flat function tools chat's tools) and runs the chat path; the answer is written back as a
//! response's output items and, streamed, as the typed events OpenAI's clients read.

use std::convert::Infallible;

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
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::answer::{timings, Envelope, Flavor};
use super::refusals::{invalid, unsupported};
use super::{chat_messages, openai_error, ChatRequest};
use crate::error::ApiError;
use crate::extract::JsonBody;

/// The fields read here; the rest (sampling, `stream`, `mode`, ...) are chat's.
#[derive(Debug, Deserialize)]
pub struct ResponsesRequest {
    #[serde(default)]
    input: Option<Input>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    max_output_tokens: Option<u32>,
    /// `{"format": {"type": "text" | "json_object" | "json_schema", ...}}`.
    #[serde(default)]
    text: Option<Value>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<Value>),
}

/// Fields that ask for what is not kept or done here; refused by name.
const REFUSED: [(&str, &str); 4] = [
    (
        "previous_response_id",
        "responses are not stored for later turns; send the whole conversation in input",
    ),
    (
        "conversation",
        "conversations are not stored here; send the whole conversation in input",
    ),
    ("background", "background responses are not supported"),
    ("include", "no extra output can be included yet"),
];

impl ResponsesRequest {
    /// The equivalent chat completion request.
    fn chat(&self) -> Result<ChatRequest, ApiError> {
        for (field, why) in REFUSED {
            let asks = match self.rest.get(field) {
                None | Some(Value::Null) | Some(Value::Bool(false)) => false,
                Some(Value::Array(items)) => !items.is_empty(),
                Some(_) => true,
            };
            if asks {
                return Err(unsupported(field, format!("{field}: {why}")));
            }
        }
        let mut body = self.rest.clone();
        body.insert("messages".into(), Value::Array(self.messages()?));
        if let Some(max) = self.max_output_tokens {
            body.insert("max_tokens".into(), json!(max));
        }
        if let Some(format) = self.text.as_ref().and_then(|t| t.get("format")) {
            body.insert("response_format".into(), response_format(format)?);
        }
        if let Some(tools) = &self.tools {
            let tools = tools.iter().map(chat_tool).collect::<Result<_, _>>()?;
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(choice) = &self.tool_choice {
            body.insert("tool_choice".into(), chat_tool_choice(choice));
        }
        serde_json::from_value(Value::Object(body))
            .map_err(|err| ApiError::invalid_parameter(err.to_string()))
    }

    /// The input as chat messages: instructions first, then its items (messages, function
    /// calls and their outputs).
    fn messages(&self) -> Result<Vec<Value>, ApiError> {
        let mut messages = Vec::new();
        if let Some(instructions) = &self.instructions {
            messages.push(json!({"role": "system", "content": instructions}));
        }
        let items = match &self.input {
            None => {
                return Err(invalid(
                    "input",
                    "input is required: text or a list of items",
                ))
            }
            Some(Input::Text(text)) => {
                messages.push(json!({"role": "user", "content": text}));
                return Ok(messages);
            }
            Some(Input::Items(items)) => items,
        };
        for item in items {
            let kind = item.get("type").and_then(Value::as_str);
            match kind {
                None | Some("message") => {
                    let role = match item.get("role").and_then(Value::as_str) {
                        Some("developer") => "system",
                        Some(role @ ("system" | "user" | "assistant")) => role,
                        other => {
                            return Err(invalid(
                                "input",
                                format!("a message's role must be user, assistant, system or developer, got {other:?}"),
                            ))
                        }
                    };
                    messages.push(json!({"role": role, "content": message_text(item)?}));
                }
                Some("function_call") => {
                    let call = json!({
                        "id": item.get("call_id"),
                        "type": "function",
                        "function": {"name": item.get("name"), "arguments": item.get("arguments")},
                    });
                    // Calls made together are one assistant message.
                    match messages.last_mut() {
                        Some(last) if last.get("tool_calls").is_some() => {
                            last["tool_calls"].as_array_mut().into_iter().for_each(|calls| calls.push(call.clone()));
                        }
                        _ => messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
                    }
                }
                Some("function_call_output") => messages.push(json!({
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": item.get("output"),
                })),
                Some(other) => {
                    return Err(unsupported(
                        "input",
                        format!("input items of type '{other}' are not supported; send messages, function calls and their outputs"),
                    ))
                }
            }
        }
        Ok(messages)
    }

    /// The response as it starts: no output yet, and the request's settings.
    fn skeleton(&self, envelope: &Envelope, id: &str) -> ResponseObject {
        let get_f32 = |field: &str| {
            self.rest
                .get(field)
                .and_then(Value::as_f64)
                .map(|v| v as f32)
        };
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
            temperature: get_f32("temperature"),
            top_p: get_f32("top_p"),
            parallel_tool_calls: self
                .rest
                .get("parallel_tool_calls")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            tool_choice: self.tool_choice.clone().unwrap_or(json!("auto")),
            tools: self.tools.clone().unwrap_or_default(),
            text: self
                .text
                .clone()
                .unwrap_or(json!({"format": {"type": "text"}})),
            metadata: self.metadata.clone().unwrap_or_default(),
            timings: None,
            run_id: None,
        }
    }
}

/// A message item's text: a string, or its text parts joined.
fn message_text(item: &Value) -> Result<String, ApiError> {
    match item.get("content") {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|part| {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("input_text" | "output_text" | "text"), Some(text)) => {
                        Ok(text.to_owned())
                    }
                    (kind, _) => Err(unsupported(
                        "input",
                        format!(
                            "content parts of type {} are not supported; send text",
                            kind.unwrap_or("(none)")
                        ),
                    )),
                }
            })
            .collect(),
        _ => Err(invalid(
            "input",
            "a message needs content: text or a list of text parts",
        )),
    }
}

/// `text.format` as chat's `response_format`.
fn response_format(format: &Value) -> Result<Value, ApiError> {
    Ok(match format.get("type").and_then(Value::as_str) {
        Some("json_schema") => json!({"type": "json_schema", "json_schema": {
            "name": format.get("name"),
            "schema": format.get("schema").ok_or_else(|| invalid("text.format", "text.format json_schema needs schema"))?,
            "strict": format.get("strict"),
        }}),
        _ => format.clone(),
    })
}

/// A flat function tool (`{"type": "function", "name": ...}`) as chat's.
fn chat_tool(tool: &Value) -> Result<Value, ApiError> {
    match tool.get("type").and_then(Value::as_str) {
        Some("function") => Ok(json!({"type": "function", "function": {
            "name": tool.get("name"),
            "description": tool.get("description"),
            "parameters": tool.get("parameters"),
        }})),
        other => Err(unsupported(
            "tools",
            format!(
                "tools of type {} are not supported; send function tools",
                other.unwrap_or("(none)")
            ),
        )),
    }
}

/// `{"type": "function", "name": ...}` as chat's named choice; the rest as they are.
fn chat_tool_choice(choice: &Value) -> Value {
    match choice.get("name") {
        Some(name) => json!({"type": "function", "function": {"name": name}}),
        None => choice.clone(),
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
    JsonBody(body): JsonBody<ResponsesRequest>,
) -> Result<Response, ApiError> {
    let chat = body.chat().map_err(responses_error)?;
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
        response: body.skeleton(&envelope, &short_id("resp")),
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
        let (content, calls) = self.envelope.read(&summary.text);
        response.output = if calls.is_empty() {
            vec![message_item(
                &short_id("msg"),
                "completed",
                content.unwrap_or_default(),
            )]
        } else {
            calls
                .into_iter()
                .map(|call| OutputItem::FunctionCall {
                    id: short_id("fc"),
                    call_id: call.id,
                    name: call.function.name,
                    arguments: call.function.arguments,
                    status: "completed".into(),
                })
                .collect()
        };
        let cut = matches!(
            summary.stop_reason,
            StopReason::MaxTokens | StopReason::ContextFull
        );
        response.status = if cut { "incomplete" } else { "completed" }.into();
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

fn message_item(id: &str, status: &str, text: String) -> OutputItem {
    OutputItem::Message {
        id: id.to_owned(),
        status: status.into(),
        role: "assistant".into(),
        content: if status == "completed" {
            vec![OutputText::new(text)]
        } else {
            Vec::new()
        },
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
        let numbered = ResponseStreamEvent {
            event,
            sequence_number: self.sequence,
        };
        self.sequence += 1;
        match serde_json::to_value(&numbered) {
            Ok(value) => {
                let name = value["type"].as_str().unwrap_or_default().to_owned();
                Event::default().event(name).data(value.to_string())
            }
            // Plain structs of strings and numbers always serialize.
            Err(err) => Event::default().event("error").data(
                json!({"type": "error", "code": "serialization", "message": err.to_string()})
                    .to_string(),
            ),
        }
    }

    /// The events opening the message item and its text part.
    fn open_message(&mut self) -> Vec<Event> {
        let id = short_id("msg");
        self.message_id = Some(id.clone());
        let item = message_item(&id, "in_progress", String::new());
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
        let item = message_item(&id, "completed", text.clone());
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
