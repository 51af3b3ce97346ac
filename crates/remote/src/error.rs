use engine::EngineError;

/// Why a remote engine could not be used. Each kind has its own code, so the UI can say what to
/// fix: the address, the key, the engine itself.
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
    #[error("remote engine '{name}' refused the API key (HTTP {status}): {message}")]
    Unauthorized {
        name: String,
        status: u16,
        message: String,
    },
    #[error("remote engine '{name}' did not answer within {seconds} s")]
    Timeout { name: String, seconds: u64 },
    #[error("remote engine '{name}' answered HTTP {status}: {message}")]
    Refused {
        name: String,
        status: u16,
        message: String,
    },
    #[error(
        "remote engine '{name}' sent something that is not an OpenAI-compatible answer: {message}"
    )]
    Malformed { name: String, message: String },
    #[error("remote engine '{name}' reported an error: {message}")]
    Reported { name: String, message: String },
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
            Self::Reported { .. } => "remote_failed",
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
