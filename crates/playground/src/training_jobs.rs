//! Heads training as a job of the playground: collect the model's answers, train, write the
//! heads next to the model, then tune them. One job at a time, on threads of its own beside
//! generation (which goes on, slower). Every change is published to watchers at once and written
//! to the history at most once a second; a cancel keeps the collected answers, and a resume
//! (after a cancel, a failure or a crash) continues from them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::tuning::{tune_engine, TuneOptions, TuneReport, DEFAULT_PROMPTS};
use engine::{Engine, EngineConfig};
use futures_util::Stream;
use store::{NewTrainingJob, TrainingJob, TrainingProgress, TrainingStatus};
use tokio::sync::watch;
use training::{StopFlag, TrainError, TrainHeadsOptions, TrainProgress};

use crate::error::{AppError, ErrorKind};
use crate::playground::Playground;
use crate::training_figures::{
    DeletedTrainingJob, PlannedHeads, TrainingFigures, TrainingPhase, TrainingReport,
    TrainingRequest, TrainingSettings, TuneSummary, DEFAULT_EPOCHS, DEFAULT_MAX_TOKENS,
    DEFAULT_TUNE_MAX_TOKENS, DEFAULT_VOCAB_SUBSET, EVALUATIONS_PER_EPOCH,
};
use crate::training_slot::{ActiveJob, Reservation};

/// Where jobs keep their collected answers, beside the history.
const TRAINING_DIR: &str = "training";
/// Least time between two publications of training steps (phase changes and evaluations are
/// published at once).
const PUBLISH_EVERY: Duration = Duration::from_millis(250);
/// Least time between two writes of a job's progress to the history.
const STORE_EVERY: Duration = Duration::from_secs(1);
/// Writes tried for a job's end before giving up (one [`STORE_EVERY`] apart).
const END_WRITE_ATTEMPTS: u32 = 5;

/// A job's settings with the prompts they name, checked.
struct Plan {
    model: PathBuf,
    settings: TrainingSettings,
    prompts: Vec<String>,
}

impl Plan {
    fn new(request: &TrainingRequest) -> Result<Self, AppError> {
        let model = check_model(&request.model)?;
        let prompts = read_prompts(request.prompts.as_deref())?;
        let samples = request.samples.unwrap_or(prompts.len());
        if samples > prompts.len() {
            return Err(invalid(
                "samples",
                format!("there are {} prompts, fewer than {samples}", prompts.len()),
            ));
        }
        let tune_prompts = request.tune_prompts.unwrap_or(DEFAULT_PROMPTS.len());
        if !(1..=DEFAULT_PROMPTS.len()).contains(&tune_prompts) {
            return Err(invalid(
                "tune_prompts",
                format!("must be between 1 and {}", DEFAULT_PROMPTS.len()),
            ));
        }
        let tune_max_tokens = request.tune_max_tokens.unwrap_or(DEFAULT_TUNE_MAX_TOKENS);
        if !(8..=1024).contains(&tune_max_tokens) {
            return Err(invalid("tune_max_tokens", "must be between 8 and 1024"));
        }
        let defaults = TrainHeadsOptions::new(&model, "");
        let settings = TrainingSettings {
            prompts_file: request.prompts.clone(),
            samples,
            max_tokens: request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            epochs: request.epochs.unwrap_or(DEFAULT_EPOCHS),
            heads: request.heads.unwrap_or(defaults.heads),
            vocab_subset: Some(request.vocab_subset.unwrap_or(DEFAULT_VOCAB_SUBSET)),
            path_input: request.path_input.unwrap_or(true),
            heldout_every: defaults.heldout_every,
            evaluations_per_epoch: EVALUATIONS_PER_EPOCH,
            tune_prompts,
            tune_max_tokens,
        };
        let plan = Self {
            model,
            settings,
            prompts,
        };
        plan.options(Path::new(""), Path::new(""))
            .validate()
            .map_err(train_error)?;
        Ok(plan)
    }

