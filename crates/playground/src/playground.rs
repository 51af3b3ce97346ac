//! The application: the model host, the run history, the runs in progress and their counters.
//! Cheap to clone; every adapter holds one.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use engine::medusa::plan::request_tree_names;
use engine::{
    Canceller, Engine, EngineConfig, EngineMetrics, GenerateRequest, GenerationMode, ModelInfo,
    ValidRequest,
};
use remote::RemoteSpec;
use store::{Store, StoreHealth};

use crate::draft::TreeChoice;
use crate::error::{AppError, ErrorKind};
use crate::info::{Health, Info};
use crate::model_host::{HostedModel, LoadRequest, ModelHost};
use crate::remotes::{AddRemoteRequest, RemoteInfo, Remotes};
use crate::run_counters::RunCounters;
use crate::training_slot::TrainingSlot;

#[derive(Clone)]
pub struct Playground {
    inner: Arc<Inner>,
}

struct Inner {
    host: Arc<ModelHost>,
    store: Store,
    remotes: Remotes,
    counters: RunCounters,
    running: Mutex<HashMap<i64, Canceller>>,
    tuning: AtomicBool,
    training: TrainingSlot,
}

/// A request checked against the model that will run it (see [`Playground::check`]).
pub struct CheckedRequest {
    pub(crate) model: Arc<HostedModel>,
    pub(crate) request: ValidRequest,
}

impl CheckedRequest {
    pub fn request(&self) -> &GenerateRequest {
        self.request.get()
    }
}

/// Marks a tuning in progress until dropped.
pub(crate) struct TuningGuard<'a>(&'a AtomicBool);

impl Drop for TuningGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Playground {
    /// A playground serving `engine`, loaded from `config` (kept to load other models the same
    /// way).
    pub fn new(engine: Arc<Engine>, store: Store, config: EngineConfig) -> Self {
        let hosted = HostedModel::new(engine, config.heads_path.clone());
        Self::with_host(ModelHost::new(config, Some(hosted)), store)
    }

    /// A playground with no model yet: `request` loads in the background (see
    /// [`Playground::model`]). A request refused at once (a missing file) is kept as the load
    /// error for the UI to show.
    pub fn loading(store: Store, template: EngineConfig, request: LoadRequest) -> Self {
        let playground = Self::with_host(ModelHost::new(template, None), store);
        if let Err(err) = playground.load_model(request) {
            playground.inner.host.record_failure(err);
        }
        playground
    }

    /// The remote engines saved with the history come back with it.
    fn with_host(host: ModelHost, store: Store) -> Self {
        Self {
            inner: Arc::new(Inner {
                host: Arc::new(host),
                remotes: Remotes::for_database(store.path()),
                store,
                counters: RunCounters::default(),
                running: Mutex::new(HashMap::new()),
                tuning: AtomicBool::new(false),
                training: TrainingSlot::default(),
            }),
        }
    }

    /// The model to generate with (unavailable while none is loaded).
    pub fn model(&self) -> Result<Arc<HostedModel>, AppError> {
        self.inner.host.current()
    }

