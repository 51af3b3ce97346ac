//! Request extractors whose failures answer in the server's own error format.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Version};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use http_body::Frame;
use serde::de::DeserializeOwned;

use playground::{AppError, ErrorKind};

use crate::error::ApiError;

/// Largest request body, except for imports.
pub const BODY_LIMIT: usize = 1 << 20;
/// Largest import: an export of a long history is much bigger than any request; the most one
/// import document may hold.
pub const IMPORT_BODY_LIMIT: usize = store::MAX_IMPORT_BYTES as usize;

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
/// `invalid_parameter`, and a body over the route's [`BodyLimit`] 413 `body_too_large`: at once,
/// before any of it is read, when its `Content-Length` says so.
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = JsonRejection;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let (body, limit) = json_body_of(req).map_err(|rejection| *rejection)?;
        let bytes = read_limited(body, limit).await?;
        parse_json(&bytes)
            .map(JsonBody)
            .map_err(JsonRejection::from)
    }
}

/// A JSON body's checks before any of it is read (its content type, and a declared length
/// within the route's limit): the body, and the route's limit.
pub(crate) fn json_body_of(req: Request) -> Result<(Body, usize), Box<JsonRejection>> {
    check_json_content_type(req.headers()).map_err(|err| Box::new(err.into()))?;
    let limit = req
        .extensions()
        .get::<BodyLimit>()
        .map_or(BODY_LIMIT, |limit| limit.0);
    if let Some(declared) = declared_length(req.headers()).filter(|&n| n > limit as u64) {
        return Err(Box::new(refuse_declared(req, declared, limit)));
    }
    Ok((req.into_body(), limit))
}

/// Why a JSON body was refused.
pub enum JsonRejection {
    Refused(ApiError),
    /// Declared longer than the limit: answered before the body is read, then what the client
    /// still sends is read and thrown away (see [`DRAIN_LIMIT`]) when it is little enough.
    DeclaredTooLarge {
        error: ApiError,
        drain: Option<(Body, u64)>,
    },
}

impl From<ApiError> for JsonRejection {
    fn from(err: ApiError) -> Self {
        Self::Refused(err)
    }
}

impl IntoResponse for JsonRejection {
    fn into_response(self) -> Response {
        match self {
            Self::Refused(err) => err.into_response(),
            Self::DeclaredTooLarge { error, drain } => {
                let mut response = error.into_response();
                if let Some((body, left)) = drain {
                    // The answer's length is no longer known ahead (it ends once the drain
                    // does): it goes out chunked.
                    response.headers_mut().remove(header::CONTENT_LENGTH);
                    let answer = std::mem::take(response.body_mut());
                    *response.body_mut() = Body::new(AnswerThenDrain {
                        answer: Some(answer),
                        drain: Some(body),
                        left,
                    });
                }
                response
            }
        }
    }
}

/// The body's length as its `Content-Length` declares it.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The 413 for a body declared `declared` bytes long, over `limit`. A client that waits for
/// `100 Continue` sends nothing more, and an HTTP/2 stream is reset alone, so only an HTTP/1
/// body sent right away is drained, and only when it is not much longer than the limit.
fn refuse_declared(req: Request, declared: u64, limit: usize) -> JsonRejection {
    tracing::debug!(declared, limit, "request body declared over the limit");
    let waits_for_continue = req
        .headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let drainable = req.version() < Version::HTTP_2
        && !waits_for_continue
        && declared <= limit.saturating_add(DRAIN_LIMIT) as u64;
    JsonRejection::DeclaredTooLarge {
        error: too_large(limit),
        drain: drainable.then(|| (req.into_body(), declared)),
    }
}

pub(crate) fn too_large(limit: usize) -> ApiError {
    ApiError(AppError::new(
        ErrorKind::TooLarge,
        "body_too_large",
        format!("the request body is larger than the limit of {limit} bytes"),
    ))
}

/// An answer's body, then, before it ends, the request body read and thrown away (at most
/// `left` bytes more): the client reads the answer while it still sends.
struct AnswerThenDrain {
    answer: Option<Body>,
    drain: Option<Body>,
    left: u64,
}

impl http_body::Body for AnswerThenDrain {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(answer) = &mut this.answer {
            match ready!(Pin::new(answer).poll_frame(cx)) {
                Some(frame) => return Poll::Ready(Some(frame)),
                None => this.answer = None,
            }
        }
        while let Some(drain) = &mut this.drain {
            match ready!(Pin::new(drain).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    let read = frame.data_ref().map_or(0, |data| data.len() as u64);
                    this.left = this.left.saturating_sub(read);
                    if this.left == 0 {
                        this.drain = None;
                    }
                }
                // Ended, or cut off by its deadline: nothing more to wait for.
                Some(Err(_)) | None => this.drain = None,
            }
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.answer.is_none() && self.drain.is_none()
    }
}

fn check_json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
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
        let chunk = chunk.map_err(body_error)?;
        seen = seen.saturating_add(chunk.len());
        if seen <= limit {
            kept.extend_from_slice(&chunk);
        } else if seen > limit.saturating_add(DRAIN_LIMIT) {
            break;
        }
    }
    if seen > limit {
        return Err(too_large(limit));
    }
    Ok(Bytes::from(kept))
}

