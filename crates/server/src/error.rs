//! Errors: what a request answers when it goes wrong, and what stops the server.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use engine::EngineError;
use playground::{AppError, ErrorBody, ErrorKind};
use serde::Serialize;
use store::StoreError;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: String,
        source: std::io::Error,
    },
    #[error("server error: {0}")]
    Io(#[from] std::io::Error),
    #[error("the model did not load: {0}")]
    ModelLoad(String),
}

/// An error answer: the status for its kind and `{"error": {"code", "message"}}`, with
/// `Retry-After` for a full queue.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct ApiError(pub AppError);

impl ApiError {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self(AppError::new(ErrorKind::Invalid, code, message))
    }

    pub fn invalid_parameter(message: impl Into<String>) -> Self {
        Self(AppError::invalid_parameter(message))
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self(AppError::not_found(message))
    }

    /// Names the request field at fault.
    pub fn param(self, param: &str) -> Self {
        Self(self.0.with_param(param))
    }

    pub fn status(&self) -> StatusCode {
        match self.0.kind {
            ErrorKind::Invalid => StatusCode::BAD_REQUEST,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorKind::Forbidden => StatusCode::FORBIDDEN,
            ErrorKind::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorKind::Conflict => StatusCode::CONFLICT,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::TimedOut => StatusCode::REQUEST_TIMEOUT,
            ErrorKind::Upstream => StatusCode::BAD_GATEWAY,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The JSON body alone, for errors that arrive inside an already started stream.
    pub fn body(&self) -> ErrorEnvelope {
        ErrorEnvelope {
            error: self.0.body(),
        }
    }
}

/// `{"error": {...}}`, as every error answer is shaped.
#[derive(Debug, Serialize)]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

impl From<AppError> for ApiError {
    fn from(err: AppError) -> Self {
        Self(err)
    }
}

impl From<EngineError> for ApiError {
    fn from(err: EngineError) -> Self {
        Self(err.into())
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        Self(err.into())
    }
}

impl ApiError {
    /// The answer, logged by the caller: for refusals that anyone can cause many of, which are
    /// no failure of the server's even when they are 503s (every place busy, say).
    pub(crate) fn unlogged_response(&self) -> Response {
        let mut response = (self.status(), axum::Json(self.body())).into_response();
        if let Some(seconds) = self.0.retry_after_s {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        // The server's own failures need an operator; a client's mistakes are the client's to
        // read in the answer, and anyone can send many of them.
        if status.is_server_error() {
            tracing::error!(code = self.0.code, message = %self.0.message, "request failed");
        } else {
            tracing::debug!(
                code = self.0.code,
                status = status.as_u16(),
                "request refused"
            );
        }
        self.unlogged_response()
    }
}
