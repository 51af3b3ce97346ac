//! Request extractors whose failures answer in the server's own error format.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use playground::{AppError, ErrorKind};

use crate::error::ApiError;

/// Largest body [`JsonBody`] reads on a route; the router sets it, and a route may raise it.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// How much of a body over the limit is still read and thrown away before answering 413. Many
/// clients send the whole body before they read the answer: closing on them mid-body makes them
/// see a broken pipe instead of the 413.
const DRAIN_LIMIT: usize = 16 << 20;

/// A JSON body. A content type other than `application/json` answers 415
/// `unsupported_media_type` (so that a web page cannot send one without a CORS preflight),
/// malformed JSON 400 `invalid_json`, a well-formed body of the wrong shape 400
/// `invalid_parameter`, and a body over the route's [`BodyLimit`] 413 `body_too_large`.
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        check_json_content_type(req.headers())?;
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .map_or(crate::BODY_LIMIT, |limit| limit.0);
        let bytes = read_limited(req.into_body(), limit).await?;
        parse_json(&bytes).map(JsonBody)
    }
}

fn check_json_content_type(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    if essence.eq_ignore_ascii_case("application/json") {
        return Ok(());
    }
    Err(ApiError(AppError::new(
        ErrorKind::UnsupportedMediaType,
        "unsupported_media_type",
        format!("the body must be sent as Content-Type: application/json, not {content_type:?}"),
    )))
}

/// The whole body if it is at most `limit` bytes. A longer one is read on, up to [`DRAIN_LIMIT`]
/// more bytes, so that the client gets to read the 413.
async fn read_limited(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let mut chunks = body.into_data_stream();
    let mut kept = Vec::new();
    let mut seen = 0usize;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|err| {
            if crate::listener::is_body_deadline(&err) {
                return ApiError(AppError::new(
                    ErrorKind::TimedOut,
                    "body_timeout",
                    format!("{err}; send it faster, or a smaller one"),
                ));
            }
            ApiError::bad_request("invalid_body", format!("could not read the body: {err}"))
        })?;
        seen = seen.saturating_add(chunk.len());
        if seen <= limit {
            kept.extend_from_slice(&chunk);
        } else if seen > limit.saturating_add(DRAIN_LIMIT) {
            break;
        }
    }
    if seen > limit {
        return Err(ApiError(AppError::new(
            ErrorKind::TooLarge,
            "body_too_large",
            format!("the request body is larger than the limit of {limit} bytes"),
        )));
    }
    Ok(Bytes::from(kept))
}

pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|err| {
        use serde_json::error::Category;
        match err.classify() {
            Category::Data => ApiError::invalid_parameter(err.to_string()),
            Category::Io | Category::Syntax | Category::Eof => {
                ApiError::bad_request("invalid_json", format!("malformed JSON: {err}"))
            }
        }
    })
}

/// A query string; a malformed one answers 400 `invalid_parameter`.
pub struct QueryParams<T>(pub T);

impl<S, T> FromRequestParts<S> for QueryParams<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| QueryParams(q.0))
            .map_err(|rejection| ApiError::invalid_parameter(rejection.body_text()))
    }
}

/// The id in a path such as `/api/runs/{id}`. A segment that is no id (not a number, not even
/// UTF-8) names no record, so it is answered like an unknown one.
pub struct RecordId(pub i64);

impl<S> FromRequestParts<S> for RecordId
where
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let text = axum::extract::Path::<String>::from_request_parts(parts, state)
            .await
            .map(|p| p.0)
            .unwrap_or_default();
        text.parse()
            .map(RecordId)
            .map_err(|_| ApiError::not_found(format!("no record has the id {text:?}")))
    }
}
