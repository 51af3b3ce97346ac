//! Errors of the application layer: a stable code, a message, and the kind of failure, which
//! each adapter maps onto its protocol (an HTTP status, a rejected command).

use engine::EngineError;
use serde::Serialize;
use store::StoreError;
use ts_rs::TS;

/// What went wrong, in the terms an adapter answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The caller sent something wrong.
    Invalid,
    NotFound,
    /// The request lacks the server's API key.
    Unauthorized,
    /// The caller may not do this (a host, origin or path the server refuses).
    Forbidden,
    /// The body is not in a format the endpoint takes.
    UnsupportedMediaType,
    /// The request conflicts with the current state (no heads, a load or tuning in progress).
    Conflict,
    /// Not now: no model yet, or the queue is full.
    Unavailable,
    TooLarge,
    /// The client took too long (a request body that did not arrive in time).
    TimedOut,
    /// A remote engine failed or could not be reached.
    Upstream,
    /// The playground failed.
    Internal,
}

/// An error with a stable `code` the UI and clients can tell apart without parsing messages.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct AppError {
    pub kind: ErrorKind,
    pub code: &'static str,
    pub message: String,
    /// Seconds after which retrying makes sense (a full queue).
    pub retry_after_s: Option<u64>,
    /// The request field at fault, where one is.
    pub param: Option<String>,
    /// What lies under the message, in its own words (a network error's text), for whoever
    /// digs; the message says what happened plainly.
    pub detail: Option<String>,
}

/// How every error reaches the UI: the body of HTTP errors (`{"error": ...}`) and of rejected
/// desktop commands.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[ts(rename = "ApiErrorBody")]
pub struct ErrorBody {
    pub code: String,
    pub message: String,
    /// The error's class in OpenAI's terms (`invalid_request_error`, `authentication_error`,
    /// `permission_error`, `server_error`), which OpenAI clients read.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub kind: Option<String>,
    /// The request field at fault; null where none is (always sent, as OpenAI clients read it).
    #[ts(optional = nullable)]
    pub param: Option<String>,
    /// What lies under the message in its own words (a network error's text), where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub detail: Option<String>,
}

impl ErrorBody {
    /// A body with a code and message only (a run refused before it started, say).
    pub fn plain(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            kind: None,
            param: None,
            detail: None,
        }
    }
}

impl AppError {
    pub fn new(kind: ErrorKind, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind,
            code,
            message: message.into(),
            retry_after_s: None,
            param: None,
            detail: None,
        }
    }

    /// Keeps what lies under the message.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Tells the client how many seconds to wait before it tries again (`Retry-After`).
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after_s = Some(seconds);
        self
    }

    /// Names the request field at fault.
    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// The error's class in OpenAI's terms.
    pub fn openai_type(&self) -> &'static str {
        match self.kind {
            ErrorKind::Unauthorized => "authentication_error",
            ErrorKind::Forbidden => "permission_error",
            ErrorKind::Unavailable | ErrorKind::Upstream | ErrorKind::Internal => "server_error",
            ErrorKind::Invalid
            | ErrorKind::NotFound
            | ErrorKind::UnsupportedMediaType
            | ErrorKind::Conflict
            | ErrorKind::TooLarge
            | ErrorKind::TimedOut => "invalid_request_error",
        }
    }

    pub fn invalid_parameter(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, "invalid_parameter", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, "not_found", message)
    }

    pub fn internal(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, code, message)
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            code: self.code.to_owned(),
            message: self.message.clone(),
            kind: Some(self.openai_type().to_owned()),
            param: self.param.clone(),
            detail: self.detail.clone(),
        }
    }
}

impl Serialize for AppError {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.body().serialize(serializer)
    }
}

impl From<EngineError> for AppError {
    fn from(err: EngineError) -> Self {
        let kind = match &err {
            EngineError::NoMedusaHeads => ErrorKind::Conflict,
            EngineError::QueueFull { .. }
            | EngineError::GrammarsBusy { .. }
            | EngineError::GrammarChecksBusy { .. }
            | EngineError::ClientGrammarChecksBusy { .. } => ErrorKind::Unavailable,
            EngineError::TooMuchWork { .. } => ErrorKind::TooLarge,
            EngineError::Remote { .. } => ErrorKind::Upstream,
            e if e.is_client_error() => ErrorKind::Invalid,
            _ => ErrorKind::Internal,
        };
        let retry_after_s = match &err {
            // Whole seconds, rounded up: `Retry-After` has no finer unit.
            EngineError::QueueFull { retry_after_ms, .. } => Some(retry_after_ms.div_ceil(1000)),
            _ => None,
        };
        let param = match &err {
            EngineError::TooMuchWork { name, .. } | EngineError::InvalidParameter { name, .. } => {
                Some((*name).to_owned())
            }
            _ => None,
        };
        Self {
            kind,
            code: err.code(),
            message: err.to_string(),
            retry_after_s,
            param,
            detail: None,
        }
    }
}

impl From<StoreError> for AppError {
    fn from(err: StoreError) -> Self {
        if err.is_storage_failure() {
            return Self::new(
                ErrorKind::Unavailable,
                "history_unavailable",
                format!("the run history cannot be written: {err}"),
            );
        }
        let kind = match &err {
            StoreError::NotFound { .. } => ErrorKind::NotFound,
            StoreError::InvalidInput(_) | StoreError::NotAnExport(_) | StoreError::Json(_) => {
                ErrorKind::Invalid
            }
            _ => ErrorKind::Internal,
        };
        Self::new(kind, err.code(), err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_keep_their_code_and_kind() {
        let full = AppError::from(EngineError::QueueFull {
            capacity: 4,
            retry_after_ms: 1500,
        });
        assert_eq!(
            (full.kind, full.code, full.retry_after_s),
            (ErrorKind::Unavailable, "queue_full", Some(2))
        );
        let heads = AppError::from(EngineError::NoMedusaHeads);
        assert_eq!(
            (heads.kind, heads.code),
            (ErrorKind::Conflict, "no_medusa_heads")
        );
        let empty = AppError::from(EngineError::EmptyPrompt);
        assert_eq!(
            (empty.kind, empty.code),
            (ErrorKind::Invalid, "empty_prompt")
        );
        let stopped = AppError::from(EngineError::EngineStopped);
        assert_eq!(stopped.kind, ErrorKind::Internal);
    }

    #[test]
    fn serializes_as_code_message_type_and_param() {
        let err = AppError::not_found("run 7 not found");
        assert_eq!(
            serde_json::to_value(&err).unwrap(),
            serde_json::json!({
                "code": "not_found",
                "message": "run 7 not found",
                "type": "invalid_request_error",
                "param": null
            })
        );
        let err =
            AppError::new(ErrorKind::Unauthorized, "unauthorized", "no key").with_param("key");
        assert_eq!(
            serde_json::to_value(&err).unwrap(),
            serde_json::json!({
                "code": "unauthorized",
                "message": "no key",
                "type": "authentication_error",
                "param": "key"
            })
        );
    }
}
