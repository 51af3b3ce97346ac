//! The engine handle: a dedicated thread owns the model and its llama.cpp context (which is
//! `Send` but not `Sync`); callers talk to it through channels and get a stream of events.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Instant;

use llama_cpp_2::model::LlamaModel;
use tokio::sync::mpsc::{self, UnboundedSender};
use tokio::sync::oneshot;

use crate::config::EngineConfig;
use crate::diagnostics::{BaselineRun, Diagnostic};
use crate::engine_loading::{engine_thread, Loaded};
use crate::engine_metrics::{EngineMetrics, Shared};
use crate::error::EngineError;
use crate::events::GenerationEvent;
use crate::generation_stream::GenerationStream;
use crate::grammar::cache::PreparedGrammars;
use crate::grammar::prep::prepare_grammar;
use crate::info::ModelInfo;
use crate::llama::embeddings::{self, Embedding, EmbeddingCall, EmbeddingInput, EmbeddingJob};
use crate::llama::prompt::RenderedPrompt;
use crate::medusa::accuracy::HeadAccuracy;
use crate::request::draft::{LoadedHeads, RequestDraft};
use crate::request::valid::ValidRequest;
use crate::request::{DraftPolicy, GenerateRequest, Prompt};
use crate::sampling::token_choice::{PromptLogprobs, TokenChoice};
use crate::scheduler::Command;
use crate::speculative::costs::{CostPoint, DecodeCosts};
use crate::speculative::outlook::{drafting_outlook, DraftingOutlook, WidenedCosts};
use crate::step::admission::QueuedRequest;
use crate::step_profile::StepProfile;
use crate::token::TokenId;
use crate::weights::model_file;

/// A loaded model, ready to generate. Dropping it stops its thread.
pub struct Engine {
    commands: UnboundedSender<Command>,
    info: ModelInfo,
    /// Shared with the engine thread, for the work done before a request queues (tokenizing
    /// texts to embed, compiling grammars) on the caller's threads.
    model: Arc<LlamaModel>,
    /// Grammars compiled and tried lately, by their text.
    grammars: Arc<PreparedGrammars>,
    shared: Arc<Shared>,
    max_queued: usize,
    /// Most tokens one embedding call may take.
    max_embedding_tokens: usize,
    /// Whether decodes keep the hidden states (heads loaded, or asked for at load).
    returns_hidden_states: bool,
    /// A widened model's decode costs measured here, for the drafting outlook.
    widened_costs: Option<WidenedCosts>,
    thread: Option<JoinHandle<()>>,
}

