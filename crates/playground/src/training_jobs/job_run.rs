//! A job's work on its blocking thread: collect, train, write the heads, tune them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use engine::tuning::{tune_engine, TuneOptions, TuneReport, DEFAULT_PROMPTS};
use engine::{Engine, EngineConfig};
use store::TrainingJob;
use training::{StopFlag, TrainError};

use super::files::{heads_path_for, place_heads};
use super::job_reporter::Reporter;
use super::Plan;
use crate::training_figures::{TrainingPhase, TrainingReport, TuneSummary};

pub(super) struct JobContext {
    pub(super) plan: Plan,
    /// Other jobs' heads files, which this job's heads may not take.
    pub(super) taken_heads: HashSet<PathBuf>,
    pub(super) data: PathBuf,
    pub(super) stop: StopFlag,
    pub(super) cancellable: Arc<AtomicBool>,
    /// The job's model with the served model's loading settings (threads, cost cache), for the
    /// tune's engine.
    pub(super) tune_config: EngineConfig,
    /// What an earlier run of the job trained, when only its tune is left.
    pub(super) trained: Option<TrainingReport>,
}

/// What a job stopped while tuning had trained: its report so far, while the heads file it
/// names is still there. Its resume then only tunes, rather than training again and writing
/// a second heads file beside the first.
pub(super) fn trained_before(job: &TrainingJob) -> Option<TrainingReport> {
    if job.phase != TrainingPhase::Tuning.as_str() {
        return None;
    }
    let report: TrainingReport = serde_json::from_value(job.report.clone()?).ok()?;
    let finished = report.tune.is_none()
        && job.heads_path.as_deref() == Some(report.heads_path.as_str())
        && Path::new(&report.heads_path).is_file();
    finished.then_some(report)
}

/// Collects, trains, writes the heads and tunes them (on a blocking thread); a job that had
/// trained already only tunes.
pub(super) fn run_job(
    context: &JobContext,
    reporter: &mut Reporter,
) -> Result<TrainingReport, TrainError> {
    let _span = tracing::info_span!("training_job", id = reporter.job.id).entered();
    let mut report = match &context.trained {
        Some(trained) => trained.clone(),
        None => {
            let trained = train(context, reporter)?;
            // Kept with the job before the tune: a job stopped while tuning resumes from it.
            reporter.job.report = Some(serde_json::to_value(&trained).expect("report serializes"));
            trained
        }
    };
    context.cancellable.store(false, Ordering::Release);
    reporter.enter(TrainingPhase::Tuning);
    let tune = tune_heads(context, Path::new(&report.heads_path), reporter)?;
    report.tune = Some(summary(&tune));
    reporter.enter(TrainingPhase::Done);
    Ok(report)
}

/// Collects, trains and writes the heads: the report without its tune.
pub(super) fn train(
    context: &JobContext,
    reporter: &mut Reporter,
) -> Result<TrainingReport, TrainError> {
    let planned = match &reporter.job.heads_path {
        Some(path) => PathBuf::from(path),
        None => heads_path_for(&context.plan.model, &context.taken_heads),
    };
    // Written under another name first, so that a crash never leaves a torn heads file that
    // the models list would offer.
    let staged = planned.with_extension("gguf.training");
    let mut options = context.plan.options(&staged, &context.data);
    options.stop = context.stop.clone();
    let trained = training::train_heads(&options, &mut |event| reporter.absorb(&event))?;
    let heads_path = place_heads(&staged, &planned, &context.plan.model, &context.taken_heads)?;
    reporter
        .job
        .set_heads_path(Some(heads_path.display().to_string()));
    Ok(TrainingReport {
        heads_path: heads_path.display().to_string(),
        file_bytes: trained.file_bytes,
        prompts: trained.prompts,
        generated_tokens: trained.generated_tokens,
        train_positions: trained.train_positions,
        heldout_positions: trained.heldout_positions,
        untrained_top1: trained.untrained.top1.clone(),
        heldout_top1: trained.trained.top1.clone(),
        heldout_top5: trained.trained.top5.clone(),
        tree_nodes: trained.tree.len(),
        expected_tokens_per_step: trained.expected_tokens_per_step,
        tree_tokens_per_step: trained.trained.tree_tokens_per_step,
        tune: None,
    })
}

/// Loads the model with the new heads and measures them along answers to the tune prompts.
pub(super) fn tune_heads(
    context: &JobContext,
    heads: &Path,
    reporter: &mut Reporter,
) -> Result<TuneReport, TrainError> {
    let settings = &context.plan.settings;
    let mut config = context.tune_config.clone();
    config.heads_path = Some(heads.to_path_buf());
    let engine = Engine::load(config)?;
    let options = TuneOptions {
        prompts: DEFAULT_PROMPTS[..settings.tune_prompts]
            .iter()
            .map(|p| p.to_string())
            .collect(),
        max_tokens: settings.tune_max_tokens,
        ..TuneOptions::default()
    };
    Ok(tune_engine(&engine, &options, |done, total| {
        reporter.figures.tuned = done;
        reporter.figures.tune_prompts = total;
        reporter.update(false);
    })?)
}

pub(super) fn summary(report: &TuneReport) -> TuneSummary {
    TuneSummary {
        measured_tokens_per_step: report
            .counted_tree
            .as_ref()
            .map(|t| t.measured_tokens_per_step),
        chosen_nodes: report.chosen.as_ref().map(|c| c.nodes),
        chosen_expected_tokens_per_step: report.chosen.as_ref().map(|c| c.expected_tokens_per_step),
        predicted_speedup: report.chosen.as_ref().map(|c| c.predicted_speedup),
        decision: report.decision.clone(),
    }
}