    /// A stored job's plan: its settings, with its prompt file read again.
    fn of_job(job: &TrainingJob) -> Result<Self, AppError> {
        let settings: TrainingSettings = serde_json::from_value(job.settings.clone())
            .map_err(|e| AppError::internal("training_settings", e.to_string()))?;
        Ok(Self {
            model: check_model(&job.model_path)?,
            prompts: read_prompts(settings.prompts_file.as_deref())?,
            settings,
        })
    }

    fn options(&self, out: &Path, data: &Path) -> TrainHeadsOptions {
        let s = &self.settings;
        let mut options = TrainHeadsOptions::new(&self.model, out);
        options.prompts = self.prompts.clone();
        options.samples = Some(s.samples);
        options.max_tokens = s.max_tokens;
        options.epochs = s.epochs;
        options.heads = s.heads;
        options.vocab_subset = s.vocab_subset;
        options.path_input = s.path_input;
        options.heldout_every = s.heldout_every;
        options.evaluations_per_epoch = s.evaluations_per_epoch;
        options.data = Some(data.to_path_buf());
        options.command = format!(
            "playground training job: {} prompts{}, {} tokens each, {} epochs, {} heads",
            s.samples,
            s.prompts_file
                .as_deref()
                .map_or(String::new(), |f| format!(" from {f}")),
            s.max_tokens,
            s.epochs,
            s.heads
        );
        options
    }
}

/// The files a stored job reads when it resumes: its model and its prompt file, for a door
/// that allows only some folders to check them.
pub fn training_job_inputs(job: &TrainingJob) -> Vec<PathBuf> {
    let prompts = serde_json::from_value::<TrainingSettings>(job.settings.clone())
        .ok()
        .and_then(|settings| settings.prompts_file);
    std::iter::once(job.model_path.clone())
        .chain(prompts)
        .map(PathBuf::from)
        .collect()
}

fn invalid(param: &'static str, message: impl Into<String>) -> AppError {
    let message = format!("{param}: {}", message.into());
    AppError::invalid_parameter(message).with_param(param)
}

fn check_model(path: &str) -> Result<PathBuf, AppError> {
    let model = PathBuf::from(path);
    if !model.is_file() {
        return Err(invalid("model", format!("{path} is not a file")));
    }
    // A file that is not a GGUF model is refused before a job starts.
    engine::medusa::convert::base_identity(&model)
        .map_err(|e| invalid("model", format!("{path} cannot be read as a model: {e}")))?;
    Ok(model)
}

fn read_prompts(file: Option<&str>) -> Result<Vec<String>, AppError> {
    training::load_prompts(file.map(Path::new)).map_err(train_error)
}

/// Errors of a request (options, prompt file) as 400s naming the field.
fn train_error(err: TrainError) -> AppError {
    match err {
        TrainError::InvalidOption { name, message } => invalid(name, message),
        TrainError::Prompts { .. } => {
            AppError::invalid_parameter(err.to_string()).with_param("prompts")
        }
        other => AppError::internal("training_failed", other.to_string()),
    }
}

impl Playground {
    /// Starts training heads for a model; answers the job as it starts.
    #[tracing::instrument(skip_all, fields(model = %request.model))]
    pub async fn start_training(&self, request: TrainingRequest) -> Result<TrainingJob, AppError> {
        let plan = Plan::new(&request)?;
        let reservation = self.training_slot().reserve()?;
        let figures = TrainingFigures::planned(
            plan.settings.samples,
            plan.settings.epochs,
            plan.settings.tune_prompts,
        );
        let taken = self.taken_heads_paths(None).await?;
        let heads = heads_path_for(&plan.model, &taken);
        let new = NewTrainingJob {
            model_name: model_name(&plan.model),
            model_path: plan.model.display().to_string(),
            heads_path: Some(heads.display().to_string()),
            settings: serde_json::to_value(&plan.settings).expect("settings serialize"),
            figures: serde_json::to_value(&figures).expect("figures serialize"),
        };
        // The folder first: a job is recorded only once it can keep its answers.
        let dir = self.training_dir()?;
        let job = self.store().begin_training_job(&new).await?;
        let data = data_file(&dir, job.id);
        Ok(self.launch(reservation, job, plan, figures, data, taken))
    }

