//! A job as it goes: its figures, published to watchers and written to the history.

use std::time::Instant;

use store::{TrainingJob, TrainingProgress, TrainingStatus};
use tokio::sync::watch;
use training::{TrainError, TrainProgress};

use super::{END_WRITE_ATTEMPTS, PUBLISH_EVERY, STORE_EVERY};
use crate::training_figures::{TrainingFigures, TrainingPhase, TrainingReport};

/// The job as it goes: folds the trainer's reports into its figures, times its phases and
/// publishes it to watchers.
pub(super) struct Reporter {
    pub(super) job: TrainingJob,
    pub(super) figures: TrainingFigures,
    sender: watch::Sender<TrainingJob>,
    phase: TrainingPhase,
    phase_started: Instant,
    /// Work done when the phase started (a resumed collection starts part-way).
    work_at_start: usize,
    last_published: Option<Instant>,
}

impl Reporter {
    pub(super) fn new(
        job: TrainingJob,
        figures: TrainingFigures,
        sender: watch::Sender<TrainingJob>,
    ) -> Self {
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

    pub(super) fn absorb(&mut self, event: &TrainProgress) {
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

    pub(super) fn enter(&mut self, phase: TrainingPhase) {
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
    pub(super) fn update(&mut self, now: bool) {
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

    pub(super) fn publish(&mut self) {
        self.job.phase = self.phase.as_str().to_owned();
        self.job.figures = serde_json::to_value(&self.figures).expect("figures serialize");
        self.sender.send_replace(self.job.clone());
        self.last_published = Some(Instant::now());
    }

    /// Records how the job ended (the caller publishes it once the history has it).
    pub(super) fn finish(&mut self, outcome: Result<TrainingReport, TrainError>) {
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

pub(super) fn progress_of(job: &TrainingJob) -> TrainingProgress {
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
pub(super) async fn record_end(store: &store::Store, job: &TrainingJob) {
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
pub(super) async fn persist_progress(
    store: store::Store,
    mut updates: watch::Receiver<TrainingJob>,
) {
    while updates.changed().await.is_ok() {
        let job = updates.borrow_and_update().clone();
        if let Err(err) = store.update_training_job(job.id, &progress_of(&job)).await {
            tracing::warn!(id = job.id, %err, "training progress not recorded");
        }
        tokio::time::sleep(STORE_EVERY).await;
    }
}
