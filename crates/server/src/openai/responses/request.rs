//! A Responses request, read and checked, and turned into a chat completion request.

use std::fmt;

use openai_wire::{Response as ResponseObject, RESPONSE};
use serde::de::value::SeqAccessDeserializer;
use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::openai::answer::Envelope;
use crate::openai::output_fields::ResponseFormat;
use crate::openai::refusals::{invalid, unsupported};
use crate::openai::tools::{FunctionSpec, InFunctionCall, InToolCall, ToolChoice, ToolSpec};
use crate::openai::{ChatRequest, Common, Content, InMessage};

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
    pub(super) fn take_chat(&mut self) -> Result<ChatRequest, ApiError> {
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
    pub(super) fn skeleton(
        &self,
        common: &Common,
        envelope: &Envelope,
        id: &str,
    ) -> ResponseObject {
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

#[cfg(test)]
mod tests;