    /// Where a job started now for `model` would write its heads (nothing is reserved).
    pub async fn planned_heads(&self, model: &str) -> Result<PlannedHeads, AppError> {
        let path = Path::new(model);
        if !path.is_file() {
            return Err(invalid("model", format!("{model} is not a file")));
        }
        let taken = self.taken_heads_paths(None).await?;
        Ok(PlannedHeads {
            model: model.to_owned(),
            heads_path: heads_path_for(path, &taken).display().to_string(),
        })
    }

    /// The heads files of the jobs in the history but `except`: no other job writes there.
    async fn taken_heads_paths(&self, except: Option<i64>) -> Result<HashSet<PathBuf>, AppError> {
        Ok(self
            .store()
            .training_heads_paths(except)
            .await?
            .into_iter()
            .map(PathBuf::from)
            .collect())
    }

    /// Continues a cancelled, failed or interrupted job from the answers it collected.
    #[tracing::instrument(skip(self))]
    pub async fn resume_training(&self, id: i64) -> Result<TrainingJob, AppError> {
        // Claimed before the job is read, so that it cannot be deleted in between.
        let reservation = self.training_slot().reserve()?;
        let job = self.store().get_training_job(id).await?;
        if !matches!(
            job.status,
            TrainingStatus::Cancelled | TrainingStatus::Failed | TrainingStatus::Interrupted
        ) {
            return Err(AppError::new(
                ErrorKind::Conflict,
                "not_resumable",
                format!(
                    "training job {id} is {}; only a cancelled, failed or interrupted job resumes",
                    job.status.as_str()
                ),
            ));
        }
        let plan = Plan::of_job(&job)?;
        let taken = self.taken_heads_paths(Some(id)).await?;
        let mut job = job;
        match job.heads_path.as_deref().map(Path::new) {
            // Recorded before jobs chose their heads file at the start: chosen now.
            None => {
                let heads = heads_path_for(&plan.model, &taken);
                job.set_heads_path(Some(heads.display().to_string()));
            }
            // A stored path may come from an import: heads are only ever written beside
            // their model, under a heads file's name.
            Some(heads) if !engine::is_heads_file_of(&plan.model, heads) => {
                return Err(AppError::new(
                    ErrorKind::Forbidden,
                    "path_not_allowed",
                    format!(
                        "training job {id} would write its heads to {}, which is not a heads \
                         file beside its model {}; start a new job for that model instead",
                        heads.display(),
                        plan.model.display()
                    ),
                ));
            }
            Some(_) => {}
        }
        let figures: TrainingFigures = serde_json::from_value(job.figures.clone())
            .map_err(|e| AppError::internal("training_figures", e.to_string()))?;
        // The job's own file in this history's folder, whatever path the job holds: an
        // imported job's would be another machine's, or anywhere.
        let data = data_file(&self.training_dir()?, id);
        Ok(self.launch(reservation, job, plan, figures, data, taken))
    }

    /// Deletes a job that is not running, with the answers it collected; the heads it wrote
    /// stay beside their model.
    #[tracing::instrument(skip(self))]
    pub async fn delete_training_job(&self, id: i64) -> Result<DeletedTrainingJob, AppError> {
        self.training_slot().check_stopped(id)?;
        // Found before the row goes, so that a folder that cannot be read fails the whole delete.
        let data = data_file(&self.training_dir()?, id);
        self.store().delete_training_job(id).await?;
        let freed_bytes = [data.with_extension("partial"), data]
            .iter()
            .map(|path| remove_answers(path))
            .sum();
        Ok(DeletedTrainingJob { id, freed_bytes })
    }

    /// Stops the job under way; it keeps what it collected.
    pub fn cancel_training(&self, id: i64) -> Result<(), AppError> {
        self.training_slot().cancel(id)
    }

