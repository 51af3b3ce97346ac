//! OpenAI's Responses API (`/v1/responses`): the response object, its output items, and the
//! typed events a streamed response is made of.

use serde::{Deserialize, Serialize};

use crate::usage::Timings;

/// `object` of a response.
pub const RESPONSE: &str = "response";

/// A response, whole or as the events of a stream carry it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub id: String,
    pub object: String,
    pub created_at: i64,
    /// `in_progress`, `completed`, `incomplete` or `failed`.
    pub status: String,
    pub model: String,
    pub output: Vec<OutputItem>,
    pub usage: Option<ResponseUsage>,
    pub error: Option<ResponseError>,
    pub incomplete_details: Option<IncompleteDetails>,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub parallel_tool_calls: bool,
    /// As the request gave them.
    pub tool_choice: serde_json::Value,
    pub tools: Vec<serde_json::Value>,
    pub text: serde_json::Value,
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// llama-server's figures, once the response is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
    /// Not OpenAI's: the run's id in this server's history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<i64>,
}

impl Response {
    /// `tool_choice` of a response whose request gave none.
    pub fn default_tool_choice() -> serde_json::Value {
        "auto".into()
    }

    /// `text` of a response whose request gave none: plain text.
    pub fn default_text() -> serde_json::Value {
        serde_json::json!({"format": {"type": "text"}})
    }
}

/// One item of a response's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    Message {
        id: String,
        status: String,
        role: String,
        content: Vec<OutputText>,
    },
    FunctionCall {
        id: String,
        call_id: String,
        name: String,
        /// JSON text.
        arguments: String,
        status: String,
    },
}

/// A message's text (`type: output_text`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputText {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: String,
    pub annotations: Vec<serde_json::Value>,
}

