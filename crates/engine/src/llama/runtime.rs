//! What the engine thread owns: the model, its llama.cpp context and batch, the chat template
//! and the measured decode costs. The scheduler drives requests through it; it knows nothing
//! of drafters or requests.

use std::time::Instant;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::{LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;

use crate::clock::{ms_since, process_cpu_ms};
use crate::config::{LoadProgress, LoadStage};
use crate::cost_cache::{CostCache, CostKey};
use crate::error::EngineError;
use crate::llama::cell_order::CellOrder;
use crate::llama::prompt;
use crate::llama::prompt::RenderedPrompt;
use crate::request::Prompt;
use crate::speculative::costs::{Calibration, CostModel, CostPoint, CostSource};
use crate::step::decoder::{DecodeTimes, Decoder, KvCells};
use crate::token::TokenId;
use crate::token::Vocabulary;

pub(crate) struct LlamaRuntime<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    /// Which tokens of the batch being built ask for logits, and of the last one decoded: so
    /// that reading logits the decode did not give is an error, not llama-cpp-2's panic.
    batch_outputs: Vec<bool>,
    decoded_outputs: Vec<bool>,
    template: Option<LlamaChatTemplate>,
    /// Context cells one request may use (prompt, output and its draft tree).
    n_ctx_seq: usize,
    n_batch: usize,
    /// Whether decodes keep each position's final hidden state (Medusa heads read it).
    returns_hidden_states: bool,
    /// Decode cost by batch size, measured when the engine is first idle with a speculative
    /// request to serve.
    cost_model: Option<CostModel>,
    /// Counts the changes of `cost_model`'s figures, for whoever publishes them.
    cost_version: u64,
    /// Where measured decode costs are kept for this machine, model and settings.
    cost_cache: Option<(CostCache, CostKey)>,
    /// Steps observed since real steps' figures were last compared with the kept ones.
    steps_since_drift_check: usize,
    /// Threads decoding on the CPU, whose share of the cores tells a busy machine; `None` when
    /// the model's layers are on a GPU.
    cpu_threads: Option<usize>,
    /// Exact mode: each sequence's cells kept in position order (see `cell_order`).
    cell_order: Option<CellOrder>,
    /// Sequence ids that may hold cells.
    n_seq_max: usize,
    /// Told how far a timing of decodes has got while the engine loads.
    calibration_progress: Option<LoadProgress>,
}

/// How the engine thread set up the context a runtime wraps.
pub(crate) struct RuntimeSettings {
    /// Context cells one request may use.
    pub(crate) n_ctx_seq: usize,
    /// Most sequences one token of a batch may belong to (a tree's root and shared nodes).
    pub(crate) max_seqs_per_token: usize,
    /// Exact mode's sequence id for retired cells; `None` frees cells at once.
    pub(crate) retired_seq: Option<i32>,
    pub(crate) returns_hidden_states: bool,
    pub(crate) cost_cache: Option<(CostCache, CostKey)>,
    /// Decode costs given instead of measured.
    pub(crate) given_costs: Option<Vec<CostPoint>>,
    /// Threads decoding on the CPU; `None` when the model's layers are on a GPU.
    pub(crate) cpu_threads: Option<usize>,
}

impl<'m> LlamaRuntime<'m> {
    pub(crate) fn new(
        model: &'m LlamaModel,
        ctx: LlamaContext<'m>,
        settings: RuntimeSettings,
    ) -> Self {
        let n_batch = ctx.n_batch() as usize;
        let n_cells = ctx.n_ctx() as usize;
        Self {
            model,
            ctx,
            batch: LlamaBatch::new(n_batch, settings.max_seqs_per_token as i32),
            batch_outputs: Vec::with_capacity(n_batch),
            decoded_outputs: Vec::with_capacity(n_batch),
            template: model.chat_template(None).ok(),
            n_ctx_seq: settings.n_ctx_seq,
            n_batch,
            returns_hidden_states: settings.returns_hidden_states,
            cost_version: 0,
            cost_model: settings
                .given_costs
                .map(|points| CostModel::with_bands(points, CostSource::Given, None)),
            cost_cache: settings.cost_cache,
            steps_since_drift_check: 0,
            cpu_threads: settings.cpu_threads,
            cell_order: settings.retired_seq.map(|seq| CellOrder::new(seq, n_cells)),
            n_seq_max: settings.max_seqs_per_token,
            calibration_progress: None,
        }
    }

