//! Why training Medusa heads failed: the engine, the tensor maths, an invalid option, too little
//! data, unreadable training data or prompts.

use engine::EngineError;

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("tensor computation failed: {0}")]
    Tensor(#[from] candle_core::Error),
    #[error("invalid {name}: {message}")]
    InvalidOption { name: &'static str, message: String },
    #[error("not enough data: {0}")]
    NotEnoughData(String),
    #[error("training data {}: {message}", path.display())]
    Data {
        path: std::path::PathBuf,
        message: String,
    },
    /// Stopped on request; collected answers stay in the data file, if one was given.
    #[error("training was cancelled")]
    Cancelled,
    #[error("cannot read the prompts in {path}: {message}")]
    Prompts { path: String, message: String },
}

pub(crate) fn invalid(name: &'static str, message: impl Into<String>) -> TrainError {
    TrainError::InvalidOption {
        name,
        message: message.into(),
    }
}
