//! The wire contract: every type the UI sends or receives, over HTTP and IPC alike, rendered as
//! the TypeScript the UI compiles against (`ui/src/lib/api/contract.ts`). The Rust types are the
//! single source; the test `contract` fails when the checked-in file is stale, and rewrites it
//! with `UPDATE_CONTRACT=1`.

use ts_rs::{Config, TS};

/// Where the generated file lives, from the workspace root.
pub const CONTRACT_PATH: &str = "ui/src/lib/api/contract.ts";

macro_rules! declarations {
    ($config:expr, $($ty:ty),+ $(,)?) => {
        vec![$(declaration::<$ty>($config)),+]
    };
}

fn declaration<T: TS>(config: &Config) -> String {
    format!(
        "{}export {}",
        T::docs().unwrap_or_default(),
        T::decl(config)
    )
}

/// The contract as TypeScript.
pub fn typescript() -> String {
    // JSON numbers: ids and counts stay far below 2^53.
    let config = Config::new().with_large_int("number");
    let config = &config;
    let blocks = declarations!(
        config,
        // Generation
        engine::GenerationMode,
        engine::LookupMemoryUse,
        engine::ChatMessage,
        engine::SamplingParams,
        engine::LogitBias,
        crate::PlaygroundRequest,
        crate::TreeChoice,
        engine::TokenSource,
        crate::RunEvent,
        engine::StepEvent,
        engine::StepTree,
        engine::StepToken,
        engine::DraftNode,
        engine::DraftSkip,
        engine::DraftSkipReason,
        engine::DraftDecision,
        engine::DrafterEvidence,
        crate::FinishedEvent,
        engine::RunSummary,
        engine::StopReason,
        crate::ErrorBody,
        crate::event_socket::StreamRequest,
        crate::event_socket::StreamMessage,
        crate::divergence::DivergenceRequest,
        crate::divergence::Divergence,
        engine::TokenChoice,
        engine::TokenLogprobs,
        // The backend
        crate::Info,
        engine::ModelInfo,
        engine::DraftModelInfo,
        engine::EagleInfo,
        engine::SamplingDefaults,
        engine::ComputeInfo,
        engine::ComputeDevice,
        engine::CpuKernels,
        engine::medusa::heads::HeadsInfo,
        engine::medusa::heads::BaseIdentity,
        engine::medusa::heads::TrainingRecord,
        engine::medusa::heads::HeadsCompute,
        engine::TreeSpec,
        engine::medusa::plan::MedusaPlan,
        engine::medusa::plan::TreeOrigin,
        engine::speculative::tree_builder::TreeForecast,
        engine::speculative::tree_builder::Verdict,
        engine::speculative::costs::DecodeCosts,
        engine::speculative::costs::CostPoint,
        engine::speculative::costs::CostSource,
        engine::speculative::outlook::DraftingOutlook,
        engine::speculative::outlook::CostRegime,
        engine::EngineMetrics,
        crate::model_host::LoadingStatus,
        crate::LoadModelRequest,
        crate::RemoteInfo,
        crate::RemoteEngineKind,
        crate::AddRemoteRequest,
        crate::SetTreeRequest,
        crate::tuning::TuneRequest,
        crate::training_figures::TrainingRequest,
        crate::training_figures::TrainingSettings,
        crate::training_figures::TrainingPhase,
        crate::training_figures::PhaseTime,
        crate::training_figures::LossPoint,
        crate::training_figures::EvaluationPoint,
        crate::training_figures::TrainingFigures,
        crate::training_figures::TuneSummary,
        crate::training_figures::TrainingReport,
        crate::training_figures::DeletedTrainingJob,
        crate::training_figures::PlannedHeads,
        store::TrainingJob,
        store::TrainingStatus,
        engine::tuning::TuneReport,
        engine::speculative::tree_builder::TunedSize,
        engine::tuning::ChosenTree,
        engine::tuning::ReferenceTree,
        engine::tuning::CountedTree,
        // Models
        crate::catalog::ModelsOnDisk,
        crate::catalog::ModelsFolder,
        crate::catalog::DiskModel,
        crate::catalog::CatalogSearch,
        crate::catalog::CatalogEntry,
        models::RepoFiles,
        models::HubFile,
        crate::catalog::DownloadRequest,
        crate::catalog::DeleteModelRequest,
        crate::catalog::DownloadEvent,
        models::DownloadProgress,
        models::Downloaded,
        // The run history
        crate::history::RunsQuery,
        crate::history::RunList,
        store::ListedRun,
        store::Run,
        store::RunStatus,
        store::ModelRef,
        store::HeadsRef,
        store::PromptRecord,
        store::MessageRecord,
        store::RunWithSteps,
        store::StepRecord,
        store::StepTreeRecord,
        store::StepTokenRecord,
        store::TokenLogprobRecord,
        store::TopLogprobRecord,
        store::DraftNodeRecord,
        store::DraftSkipRecord,
        store::DraftDecisionRecord,
        store::DrafterEvidenceRecord,
        store::SortKey,
        store::SortOrder,
        store::ExportFormat,
        store::ImportReport,
        store::DeleteReport,
        store::ImportRejection,
        crate::history::ComparisonList,
        store::Comparison,
        store::ModeFigures,
        store::Spread,
        store::SpeedVerdict,
        store::SpeedupBounds,
        store::ComparisonRun,
        // Conversations
        crate::conversations::ConversationsQuery,
        crate::conversations::ConversationList,
        store::ConversationSummary,
        store::Conversation,
        store::ConversationMessage,
        store::ConversationPatch,
        store::ConversationExport,
        serde_json::Value,
    );
    let mut out = String::from(
        "// The backend's wire contract, generated from its Rust types (crates/playground/src/contract.rs).\n\
         // Do not edit: `UPDATE_CONTRACT=1 cargo test -p playground --test contract` rewrites it.\n\n",
    );
    for block in blocks {
        out.push_str(&block);
        out.push_str("\n\n");
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}