    /// Reports the timing of decodes to `progress` from here on (`None`: to nobody), so that
    /// a first load's measurement shows as a stage of the load.
    pub(crate) fn report_calibration_to(&mut self, progress: Option<LoadProgress>) {
        self.calibration_progress = progress;
    }

    pub(crate) fn has_chat_template(&self) -> bool {
        self.template.is_some()
    }

    /// Whether it decodes in exact mode (batch-invariant kernels, cells in position order).
    pub(crate) fn is_exact(&self) -> bool {
        self.cell_order.is_some()
    }

    /// Threads decoding on the CPU (all cores when the layers are on a GPU).
    pub(crate) fn threads(&self) -> usize {
        self.cpu_threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        })
    }

    /// Tokens in the batch being built.
    pub(crate) fn batch_len(&self) -> usize {
        self.batch.n_tokens() as usize
    }

    pub(crate) fn model(&self) -> &'m LlamaModel {
        self.model
    }

    pub(crate) fn render_prompt(&self, prompt: &Prompt) -> Result<RenderedPrompt, EngineError> {
        let text = prompt::render(self.model, self.template.as_ref(), prompt, false)?;
        let token_count = prompt::tokenize(self.model, &text).len();
        Ok(RenderedPrompt {
            text: text.text(),
            token_count,
        })
    }

    /// The model and its context, for the bare yardstick loop that bypasses the runtime.
    pub(crate) fn model_and_context(&mut self) -> (&'m LlamaModel, &mut LlamaContext<'m>) {
        (self.model, &mut self.ctx)
    }

    /// Takes the decode costs from the cache, if it has them and none are known yet.
    pub(crate) fn read_cached_costs(&mut self) -> Option<&CostModel> {
        if self.cost_model.is_none() {
            let cached = self
                .cost_cache
                .as_ref()
                .and_then(|(cache, key)| cache.load(key));
            if let Some(points) = cached {
                tracing::info!(?points, "decode costs read from the cache");
                self.cost_model = Some(CostModel::with_bands(points, CostSource::Cached, None));
                self.cost_version += 1;
            }
        }
        self.cost_model.as_ref()
    }

    /// Measures decode costs now and uses them from here on; keeps them in the cache unless
    /// the machine was too busy for them to be the machine's own.
    pub(crate) fn measure_costs(&mut self) -> Result<&CostModel, EngineError> {
        let measured = self.calibrate()?.into_model();
        let report = measured.report();
        match (&self.cost_cache, &report.busy) {
            (_, Some(busy)) => {
                tracing::warn!(
                    "the decode costs were measured on a busy machine ({busy}): they serve \
                     until this model is loaded again, which measures them again"
                );
            }
            (Some((cache, key)), None) => {
                if let Err(err) = cache.store(key, measured.points()) {
                    tracing::warn!(%err, "could not keep the measured decode costs");
                }
            }
            (None, None) => {}
        }
        self.steps_since_drift_check = 0;
        self.cost_version += 1;
        Ok(self.cost_model.insert(measured))
    }

    /// Times a decode of every calibration size in interleaved rounds (after one unmeasured
    /// round, as the first decode of a size allocates), with the share of the threads' time the
    /// process got. Leaves the KV cache empty.
    fn calibrate(&mut self) -> Result<Calibration, EngineError> {
        let _span = tracing::info_span!("calibrate").entered();
        let token = self.model.vocab().bos();
        let mut rounds = Vec::with_capacity(CALIBRATION_ROUNDS);
        let (mut wall_ms, mut cpu_ms) = (0.0, Some(0.0));
        // Shares by tokens decoded, which the time follows more than the count of decodes.
        let total_tokens = (CALIBRATION_ROUNDS + 1) * CALIBRATION_SIZES.iter().sum::<usize>();
        let mut tokens_done = 0;
        let progress = self.calibration_progress.clone();
        let report = |done: usize| {
            if let Some(progress) = &progress {
                progress.report(LoadStage::DecodeCosts, done as f32 / total_tokens as f32);
            }
        };
        report(0);
        for round in 0..=CALIBRATION_ROUNDS {
            let mut times = Vec::with_capacity(CALIBRATION_SIZES.len());
            for &n in CALIBRATION_SIZES {
                self.clear_cells();
                self.clear_batch();
                for pos in 0..n {
                    self.add_to_batch(token.0, pos, &[0], true)?;
                }
                let cpu_before = process_cpu_ms();
                let ms = self.decode()?.total_ms();
                times.push(ms);
                tokens_done += n;
                report(tokens_done);
                if round > 0 {
                    wall_ms += ms;
                    cpu_ms = cpu_ms
                        .zip(cpu_before)
                        .zip(process_cpu_ms())
                        .map(|((sum, before), after)| sum + (after - before));
                }
            }
            if round > 0 {
                rounds.push(times);
            }
        }
        self.clear_cells();
        let cpu_share = self
            .cpu_threads
            .zip(cpu_ms)
            .filter(|_| wall_ms > 0.0)
            .map(|(threads, cpu_ms)| cpu_ms / (wall_ms * threads as f64));
        let calibration = Calibration {
            sizes: CALIBRATION_SIZES.to_vec(),
            rounds,
            cpu_share,
        };
        tracing::info!(?calibration, "decode cost measured");
        Ok(calibration)
    }
}

