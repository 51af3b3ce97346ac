//! What every handler shares: the model slot, the run history, the runs in progress and the
//! counters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::StatusCode;
use engine::{Canceller, Engine, EngineConfig};
use store::Store;

use crate::error::ApiError;
use crate::metrics::ServerMetrics;
use crate::model_slot::{LoadRequest, LoadedModel, ModelSlot};

#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    model: Arc<ModelSlot>,
    store: Store,
    metrics: ServerMetrics,
    running: Mutex<HashMap<i64, Canceller>>,
    tuning: AtomicBool,
}

/// Marks a tuning in progress until dropped.
pub struct TuningGuard<'a>(&'a AtomicBool);

impl Drop for TuningGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl AppState {
    /// A state serving `engine`, loaded from `config` (kept to load other models the same way).
    pub fn new(engine: Arc<Engine>, store: Store, config: EngineConfig) -> Self {
        let loaded = LoadedModel {
            engine,
            heads_path: config.heads_path.clone(),
        };
        Self::with_slot(ModelSlot::new(config, Some(loaded)), store)
    }

    /// A state with no model yet: `request` loads in the background (see [`AppState::model`]).
    /// A request refused at once (a missing file) is kept as the load error for the UI to show.
    pub fn loading(store: Store, template: EngineConfig, request: LoadRequest) -> Self {
        let state = Self::with_slot(ModelSlot::new(template, None), store);
        if let Err(err) = state.load_model(request) {
            state.inner.model.record_failure(err.code, err.message);
        }
        state
    }

    fn with_slot(slot: ModelSlot, store: Store) -> Self {
        Self {
            inner: Arc::new(Inner {
                model: Arc::new(slot),
                store,
                metrics: ServerMetrics::default(),
                running: Mutex::new(HashMap::new()),
                tuning: AtomicBool::new(false),
            }),
        }
    }

    /// The model to generate with (503 while none is loaded).
    pub fn model(&self) -> Result<Arc<LoadedModel>, ApiError> {
        self.inner.model.current()
    }

    pub fn model_slot(&self) -> &ModelSlot {
        &self.inner.model
    }

    /// Starts loading another model; the current one serves until it is ready.
    pub fn load_model(&self, request: LoadRequest) -> Result<(), ApiError> {
        self.inner.model.begin_load(request)
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn metrics(&self) -> &ServerMetrics {
        &self.inner.metrics
    }

    pub(crate) fn register_run(&self, run_id: i64, canceller: Canceller) {
        self.running().insert(run_id, canceller);
    }

    pub(crate) fn unregister_run(&self, run_id: i64) {
        self.running().remove(&run_id);
    }

    /// Cancels a run in progress; it is recorded as `cancelled` with what it produced.
    pub fn cancel_run(&self, run_id: i64) -> Result<(), ApiError> {
        match self.running().get(&run_id) {
            Some(canceller) => {
                canceller.cancel();
                Ok(())
            }
            None => Err(ApiError::new(
                StatusCode::CONFLICT,
                "not_running",
                format!("run {run_id} is not in progress"),
            )),
        }
    }

    /// Cancels every run in progress (the desktop app does this when its window closes).
    pub fn cancel_all(&self) -> usize {
        let running = self.running();
        running.values().for_each(Canceller::cancel);
        running.len()
    }

    /// Claims the tuner; 409 while another tuning runs.
    pub fn begin_tuning(&self) -> Result<TuningGuard<'_>, ApiError> {
        if self.inner.tuning.swap(true, Ordering::AcqRel) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "tuning_in_progress",
                "the heads are being tuned already; wait for that result",
            ));
        }
        Ok(TuningGuard(&self.inner.tuning))
    }

    /// Runs in progress.
    pub fn running_count(&self) -> usize {
        self.running().len()
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Canceller>> {
        self.inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
