//! OpenAI's Responses API (`/v1/responses`), plain and streamed. A request is read into a chat
//! completion request (its input items become messages, `text.format` the response format, its
//! flat function tools chat's tools) and runs the chat path; the answer is written back as a
//! response's output items and, streamed, as the typed events OpenAI's clients read.

use axum::extract::State;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::Prompt;
use playground::{AppError, Playground};

use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::openai::answer::Flavor;
use crate::openai::refusals::invalid;
use crate::openai::{chat_messages, openai_error};

mod output;
mod request;

use output::{events, Builder};
use request::ResponsesRequest;

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