    /// Runs `work` on the loaded engine from a blocking thread, since engine calls wait for the
    /// engine's own thread; a task that could not finish is an internal error with `code`.
    pub(crate) async fn on_engine<T: Send + 'static>(
        &self,
        code: &'static str,
        work: impl FnOnce(&engine::Engine) -> Result<T, engine::EngineError> + Send + 'static,
    ) -> Result<T, AppError> {
        let engine = self.model()?.engine.clone();
        tokio::task::spawn_blocking(move || work(&engine))
            .await
            .map_err(|e| AppError::internal(code, e.to_string()))?
            .map_err(AppError::from)
    }

    /// What the model served now is (unavailable while none is loaded).
    pub fn model_info(&self) -> Result<ModelInfo, AppError> {
        Ok(self.model()?.engine.info().clone())
    }

    /// The served model's engine counters; zeros while none is loaded.
    pub fn engine_metrics(&self) -> EngineMetrics {
        self.inner
            .host
            .current_if_loaded()
            .map(|model| model.engine.metrics())
            .unwrap_or_default()
    }

    /// The model and heads files served now, if any.
    pub fn loaded_files(&self) -> Vec<PathBuf> {
        self.inner
            .host
            .current_if_loaded()
            .map(|model| {
                [
                    Some(model.engine.info().path.clone()),
                    model.heads_path.clone(),
                ]
                .into_iter()
                .flatten()
                .collect()
            })
            .unwrap_or_default()
    }

    /// Whether generations can be served now.
    pub async fn health(&self) -> Health {
        if let StoreHealth::Degraded { reason } = self.store().health().await {
            return Health::Degraded { reason };
        }
        match self.model() {
            Ok(model) => Health::Ok {
                model: model.engine.info().name.clone(),
            },
            Err(err) => Health::Loading {
                message: err.message,
            },
        }
    }

    pub fn model_host(&self) -> &ModelHost {
        &self.inner.host
    }

    /// Starts loading another model; the current one serves until it is ready.
    pub fn load_model(&self, request: LoadRequest) -> Result<(), AppError> {
        self.inner.host.begin_load(request)
    }

    /// The one validation of a generation, whichever API it came through: its fields, and what
    /// it asks of the model now served (heads for Medusa mode).
    pub fn check(&self, request: GenerateRequest) -> Result<CheckedRequest, AppError> {
        let model = self.model()?;
        let request = model
            .engine
            .validate_with_default_tree(request, model.default_tree_policy().as_ref())?;
        Ok(CheckedRequest { model, request })
    }

    /// Makes `choice` the tree Medusa requests drafting `auto` draft in full (`"auto"` undoes
    /// it), without reloading the model.
    pub fn set_default_tree(&self, choice: TreeChoice) -> Result<Info, AppError> {
        self.model()?.set_default_tree(choice)?;
        Ok(self.info())
    }

    pub fn info(&self) -> Info {
        let host = self.model_host();
        let model = host.current_if_loaded();
        // What the model was loaded with, and the drafting outlook as the costs are known now.
        let info = model.as_ref().map(|m| {
            let mut info = m.engine.info().clone();
            info.drafting_outlook = m.engine.known_drafting_outlook();
            info
        });
        let modes = modes_of(model.as_deref());
        Info {
            heads: info.as_ref().and_then(|i| i.heads.clone()),
            heads_path: model
                .as_ref()
                .and_then(|m| m.heads_path.as_ref())
                .map(|p| p.display().to_string()),
            tree: info.as_ref().and_then(|i| i.medusa_tree.clone()),
            default_tree: model.as_ref().and_then(|m| m.default_tree()),
            tree_names: info.as_ref().map_or_else(Vec::new, |i| {
                let head_count = i.heads.as_ref().map_or(0, |h| h.head_count);
                let tuned = i
                    .medusa_plan
                    .as_ref()
                    .is_some_and(|p| p.tuned_tree.is_some());
                request_tree_names(head_count, tuned)
            }),
            modes,
            metrics: model.as_ref().map(|m| m.engine.metrics()),
            database: self.store().path().display().to_string(),
            loading: host.loading_status(),
            error: host.last_error(),
            remotes: self.remotes().list(),
            model: info,
        }
    }

    /// The modes the model served now runs: every one but Medusa without heads and draft
    /// without a draft model; none while no model is loaded.
    pub fn modes(&self) -> Vec<GenerationMode> {
        modes_of(self.model_host().current_if_loaded().as_deref())
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The remote engines runs may name instead of the model served here.
    pub fn remotes(&self) -> &Remotes {
        &self.inner.remotes
    }

    /// Adds a remote engine from Settings; it is saved for later starts.
    pub async fn add_remote(&self, request: AddRemoteRequest) -> Result<RemoteInfo, AppError> {
        let spec = RemoteSpec::new(request.name, request.url, request.api_key)?;
        self.remotes().add(spec, true).await
    }

    pub fn counters(&self) -> &RunCounters {
        &self.inner.counters
    }

    pub(crate) fn register_run(&self, run_id: i64, canceller: Canceller) {
        self.running().insert(run_id, canceller);
    }

    pub(crate) fn unregister_run(&self, run_id: i64) {
        self.running().remove(&run_id);
    }

    /// Cancels a run in progress; it is recorded as `cancelled` with what it produced.
    pub fn cancel_run(&self, run_id: i64) -> Result<(), AppError> {
        match self.running().get(&run_id) {
            Some(canceller) => {
                canceller.cancel();
                Ok(())
            }
            None => Err(AppError::new(
                ErrorKind::Conflict,
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

    /// Claims the tuner; a conflict while another tuning runs.
    pub(crate) fn begin_tuning(&self) -> Result<TuningGuard<'_>, AppError> {
        if self.inner.tuning.swap(true, Ordering::AcqRel) {
            return Err(AppError::new(
                ErrorKind::Conflict,
                "tuning_in_progress",
                "the heads are being tuned already; wait for that result",
            ));
        }
        Ok(TuningGuard(&self.inner.tuning))
    }

    /// The heads training job under way, if any.
    pub(crate) fn training_slot(&self) -> &TrainingSlot {
        &self.inner.training
    }

    /// Runs in progress.
    pub fn running_count(&self) -> usize {
        self.running().len()
    }

    fn running(&self) -> MutexGuard<'_, HashMap<i64, Canceller>> {
        self.inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn modes_of(model: Option<&HostedModel>) -> Vec<GenerationMode> {
    let Some(model) = model else {
        return Vec::new();
    };
    let has_heads = model.has_heads();
    let has_draft_model = model.engine.info().draft_model.is_some();
    let has_eagle = model.engine.info().eagle.is_some();
    GenerationMode::ALL
        .into_iter()
        .filter(|m| match m {
            GenerationMode::Medusa => has_heads,
            GenerationMode::Draft => has_draft_model,
            GenerationMode::Eagle => has_eagle,
            _ => true,
        })
        .collect()
}