    pub async fn list_training_jobs(&self) -> Result<Vec<TrainingJob>, AppError> {
        let mut jobs = self.store().list_training_jobs().await?;
        if let Some(live) = self.live_training_job() {
            if let Some(job) = jobs.iter_mut().find(|j| j.id == live.id) {
                *job = live;
            }
        }
        Ok(jobs)
    }

    /// A job as it is now (the job under way as last published, ahead of the history).
    pub async fn get_training_job(&self, id: i64) -> Result<TrainingJob, AppError> {
        match self.live_training_job().filter(|job| job.id == id) {
            Some(job) => Ok(job),
            None => Ok(self.store().get_training_job(id).await?),
        }
    }

    /// The job now, then each change until it stops running.
    pub async fn training_updates(
        &self,
        id: i64,
    ) -> Result<Pin<Box<dyn Stream<Item = TrainingJob> + Send>>, AppError> {
        let receiver = self
            .training_slot()
            .active()
            .filter(|(active, _)| *active == id)
            .map(|(_, receiver)| receiver);
        let Some(receiver) = receiver else {
            let job = self.store().get_training_job(id).await?;
            return Ok(Box::pin(futures_util::stream::iter([job])));
        };
        Ok(Box::pin(futures_util::stream::unfold(
            (receiver, true, false),
            |(mut receiver, first, ended)| async move {
                if ended || (!first && receiver.changed().await.is_err()) {
                    return None;
                }
                let job = receiver.borrow_and_update().clone();
                let ended = job.status != TrainingStatus::Running;
                Some((job, (receiver, false, ended)))
            },
        )))
    }

    fn live_training_job(&self) -> Option<TrainingJob> {
        self.training_slot()
            .active()
            .map(|(_, receiver)| receiver.borrow().clone())
    }

    /// Where jobs keep their collected answers, created if need be.
    fn training_dir(&self) -> Result<PathBuf, AppError> {
        let dir = self
            .store()
            .path()
            .parent()
            .unwrap_or(Path::new("."))
            .join(TRAINING_DIR);
        // Absolute, so that the stored path holds wherever the process runs from.
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::canonicalize(&dir))
            .map_err(|e| {
                AppError::internal(
                    "training_dir",
                    format!("cannot create {}: {e}", dir.display()),
                )
            })
    }

    /// Marks `job` running in the slot and starts its threads: only its tune where an earlier
    /// run of it trained already.
    fn launch(
        &self,
        reservation: Reservation<'_>,
        mut job: TrainingJob,
        plan: Plan,
        figures: TrainingFigures,
        data: PathBuf,
        taken: HashSet<PathBuf>,
    ) -> TrainingJob {
        let trained = trained_before(&job);
        job.status = TrainingStatus::Running;
        job.phase = TrainingPhase::Starting.as_str().to_owned();
        job.error = None;
        if trained.is_none() {
            // An earlier run's report, whose heads are gone: this run writes its own.
            job.report = None;
        }
        job.data_path = Some(data.display().to_string());
        let (sender, updates) = watch::channel(job.clone());
        let stop = StopFlag::default();
        // A tune runs to its end.
        let cancellable = Arc::new(AtomicBool::new(trained.is_none()));
        reservation.fill(ActiveJob {
            id: job.id,
            stop: stop.clone(),
            cancellable: cancellable.clone(),
            updates: updates.clone(),
        });
        let reporter = Reporter::new(job.clone(), figures, sender);
        let context = JobContext {
            tune_config: self.model_host().config_for(&plan.model),
            taken_heads: taken,
            plan,
            data,
            stop,
            cancellable,
            trained,
        };
        let playground = self.clone();
        tokio::spawn(async move { playground.supervise(context, reporter, updates).await });
        job
    }

    /// Runs the job to its end and records how it ended.
    async fn supervise(
        self,
        context: JobContext,
        reporter: Reporter,
        updates: watch::Receiver<TrainingJob>,
    ) {
        let id = reporter.job.id;
        let store = self.store().clone();
        let persist = tokio::spawn(persist_progress(store.clone(), updates.clone()));
        let ran = tokio::task::spawn_blocking(move || {
            let mut reporter = reporter;
            let outcome = run_job(&context, &mut reporter);
            (reporter, outcome)
        })
        .await;
        persist.abort();
        let _ = persist.await;
        let (mut reporter, outcome) = match ran {
            Ok(ran) => ran,
            Err(panic) => {
                tracing::error!(id, %panic, "training job thread ended abnormally");
                // Its last published state, failed, so that it does not read as running.
                let mut job = updates.borrow().clone();
                job.status = TrainingStatus::Failed;
                job.error = Some(format!("the training thread ended abnormally: {panic}"));
                record_end(&store, &job).await;
                self.training_slot().release();
                return;
            }
        };
        reporter.finish(outcome);
        record_end(&store, &reporter.job).await;
        self.training_slot().release();
        reporter.publish();
    }
}

