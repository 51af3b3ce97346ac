//! Everything the engine can refuse or fail at, each with a stable code for the server and the UI.

use std::path::PathBuf;

/// Everything the engine can refuse or fail at. Each variant has a stable `code()` so that
/// the HTTP server and the UI can tell them apart without parsing messages.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum EngineError {
    #[error("model file not found: {}", path.display())]
    ModelNotFound { path: PathBuf },
    #[error("{} is not a GGUF model file (it does not start with the GGUF magic bytes)", path.display())]
    NotGguf { path: PathBuf },
    #[error("{} looks like GGUF but its header cannot be read: the file is truncated or corrupt", path.display())]
    CorruptModel { path: PathBuf },
    /// A Medusa heads file picked as the model (llama.cpp knows no `medusa` architecture).
    #[error("{}", heads_not_model_message(path, model.as_deref()))]
    HeadsNotModel {
        path: PathBuf,
        /// The model file the heads go with, when one is found beside them.
        model: Option<PathBuf>,
    },
    #[error("llama.cpp could not load {} (architecture '{architecture}'): {reason}", path.display())]
    LoadFailed {
        path: PathBuf,
        architecture: String,
        reason: String,
    },
    #[error("could not create a llama.cpp context: {0}")]
    Context(String),
    #[error("invalid parameter '{name}': {message}")]
    InvalidParameter { name: &'static str, message: String },
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("the prompt has {tokens} tokens but the context holds at most {limit} prompt tokens; shorten it or raise --ctx-size")]
    PromptTooLong { tokens: usize, limit: usize },
    #[error("invalid grammar: {0}")]
    InvalidGrammar(String),
    #[error("invalid JSON schema: {0}")]
    InvalidSchema(String),
    /// A grammar (or a schema's) that would cost the engine too much to compile or to follow.
    #[error("grammar too complex: {0}")]
    GrammarTooComplex(String),
    /// More work in one request than the engine takes at once.
    #[error("{message}")]
    TooMuchWork { name: &'static str, message: String },
    #[error("the model has no chat template; send a plain prompt instead of chat messages")]
    NoChatTemplate,
    #[error("the chat template could not be applied: {0}")]
    ChatTemplate(String),
    #[error("Medusa mode needs heads for this model: pass a heads file (--heads PATH)")]
    NoMedusaHeads,
    #[error("invalid Medusa heads: {0}")]
    Heads(String),
    #[error("invalid feature drafter: {0}")]
    FeatureDrafter(String),
    #[error("these Medusa heads were made for another model: its {what} is {heads}, this model's is {model}")]
    HeadsMismatch {
        what: &'static str,
        heads: String,
        model: String,
    },
    #[error("eagle mode needs a feature drafter for this model: pass one (--drafter PATH)")]
    NoEagleDrafter,
    #[error("draft mode needs a draft model: load one beside the model (--draft-model PATH)")]
    NoDraftModel,
    #[error("{} cannot draft for this model: {reason}", path.display())]
    DraftModelMismatch { path: PathBuf, reason: String },
    #[error("llama.cpp decode failed: {0}")]
    Decode(String),
    /// A step failed in a way the engine did not foresee (a panic): its requests end, the
    /// engine goes on.
    #[error("the engine failed during this request's step and ended it: {0}")]
    StepFailed(String),
    #[error("quantization failed: {0}")]
    Quantize(String),
    #[error("the engine has stopped")]
    EngineStopped,
    /// Grammars refused earlier are still being worked off (llama.cpp cannot stop them).
    #[error(
        "{overdue} grammars refused as too complex are still being worked off in the background; \
         grammars are taken again once they end"
    )]
    GrammarsBusy { overdue: usize },
    /// Every grammar check's place stayed taken for as long as a check may wait.
    #[error(
        "{running} grammar checks are running and none ended in time; send the grammar again \
         shortly"
    )]
    GrammarChecksBusy { running: usize },
    /// The client's own share of grammar check places stayed taken for as long as a check may
    /// wait.
    #[error(
        "this client already has {running} grammar checks running, as many as one client may; \
         send the grammar again when one has ended"
    )]
    ClientGrammarChecksBusy { running: usize },
    #[error("the queue is full ({capacity} requests waiting); retry in {retry_after_ms} ms")]
    QueueFull {
        capacity: usize,
        retry_after_ms: u64,
    },
    /// A remote engine's failure, with a code saying which kind (unreachable, refused the key,
    /// timed out, answered something unreadable, or reported an error).
    #[error("{message}")]
    Remote { code: &'static str, message: String },
    #[error("i/o error on {}: {message}", path.display())]
    Io { path: PathBuf, message: String },
    #[error("cannot widen {}: {reason}", path.display())]
    Widen { path: PathBuf, reason: String },
}

