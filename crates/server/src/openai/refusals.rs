//! Refusals of a request's fields, naming the field (OpenAI's `param`): a value that cannot be
//! taken, or a field this server does not honour.

use playground::AppError;

use crate::error::ApiError;

pub(super) fn invalid(param: &str, message: impl Into<String>) -> ApiError {
    AppError::invalid_parameter(message)
        .with_param(param)
        .into()
}

pub(super) fn unsupported(param: &str, message: impl Into<String>) -> ApiError {
    AppError::new(
        playground::ErrorKind::Invalid,
        "unsupported_parameter",
        message,
    )
    .with_param(param)
    .into()
}
