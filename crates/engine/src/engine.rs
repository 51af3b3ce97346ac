//! The engine handle: a dedicated thread owns the model and its llama.cpp context (which is
//! `Send` but not `Sync`); callers talk to it through channels and get a stream of events.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::sync::{mpsc as std_mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Instant;

use llama_cpp_2::context::params::{LlamaContextParams, LlamaPoolingType};
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use crate::backend::{backend, clear_recent_errors, take_recent_errors};
use crate::compute::ComputeInfo;
use crate::config::{EngineConfig, DEFAULT_CTX_SIZE};
use crate::cost_cache::{CostCache, CostKey};
use crate::diagnostics::{BaselineRun, Diagnostic};
use crate::drafters::{Drafters, MedusaSetup};
use crate::error::EngineError;
use crate::events::{GenerationEvent, RunSummary};
use crate::info::ModelInfo;
use crate::llama_runtime::{LlamaRuntime, RuntimeSettings};
use crate::medusa::accuracy::HeadAccuracy;
use crate::medusa::heads::MedusaHeads;
use crate::medusa::plan::plan_tree;
use crate::model_file;
use crate::prompt::RenderedPrompt;
use crate::quantize::file_type_name;
use crate::request::MAX_DRAFT_TOKENS;
use crate::request::{DraftPolicy, GenerateRequest, Prompt};
use crate::request_draft::{LoadedHeads, RequestDraft};
use crate::sampling_defaults::SamplingDefaults;
use crate::scheduler::{Command, EngineMetrics, Scheduler, Shared};
use crate::speculative::costs::DecodeCosts;
use crate::speculative::tree::TreeSpec;
use crate::step_profile::StepProfile;
use crate::token::TokenId;
use crate::valid_request::ValidRequest;

/// A loaded model, ready to generate. Dropping it stops its thread.
pub struct Engine {
    commands: UnboundedSender<Command>,
    info: ModelInfo,
    shared: Arc<Shared>,
    max_queued: usize,
    /// Whether decodes keep the hidden states (heads loaded, or asked for at load).
    returns_hidden_states: bool,
    thread: Option<JoinHandle<()>>,
}