impl OutputText {
    pub fn new(text: String) -> Self {
        Self {
            kind: "output_text".into(),
            text,
            annotations: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ResponseUsage {
    pub input_tokens: u64,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens: u64,
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct InputTokensDetails {
    /// Prompt tokens reused from the prompt cache.
    pub cached_tokens: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OutputTokensDetails {
    pub reasoning_tokens: u64,
}

impl ResponseUsage {
    pub fn counted(input: u64, output: u64, cached: u64) -> Self {
        Self {
            input_tokens: input,
            input_tokens_details: InputTokensDetails {
                cached_tokens: cached,
            },
            output_tokens: output,
            output_tokens_details: OutputTokensDetails {
                reasoning_tokens: 0,
            },
            total_tokens: input + output,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseError {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncompleteDetails {
    /// `max_output_tokens`.
    pub reason: String,
}

/// One event of a streamed response, numbered in the order sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseStreamEvent {
    #[serde(flatten)]
    pub event: ResponseEvent,
    pub sequence_number: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ResponseEvent {
    #[serde(rename = "response.created")]
    Created { response: Response },
    #[serde(rename = "response.in_progress")]
    InProgress { response: Response },
    #[serde(rename = "response.output_item.added")]
    OutputItemAdded { output_index: u32, item: OutputItem },
    #[serde(rename = "response.content_part.added")]
    ContentPartAdded {
        item_id: String,
        output_index: u32,
        content_index: u32,
        part: OutputText,
    },
    #[serde(rename = "response.output_text.delta")]
    OutputTextDelta {
        item_id: String,
        output_index: u32,
        content_index: u32,
        delta: String,
        logprobs: Vec<serde_json::Value>,
    },
    #[serde(rename = "response.output_text.done")]
    OutputTextDone {
        item_id: String,
        output_index: u32,
        content_index: u32,
        text: String,
        logprobs: Vec<serde_json::Value>,
    },
    #[serde(rename = "response.content_part.done")]
    ContentPartDone {
        item_id: String,
        output_index: u32,
        content_index: u32,
        part: OutputText,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    FunctionCallArgumentsDelta {
        item_id: String,
        output_index: u32,
        delta: String,
    },
    #[serde(rename = "response.function_call_arguments.done")]
    FunctionCallArgumentsDone {
        item_id: String,
        output_index: u32,
        arguments: String,
    },
    #[serde(rename = "response.output_item.done")]
    OutputItemDone { output_index: u32, item: OutputItem },
    #[serde(rename = "response.completed")]
    Completed { response: Response },
    #[serde(rename = "response.incomplete")]
    Incomplete { response: Response },
    #[serde(rename = "response.failed")]
    Failed { response: Response },
    /// The stream could not go on (OpenAI's `error` event).
    #[serde(rename = "error")]
    Error {
        code: String,
        message: String,
        param: Option<String>,
    },
}

impl ResponseEvent {
    /// The event's `type`, which a stream also names the event by.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Created { .. } => "response.created",
            Self::InProgress { .. } => "response.in_progress",
            Self::OutputItemAdded { .. } => "response.output_item.added",
            Self::ContentPartAdded { .. } => "response.content_part.added",
            Self::OutputTextDelta { .. } => "response.output_text.delta",
            Self::OutputTextDone { .. } => "response.output_text.done",
            Self::ContentPartDone { .. } => "response.content_part.done",
            Self::FunctionCallArgumentsDelta { .. } => "response.function_call_arguments.delta",
            Self::FunctionCallArgumentsDone { .. } => "response.function_call_arguments.done",
            Self::OutputItemDone { .. } => "response.output_item.done",
            Self::Completed { .. } => "response.completed",
            Self::Incomplete { .. } => "response.incomplete",
            Self::Failed { .. } => "response.failed",
            Self::Error { .. } => "error",
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn events_carry_their_type_and_number_beside_their_fields() {
        let event = ResponseStreamEvent {
            event: ResponseEvent::OutputTextDelta {
                item_id: "msg_1".into(),
                output_index: 0,
                content_index: 0,
                delta: "Hi".into(),
                logprobs: Vec::new(),
            },
            sequence_number: 4,
        };
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
                   "content_index": 0, "delta": "Hi", "logprobs": [], "sequence_number": 4})
        );
        let call = OutputItem::FunctionCall {
            id: "fc_1".into(),
            call_id: "call_1".into(),
            name: "f".into(),
            arguments: "{}".into(),
            status: "completed".into(),
        };
        assert_eq!(
            serde_json::to_value(&call).unwrap()["type"],
            "function_call"
        );
    }

    #[test]
    fn every_event_is_named_by_its_type() {
        let response = Response {
            id: "resp_1".into(),
            object: RESPONSE.into(),
            created_at: 0,
            status: "completed".into(),
            model: "m".into(),
            output: Vec::new(),
            usage: None,
            error: None,
            incomplete_details: None,
            instructions: None,
            max_output_tokens: None,
            temperature: None,
            top_p: None,
            parallel_tool_calls: false,
            tool_choice: Response::default_tool_choice(),
            tools: Vec::new(),
            text: Response::default_text(),
            metadata: serde_json::Map::new(),
            timings: None,
            run_id: None,
        };
        let item = OutputItem::Message {
            id: "msg_1".into(),
            status: "completed".into(),
            role: "assistant".into(),
            content: vec![OutputText::new("Hi".into())],
        };
        let part = OutputText::new("Hi".into());
        let events = [
            ResponseEvent::Created {
                response: response.clone(),
            },
            ResponseEvent::InProgress {
                response: response.clone(),
            },
            ResponseEvent::OutputItemAdded {
                output_index: 0,
                item: item.clone(),
            },
            ResponseEvent::ContentPartAdded {
                item_id: "msg_1".into(),
                output_index: 0,
                content_index: 0,
                part: part.clone(),
            },
            ResponseEvent::OutputTextDelta {
                item_id: "msg_1".into(),
                output_index: 0,
                content_index: 0,
                delta: "Hi".into(),
                logprobs: Vec::new(),
            },
            ResponseEvent::OutputTextDone {
                item_id: "msg_1".into(),
                output_index: 0,
                content_index: 0,
                text: "Hi".into(),
                logprobs: Vec::new(),
            },
            ResponseEvent::ContentPartDone {
                item_id: "msg_1".into(),
                output_index: 0,
                content_index: 0,
                part,
            },
            ResponseEvent::FunctionCallArgumentsDelta {
                item_id: "fc_1".into(),
                output_index: 0,
                delta: "{}".into(),
            },
            ResponseEvent::FunctionCallArgumentsDone {
                item_id: "fc_1".into(),
                output_index: 0,
                arguments: "{}".into(),
            },
            ResponseEvent::OutputItemDone {
                output_index: 0,
                item,
            },
            ResponseEvent::Completed {
                response: response.clone(),
            },
            ResponseEvent::Incomplete {
                response: response.clone(),
            },
            ResponseEvent::Failed { response },
            ResponseEvent::Error {
                code: "serialization".into(),
                message: "no".into(),
                param: None,
            },
        ];
        for event in events {
            assert_eq!(serde_json::to_value(&event).unwrap()["type"], event.kind());
        }
    }
}
