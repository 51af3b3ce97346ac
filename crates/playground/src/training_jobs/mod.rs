//! Heads training as a job of the playground: collect the model's answers, train, write the
//! heads next to the model, then tune them. One job at a time, on threads of its own beside
//! generation (which goes on, slower). Every change is published to watchers at once and written
//! to the history at most once a second; a cancel keeps the collected answers, and a resume
//! (after a cancel, a failure or a crash) continues from them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use engine::tuning::DEFAULT_PROMPTS;
use futures_util::Stream;
use store::{NewTrainingJob, TrainingJob, TrainingStatus};
use tokio::sync::watch;
use training::{StopFlag, TrainError, TrainHeadsOptions};

use crate::error::{AppError, ErrorKind};
use crate::playground::Playground;
use crate::training_figures::{
    DeletedTrainingJob, PlannedHeads, TrainingFigures, TrainingPhase, TrainingRequest,
    TrainingSettings, DEFAULT_EPOCHS, DEFAULT_MAX_TOKENS, DEFAULT_TUNE_MAX_TOKENS,
    DEFAULT_VOCAB_SUBSET, EVALUATIONS_PER_EPOCH,
};
use crate::training_slot::{ActiveJob, Reservation};

mod files;
mod job_reporter;
mod job_run;

use files::{data_file, heads_path_for, model_name, remove_answers};
use job_reporter::{persist_progress, record_end, Reporter};
use job_run::{run_job, trained_before, JobContext};

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
    pub(super) fn new(request: &TrainingRequest) -> Result<Self, AppError> {
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