impl Decoder for LlamaRuntime<'_> {
    fn returns_hidden_states(&self) -> bool {
        self.returns_hidden_states
    }

    fn n_ctx_seq(&self) -> usize {
        self.n_ctx_seq
    }

    fn n_batch(&self) -> usize {
        self.n_batch
    }

    /// Renders and tokenizes a prompt, refusing one that leaves no room to generate; with
    /// `continues`, a chat's last message is left open (see [`prompt::render`]).
    fn prompt_tokens(&self, prompt: &Prompt, continues: bool) -> Result<Vec<TokenId>, EngineError> {
        let text = prompt::render(self.model, self.template.as_ref(), prompt, continues)?;
        let tokens: Vec<TokenId> = prompt::tokenize(self.model, &text)
            .into_iter()
            .map(|t| t.0)
            .collect();
        if tokens.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let limit = self.n_ctx_seq - 1;
        if tokens.len() > limit {
            return Err(EngineError::PromptTooLong {
                tokens: tokens.len(),
                limit,
            });
        }
        Ok(tokens)
    }

    fn clear_batch(&mut self) {
        self.batch.clear();
        self.batch_outputs.clear();
    }

    fn add_to_batch(
        &mut self,
        token: TokenId,
        pos: usize,
        seqs: &[i32],
        logits: bool,
    ) -> Result<(), EngineError> {
        self.batch
            .add(LlamaToken(token), pos as i32, seqs, logits)
            .map_err(|e| EngineError::Decode(e.to_string()))?;
        self.batch_outputs.push(logits);
        Ok(())
    }

    fn decode(&mut self) -> Result<DecodeTimes, EngineError> {
        if let Some(order) = self.cell_order.as_mut() {
            order.took(self.batch.n_tokens() as usize);
        }
        let started = Instant::now();
        self.decoded_outputs.clear();
        self.ctx
            .decode(&mut self.batch)
            .map_err(|e| EngineError::Decode(e.to_string()))?;
        self.decoded_outputs.clone_from(&self.batch_outputs);
        let submit_ms = ms_since(started);
        // GPU backends return before the work is done; the decode timings that size draft
        // trees must include it.
        let waited = Instant::now();
        self.ctx.synchronize();
        Ok(DecodeTimes {
            submit_ms,
            wait_ms: ms_since(waited),
        })
    }

    /// Logits of the last decode at batch index `index`; an error where that decode gave none
    /// (with hidden states on, llama.cpp gives every token's).
    fn logits(&self, index: i32) -> Result<&[f32], EngineError> {
        let given = usize::try_from(index)
            .ok()
            .and_then(|i| self.decoded_outputs.get(i))
            .is_some_and(|&asked| asked || self.returns_hidden_states);
        if !given {
            return Err(EngineError::Decode(format!(
                "the last decode gave no logits at batch index {index}"
            )));
        }
        Ok(self.ctx.get_logits_ith(index))
    }

    /// Final hidden state of the last decode at batch index `index` (llama.cpp looks them up
    /// like logits); only when the runtime returns hidden states.
    fn hidden_state(&self, index: i32) -> Result<&[f32], EngineError> {
        self.ctx
            .embeddings_ith(index)
            .map_err(|e| EngineError::Decode(format!("hidden state unavailable: {e}")))
    }

    fn cost_model(&self) -> Option<&CostModel> {
        self.cost_model.as_ref()
    }

    /// Changes each time the cost model's figures change.
    fn cost_version(&self) -> u64 {
        self.cost_version
    }

    /// Teaches the cost model what a decode of `tokens` draft-able tokens took. Every so many
    /// steps, figures that real steps clearly contradict replace the kept ones.
    fn observe_decode(&mut self, tokens: usize, ms: f64) {
        let Some(cost) = self.cost_model.as_mut() else {
            return;
        };
        cost.observe(tokens, ms);
        self.steps_since_drift_check += 1;
        if self.steps_since_drift_check < STEPS_BETWEEN_DRIFT_CHECKS {
            return;
        }
        self.steps_since_drift_check = 0;
        if cost.drifted() {
            cost.settle();
            self.cost_version += 1;
            tracing::info!(points = ?cost.points(), "decode costs follow real steps now");
            if let Some((cache, key)) = &self.cost_cache {
                if let Err(err) = cache.store(key, cost.points()) {
                    tracing::warn!(%err, "could not keep the updated decode costs");
                }
            }
        }
    }

    /// The decode cost model: read from the cache when this machine measured it before for
    /// this model and settings, else measured once per engine. Needs the engine to be idle.
    fn ensure_cost_model(&mut self) -> Result<&CostModel, EngineError> {
        self.read_cached_costs();
        if self.cost_model.is_none() {
            self.measure_costs()?;
        }
        Ok(self
            .cost_model
            .get_or_insert_with(|| CostModel::new(vec![])))
    }
}

