//! What an OpenAI-compatible request answers: the envelope every chunk and answer shares, whole
//! answers with their usage and llama-server's timings, and stream chunks.

use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::{RunSummary, StopReason};
use openai_wire::{
    ChatChoice, ChatChunkChoice, Completion, Delta, Message, TextChoice, TextLogprobs, Timings,
    ToolCall, ToolCallDelta, Usage, CHAT_COMPLETION, CHAT_COMPLETION_CHUNK, TEXT_COMPLETION,
};
use playground::{AppError, Collected};
use serde::Serialize;

use super::{logprobs, tools};
use crate::error::ApiError;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Flavor {
    Chat,
    Completion,
}

/// A chunk's tokens' log-probabilities and where its text starts in the answer (characters).
pub(super) type ChunkLogprobs<'t> = Option<(&'t [engine::TokenLogprobs], usize)>;

/// An echoed prompt: its text and, when asked for, its tokens' log-probabilities.
pub(super) struct Echoed {
    pub(super) text: String,
    pub(super) logprobs: Option<TextLogprobs>,
    /// The prompt's tokens.
    pub(super) tokens: usize,
}

/// What every chunk and answer of one request repeats.
pub(super) struct Envelope {
    pub(super) flavor: Flavor,
    pub(super) id: String,
    pub(super) created: i64,
    pub(super) model: String,
    pub(super) include_usage: bool,
    /// Whether choices carry log-probabilities.
    pub(super) logprobs: bool,
    /// Whether answers are read as tool calls or a reply (see [`tools`]).
    pub(super) tools: bool,
    /// Text completions: the prompt each choice starts with.
    pub(super) echo: Option<Echoed>,
}

