//! A response written from its run: whole, or as the typed events of a stream.

use std::convert::Infallible;

use axum::response::sse::Event;
use engine::{GenerationEvent, RunSummary, StopReason};
use futures_util::stream::{self, Stream, StreamExt};
use openai_wire::{
    IncompleteDetails, OutputItem, OutputText, Response as ResponseObject, ResponseError,
    ResponseEvent, ResponseStreamEvent, ResponseUsage,
};
use playground::{AppError, RunHandle};

use super::short_id;
use crate::openai::answer::{timings, Envelope};

/// Writes the response from the run.
pub(super) struct Builder {
    pub(super) response: ResponseObject,
    pub(super) envelope: Envelope,
}

impl Builder {
    /// The whole response of a finished run.
    pub(super) fn finished(&self, summary: &RunSummary) -> ResponseObject {
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

pub(super) fn events(
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