impl KvCells for LlamaRuntime<'_> {
    fn clear_cells(&mut self) {
        self.ctx.clear_kv_cache();
        if let Some(order) = self.cell_order.as_mut() {
            order.reset();
        }
    }

    /// Makes sequence `to` share `from`'s cells at positions `first..end` (all when `None`).
    fn copy_cells(
        &mut self,
        from: i32,
        to: i32,
        first: Option<u32>,
        end: Option<u32>,
    ) -> Result<(), EngineError> {
        self.ctx
            .kv_cache_seq_cp(from, to, first, end)
            .map_err(|e| EngineError::Decode(e.to_string()))
    }

    /// Frees every cell of sequence `seq` (in exact mode: retires them).
    fn remove_cells(&mut self, seq: i32) -> Result<(), EngineError> {
        if let Some(retired) = self.cell_order.as_ref().map(|order| order.retired_seq) {
            self.copy_cells(seq, retired, None, None)?;
        }
        self.ctx
            .kv_cache_seq_rm(seq, None, None)
            .map(|_| ())
            .map_err(|e| EngineError::Decode(e.to_string()))
    }

    fn holds_cells(&self, seq: i32) -> bool {
        self.ctx.kv_cache_seq_pos_max(seq) >= 0
    }

    /// In exact mode, makes room for a decode of up to `incoming` tokens after every taken
    /// cell (see [`CellOrder::keep_room`]); the sequences dropped from the cache are returned.
    fn keep_cell_order(
        &mut self,
        incoming: usize,
        requests: usize,
    ) -> Result<Vec<i32>, EngineError> {
        match self.cell_order.as_mut() {
            Some(order) => order.keep_room(&mut self.ctx, self.n_seq_max, incoming, requests),
            None => Ok(Vec::new()),
        }
    }
}

impl Vocabulary for LlamaModel {
    fn ends_generation(&self, token: TokenId) -> bool {
        self.vocab().is_eog(LlamaToken(token))
    }

    fn piece_into(&self, token: TokenId, special: bool, out: &mut Vec<u8>) {
        self.vocab()
            .token_to_piece_into(LlamaToken(token), out, special, None);
    }
}

/// Rounds of timings the calibration takes; their quartiles make each figure's band.
const CALIBRATION_ROUNDS: usize = 7;

/// How many steps pass between comparisons of real steps' figures with the kept ones.
const STEPS_BETWEEN_DRIFT_CHECKS: usize = 256;

/// Batch sizes timed by `calibrate`; larger ones are extrapolated.
const CALIBRATION_SIZES: &[usize] = &[1, 2, 4, 8, 16, 32];
