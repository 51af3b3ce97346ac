//! Why a request body was cut off: what the listener's body rules raise and the extractors read
//! back to answer 408, in a module of its own so that neither depends on the other.

use std::time::Duration;

/// A request body took too long: it is answered 408.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BodyTimeout {
    /// It did not arrive whole within `ConnectionLimits::body_timeout`.
    #[error("the request body did not arrive whole within {} s", .0.as_secs_f64())]
    Deadline(Duration),
    /// It arrived slower than `ConnectionLimits::min_body_rate`.
    #[error("the request body arrived slower than {0} bytes a second")]
    TooSlow(u64),
}

impl BodyTimeout {
    /// The error code clients see.
    pub(crate) fn code(self) -> &'static str {
        match self {
            Self::Deadline(_) => "body_timeout",
            Self::TooSlow(_) => "body_too_slow",
        }
    }
}

/// Why reading a body failed, when it broke the connection's body rules.
pub(crate) fn body_timeout(err: &(dyn std::error::Error + 'static)) -> Option<BodyTimeout> {
    let mut cause = Some(err);
    while let Some(err) = cause {
        if let Some(timeout) = err.downcast_ref::<BodyTimeout>() {
            return Some(*timeout);
        }
        cause = err.source();
    }
    None
}