impl Engine {
    /// Loads the model on a new engine thread; returns once it is ready or has failed.
    pub fn load(config: EngineConfig) -> Result<Self, EngineError> {
        config.validate()?;
        let header = model_file::inspect(&config.model_path)?;
        let (commands, receiver) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = std_mpsc::channel();
        let shared = Arc::new(Shared {
            queued: AtomicUsize::new(0),
            metrics: Mutex::new(EngineMetrics::default()),
            step_profile: Mutex::new(StepProfile::default()),
        });
        let max_queued = config.max_queued;
        let hidden_states_asked = config.hidden_states;
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("medusa-engine".into())
            .spawn(move || engine_thread(config, header, ready_tx, receiver, thread_shared))
            .map_err(|e| EngineError::Context(format!("cannot start engine thread: {e}")))?;
        match ready_rx.recv() {
            Ok(Ok(info)) => Ok(Self {
                commands,
                // The context keeps hidden states when asked to, or for the heads it loaded.
                returns_hidden_states: hidden_states_asked || info.heads.is_some(),
                info,
                shared,
                max_queued,
                thread: Some(thread),
            }),
            Ok(Err(err)) => {
                let _ = thread.join();
                Err(err)
            }
            Err(_) => {
                let _ = thread.join();
                Err(EngineError::EngineStopped)
            }
        }
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The one check of a request: its own fields, and what it asks of this engine (heads for
    /// Medusa mode, hidden states), with its draft decided. Only a [`ValidRequest`] can be
    /// queued.
    pub fn validate(&self, request: GenerateRequest) -> Result<ValidRequest, EngineError> {
        self.validate_with_default_tree(request, None)
    }

    /// [`Engine::validate`], with `default_tree` drafted by Medusa requests that draft `auto`
    /// (the tree set in Settings).
    pub fn validate_with_default_tree(
        &self,
        mut request: GenerateRequest,
        default_tree: Option<&DraftPolicy>,
    ) -> Result<ValidRequest, EngineError> {
        request.validate()?;
        let heads = match (&self.info.heads, &self.info.medusa_plan) {
            (Some(heads), Some(plan)) => Some(LoadedHeads {
                head_count: heads.head_count,
                plan,
            }),
            _ => None,
        };
        let draft = RequestDraft::resolve(&request, heads, default_tree)?;
        if request.record_hidden_states && !self.returns_hidden_states {
            return Err(EngineError::InvalidParameter {
                name: "record_hidden_states",
                message: "the engine was loaded without hidden states".into(),
            });
        }
        request.draft = draft.policy.clone();
        Ok(ValidRequest::accepted(request, draft))
    }

    /// [`Engine::validate`], then [`Engine::submit`].
    pub fn generate(&self, request: GenerateRequest) -> Result<GenerationStream, EngineError> {
        self.submit(self.validate(request)?)
    }

    /// Queues a request and returns its event stream. Requests beyond the queue's capacity are
    /// refused here at once.
    pub fn submit(&self, request: ValidRequest) -> Result<GenerationStream, EngineError> {
        let queued = self.shared.queued.fetch_add(1, Ordering::Relaxed);
        if queued >= self.max_queued {
            self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(EngineError::QueueFull {
                capacity: self.max_queued,
                retry_after_ms: 1000,
            });
        }
        let (events, receiver) = mpsc::unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let sent = self.commands.send(Command::Generate {
            request: Box::new(request),
            events,
            cancel: cancel.clone(),
            queued_at: Instant::now(),
        });
        if sent.is_err() {
            self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(EngineError::EngineStopped);
        }
        Ok(GenerationStream { receiver, cancel })
    }

    /// Engine-wide counters: slots, active and queued requests, batch sizes, tokens.
    pub fn metrics(&self) -> EngineMetrics {
        self.shared
            .metrics
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// Where the decoding steps' time went so far, summed; read it before and after a run to
    /// see that run's steps.
    pub fn step_profile(&self) -> StepProfile {
        self.shared
            .step_profile
            .lock()
            .map(|p| *p)
            .unwrap_or_default()
    }

    /// Shows a prompt after the chat template, and how many tokens it takes (blocking).
    pub fn render_prompt(&self, prompt: Prompt) -> Result<RenderedPrompt, EngineError> {
        let (reply, answer) = std_mpsc::channel();
        self.commands
            .send(Command::RenderPrompt { prompt, reply })
            .map_err(|_| EngineError::EngineStopped)?;
        answer.recv().map_err(|_| EngineError::EngineStopped)?
    }

    /// Sends a diagnostic to the engine thread and waits for its answer.
    fn diagnose<T>(
        &self,
        diagnostic: impl FnOnce(std_mpsc::Sender<Result<T, EngineError>>) -> Diagnostic,
    ) -> Result<T, EngineError> {
        let (reply, answer) = std_mpsc::channel();
        self.commands
            .send(Command::Diagnostic(diagnostic(reply)))
            .map_err(|_| EngineError::EngineStopped)?;
        answer.recv().map_err(|_| EngineError::EngineStopped)?
    }

    /// The `top` most likely next tokens and their logits after `prompt` followed by
    /// `continuation`, decoded plainly in one pass (blocking). For inspecting near-ties.
    pub fn next_token_logits(
        &self,
        prompt: Prompt,
        continuation: Vec<TokenId>,
        top: usize,
    ) -> Result<Vec<(TokenId, f32)>, EngineError> {
        self.diagnose(|reply| Diagnostic::NextTokenLogits {
            prompt,
            continuation,
            top,
            reply,
        })
    }

    /// Decode time in milliseconds by number of tokens in a batch, as known to the draft budget
    /// (from the cache, or measured now if no speculative request has run yet; blocking).
    pub fn decode_costs(&self) -> Result<DecodeCosts, EngineError> {
        self.diagnose(|reply| Diagnostic::DecodeCosts {
            fresh: false,
            reply,
        })
    }

    /// The same, measured now whatever is known, and kept in the cache for later loads.
    pub fn measure_decode_costs(&self) -> Result<DecodeCosts, EngineError> {
        self.diagnose(|reply| Diagnostic::DecodeCosts { fresh: true, reply })
    }

    /// How often the Medusa heads' top-`top_k` guesses are right along `continuation`, text the
    /// model wrote after `prompt` (blocking; runs when no request is decoding).
    pub fn measure_heads(
        &self,
        prompt: Prompt,
        continuation: Vec<TokenId>,
        top_k: usize,
    ) -> Result<HeadAccuracy, EngineError> {
        self.diagnose(|reply| Diagnostic::MeasureHeads {
            prompt,
            continuation,
            top_k,
            reply,
        })
    }

    /// Runs the bare llama-cpp-2 greedy loop on this engine's context (blocking).
    pub fn raw_baseline(
        &self,
        prompt: Prompt,
        max_tokens: usize,
    ) -> Result<BaselineRun, EngineError> {
        self.diagnose(|reply| Diagnostic::Baseline {
            prompt,
            max_tokens,
            reply,
        })
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Shutdown);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Cancels one run; cheap to clone.
#[derive(Debug, Clone)]
pub struct Canceller(Arc<AtomicBool>);

impl Canceller {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The producing end of a [`GenerationStream`] fed from outside the engine (a remote engine's
/// client): the same events, and the cancel the stream's reader asks for.
pub struct GenerationSender {
    events: UnboundedSender<GenerationEvent>,
    cancel: Arc<AtomicBool>,
}

impl GenerationSender {
    /// Passes an event on; false when the reader has gone.
    pub fn send(&self, event: GenerationEvent) -> bool {
        self.events.send(event).is_ok()
    }

    /// Whether the reader cancelled the run or went away.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.events.is_closed()
    }
}

/// Events of one run. Dropping the stream cancels the run.
pub struct GenerationStream {
    receiver: UnboundedReceiver<GenerationEvent>,
    cancel: Arc<AtomicBool>,
}

impl GenerationStream {
    /// A stream whose events come from the returned sender instead of this engine.
    pub fn channel() -> (GenerationSender, Self) {
        let (events, receiver) = mpsc::unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let sender = GenerationSender {
            events,
            cancel: cancel.clone(),
        };
        (sender, Self { receiver, cancel })
    }

    pub async fn next(&mut self) -> Option<GenerationEvent> {
        self.receiver.recv().await
    }

    /// For callers outside an async runtime.
    pub fn blocking_next(&mut self) -> Option<GenerationEvent> {
        self.receiver.blocking_recv()
    }

    /// An event already delivered, without waiting.
    pub fn try_next(&mut self) -> Option<GenerationEvent> {
        self.receiver.try_recv().ok()
    }

    /// Asks the engine to stop this run after the current token.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// A handle that cancels this run from elsewhere, while another task reads the events.
    pub fn canceller(&self) -> Canceller {
        Canceller(self.cancel.clone())
    }

    /// Waits for the end of the run (blocking) and returns its summary.
    pub fn wait(mut self) -> Result<RunSummary, EngineError> {
        while let Some(event) = self.blocking_next() {
            match event {
                GenerationEvent::Finished(summary) => return Ok(summary),
                GenerationEvent::Failed(err) => return Err(err),
                GenerationEvent::Started { .. }
                | GenerationEvent::Text { .. }
                | GenerationEvent::Step(_) => {}
            }
        }
        Err(EngineError::EngineStopped)
    }
}

impl Drop for GenerationStream {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// The batch a context is created with: `batch_size` (how much of a prompt one decode takes), or
/// more when it must. A decode holds a whole draft tree and a root per request; and llama.cpp
/// reserves an output for every sequence id at creation, aborting the process (not failing)
/// when the batch has fewer outputs than that, which `--batch-size 32` did.
pub(crate) fn batch_capacity(batch_size: u32, parallel: usize, n_seq_max: usize) -> u32 {
    let min_batch = (MAX_DRAFT_TOKENS + parallel).max(n_seq_max);
    batch_size.max(u32::try_from(min_batch).unwrap_or(u32::MAX))
}

fn engine_thread(
    config: EngineConfig,
    header: model_file::GgufHeader,
    ready: std_mpsc::Sender<Result<ModelInfo, EngineError>>,
    mut commands: UnboundedReceiver<Command>,
    shared: Arc<Shared>,
) {
    let loaded = backend().and_then(|backend| {
        let model = load_model(backend, &config, &header)?;
        Ok((backend, model))
    });
    let (backend, model) = match loaded {
        Ok(loaded) => loaded,
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    let threads = config.resolved_threads();
    let n_ctx_seq = config
        .ctx_size
        .unwrap_or_else(|| DEFAULT_CTX_SIZE.min(model.n_ctx_train().max(16)));
    let parallel = config.parallel;
    // Sequence ids: one per request, one per request for the prompt cache where they fit, the
    // rest for draft-tree leaves (llama.cpp allows 256).
    let n_seq_max = (2 * parallel + MAX_DRAFT_TOKENS).min(256);
    let cache_seqs = parallel.min(n_seq_max.saturating_sub(parallel + MAX_DRAFT_TOKENS));
    let n_batch = batch_capacity(config.batch_size, parallel, n_seq_max);
    // Every request gets its own share of one unified KV cache. llama.cpp cuts the batch down
    // to the context (and rounds the context up to 256 cells anyway), so it holds one batch.
    let n_ctx_total = (n_ctx_seq * parallel as u32).max(n_batch);
    let heads = match load_heads(&config, &model, threads) {
        Ok(heads) => heads,
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    let params = LlamaContextParams::default()
        // Medusa heads read the final hidden state, which llama.cpp returns as embeddings.
        .with_embeddings(heads.is_some() || config.hidden_states)
        .with_pooling_type(LlamaPoolingType::None)
        .with_n_ctx(NonZeroU32::new(n_ctx_total))
        .with_n_batch(n_batch)
        .with_n_ubatch(n_batch)
        .with_n_seq_max(n_seq_max as u32)
        // Tree nodes share prefix cells across sequences, which needs one unified KV cache.
        .with_kv_unified(true)
        .with_n_threads(threads as i32)
        .with_n_threads_batch(threads as i32);
    let ctx = match model.new_context(backend, params) {
        Ok(ctx) => ctx,
        Err(e) => {
            let _ = ready.send(Err(EngineError::Context(format!(
                "{e} (context of {n_ctx_seq} tokens for each of {parallel} requests); try a smaller --ctx-size or --parallel"
            ))));
            return;
        }
    };
    // llama.cpp may round the context up; share out what it really holds.
    let n_ctx_seq = ctx.n_ctx() / parallel as u32;
    let cost_cache = config.decode_costs_dir.as_ref().map(|dir| {
        let key = CostKey::new(
            &config.model_path,
            threads,
            config.gpu_layers,
            n_batch,
            n_ctx_total,
        );
        (CostCache::new(dir), key)
    });
    let mut runtime = LlamaRuntime::new(
        &model,
        ctx,
        RuntimeSettings {
            n_ctx_seq: n_ctx_seq as usize,
            max_seqs_per_token: n_seq_max,
            returns_hidden_states: heads.is_some() || config.hidden_states,
            cost_cache,
            given_costs: config.decode_costs.clone(),
            cpu_threads: (ComputeInfo::detect(config.gpu_layers, model.n_layer()).gpu_layers == 0)
                .then_some(threads),
        },
    );
    let medusa = match heads.map(|heads| plan_medusa(&mut runtime, heads, config.tree.clone())) {
        None => None,
        Some(Ok(setup)) => Some(setup),
        Some(Err(err)) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    let mut info = model_info(
        &config,
        &header,
        &model,
        n_ctx_seq,
        n_batch,
        threads,
        runtime.has_chat_template(),
    );
    info.parallel = parallel;
    if let Some(medusa) = &medusa {
        info.heads = Some(medusa.heads.info().clone());
        info.medusa_tree = medusa.plan.tree.clone();
        info.medusa_plan = Some(medusa.plan.clone());
    }
    tracing::info!(model = %info.name, file_type = %info.file_type, threads, n_ctx_seq, parallel, "model loaded");
    if ready.send(Ok(info)).is_err() {
        return;
    }

    Scheduler::new(
        runtime,
        Drafters::new(medusa),
        parallel,
        cache_seqs,
        n_seq_max,
        shared,
    )
    .run(&mut commands);
}

/// Settles Medusa mode's tree once the heads are loaded, from the heads' record and this
/// machine's decode costs (measuring them if need be, which clears the KV cache).
fn plan_medusa(
    runtime: &mut LlamaRuntime<'_>,
    heads: Arc<MedusaHeads>,
    given: Option<TreeSpec>,
) -> Result<MedusaSetup, EngineError> {
    let plan = plan_tree(heads.info(), given, || {
        let costs = runtime.ensure_cost_model()?.clone();
        Ok::<_, EngineError>((costs, heads.draft_ms_per_head()))
    })?;
    tracing::info!(decision = %plan.decision, "medusa plan");
    Ok(MedusaSetup::new(heads, plan))
}

/// Loads the configured heads and checks that a given tree fits them.
fn load_heads(
    config: &EngineConfig,
    model: &LlamaModel,
    threads: usize,
) -> Result<Option<Arc<MedusaHeads>>, EngineError> {
    let Some(path) = &config.heads_path else {
        if config.tree.is_some() {
            return Err(EngineError::InvalidParameter {
                name: "tree",
                message: "a tree needs Medusa heads (--heads PATH)".into(),
            });
        }
        return Ok(None);
    };
    // The heads go where the model's layers went.
    let on_gpu = ComputeInfo::detect(config.gpu_layers, model.n_layer()).gpu_layers > 0;
    let heads = MedusaHeads::load(
        path,
        model,
        &config.model_path,
        threads,
        config.heads_placement,
        on_gpu,
    )?;
    if let Some(tree) = &config.tree {
        tree.check_heads(heads.head_count())
            .map_err(|e| EngineError::InvalidParameter {
                name: "tree",
                message: e.to_string(),
            })?;
    }
    Ok(Some(Arc::new(heads)))
}

fn load_model(
    backend: &llama_cpp_2::llama_backend::LlamaBackend,
    config: &EngineConfig,
    header: &model_file::GgufHeader,
) -> Result<LlamaModel, EngineError> {
    let mut params = LlamaModelParams::default().with_n_gpu_layers(config.gpu_layers);
    if let Some(progress) = config.load_progress.clone() {
        params = params.with_progress_callback(move |share| {
            (progress.0)(share);
            true
        });
    }
    clear_recent_errors();
    LlamaModel::load_from_file(backend, &config.model_path, &params).map_err(|e| {
        let errors = take_recent_errors();
        let reason = if errors.is_empty() {
            e.to_string()
        } else {
            errors.join("; ")
        };
        EngineError::LoadFailed {
            path: config.model_path.clone(),
            architecture: header.architecture.clone(),
            reason,
        }
    })
}

fn model_info(
    config: &EngineConfig,
    header: &model_file::GgufHeader,
    model: &LlamaModel,
    n_ctx: u32,
    n_batch: u32,
    threads: usize,
    has_chat_template: bool,
) -> ModelInfo {
    let path = config.model_path.clone();
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    ModelInfo {
        name: header.display_name(&file_name),
        metadata_name: header.name.clone(),
        architecture: header.architecture.clone(),
        file_type: model
            .meta_val_str("general.file_type")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or_else(|| "unknown".to_owned(), file_type_name),
        file_size_bytes: std::fs::metadata(&path).map_or(0, |m| m.len()),
        path,
        n_params: model.n_params(),
        n_layer: model.n_layer(),
        n_embd: model.n_embd().max(0) as u32,
        n_vocab: model.n_vocab().max(0) as u32,
        n_ctx_train: model.n_ctx_train(),
        n_ctx,
        n_batch,
        threads,
        compute: ComputeInfo::detect(config.gpu_layers, model.n_layer()),
        has_chat_template,
        sampling_defaults: SamplingDefaults::from_metadata(|key| model.meta_val_str(key).ok()),
        heads: None,
        medusa_tree: None,
        medusa_plan: None,
        parallel: 1,
    }
}

#[cfg(test)]
mod batch_tests {
    use super::*;

    #[test]
    fn the_batch_holds_an_output_for_every_sequence_and_a_whole_tree() {
        for parallel in [1, 4, 64] {
            let n_seq_max = (2 * parallel + MAX_DRAFT_TOKENS).min(256);
            for batch_size in [1, 32, 64, 128] {
                let n_batch = batch_capacity(batch_size, parallel, n_seq_max) as usize;
                assert!(n_batch >= n_seq_max, "{batch_size} for {parallel}");
                assert!(n_batch >= MAX_DRAFT_TOKENS + parallel);
            }
        }
        // A larger chunk of prompt is kept as asked.
        assert_eq!(batch_capacity(1024, 4, 136), 1024);
    }
}
