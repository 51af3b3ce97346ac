//! Streamed answers: each choice's events as server-sent chunks, the choices interleaved as
//! they come, usage and `[DONE]` once all have finished.

use std::convert::Infallible;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use engine::{GenerationEvent, RunSummary, TokenLogprobs};
use futures_util::future;
use futures_util::stream::{self, Stream, StreamExt};
use playground::{RecordedEvent, RunHandle};

use super::answer::{data, Envelope, Flavor};
use crate::error::ApiError;

pub(super) async fn complete(
    mut handles: Vec<RunHandle>,
    envelope: Envelope,
    streamed: bool,
) -> Result<Response, ApiError> {
    if !streamed {
        let runs = future::try_join_all(handles.into_iter().map(RunHandle::collect)).await?;
        return Ok(envelope.answer(&runs));
    }
    // The first events decide the status: a prompt too long for the context is still a 400.
    let mut firsts = Vec::new();
    for handle in &mut handles {
        firsts.push(handle.first().await?);
    }
    let events = sse_events(handles, firsts, envelope);
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// A stream's progress, per choice and in all.
pub(super) struct StreamState {
    pub(super) envelope: Envelope,
    /// Per choice: whether its first chunk went out, and the characters it sent so far (text
    /// completions' log-probability offsets).
    pub(super) sent: Vec<(bool, usize)>,
    /// Per choice under tools: the answer so far and its log-probabilities, held back until
    /// it can be read as tool calls or a reply.
    pub(super) held: Vec<(String, Vec<TokenLogprobs>)>,
    /// The summaries of the choices that finished.
    pub(super) finished: Vec<Option<RunSummary>>,
    pub(super) done: bool,
}

impl StreamState {
    /// The chunks one event of choice `index` becomes.
    pub(super) fn chunks(&mut self, index: usize, event: RecordedEvent) -> Vec<Event> {
        let choice = index as u32;
        let chat = self.envelope.flavor == Flavor::Chat;
        let (sent_role, sent_chars) = &mut self.sent[index];
        let failure = match event {
            Ok(GenerationEvent::Started { .. }) => {
                // Chat streams open with the assistant's role, as OpenAI's do; text
                // completions with the echoed prompt, when asked for.
                if !chat {
                    let Some(echo) = self.envelope.echo_chunk(choice) else {
                        return Vec::new();
                    };
                    *sent_chars = self
                        .envelope
                        .echo
                        .as_ref()
                        .map_or(0, |e| e.text.chars().count());
                    return vec![echo];
                }
                *sent_role = true;
                return vec![self
                    .envelope
                    .chunk(choice, Some(""), true, None, None, None)];
            }
            Ok(GenerationEvent::Text { text, logprobs, .. }) if self.envelope.tools => {
                let (held_text, held_logprobs) = &mut self.held[index];
                held_text.push_str(&text);
                held_logprobs.extend(logprobs);
                return Vec::new();
            }
            Ok(GenerationEvent::Text { text, logprobs, .. }) => {
                let first = chat && !*sent_role;
                *sent_role = true;
                let offset = *sent_chars;
                *sent_chars += text.chars().count();
                let logprobs = Some((&logprobs[..], offset));
                return vec![self
                    .envelope
                    .chunk(choice, Some(&text), first, None, None, logprobs)];
            }
            Ok(GenerationEvent::Step(_)) => return Vec::new(),
            Ok(GenerationEvent::Finished(summary)) => {
                let mut events = Vec::new();
                let mut called = false;
                if self.envelope.tools {
                    let (text, logprobs) = std::mem::take(&mut self.held[index]);
                    let logprobs = Some((&logprobs[..], 0));
                    let (content, calls) = self.envelope.read(&text);
                    called = !calls.is_empty();
                    if called {
                        events.push(self.envelope.tool_calls_chunk(choice, calls, logprobs));
                    } else if let Some(content) = content.filter(|c| !c.is_empty()) {
                        let first = !*sent_role;
                        events.push(self.envelope.chunk(
                            choice,
                            Some(&content),
                            first,
                            None,
                            None,
                            logprobs,
                        ));
                    }
                }
                events.push(self.envelope.last_chunk(choice, &summary, called));
                self.finished[index] = Some(summary);
                if self.finished.iter().all(Option::is_some) {
                    self.done = true;
                    if self.envelope.include_usage {
                        let summaries: Vec<RunSummary> =
                            self.finished.iter().flatten().cloned().collect();
                        events.push(self.envelope.usage_chunk(&summaries));
                    }
                    events.push(Event::default().data("[DONE]"));
                }
                return events;
            }
            Ok(GenerationEvent::Failed(err)) => ApiError::from(err),
            Err(err) => ApiError(err),
        };
        // One choice failing ends the stream; the other runs are cancelled as it drops them.
        self.done = true;
        vec![data(&failure.body())]
    }
}

pub(super) fn sse_events(
    handles: Vec<RunHandle>,
    firsts: Vec<GenerationEvent>,
    envelope: Envelope,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let choices = handles.len();
    // Each choice's events in order, tagged with its index, the choices interleaved as they
    // come; a choice's stream ends after its terminal event.
    let merged = stream::select_all(handles.into_iter().zip(firsts).enumerate().map(
        |(index, (handle, first))| {
            handle
                .events_from(first)
                .map(move |event| (index, event))
                .boxed()
        },
    ));
    let state = StreamState {
        envelope,
        sent: vec![(false, 0); choices],
        held: vec![Default::default(); choices],
        finished: vec![None; choices],
        done: false,
    };
    stream::unfold((merged, state), |(mut merged, mut state)| async move {
        if state.done {
            return None;
        }
        let (index, event) = merged.next().await?;
        let events = state.chunks(index, event);
        Some((events, (merged, state)))
    })
    .flat_map(|events| stream::iter(events.into_iter().map(Ok)))
}
