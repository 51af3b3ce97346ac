//! Errors: what a request answers when it goes wrong, and what stops the server.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use engine::EngineError;
use serde_json::json;
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
}

/// An error answer: a status and `{"error": {"code", "message"}}`, with `Retry-After` for a full
/// queue.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds, for `Retry-After`.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn invalid_parameter(message: impl Into<String>) -> Self {
        Self::bad_request("invalid_parameter", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn internal(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, code, message)
    }

    /// The JSON body alone, for errors that arrive inside an already started stream.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"code": self.code, "message": self.message}})
    }
}

/// `{"code", "message"}`: how the desktop app's commands reject.
impl serde::Serialize for ApiError {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut body = serializer.serialize_struct("ApiError", 2)?;
        body.serialize_field("code", self.code)?;
        body.serialize_field("message", &self.message)?;
        body.end()
    }
}

impl From<EngineError> for ApiError {
    fn from(err: EngineError) -> Self {
        let status = match &err {
            EngineError::NoMedusaHeads => StatusCode::CONFLICT,
            EngineError::QueueFull { .. } => StatusCode::SERVICE_UNAVAILABLE,
            e if e.is_client_error() => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let retry_after = match &err {
            // Whole seconds, rounded up: `Retry-After` has no finer unit.
            EngineError::QueueFull { retry_after_ms, .. } => Some(retry_after_ms.div_ceil(1000)),
            _ => None,
        };
        Self {
            status,
            code: err.code(),
            message: err.to_string(),
            retry_after,
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        let status = match &err {
            StoreError::NotFound { .. } => StatusCode::NOT_FOUND,
            StoreError::InvalidInput(_) | StoreError::Json(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, err.code(), err.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code, message = %self.message, "request failed");
        }
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
