//! The OpenAI-compatible API's wire format (chat and text completions, the Responses API,
//! embeddings), typed once for every side that speaks it: the server writes answers and stream
//! chunks with these types, the remote engines' client sends request bodies and reads any
//! engine's chunks with them.

mod answer;
mod embeddings;
mod models;
mod request;
mod responses;
mod stream;
mod usage;

pub use answer::{
    ChatChoice, ChatChunkChoice, ChatLogprobs, ChatTokenLogprob, Completion, Delta, FunctionCall,
    Message, TextChoice, TextLogprobs, ToolCall, ToolCallDelta, TopLogprob, CHAT_COMPLETION,
    CHAT_COMPLETION_CHUNK, TEXT_COMPLETION,
};
pub use embeddings::{EmbeddingData, EmbeddingList, EmbeddingUsage, EmbeddingVector};
pub use models::{ModelCard, ModelList};
pub use request::{CompletionRequest, RequestMessage, StreamOptions, TreeField};
pub use responses::{
    IncompleteDetails, InputTokensDetails, OutputItem, OutputText, OutputTokensDetails, Response,
    ResponseError, ResponseEvent, ResponseStreamEvent, ResponseUsage, RESPONSE,
};
pub use stream::{StreamChoice, StreamChunk, StreamDelta};
pub use usage::{PromptTokensDetails, Timings, Usage};