impl Engine {
    /// Loads the model on a new engine thread; returns once it is ready or has failed.
    pub fn load(config: EngineConfig) -> Result<Self, EngineError> {
        config.validate()?;
        let header = model_file::inspect(&config.model_path)?;
        let (commands, receiver) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = std_mpsc::channel();
        let shared = Arc::new(Shared::default());
        let max_queued = config.max_queued;
        let max_embedding_tokens = config.max_embedding_tokens;
        let hidden_states_asked = config.hidden_states;
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("medusa-engine".into())
            .spawn(move || engine_thread(config, header, ready_tx, receiver, thread_shared))
            .map_err(|e| EngineError::Context(format!("cannot start engine thread: {e}")))?;
        match ready_rx.recv() {
            Ok(Ok(Loaded {
                info,
                model,
                widened_costs,
            })) => Ok(Self {
                commands,
                // The context keeps hidden states when asked to, or for the heads it loaded.
                returns_hidden_states: hidden_states_asked || info.heads.is_some(),
                // A context's worth unless configured: every request's cells.
                max_embedding_tokens: max_embedding_tokens
                    .unwrap_or(info.n_ctx as usize * info.parallel),
                info,
                model,
                widened_costs,
                grammars: Arc::default(),
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
        let n_vocab = self.info.n_vocab as TokenId;
        if let Some(entry) = request
            .sampling
            .logit_bias
            .iter()
            .find(|b| b.token >= n_vocab)
        {
            return Err(EngineError::InvalidParameter {
                name: "logit_bias",
                message: format!(
                    "token {} is not in the model's vocabulary (0..{n_vocab})",
                    entry.token
                ),
            });
        }
        let heads = match (&self.info.heads, &self.info.medusa_plan) {
            (Some(heads), Some(plan)) => Some(LoadedHeads {
                head_count: heads.head_count,
                plan,
            }),
            _ => None,
        };
        let draft = RequestDraft::resolve(
            &request,
            heads,
            default_tree,
            self.info.draft_model.is_some(),
            self.info.eagle.is_some(),
        )?;
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
    /// refused here at once. A request with a grammar waits, counted in the queue, while its
    /// grammar is compiled and tried off the engine thread; a grammar refused then is the
    /// stream's first event.
    pub fn submit(&self, request: ValidRequest) -> Result<GenerationStream, EngineError> {
        self.reserve_queue_place()?;
        let (events, receiver) = mpsc::unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let queued_at = Instant::now();
        let Some(gbnf) = request.get().grammar.clone() else {
            self.queue(Command::Generate(QueuedRequest {
                request: Box::new(request),
                grammar: None,
                events,
                cancel: cancel.clone(),
                queued_at,
            }))?;
            return Ok(GenerationStream::from_parts(receiver, cancel));
        };
        let grammars = self.grammars.clone();
        let (model, model_path, commands, shared) = (
            self.model.clone(),
            self.info.path.clone(),
            self.commands.clone(),
            self.shared.clone(),
        );
        let thread_cancel = cancel.clone();
        let client = crate::grammar::requester::requester();
        let span = tracing::info_span!("prepare_grammar", bytes = gbnf.len());
        let waiting = std::thread::Builder::new()
            .name("medusa-grammar-wait".into())
            .spawn(move || {
                let _span = span.entered();
                let prepared = grammars.get_or_prepare(gbnf, |gbnf| {
                    prepare_grammar(model, &model_path, gbnf, client)
                });
                let command = match prepared {
                    Ok(grammar) => Command::Generate(QueuedRequest {
                        request: Box::new(request),
                        grammar: Some(grammar),
                        events,
                        cancel: thread_cancel,
                        queued_at,
                    }),
                    Err(err) => {
                        tracing::info!(error = %err, "grammar refused");
                        shared.queued.fetch_sub(1, Ordering::Relaxed);
                        shared.count_failed();
                        let _ = events.send(GenerationEvent::Failed(err));
                        return;
                    }
                };
                if let Err(unsent) = commands.send(command) {
                    shared.queued.fetch_sub(1, Ordering::Relaxed);
                    if let Command::Generate(QueuedRequest { events, .. }) = unsent.0 {
                        let _ = events.send(GenerationEvent::Failed(EngineError::EngineStopped));
                    }
                }
            });
        if let Err(err) = waiting {
            self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(EngineError::Context(format!(
                "cannot start a grammar thread: {err}"
            )));
        }
        Ok(GenerationStream::from_parts(receiver, cancel))
    }

    /// Takes a place in the queue, or refuses when it is full.
    fn reserve_queue_place(&self) -> Result<(), EngineError> {
        let queued = self.shared.queued.fetch_add(1, Ordering::Relaxed);
        if queued >= self.max_queued {
            self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(EngineError::QueueFull {
                capacity: self.max_queued,
                retry_after_ms: 1000,
            });
        }
        Ok(())
    }

    /// Sends work that holds a queue place to the engine thread; gives the place back when the
    /// thread has stopped.
    fn queue(&self, command: Command) -> Result<(), EngineError> {
        self.commands.send(command).map_err(|_| {
            self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            EngineError::EngineStopped
        })
    }

    /// Makes the next decoding step panic part-way, after its decode (or the next diagnostic,
    /// if one runs first, as it starts): a fault to show that a panic ends that step's requests
    /// with an error and the engine goes on.
    #[doc(hidden)]
    pub fn inject_step_panic(&self) -> Result<(), EngineError> {
        self.commands
            .send(Command::PanicInNextStep)
            .map_err(|_| EngineError::EngineStopped)
    }

    /// Engine-wide counters: slots, active and queued requests, batch sizes, tokens.
    pub fn metrics(&self) -> EngineMetrics {
        self.shared.metrics()
    }

    /// Where the decoding steps' time went so far, summed; read it before and after a run to
    /// see that run's steps.
    pub fn step_profile(&self) -> StepProfile {
        self.shared.step_profile()
    }

    /// Shows a prompt after the chat template, and how many tokens it takes (blocking).
    pub fn render_prompt(&self, prompt: Prompt) -> Result<RenderedPrompt, EngineError> {
        let (reply, answer) = std_mpsc::channel();
        self.commands
            .send(Command::RenderPrompt { prompt, reply })
            .map_err(|_| EngineError::EngineStopped)?;
        answer.recv().map_err(|_| EngineError::EngineStopped)?
    }

    /// Gives lookup's memory an earlier request's `prompt` and the token ids of its `answer`
    /// (from the run history, so that a restart does not forget them), between two steps. An
    /// answer with ids outside this model's vocabulary (another model's) is refused.
    pub fn remember(&self, prompt: Prompt, answer: Vec<TokenId>) -> Result<(), EngineError> {
        let n_vocab = self.info.n_vocab;
        if let Some(&id) = answer
            .iter()
            .find(|&&id| u32::try_from(id).map_or(true, |id| id >= n_vocab))
        {
            return Err(EngineError::InvalidParameter {
                name: "answer",
                message: format!("token id {id} is outside this model's {n_vocab} tokens"),
            });
        }
        self.commands
            .send(Command::Remember { prompt, answer })
            .map_err(|_| EngineError::EngineStopped)
    }

    /// Queues an embedding call (blocking while its texts are tokenized): at most
    /// [`crate::MAX_EMBEDDING_INPUTS`] texts, each within a request's context, all together
    /// within the embedding budget; it takes a queue place like a generation. Await the call for
    /// the vectors; dropping it cancels the call.
    pub fn submit_embedding(&self, texts: Vec<String>) -> Result<EmbeddingCall, EngineError> {
        self.submit_embedding_inputs(texts.into_iter().map(EmbeddingInput::Text).collect())
    }

    /// [`Self::submit_embedding`] for texts or token ids.
    pub fn submit_embedding_inputs(
        &self,
        inputs: Vec<EmbeddingInput>,
    ) -> Result<EmbeddingCall, EngineError> {
        let _span = tracing::info_span!("submit_embedding", texts = inputs.len()).entered();
        let texts = embeddings::tokenize_inputs(
            &self.model,
            &inputs,
            self.info.n_ctx as usize,
            self.max_embedding_tokens,
        )?;
        self.reserve_queue_place()?;
        let (reply, answer) = oneshot::channel();
        self.queue(Command::Embed(EmbeddingJob {
            texts,
            reply,
            queued_at: Instant::now(),
        }))?;
        Ok(EmbeddingCall { answer })
    }

    /// Each text's embedding (blocking): the mean of its final hidden states, unit length.
    pub fn embed(&self, texts: Vec<String>) -> Result<Vec<Embedding>, EngineError> {
        self.submit_embedding(texts)?
            .answer
            .blocking_recv()
            .unwrap_or(Err(EngineError::EngineStopped))
    }

    /// Sends a diagnostic to the engine thread and waits for its answer.
    fn diagnose<T>(
        &self,
        diagnostic: impl FnOnce(std_mpsc::Sender<Result<T, EngineError>>) -> Diagnostic,
    ) -> Result<T, EngineError> {
        // It holds a queue place until it runs, like a request.
        self.reserve_queue_place()?;
        let (reply, answer) = std_mpsc::channel();
        self.queue(Command::Diagnostic(diagnostic(reply)))?;
        answer.recv().map_err(|_| self.unanswered_diagnostic())?
    }

    /// Why a diagnostic was dropped unanswered: the engine thread drops one only when it
    /// panicked (the engine then starts afresh) or when the thread has ended.
    fn unanswered_diagnostic(&self) -> EngineError {
        match &self.thread {
            Some(thread) if !thread.is_finished() => EngineError::StepFailed(
                "the diagnostic failed part-way (a panic in the engine); the engine started afresh"
                    .into(),
            ),
            _ => EngineError::EngineStopped,
        }
    }

    /// How likely each of `tokens` is as the next token after `prompt` followed by
    /// `continuation`, decoded plainly in one pass (blocking): where two outputs part, whether
    /// the model found both tokens nearly equally likely.
    pub fn next_token_choices(
        &self,
        prompt: Prompt,
        continuation: Vec<TokenId>,
        tokens: Vec<TokenId>,
    ) -> Result<Vec<TokenChoice>, EngineError> {
        self.diagnose(|reply| Diagnostic::NextTokenChoices {
            prompt,
            continuation,
            tokens,
            reply,
        })
    }

    /// How likely each token of `prompt` was after those before it, with the `top` likeliest
    /// at each place (blocking; runs when no request is decoding).
    pub fn prompt_logprobs(
        &self,
        prompt: Prompt,
        top: usize,
    ) -> Result<PromptLogprobs, EngineError> {
        crate::request::check_top_logprobs("logprobs", top)?;
        self.diagnose(|reply| Diagnostic::PromptLogprobs { prompt, top, reply })
    }

    /// Decode time in milliseconds by number of tokens in a batch, as known to the draft budget
    /// (from the cache, or measured now if no speculative request has run yet; blocking).
    pub fn decode_costs(&self) -> Result<DecodeCosts, EngineError> {
        self.diagnose(|reply| Diagnostic::DecodeCosts {
            fresh: false,
            reply,
        })
    }

    /// Whether drafting can pay for this model here, and why, from its decode costs (measured
    /// now if they are not known yet; blocking). `None` when the costs lack the sizes it reads.
    pub fn drafting_outlook(&self) -> Result<Option<DraftingOutlook>, EngineError> {
        Ok(self.outlook_from(&self.decode_costs()?.points))
    }

    /// [`Self::drafting_outlook`] as far as the engine knows its decode costs now, without
    /// measuring them (`None` until they are known: read from the cache, measured at load for
    /// the heads, or when a request first drafted by the budget).
    pub fn known_drafting_outlook(&self) -> Option<DraftingOutlook> {
        self.outlook_from(&self.shared.decode_costs()?)
    }

    fn outlook_from(&self, costs: &[CostPoint]) -> Option<DraftingOutlook> {
        drafting_outlook(
            costs,
            &self.info.file_type,
            self.info.compute.gpu_layers > 0,
            self.info.cpu_kernels,
            self.widened_costs.as_ref(),
        )
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