fn heads_not_model_message(path: &std::path::Path, model: Option<&std::path::Path>) -> String {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    match model {
        Some(model) => format!(
            "{name} is a Medusa heads file, not a model: it goes with {} beside it. Open that \
             model and pick {name} as its heads (--model {} --heads {})",
            model.file_name().unwrap_or_default().to_string_lossy(),
            model.display(),
            path.display()
        ),
        None => format!(
            "{name} is a Medusa heads file, not a model: pick the model it was made for as the \
             model, and {name} as its heads (--heads {})",
            path.display()
        ),
    }
}

impl EngineError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::ModelNotFound { .. } => "model_not_found",
            Self::NotGguf { .. } => "not_gguf",
            Self::CorruptModel { .. } => "corrupt_model",
            Self::HeadsNotModel { .. } => "heads_not_model",
            Self::LoadFailed { .. } => "model_load_failed",
            Self::Context(_) => "context_failed",
            Self::InvalidParameter { .. } => "invalid_parameter",
            Self::EmptyPrompt => "empty_prompt",
            Self::PromptTooLong { .. } => "prompt_too_long",
            Self::InvalidGrammar(_) => "invalid_grammar",
            Self::InvalidSchema(_) => "invalid_json_schema",
            Self::GrammarTooComplex(_) => "grammar_too_complex",
            Self::TooMuchWork { .. } => "request_too_large",
            Self::NoChatTemplate => "no_chat_template",
            Self::ChatTemplate(_) => "chat_template_failed",
            Self::NoMedusaHeads => "no_medusa_heads",
            Self::Heads(_) => "invalid_heads",
            Self::FeatureDrafter(_) => "invalid_feature_drafter",
            Self::HeadsMismatch { .. } => "heads_model_mismatch",
            Self::NoDraftModel => "no_draft_model",
            Self::NoEagleDrafter => "no_eagle_drafter",
            Self::DraftModelMismatch { .. } => "draft_model_mismatch",
            Self::Decode(_) => "decode_failed",
            Self::StepFailed(_) => "engine_step_failed",
            Self::Quantize(_) => "quantize_failed",
            Self::EngineStopped => "engine_stopped",
            Self::QueueFull { .. } => "queue_full",
            Self::GrammarsBusy { .. }
            | Self::GrammarChecksBusy { .. }
            | Self::ClientGrammarChecksBusy { .. } => "grammars_busy",
            Self::Remote { code, .. } => code,
            Self::Io { .. } => "io_error",
            Self::Widen { .. } => "cannot_widen",
        }
    }

    /// True when the caller sent something wrong (as opposed to the engine failing).
    pub fn is_client_error(&self) -> bool {
        matches!(
            self,
            Self::InvalidParameter { .. }
                | Self::EmptyPrompt
                | Self::PromptTooLong { .. }
                | Self::InvalidGrammar(_)
                | Self::InvalidSchema(_)
                | Self::GrammarTooComplex(_)
                | Self::TooMuchWork { .. }
                | Self::NoChatTemplate
                | Self::NoMedusaHeads
                | Self::NoDraftModel
                | Self::NoEagleDrafter
                | Self::HeadsNotModel { .. }
        )
    }

    pub(crate) fn io(path: impl Into<PathBuf>, err: &std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            message: err.to_string(),
        }
    }
}
