//! The llama.cpp runtime of Medusa Playground: a dedicated thread owns the model and decodes every
//! running request in one batch per step, streaming each one's events. Requests may draft
//! speculatively (Medusa heads, prompt lookup or both): each step's token tree, sized by default
//! to what pays under the decode costs measured on this machine, is verified in that same batch.
//! Also Medusa heads files (loading, importing, tuning their tree), quantization and
//! diagnostics. Knows nothing of HTTP, SQL or UI.

mod active_request;
mod backend;
mod batcher;
mod cell_order;
mod clock;
mod compute;
mod config;
pub mod cost_cache;
mod diagnostics;
mod draft_model;
mod drafter_pool;
mod embeddings;
mod engine;
mod engine_loading;
mod engine_metrics;
mod error;
mod events;
mod exact_kernels;
mod generation_stream;
mod gguf_widen;
mod grammar;
mod grammar_cache;
mod grammar_limits;
mod grammar_prep;
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
mod request_drafting;
mod rng;
mod sampler;
mod sampling_defaults;
mod scheduler;
pub mod speculative;
mod step_backend;
mod step_batch;
mod step_profile;
mod stop;
mod token;
mod token_choice;
#[cfg(test)]
mod toy_backend;
pub mod tuning;
mod utf8;
mod valid_request;
mod wide_model;

pub use compute::{ComputeDevice, ComputeInfo};
pub use config::{
    default_threads, EngineConfig, LoadProgress, DEFAULT_BATCH_SIZE, DEFAULT_CTX_SIZE,
    DEFAULT_DRAFT_CONFIDENCE, DEFAULT_MAX_QUEUED, DEFAULT_PARALLEL, MAX_DRAFT_CONFIDENCE,
};
pub use diagnostics::BaselineRun;
pub use embeddings::{
    Embedding, EmbeddingCall, EmbeddingInput, EMBEDDING_CHUNK, MAX_EMBEDDING_INPUTS,
};
pub use engine::Engine;
pub use engine_metrics::EngineMetrics;
pub use error::EngineError;
pub use events::{
    tokens_per_second, DraftDecision, DraftNode, DraftSkip, DraftSkipReason, DrafterEvidence,
    GenerationEvent, RunSummary, StepEvent, StepToken, StepTree, StopReason,
};
pub use generation_stream::{Canceller, GenerationSender, GenerationStream};
pub use grammar::{json_object_grammar, json_schema_grammar};
pub use grammar_limits::{MAX_GRAMMAR_BYTES, MAX_GRAMMAR_NESTING};
pub use grammar_prep::{GRAMMAR_PREPARE_DEADLINE, GRAMMAR_STEP_LIMIT};
pub use info::{DraftModelInfo, ModelInfo};
pub use prompt::RenderedPrompt;
pub use quantize::{file_type_name, quantize, quantize_type_names, QuantType, QuantizeReport};
pub use request::{
    AcceptanceRule, ChatMessage, DraftPolicy, GenerateRequest, GenerationMode, LogitBias, Prompt,
    SamplingParams, CHAT_ROLES, MAX_DRAFT_TOKENS, MAX_LOGIT_BIAS, MAX_TOKENS_LIMIT,
    MAX_TOP_LOGPROBS,
};
pub use request_draft::RequestDraft;
pub use sampler::{argmax, Sampler, TokenProb};
pub use sampling_defaults::SamplingDefaults;
pub use speculative::tree::{TokenSource, TreeSpec};
pub use step_profile::StepProfile;
pub use token::TokenId;
pub use token_choice::{PromptLogprobs, TokenChoice, TokenLogprobs};
pub use utf8::Utf8Stream;
pub use valid_request::ValidRequest;
pub use wide_model::{widen_model, width_is_bit_exact, WideModelReport, WIDTH_FACTORS};