impl Envelope {
    pub(super) fn new(
        flavor: Flavor,
        model: String,
        include_usage: bool,
        logprobs: bool,
        tools: bool,
    ) -> Self {
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
            logprobs,
            tools,
            echo: None,
        }
    }

    /// A text completion's choice: the echoed prompt, if any, then the generated text, with
    /// their log-probabilities when asked for.
    fn text_choice(
        &self,
        index: u32,
        text: &str,
        tokens: &[engine::TokenLogprobs],
        finish_reason: Option<String>,
    ) -> TextChoice {
        let (prefix, mut lists) = match &self.echo {
            Some(echo) => (
                echo.text.as_str(),
                echo.logprobs.clone().unwrap_or_default(),
            ),
            None => ("", TextLogprobs::default()),
        };
        logprobs::append(&mut lists, logprobs::text(tokens, prefix.chars().count()));
        TextChoice {
            index,
            text: format!("{prefix}{text}"),
            logprobs: self.logprobs.then_some(lists),
            finish_reason,
        }
    }

    /// A text completion's first chunk under echo: the prompt.
    pub(super) fn echo_chunk(&self, index: u32) -> Option<Event> {
        self.echo.as_ref()?;
        let choice = self.text_choice(index, "", &[], None);
        Some(data(&self.completion(TEXT_COMPLETION, vec![choice], None)))
    }

    /// The answer of an echo with no tokens to generate: each choice is the prompt.
    pub(super) fn echo_only(&self, choices: u32, streamed: bool) -> Response {
        let prompt_tokens = self.echo.as_ref().map_or(0, |echo| echo.tokens);
        let usage = Usage::counted(prompt_tokens, 0, 0);
        let answer = |index| self.text_choice(index, "", &[], Some("length".to_owned()));
        if !streamed {
            let mut whole =
                self.completion(TEXT_COMPLETION, (0..choices).map(answer).collect(), None);
            whole.usage = Some(Some(usage));
            return Json(whole).into_response();
        }
        let mut events: Vec<Event> = (0..choices)
            .map(|index| data(&self.completion(TEXT_COMPLETION, vec![answer(index)], None)))
            .collect();
        if self.include_usage {
            let chunk: Completion<TextChoice> =
                self.completion(TEXT_COMPLETION, Vec::new(), Some(usage));
            events.push(data(&chunk));
        }
        events.push(Event::default().data("[DONE]"));
        Sse::new(futures_util::stream::iter(
            events.into_iter().map(Ok::<_, std::convert::Infallible>),
        ))
        .into_response()
    }

    /// A chat answer's content and tool calls: under tools, what the answer's JSON says.
    pub(super) fn read(&self, text: &str) -> (Option<String>, Vec<ToolCall>) {
        if self.tools {
            tools::read_answer(text)
        } else {
            (Some(text.to_owned()), Vec::new())
        }
    }

    /// The envelope around `choices`; `usage` as a chunk carries it (absent unless asked for).
    pub(super) fn completion<C>(
        &self,
        object: &str,
        choices: Vec<C>,
        usage: Option<Usage>,
    ) -> Completion<C> {
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
    pub(super) fn chunk(
        &self,
        index: u32,
        text: Option<&str>,
        first: bool,
        finish: Option<&str>,
        timings: Option<Timings>,
        logprobs: ChunkLogprobs,
    ) -> Event {
        let finish_reason = finish.map(str::to_owned);
        let logprobs = logprobs.filter(|_| self.logprobs);
        match self.flavor {
            Flavor::Chat => {
                let delta = Delta {
                    role: first.then(|| "assistant".to_owned()),
                    content: text.map(str::to_owned),
                    tool_calls: Vec::new(),
                };
                let choice = ChatChunkChoice {
                    index,
                    delta,
                    logprobs: logprobs.map(|(tokens, _)| logprobs::chat(tokens)),
                    finish_reason,
                };
                let mut chunk = self.completion(CHAT_COMPLETION_CHUNK, vec![choice], None);
                chunk.timings = timings;
                data(&chunk)
            }
            Flavor::Completion => {
                // Offsets count from the answer's start, the echoed prompt included.
                let choice = TextChoice {
                    index,
                    text: text.unwrap_or_default().to_owned(),
                    logprobs: logprobs.map(|(tokens, offset)| logprobs::text(tokens, offset)),
                    finish_reason,
                };
                let mut chunk = self.completion(TEXT_COMPLETION, vec![choice], None);
                chunk.timings = timings;
                data(&chunk)
            }
        }
    }

    /// A chat choice's tool calls, whole, in one chunk.
    pub(super) fn tool_calls_chunk(
        &self,
        index: u32,
        calls: Vec<ToolCall>,
        logprobs: ChunkLogprobs,
    ) -> Event {
        let delta = Delta {
            role: None,
            content: None,
            tool_calls: (0u32..)
                .zip(calls)
                .map(|(index, call)| ToolCallDelta { index, call })
                .collect(),
        };
        let choice = ChatChunkChoice {
            index,
            delta,
            logprobs: logprobs
                .filter(|_| self.logprobs)
                .map(|(tokens, _)| logprobs::chat(tokens)),
            finish_reason: None,
        };
        data(&self.completion(CHAT_COMPLETION_CHUNK, vec![choice], None))
    }

    /// A choice's last chunk: no text, the finish reason (`tool_calls` when it called some)
    /// and llama-server's timings.
    pub(super) fn last_chunk(&self, index: u32, summary: &RunSummary, called: bool) -> Event {
        let reason = answer_finish_reason(summary.stop_reason, called);
        self.chunk(
            index,
            None,
            false,
            Some(reason),
            Some(timings(summary)),
            None,
        )
    }

    /// OpenAI sends usage as one more chunk, with no choices, after the last one.
    pub(super) fn usage_chunk(&self, summaries: &[RunSummary]) -> Event {
        let object = match self.flavor {
            Flavor::Chat => CHAT_COMPLETION_CHUNK,
            Flavor::Completion => TEXT_COMPLETION,
        };
        let mut chunk: Completion<TextChoice> =
            self.completion(object, Vec::new(), Some(usage(summaries)));
        chunk.timings = summaries.first().map(timings);
        data(&chunk)
    }

    /// The whole answer.
    pub(super) fn answer(&self, runs: &[Collected]) -> Response {
        let summaries: Vec<RunSummary> = runs.iter().map(|r| r.summary.clone()).collect();
        let finish = |s: &RunSummary| Some(finish_reason(s.stop_reason).to_owned());
        let indexed = (0u32..).zip(&summaries);
        match self.flavor {
            Flavor::Chat => {
                let choices = indexed
                    .map(|(index, summary)| {
                        let (content, tool_calls) = self.read(&summary.text);
                        let finish_reason =
                            answer_finish_reason(summary.stop_reason, !tool_calls.is_empty());
                        ChatChoice {
                            index,
                            message: Message {
                                role: "assistant".into(),
                                content,
                                tool_calls,
                            },
                            logprobs: self.logprobs.then(|| logprobs::chat(&summary.logprobs)),
                            finish_reason: Some(finish_reason.to_owned()),
                        }
                    })
                    .collect();
                whole(
                    self.completion(CHAT_COMPLETION, choices, None),
                    runs,
                    &summaries,
                )
            }
            Flavor::Completion => {
                let choices = indexed
                    .map(|(index, summary)| {
                        self.text_choice(index, &summary.text, &summary.logprobs, finish(summary))
                    })
                    .collect();
                whole(
                    self.completion(TEXT_COMPLETION, choices, None),
                    runs,
                    &summaries,
                )
            }
        }
    }
}

