//! The one heads training job that may run at a time: free, reserved while a job is recorded,
//! or held by the running job with its stop flag and its updates.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use store::TrainingJob;
use tokio::sync::watch;
use training::StopFlag;

use crate::error::{AppError, ErrorKind};

/// The job under way, if any.
#[derive(Default)]
pub(crate) struct TrainingSlot(Mutex<Slot>);

#[derive(Default)]
enum Slot {
    #[default]
    Free,
    /// A job is being recorded and will start.
    Reserved,
    Active(ActiveJob),
}

pub(crate) struct ActiveJob {
    pub id: i64,
    pub stop: StopFlag,
    /// False once the heads are written: the tune that follows cannot be stopped part-way.
    pub cancellable: Arc<AtomicBool>,
    pub updates: watch::Receiver<TrainingJob>,
}

impl TrainingSlot {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims the slot for a job about to start; a conflict while one runs.
    pub(crate) fn reserve(&self) -> Result<Reservation<'_>, AppError> {
        let mut slot = self.lock();
        match &*slot {
            Slot::Free => {
                *slot = Slot::Reserved;
                Ok(Reservation(self))
            }
            Slot::Reserved => Err(in_progress("another training job is starting".into())),
            Slot::Active(active) => Err(in_progress(format!(
                "training job {} is running; one job trains at a time",
                active.id
            ))),
        }
    }

    pub(crate) fn active(&self) -> Option<(i64, watch::Receiver<TrainingJob>)> {
        match &*self.lock() {
            Slot::Active(active) => Some((active.id, active.updates.clone())),
            _ => None,
        }
    }

    /// A conflict while job `id` runs, or while a job is starting (whose id is not known yet).
    pub(crate) fn check_stopped(&self, id: i64) -> Result<(), AppError> {
        match &*self.lock() {
            Slot::Active(active) if active.id == id => Err(AppError::new(
                ErrorKind::Conflict,
                "training_running",
                format!("training job {id} is running: cancel it first"),
            )),
            Slot::Reserved => Err(in_progress(
                "a training job is starting; try again in a moment".into(),
            )),
            _ => Ok(()),
        }
    }

    /// Raises the stop of job `id` if it is the one running and may still stop.
    pub(crate) fn cancel(&self, id: i64) -> Result<(), AppError> {
        match &*self.lock() {
            Slot::Active(active) if active.id == id => {
                if !active.cancellable.load(Ordering::Acquire) {
                    return Err(AppError::new(
                        ErrorKind::Conflict,
                        "training_tuning",
                        "the heads are written and being tuned, which cannot be stopped \
                         part-way; it takes about a minute",
                    ));
                }
                active.stop.raise();
                Ok(())
            }
            _ => Err(AppError::new(
                ErrorKind::Conflict,
                "not_running",
                format!("training job {id} is not running"),
            )),
        }
    }

    pub(crate) fn release(&self) {
        *self.lock() = Slot::Free;
    }
}

fn in_progress(message: String) -> AppError {
    AppError::new(ErrorKind::Conflict, "training_in_progress", message)
}

/// A claimed slot; freed when dropped before a job fills it.
pub(crate) struct Reservation<'a>(&'a TrainingSlot);

impl Reservation<'_> {
    pub(crate) fn fill(self, job: ActiveJob) {
        *self.0.lock() = Slot::Active(job);
        std::mem::forget(self);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}
