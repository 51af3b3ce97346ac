//! What can go wrong with a remote engine, each kind with its own code, and how it becomes an
//! [`EngineError`].

use engine::EngineError;

/// Why a remote engine could not be used. Each kind has its own code, so the UI can say what to
/// fix: the address, the key, the engine itself.
///
/// The messages are our own words, the status and the content type only: never the remote's
/// body or a header of its answer, which may echo the key it was sent or come from a service
/// that is no engine at all (and whose contents must not reach whoever added the address).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RemoteError {
    #[error("invalid remote engine: {0}")]
    InvalidSpec(String),
    #[error("remote engine '{name}' cannot be reached at {url}: {reason}")]
    Unreachable {
        name: String,
        url: String,
        reason: String,
    },
    #[error(
        "remote engine '{name}' wants a valid API key: it answered HTTP {status} with {content}"
    )]
    Unauthorized {
        name: String,
        status: u16,
        content: &'static str,
    },
    #[error("remote engine '{name}' did not answer within {seconds} s")]
    Timeout { name: String, seconds: u64 },
    #[error("remote engine '{name}' answered HTTP {status} with {content}{hint}")]
    Refused {
        name: String,
        status: u16,
        content: &'static str,
        /// What the status suggests, in our words (empty when nothing).
        hint: &'static str,
    },
    #[error(
        "remote engine '{name}' sent something that is not an OpenAI-compatible answer: {message}"
    )]
    Malformed { name: String, message: String },
    #[error("remote engine '{name}' sent more than the {limit_bytes} bytes taken for {what}")]
    TooLarge {
        name: String,
        what: &'static str,
        limit_bytes: usize,
    },
    /// A request the engine cannot run as asked (a mode it does not run, a field it does not
    /// take), refused before it is sent.
    #[error("remote engine '{name}' {message}")]
    Unsupported { name: String, message: String },
    #[error("remote engine '{name}' reported an error in its answer{detail}")]
    Reported {
        name: String,
        /// Its numeric code when it gave one, such as " (code 503)"; else empty.
        detail: String,
    },
}

impl RemoteError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidSpec(_) => "invalid_remote",
            Self::Unreachable { .. } => "remote_unreachable",
            Self::Unauthorized { .. } => "remote_unauthorized",
            Self::Timeout { .. } => "remote_timeout",
            Self::Refused { .. } => "remote_refused",
            Self::Malformed { .. } => "remote_malformed",
            Self::TooLarge { .. } => "remote_too_large",
            Self::Reported { .. } => "remote_failed",
            Self::Unsupported { .. } => "unsupported_parameter",
        }
    }
}

impl From<RemoteError> for EngineError {
    fn from(err: RemoteError) -> Self {
        EngineError::Remote {
            code: err.code(),
            message: err.to_string(),
        }
    }
}
