//! The llama.cpp runtime of Medusa Playground: a dedicated thread owns the model and decodes every
//! running request in one batch per step, streaming each one's events. Requests may draft
//! speculatively (Medusa heads, prompt lookup, a draft model, or several merged): each step's
//! token tree, sized by default to what pays under the decode costs measured on this machine, is
//! verified in that same batch.
//! Also Medusa heads files (loading, importing, tuning their tree), quantization and
//! diagnostics. Knows nothing of HTTP, SQL or UI.

mod clock;
mod config;
pub mod cost_cache;
mod cpu_kernel_choice;
mod diagnostics;
mod engine;
mod engine_loading;
mod engine_metrics;
mod error;
mod events;
pub mod feature_drafter;
mod generation_stream;
mod grammar;
mod info;
mod llama;
mod llama_process;
pub mod medusa;
mod output;
mod request;
mod sampling;
mod scheduler;
pub mod speculative;
mod step;
mod step_profile;
mod token;
pub mod tuning;
mod weights;

pub use config::{
    default_threads, EngineConfig, LoadProgress, LoadStage, DEFAULT_BATCH_SIZE, DEFAULT_CTX_SIZE,
    DEFAULT_DRAFT_CONFIDENCE, DEFAULT_LOOKUP_MEMORY, DEFAULT_MAX_QUEUED, DEFAULT_PARALLEL,
    MAX_DRAFT_CONFIDENCE, MAX_LOOKUP_MEMORY,
};
pub use cpu_kernel_choice::CpuKernels;
pub use diagnostics::BaselineRun;
pub use engine::Engine;
pub use engine_metrics::EngineMetrics;
pub use error::EngineError;
pub use events::{
    tokens_per_second, DraftDecision, DraftNode, DraftSkip, DraftSkipReason, DrafterEvidence,
    GenerationEvent, RunSummary, StepEvent, StepToken, StepTree, StopReason,
};
pub use generation_stream::{Canceller, GenerationSender, GenerationStream};
pub use grammar::check_places::{MAX_GRAMMAR_CHECKS, MAX_GRAMMAR_CHECKS_PER_CLIENT};
pub use grammar::child::serve_grammar_checks;
pub use grammar::deadline::{overdue_grammar_threads, MAX_OVERDUE_GRAMMARS};
pub use grammar::limits::{MAX_GRAMMAR_BYTES, MAX_GRAMMAR_NESTING};
pub use grammar::prep::GRAMMAR_PREPARE_DEADLINE;
pub use grammar::requester::{on_behalf_of, requester};
pub use grammar::trial::GRAMMAR_STEP_LIMIT;
pub use grammar::{json_object_grammar, json_schema_grammar};
pub use info::{DraftModelInfo, EagleInfo, ModelInfo};
pub use llama::compute::{ComputeDevice, ComputeInfo};
pub use llama::embeddings::{
    Embedding, EmbeddingCall, EmbeddingInput, EMBEDDING_CHUNK, MAX_EMBEDDING_INPUTS,
};
pub use llama::prompt::RenderedPrompt;
pub use output::utf8::Utf8Stream;
pub use request::draft::RequestDraft;
pub use request::valid::ValidRequest;
pub use request::{
    check_top_logprobs, AcceptanceRule, ChatMessage, DraftPolicy, GenerateRequest, GenerationMode,
    LogitBias, LookupMemoryUse, Prompt, SamplingParams, CHAT_ROLES, MAX_DRAFT_TOKENS,
    MAX_LOGIT_BIAS, MAX_TOKENS_LIMIT, MAX_TOP_LOGPROBS,
};
pub use sampling::defaults::SamplingDefaults;
pub use sampling::sampler::{argmax, Sampler, TokenProb};
pub use sampling::token_choice::{PromptLogprobs, TokenChoice, TokenLogprobs};
pub use speculative::drafter_kind::DrafterKind;
pub use speculative::tree::{TokenSource, TreeSpec};
pub use step_profile::StepProfile;
pub use token::TokenId;
pub use weights::matrix;
pub use weights::model_file::{
    heads_file_names, inspect as inspect_model, is_heads_file_of, model_beside_heads, GgufHeader,
};
pub use weights::quantize::{
    file_type_name, quantize, quantize_type_names, QuantType, QuantizeReport,
};
pub use weights::widen::{widen_model, width_is_bit_exact, WideModelReport, WIDTH_FACTORS};
