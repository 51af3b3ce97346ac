//! The OpenAI-compatible API's wire format, typed once for every side that speaks it: the
//! server writes answers and stream chunks with these types, the remote engines' client sends
//! request bodies and reads any engine's chunks with them.

mod answer;
mod models;
mod request;
mod stream;
mod usage;

pub use answer::{
    ChatChoice, ChatChunkChoice, Completion, Delta, Message, TextChoice, CHAT_COMPLETION,
    CHAT_COMPLETION_CHUNK, TEXT_COMPLETION,
};
pub use models::{ModelCard, ModelList};
pub use request::{CompletionRequest, RequestMessage, StreamOptions, TreeField};
pub use stream::{StreamChoice, StreamChunk, StreamDelta};
pub use usage::{PromptTokensDetails, Timings, Usage};