fn data_file(dir: &Path, id: i64) -> PathBuf {
    dir.join(format!("job-{id}.data"))
}

/// Removes a file of collected answers if it is there; the bytes it held.
fn remove_answers(path: &Path) -> u64 {
    let Ok(meta) = std::fs::metadata(path) else {
        return 0;
    };
    match std::fs::remove_file(path) {
        Ok(()) => meta.len(),
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "collected answers not removed");
            0
        }
    }
}

fn model_name(model: &Path) -> String {
    model.file_stem().map_or_else(
        || model.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}

/// Where new heads for `model` go: `<model>.medusa.gguf` beside it, the name the models list
/// pairs with the model, or `<model>-2.medusa.gguf` and so on when that is taken by a file or
/// is in `taken` (another job's), so that existing heads are never overwritten and no two jobs
/// share a name.
fn heads_path_for(model: &Path, taken: &HashSet<PathBuf>) -> PathBuf {
    let dir = model.parent().unwrap_or(Path::new("."));
    let stem = model_name(model);
    let unused = engine::heads_file_names(&stem)
        .map(|name| dir.join(name))
        .find(|path| !taken.contains(path) && std::fs::symlink_metadata(path).is_err());
    unused.expect("an unused name")
}

/// Moves the finished heads from `staged` to `planned`, never over a file: when a file took
/// that name while the job ran, the next free name is used. Where they went.
fn place_heads(
    staged: &Path,
    planned: &Path,
    model: &Path,
    taken: &HashSet<PathBuf>,
) -> Result<PathBuf, TrainError> {
    let mut taken = taken.clone();
    let mut target = planned.to_path_buf();
    loop {
        // A hard link fails where the name exists, where a rename would replace it.
        match std::fs::hard_link(staged, &target) {
            Ok(()) => {
                let _ = std::fs::remove_file(staged);
                return Ok(target);
            }
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                tracing::warn!(path = %target.display(), "heads file appeared while the job ran; writing beside it");
                taken.insert(target);
                target = heads_path_for(model, &taken);
            }
            // A filesystem without hard links: renamed, after one more look.
            Err(_) if std::fs::symlink_metadata(&target).is_err() => {
                std::fs::rename(staged, &target).map_err(|e| TrainError::Data {
                    path: target.clone(),
                    message: e.to_string(),
                })?;
                return Ok(target);
            }
            Err(err) => {
                return Err(TrainError::Data {
                    path: target,
                    message: err.to_string(),
                })
            }
        }
    }
}

struct JobContext {
    plan: Plan,
    /// Other jobs' heads files, which this job's heads may not take.
    taken_heads: HashSet<PathBuf>,
    data: PathBuf,
    stop: StopFlag,
    cancellable: Arc<AtomicBool>,
    /// The job's model with the served model's loading settings (threads, cost cache), for the
    /// tune's engine.
    tune_config: EngineConfig,
    /// What an earlier run of the job trained, when only its tune is left.
    trained: Option<TrainingReport>,
}

