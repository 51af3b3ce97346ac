//! Run history for Medusa Playground: every generation run kept in SQLite with its prompt,
//! settings, output, timings, Medusa statistics and per-step events; comparisons that link runs of
//! one prompt in different modes; chat conversations whose messages link to their runs; heads
//! training jobs; export as JSON, JSON lines or CSV, and import of JSON exports.
//!
//! The store knows nothing of the engine: it has its own plain records, and the caller maps engine
//! results onto them.
//!
//! ```no_run
//! # async fn demo() -> Result<(), store::StoreError> {
//! use store::{ModelRef, NewRun, PromptRecord, Store};
//! let store = Store::open(Store::default_path()?).await?;
//! let model = ModelRef {
//!     name: "SmolLM2-135M-Instruct".into(),
//!     path: "/models/smollm2.gguf".into(),
//!     file_type: "Q4_1".into(),
//!     identity: String::new(),
//! };
//! let prompt = PromptRecord::Text("Once upon a time".into());
//! let run = NewRun::new("normal", model, prompt, serde_json::json!({"temperature": 0.0}), 64);
//! let id = store.begin_run(&run).await?;
//! store.fail_run(id, "model file vanished").await?;
//! # Ok(())
//! # }
//! ```

mod codec;
mod comparison_figures;
mod comparisons;
mod conversation_export;
mod conversations;
mod db;
mod delete;
mod error;
mod export;
mod filter;
mod import;
mod import_checks;
mod import_spool;
mod records;
mod runs;
mod search;
mod training_jobs;
mod turns;
mod write;

pub use comparison_figures::first_difference;
pub use conversation_export::ConversationExport;
pub use conversations::{
    Conversation, ConversationMessage, ConversationPatch, ConversationSummary,
    MAX_CONVERSATIONS_LISTED, MAX_TITLE_CHARS,
};
pub use db::{Store, DB_ENV};
pub use delete::{DeleteReport, MAX_DELETED_RUNS};
pub use error::{Result, StoreError};
pub use export::{ExportDocument, ExportFormat, EXPORT_VERSION};
pub use filter::{RunFilter, SortKey, SortOrder, LOCAL_ENGINE};
pub use import::{
    ImportRejection, ImportReport, SpooledImport, MAX_IMPORT_BYTES, MAX_IMPORT_STEPS,
    MAX_IMPORT_TOKENS,
};
pub use records::{
    Comparison, ComparisonRun, ConversationTurn, DraftDecisionRecord, DraftNodeRecord,
    DraftSkipRecord, DrafterEvidenceRecord, HeadsRef, ListedRun, MessageRecord, ModeFigures,
    ModelRef, NewRun, PromptRecord, Run, RunOutcome, RunStatus, RunWithSteps, SpeedVerdict,
    SpeedupBounds, Spread, StepRecord, StepTokenRecord, StepTreeRecord, TokenLogprobRecord,
    TopLogprobRecord,
};
pub use training_jobs::{
    training_job_name, NewTrainingJob, TrainingJob, TrainingProgress, TrainingStatus,
    MAX_TRAINING_JOBS_LISTED,
};
pub use write::StoreHealth;
