//! The llama.cpp runtime of Medusa Playground: model loading, prompt handling, sampling and
//! streamed generation on a dedicated thread. Knows nothing of HTTP, SQL or UI.

mod backend;
mod clock;
mod compute;
mod config;
pub mod cost_cache;
mod diagnostics;
mod drafters;
mod drafting;
mod engine;
mod error;
mod events;
mod info;
mod llama_runtime;
pub mod medusa;
mod model_file;
mod output;
mod prompt;
mod prompt_cache;
mod quantize;
mod request;
mod request_draft;
mod rng;
mod sampler;
mod sampling_defaults;
mod scheduler;
mod sequence;
pub mod speculative;
mod step_profile;
mod stop;
mod token;
pub mod tuning;
mod utf8;
mod valid_request;

pub use compute::{ComputeDevice, ComputeInfo};
pub use config::{
    default_threads, EngineConfig, LoadProgress, DEFAULT_BATCH_SIZE, DEFAULT_CTX_SIZE,
    DEFAULT_MAX_QUEUED, DEFAULT_PARALLEL,
};
pub use diagnostics::BaselineRun;
pub use engine::{Canceller, Engine, GenerationSender, GenerationStream};
pub use error::EngineError;
pub use events::{
    tokens_per_second, DraftDecision, DraftNode, DraftSkip, DraftSkipReason, DrafterEvidence,
    GenerationEvent, RunSummary, StepEvent, StepToken, StepTree, StopReason,
};
pub use info::ModelInfo;
pub use prompt::RenderedPrompt;
pub use quantize::{file_type_name, quantize, quantize_type_names, QuantType, QuantizeReport};
pub use request::{
    AcceptanceRule, ChatMessage, DraftPolicy, GenerateRequest, GenerationMode, Prompt,
    SamplingParams, CHAT_ROLES, MAX_DRAFT_TOKENS, MAX_TOKENS_LIMIT,
};
pub use request_draft::RequestDraft;
pub use sampler::{argmax, Sampler, TokenProb};
pub use sampling_defaults::SamplingDefaults;
pub use scheduler::EngineMetrics;
pub use speculative::tree::{TokenSource, TreeSpec};
pub use step_profile::StepProfile;
pub use token::TokenId;
pub use utf8::Utf8Stream;
pub use valid_request::ValidRequest;