/// A whole answer with its usage, and the first choice's timings and run id.
pub(super) fn whole<C: Serialize>(
    mut answer: Completion<C>,
    runs: &[Collected],
    summaries: &[RunSummary],
) -> Response {
    answer.usage = Some(Some(usage(summaries)));
    answer.timings = summaries.first().map(timings);
    answer.run_id = runs.first().map(|r| r.run_id);
    Json(answer).into_response()
}

/// `tool_calls` when the answer called tools, else why the run stopped; `length` for a call
/// cut short by the limit, as OpenAI says it.
fn answer_finish_reason(reason: StopReason, called: bool) -> &'static str {
    match finish_reason(reason) {
        "length" => "length",
        _ if called => "tool_calls",
        other => other,
    }
}

pub(super) fn finish_reason(reason: StopReason) -> &'static str {
    match reason {
        StopReason::MaxTokens | StopReason::ContextFull => "length",
        StopReason::EndOfGeneration | StopReason::StopString | StopReason::Cancelled => "stop",
    }
}

/// llama-server's `timings`, so that clients written for it show these figures unchanged.
pub(super) fn timings(summary: &RunSummary) -> Timings {
    let prompt_n = summary
        .prompt_tokens
        .saturating_sub(summary.cached_prompt_tokens);
    let prompt_ms = summary.ttft_ms;
    Timings {
        cache_n: Some(summary.cached_prompt_tokens),
        prompt_n: Some(prompt_n),
        prompt_ms: Some(prompt_ms),
        prompt_per_second: Some(engine::tokens_per_second(prompt_n, prompt_ms)),
        predicted_n: Some(summary.tokens_generated),
        predicted_ms: Some((summary.total_ms - summary.queue_ms - summary.ttft_ms).max(0.0)),
        predicted_per_second: Some(summary.decode_tokens_per_second),
        draft_n: Some(summary.draft_tokens.unwrap_or(0)),
        draft_n_accepted: Some(summary.accepted_draft_tokens.unwrap_or(0)),
    }
}

/// OpenAI's `usage` of the choices: the prompt once, with its tokens reused from the prompt
/// cache (the first choice's), and every choice's completion tokens.
pub(super) fn usage(summaries: &[RunSummary]) -> Usage {
    let first = summaries.first();
    Usage::counted(
        first.map_or(0, |s| s.prompt_tokens),
        summaries.iter().map(|s| s.tokens_generated).sum(),
        first.map_or(0, |s| s.cached_prompt_tokens),
    )
}

/// One server-sent event of JSON.
pub(super) fn data(value: &impl Serialize) -> Event {
    match serde_json::to_string(value) {
        Ok(json) => Event::default().data(json),
        // Plain structs of strings and numbers always serialize; should one not, the client
        // still gets an error event rather than a silent gap.
        Err(err) => data(&ApiError(AppError::internal("serialization", err.to_string())).body()),
    }
}