/// What a job stopped while tuning had trained: its report so far, while the heads file it
/// names is still there. Its resume then only tunes, rather than training again and writing
/// a second heads file beside the first.
fn trained_before(job: &TrainingJob) -> Option<TrainingReport> {
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
fn run_job(context: &JobContext, reporter: &mut Reporter) -> Result<TrainingReport, TrainError> {
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
fn train(context: &JobContext, reporter: &mut Reporter) -> Result<TrainingReport, TrainError> {
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
fn tune_heads(
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

fn summary(report: &TuneReport) -> TuneSummary {
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

/// The job as it goes: folds the trainer's reports into its figures, times its phases and
/// publishes it to watchers.
struct Reporter {
    job: TrainingJob,
    figures: TrainingFigures,
    sender: watch::Sender<TrainingJob>,
    phase: TrainingPhase,
    phase_started: Instant,
    /// Work done when the phase started (a resumed collection starts part-way).
    work_at_start: usize,
    last_published: Option<Instant>,
}

impl Reporter {
    fn new(job: TrainingJob, figures: TrainingFigures, sender: watch::Sender<TrainingJob>) -> Self {
        Self {
            job,
            figures,
            sender,
            phase: TrainingPhase::Starting,
            phase_started: Instant::now(),
            work_at_start: 0,
            last_published: None,
        }
    }

    fn absorb(&mut self, event: &TrainProgress) {
        let evaluated = matches!(
            event,
            TrainProgress::Baseline(_)
                | TrainProgress::Train(training::TrainEvent::Evaluated { .. })
        );
        if let Some(phase) = self.figures.absorb(event) {
            self.enter(phase);
        }
        self.update(evaluated);
    }

    fn enter(&mut self, phase: TrainingPhase) {
        if phase == self.phase {
            return;
        }
        self.close_phase();
        self.phase = phase;
        self.work_at_start = self.figures.work(phase).map_or(0, |(done, _)| done);
        self.update(true);
    }

    fn close_phase(&mut self) {
        let seconds = self.phase_started.elapsed().as_secs_f64();
        if self.phase != TrainingPhase::Done {
            self.figures.add_phase_time(self.phase, seconds);
        }
        self.phase_started = Instant::now();
    }

    /// Refreshes the time left and publishes, at once when `now`, else at most every
    /// [`PUBLISH_EVERY`].
    fn update(&mut self, now: bool) {
        self.figures.seconds_left = self.figures.work(self.phase).and_then(|(done, total)| {
            let progressed = done.checked_sub(self.work_at_start).filter(|&d| d > 0)?;
            let per_unit = self.phase_started.elapsed().as_secs_f64() / progressed as f64;
            Some(per_unit * total.saturating_sub(done) as f64)
        });
        if now
            || self
                .last_published
                .is_none_or(|at| at.elapsed() >= PUBLISH_EVERY)
        {
            self.publish();
        }
    }

    fn publish(&mut self) {
        self.job.phase = self.phase.as_str().to_owned();
        self.job.figures = serde_json::to_value(&self.figures).expect("figures serialize");
        self.sender.send_replace(self.job.clone());
        self.last_published = Some(Instant::now());
    }

    /// Records how the job ended (the caller publishes it once the history has it).
    fn finish(&mut self, outcome: Result<TrainingReport, TrainError>) {
        self.close_phase();
        self.figures.seconds_left = None;
        match outcome {
            Ok(report) => {
                self.job.status = TrainingStatus::Finished;
                self.job.report = Some(serde_json::to_value(&report).expect("report serializes"));
            }
            Err(TrainError::Cancelled) => self.job.status = TrainingStatus::Cancelled,
            Err(err) => {
                tracing::warn!(id = self.job.id, %err, "training job failed");
                self.job.status = TrainingStatus::Failed;
                self.job.error = Some(err.to_string());
            }
        }
        self.job.phase = self.phase.as_str().to_owned();
        self.job.figures = serde_json::to_value(&self.figures).expect("figures serialize");
    }
}

fn progress_of(job: &TrainingJob) -> TrainingProgress {
    TrainingProgress {
        status: job.status,
        phase: job.phase.clone(),
        figures: job.figures.clone(),
        data_path: job.data_path.clone(),
        heads_path: job.heads_path.clone(),
        report: job.report.clone(),
        error: job.error.clone(),
    }
}

/// Writes how a job ended, trying again a few times: a job whose end is not written reads as
/// running until the next start.
async fn record_end(store: &store::Store, job: &TrainingJob) {
    for attempt in 1..=END_WRITE_ATTEMPTS {
        match store.update_training_job(job.id, &progress_of(job)).await {
            Ok(()) => return,
            Err(err) if attempt < END_WRITE_ATTEMPTS => {
                tracing::warn!(id = job.id, %err, attempt, "the training job's end not recorded yet");
                tokio::time::sleep(STORE_EVERY).await;
            }
            Err(err) => {
                tracing::error!(id = job.id, %err, "the training job's end could not be recorded")
            }
        }
    }
}

/// Writes the job's progress to the history as it changes, at most every [`STORE_EVERY`].
async fn persist_progress(store: store::Store, mut updates: watch::Receiver<TrainingJob>) {
    while updates.changed().await.is_ok() {
        let job = updates.borrow_and_update().clone();
        if let Err(err) = store.update_training_job(job.id, &progress_of(&job)).await {
            tracing::warn!(id = job.id, %err, "training progress not recorded");
        }
        tokio::time::sleep(STORE_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_heads_never_replace_existing_ones_nor_take_another_jobs_name() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("tiny.Q4_0.gguf");
        let none = HashSet::new();
        assert_eq!(
            heads_path_for(&model, &none),
            dir.path().join("tiny.Q4_0.medusa.gguf")
        );
        std::fs::write(dir.path().join("tiny.Q4_0.medusa.gguf"), b"x").unwrap();
        assert_eq!(
            heads_path_for(&model, &none),
            dir.path().join("tiny.Q4_0-2.medusa.gguf")
        );
        std::fs::write(dir.path().join("tiny.Q4_0-2.medusa.gguf"), b"x").unwrap();
        assert_eq!(
            heads_path_for(&model, &none),
            dir.path().join("tiny.Q4_0-3.medusa.gguf")
        );
        // A job that has not written its heads yet keeps its name from later jobs.
        let taken = HashSet::from([dir.path().join("tiny.Q4_0-3.medusa.gguf")]);
        assert_eq!(
            heads_path_for(&model, &taken),
            dir.path().join("tiny.Q4_0-4.medusa.gguf")
        );
        // A dangling link is a name taken too.
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(
                dir.path().join("gone"),
                dir.path().join("tiny.Q4_0-4.medusa.gguf"),
            )
            .unwrap();
            assert_eq!(
                heads_path_for(&model, &taken),
                dir.path().join("tiny.Q4_0-5.medusa.gguf")
            );
        }
    }

    #[test]
    fn finished_heads_go_beside_a_file_that_took_their_name() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("tiny.gguf");
        let planned = dir.path().join("tiny.medusa.gguf");
        let staged = dir.path().join("tiny.medusa.gguf.training");
        std::fs::write(&staged, b"new heads").unwrap();
        assert_eq!(
            place_heads(&staged, &planned, &model, &HashSet::new()).unwrap(),
            planned
        );
        assert_eq!(std::fs::read(&planned).unwrap(), b"new heads");
        assert!(!staged.exists());

        // Planned as -2, but a file took that name meanwhile and -3 is another job's.
        let planned = dir.path().join("tiny-2.medusa.gguf");
        std::fs::write(&planned, b"somebody's heads").unwrap();
        std::fs::write(&staged, b"newer heads").unwrap();
        let taken = HashSet::from([dir.path().join("tiny-3.medusa.gguf")]);
        let placed = place_heads(&staged, &planned, &model, &taken).unwrap();
        assert_eq!(placed, dir.path().join("tiny-4.medusa.gguf"));
        assert_eq!(std::fs::read(&placed).unwrap(), b"newer heads");
        assert_eq!(std::fs::read(&planned).unwrap(), b"somebody's heads");
        assert_eq!(
            std::fs::read(dir.path().join("tiny.medusa.gguf")).unwrap(),
            b"new heads"
        );
    }
}