/// What the client is told of a body that failed while it was read: too slow, or cut off.
pub(crate) fn body_error(err: axum::Error) -> ApiError {
    if let Some(timeout) = crate::body_timeout::body_timeout(&err) {
        return ApiError(AppError::new(
            ErrorKind::TimedOut,
            timeout.code(),
            format!("{timeout}; send it faster, or a smaller one"),
        ));
    }
    ApiError::bad_request("invalid_body", format!("could not read the body: {err}"))
}

pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let malformed = |err: serde_json::Error| {
        ApiError::bad_request("invalid_json", format!("malformed JSON: {err}"))
    };
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        use serde_json::error::Category;
        let path = openai_param(err.path());
        let err = err.into_inner();
        if err.classify() != Category::Data {
            return malformed(err);
        }
        let param = path.or_else(|| field_at_fault::<T>(bytes));
        // serde's own words, without where in the text: the field is named instead.
        let message = err.to_string();
        let message = message
            .rsplit_once(" at line ")
            .map_or(message.as_str(), |(message, _)| message);
        match param {
            Some(param) => ApiError::invalid_parameter(format!("{param}: {message}")).param(&param),
            None => ApiError::invalid_parameter(message),
        }
    })?;
    // Characters after the value are malformed JSON too.
    deserializer.end().map_err(malformed)?;
    Ok(value)
}

/// Most top-level fields [`field_at_fault`] leaves out one by one; more than any request type
/// has.
const MAX_FIELDS_TRIED: usize = 64;
/// Largest body [`field_at_fault`] reads again: each try costs a read of the whole body.
const MAX_BYTES_TRIED: usize = 64 << 10;

/// The top-level field without which `bytes` would be read as a `T`: serde loses the path of
/// an error inside a flattened struct (the request types flatten their shared field groups), so
/// the field is found by leaving each out in turn. None when no one field is at fault.
fn field_at_fault<T: DeserializeOwned>(bytes: &[u8]) -> Option<String> {
    if bytes.len() > MAX_BYTES_TRIED {
        return None;
    }
    let serde_json::Value::Object(fields) = serde_json::from_slice(bytes).ok()? else {
        return None;
    };
    if fields.len() > MAX_FIELDS_TRIED {
        return None;
    }
    let mut at_fault = fields.keys().filter(|&key| {
        let mut without = fields.clone();
        without.remove(key);
        serde_json::from_value::<T>(serde_json::Value::Object(without)).is_ok()
    });
    let key = at_fault.next()?;
    at_fault.next().is_none().then(|| key.clone())
}

/// The field a deserializing error is at, written as OpenAI names fields in its errors
/// (`messages.[0].content`); none at the document's top.
fn openai_param(path: &serde_path_to_error::Path) -> Option<String> {
    use serde_path_to_error::Segment;
    let parts: Vec<String> = path
        .iter()
        .map(|segment| match segment {
            Segment::Seq { index } => format!("[{index}]"),
            Segment::Map { key } => key.clone(),
            Segment::Enum { variant } => variant.clone(),
            Segment::Unknown => "?".to_owned(),
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("."))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Request {
        temperature: Option<f32>,
        max_tokens: Option<u32>,
        messages: Option<Vec<Message>>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Message {
        content: String,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Flattened {
        model: String,
        #[serde(flatten)]
        sampling: Sampling,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Sampling {
        temperature: Option<f32>,
    }

    fn refusal(body: &str) -> (&'static str, Option<String>, String) {
        let err = parse_json::<Request>(body.as_bytes()).unwrap_err().0;
        (err.code, err.param, err.message)
    }

    #[test]
    fn a_field_of_the_wrong_type_is_named_as_openai_names_it() {
        let (code, param, message) = refusal(r#"{"temperature": "hot"}"#);
        assert_eq!(
            (code, param.as_deref()),
            ("invalid_parameter", Some("temperature"))
        );
        assert!(
            message.starts_with("temperature: invalid type"),
            "{message}"
        );
        assert!(!message.contains("line 1"), "{message}");
        let (_, param, _) = refusal(r#"{"max_tokens": -1}"#);
        assert_eq!(param.as_deref(), Some("max_tokens"));
        let (_, param, _) = refusal(r#"{"messages": [{"content": "hi"}, {"content": 7}]}"#);
        assert_eq!(param.as_deref(), Some("messages.[1].content"));
        // A field of a flattened group, whose path serde does not keep.
        let err = parse_json::<Flattened>(br#"{"model": "m", "temperature": "hot"}"#).unwrap_err();
        assert_eq!(err.0.param.as_deref(), Some("temperature"));
        assert!(
            err.0.message.starts_with("temperature: invalid type"),
            "{}",
            err.0.message
        );
        // Malformed text is not a field's fault.
        let (code, param, _) = refusal(r#"{"temperature": 0.5} x"#);
        assert_eq!((code, param), ("invalid_json", None));
        let (code, _, _) = refusal(r#"{"temperature": "#);
        assert_eq!(code, "invalid_json");
    }
}
