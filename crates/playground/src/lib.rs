//! Medusa Playground's application layer: what the playground does, whatever carries it. It
//! hosts the served model (and loads replacements), checks requests once, starts runs and records
//! each in the history, answers history and comparison queries, and tunes the heads. It knows no
//! transport: the HTTP server (`server`) and the desktop app (`src-tauri`) are thin adapters over
//! [`Playground`], and both answer the types of [`contract`], from which the UI's TypeScript
//! types are generated.
//!
//! Flow of a run: an adapter's request shape -> [`GenerateRequest`](engine::GenerateRequest)
//! -> [`Playground::check`] (the one validation) -> [`runs::start`] (queued on the engine, recorded
//! in the store) -> [`RunEvent`]s back to the adapter.
//!
//! Heads training runs as a job beside generation (`training_jobs`), its figures in
//! [`training_figures`].

pub mod catalog;
pub mod comparing;
pub mod contract;
pub mod conversations;
pub mod divergence;
mod draft;
mod embeddings;
mod error;
pub mod event_socket;
mod events;
pub mod history;
mod info;
pub mod model_host;
mod playground;
mod recording;
pub mod remotes;
mod requests;
mod run_counters;
pub mod run_order;
pub mod runs;
mod scoring;
mod targets;
pub mod training_figures;
mod training_jobs;
mod training_slot;
pub mod tuning;

pub use draft::{DraftFields, TreeChoice};
pub use error::{AppError, ErrorBody, ErrorKind};
pub use events::{FinishedEvent, RunEvent};
pub use info::{Health, Info};
pub use model_host::{load_stage_name, HostedModel, LoadRequest, ModelHost, ModelSource};
pub use playground::{CheckedRequest, Playground};
pub use remotes::{AddRemoteRequest, RemoteEngineKind, RemoteInfo, Remotes};
pub use requests::{LoadModelRequest, PlaygroundRequest, SetTreeRequest, PLAYGROUND_MAX_TOKENS};
pub use run_counters::{Histogram, RunCounters, RunCountsSnapshot, RunLatencies, SpecDecodeCounts};
pub use runs::{Collected, RecordedEvent, RunHandle};
pub use targets::RunTarget;
pub use training_jobs::training_job_inputs;
