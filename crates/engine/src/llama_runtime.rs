//! What the engine thread owns: the model, its llama.cpp context and batch, the chat template,
//! the measured decode costs and the Medusa heads. Requests are driven by the scheduler.

use std::sync::Arc;
use std::time::Instant;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::{LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;

use crate::clock::ms_since;
use crate::cost_cache::{CostCache, CostKey};
use crate::error::EngineError;
use crate::medusa::accuracy::HeadAccuracy;
use crate::medusa::heads::MedusaHeads;
use crate::medusa::plan::{plan_tree, MedusaPlan};
use crate::prompt;
use crate::prompt::RenderedPrompt;
use crate::request::Prompt;
use crate::sampler::TokenId;
use crate::speculative::budget::CostModel;
use crate::speculative::tree::TreeSpec;

pub(crate) struct LlamaRuntime<'m> {
    pub(crate) model: &'m LlamaModel,
    pub(crate) ctx: LlamaContext<'m>,
    pub(crate) batch: LlamaBatch<'static>,
    template: Option<LlamaChatTemplate>,
    /// Context cells one request may use (prompt, output and its draft tree).
    pub(crate) n_ctx_seq: usize,
    pub(crate) n_batch: usize,
    /// Decode cost by batch size, measured when the engine is first idle with a speculative
    /// request to serve.
    pub(crate) cost_model: Option<CostModel>,
    /// Medusa heads, when loaded; the context then returns hidden states.
    pub(crate) heads: Option<Arc<MedusaHeads>>,
    /// Medusa mode's tree and why, settled by `plan_medusa` once the heads are loaded.
    pub(crate) medusa_plan: Option<MedusaPlan>,
    /// Where measured decode costs are kept for this machine, model and settings.
    pub(crate) cost_cache: Option<(CostCache, CostKey)>,
}

impl<'m> LlamaRuntime<'m> {
    pub(crate) fn new(
        model: &'m LlamaModel,
        ctx: LlamaContext<'m>,
        n_ctx_seq: usize,
        max_seqs_per_token: usize,
        heads: Option<Arc<MedusaHeads>>,
    ) -> Self {
        let n_batch = ctx.n_batch() as usize;
        Self {
            model,
            ctx,
            batch: LlamaBatch::new(n_batch, max_seqs_per_token as i32),
            template: model.chat_template(None).ok(),
            n_ctx_seq,
            n_batch,
            cost_model: None,
            heads,
            medusa_plan: None,
            cost_cache: None,
        }
    }

    pub(crate) fn has_chat_template(&self) -> bool {
        self.template.is_some()
    }

    pub(crate) fn has_heads(&self) -> bool {
        self.heads.is_some()
    }

    pub(crate) fn render_prompt(&self, prompt: &Prompt) -> Result<RenderedPrompt, EngineError> {
        let text = prompt::render(self.model, self.template.as_ref(), prompt)?;
        let token_count = prompt::tokenize(self.model, &text).len();
        Ok(RenderedPrompt { text, token_count })
    }

    /// Renders and tokenizes a prompt, refusing one that leaves no room to generate.
    pub(crate) fn prompt_tokens(&self, prompt: &Prompt) -> Result<Vec<LlamaToken>, EngineError> {
        let text = prompt::render(self.model, self.template.as_ref(), prompt)?;
        let tokens = prompt::tokenize(self.model, &text);
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

    pub(crate) fn decode(&mut self) -> Result<(), EngineError> {
        self.ctx
            .decode(&mut self.batch)
            .map_err(|e| EngineError::Decode(e.to_string()))?;
        // GPU backends return before the work is done; the decode timings that size draft
        // trees must include it.
        self.ctx.synchronize();
        Ok(())
    }

    pub(crate) fn add(
        &mut self,
        token: LlamaToken,
        pos: usize,
        seqs: &[i32],
        logits: bool,
    ) -> Result<(), EngineError> {
        self.batch
            .add(token, pos as i32, seqs, logits)
            .map_err(|e| EngineError::Decode(e.to_string()))
    }

    /// Decodes `tokens` from position 0 of sequence `seq`, in chunks; the last token's logits
    /// are at batch index `self.batch.n_tokens() - 1` afterwards. Needs the engine to be idle.
    pub(crate) fn prefill_alone(
        &mut self,
        seq: i32,
        tokens: &[LlamaToken],
    ) -> Result<(), EngineError> {
        self.ctx.clear_kv_cache();
        let last = tokens.len() - 1;
        for (chunk_index, chunk) in tokens.chunks(self.n_batch).enumerate() {
            self.batch.clear();
            for (i, &token) in chunk.iter().enumerate() {
                let pos = chunk_index * self.n_batch + i;
                self.add(token, pos, &[seq], pos == last)?;
            }
            self.decode()?;
        }
        Ok(())
    }

    /// The `top` most likely next tokens after `prompt` + `continuation`. Needs the engine idle.
    pub(crate) fn next_token_logits(
        &mut self,
        prompt: &Prompt,
        continuation: &[TokenId],
        top: usize,
    ) -> Result<Vec<(TokenId, f32)>, EngineError> {
        let mut tokens = self.prompt_tokens(prompt)?;
        tokens.extend(continuation.iter().map(|&t| LlamaToken(t)));
        if tokens.len() >= self.n_ctx_seq {
            return Err(EngineError::PromptTooLong {
                tokens: tokens.len(),
                limit: self.n_ctx_seq - 1,
            });
        }
        self.prefill_alone(0, &tokens)?;
        let last = self.batch.n_tokens() - 1;
        let mut ranked: Vec<(TokenId, f32)> = self
            .ctx
            .get_logits_ith(last)
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as TokenId, l))
            .collect();
        self.ctx.clear_kv_cache();
        ranked.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
        ranked.truncate(top);
        Ok(ranked)
    }

    /// How often the heads guess right along `continuation` (text the model wrote after
    /// `prompt`): at each position from the prompt's last token on, head `d`'s `top_k` guesses
    /// from the hidden state are checked against the token `d + 2` ahead. Needs the engine idle.
    pub(crate) fn measure_heads(
        &mut self,
        prompt: &Prompt,
        continuation: &[TokenId],
        top_k: usize,
    ) -> Result<HeadAccuracy, EngineError> {
        let Some(heads) = self.heads.clone() else {
            return Err(EngineError::NoMedusaHeads);
        };
        let mut tally = HeadAccuracy::new(heads.head_count(), top_k);
        self.decode_along(prompt, continuation, |tokens, pos, hidden| {
            if pos + 2 >= tokens.len() {
                return;
            }
            let start = Instant::now();
            let mut ranks = Vec::with_capacity(heads.head_count());
            let root_input = heads.root_input(tokens[pos + 1]);
            for head in 0..heads.head_count() {
                let Some(&actual) = tokens.get(pos + 2 + head) else {
                    break;
                };
                let guesses = heads.top_k(head, hidden, root_input.as_deref(), top_k);
                ranks.push(tally.record(head, &guesses, actual));
            }
            tally.record_position(ranks);
            tally.heads_ms += ms_since(start);
            tally.heads_runs += 1;
        })?;
        Ok(tally)
    }

    /// Decodes `prompt` + `continuation` from an empty cache and hands `visit` the tokens, a
    /// position and its final hidden state, for every position from the prompt's last token
    /// on.
    fn decode_along(
        &mut self,
        prompt: &Prompt,
        continuation: &[TokenId],
        mut visit: impl FnMut(&[TokenId], usize, &[f32]),
    ) -> Result<(), EngineError> {
        let mut tokens: Vec<TokenId> = self.prompt_tokens(prompt)?.iter().map(|t| t.0).collect();
        let first = tokens.len() - 1;
        tokens.extend_from_slice(continuation);
        if tokens.len() > self.n_ctx_seq {
            return Err(EngineError::PromptTooLong {
                tokens: tokens.len(),
                limit: self.n_ctx_seq,
            });
        }
        self.ctx.clear_kv_cache();
        let result = self.visit_hidden_states(&tokens, first, &mut visit);
        self.ctx.clear_kv_cache();
        result
    }

    fn visit_hidden_states(
        &mut self,
        tokens: &[TokenId],
        first: usize,
        visit: &mut impl FnMut(&[TokenId], usize, &[f32]),
    ) -> Result<(), EngineError> {
        for (chunk_index, chunk) in tokens.chunks(self.n_batch).enumerate() {
            let offset = chunk_index * self.n_batch;
            self.batch.clear();
            for (i, &token) in chunk.iter().enumerate() {
                self.add(LlamaToken(token), offset + i, &[0], offset + i >= first)?;
            }
            self.decode()?;
            // llama.cpp looks hidden states up by batch index, like logits.
            for pos in (offset..offset + chunk.len()).filter(|&p| p >= first) {
                let hidden = self
                    .ctx
                    .embeddings_ith((pos - offset) as i32)
                    .map_err(|e| EngineError::Decode(format!("hidden state unavailable: {e}")))?;
                visit(tokens, pos, hidden);
            }
        }
        Ok(())
    }

    /// The decode cost model: read from the cache when this machine measured it before for
    /// this model and settings, else measured once per engine. Needs the engine to be idle.
    pub(crate) fn ensure_cost_model(&mut self) -> Result<&CostModel, EngineError> {
        if self.cost_model.is_none() {
            let cached = self
                .cost_cache
                .as_ref()
                .and_then(|(cache, key)| cache.load(key));
            match cached {
                Some(points) => {
                    tracing::info!(?points, "decode costs read from the cache");
                    self.cost_model = Some(CostModel::new(points));
                }
                None => {
                    self.measure_costs()?;
                }
            }
        }
        Ok(self
            .cost_model
            .get_or_insert_with(|| CostModel::new(vec![])))
    }

    /// Settles Medusa mode's tree once the heads are loaded, from the heads' record and this
    /// machine's decode costs. Needs the engine idle (measuring clears the KV cache).
    pub(crate) fn plan_medusa(&mut self, given: Option<TreeSpec>) -> Result<(), EngineError> {
        let Some(heads) = self.heads.clone() else {
            return Ok(());
        };
        let plan = plan_tree(heads.info(), given, || {
            let costs = self.ensure_cost_model()?.clone();
            Ok::<_, EngineError>((costs, heads.draft_ms_per_head()))
        })?;
        tracing::info!(decision = %plan.decision, "medusa plan");
        self.medusa_plan = Some(plan);
        Ok(())
    }

    /// Measures decode costs now, keeps them in the cache and uses them from here on.
    pub(crate) fn measure_costs(&mut self) -> Result<&CostModel, EngineError> {
        let measured = self.calibrate()?;
        if let Some((cache, key)) = &self.cost_cache {
            if let Err(err) = cache.store(key, measured.points()) {
                tracing::warn!(%err, "could not keep the measured decode costs");
            }
        }
        Ok(self.cost_model.insert(measured))
    }

    /// Measures decode time by batch size on this machine (median of a few runs each), so
    /// that drafting only happens where it pays. Leaves the KV cache empty.
    fn calibrate(&mut self) -> Result<CostModel, EngineError> {
        let _span = tracing::info_span!("calibrate").entered();
        let token = self.model.vocab().bos();
        let mut points = Vec::new();
        for &n in CALIBRATION_SIZES {
            let mut times = Vec::new();
            // One unmeasured run first: the first decode of a size allocates.
            for _ in 0..4 {
                self.ctx.clear_kv_cache();
                self.batch.clear();
                for pos in 0..n {
                    self.add(token, pos, &[0], true)?;
                }
                let started = Instant::now();
                self.decode()?;
                times.push(ms_since(started));
            }
            // The fastest run is the least disturbed by whatever else the machine is doing.
            times.remove(0);
            points.push((n, times.iter().copied().fold(f64::INFINITY, f64::min)));
        }
        self.ctx.clear_kv_cache();
        tracing::info!(?points, "decode cost measured");
        Ok(CostModel::new(points))
    }
}

/// Batch sizes timed by `calibrate`; larger ones are extrapolated.
const CALIBRATION_SIZES: &[usize] = &[1, 2, 4, 8, 16, 32];

/// Largest seed chosen for a run: 2^53 - 1, so that the seed survives JSON clients that read
/// numbers as doubles (browsers) and the run can be repeated from what they show.
pub(crate) const MAX_RANDOM_SEED: u64 = (1 << 53) - 1;

pub(crate) fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // Mix in an address so two runs in the same nanosecond still differ.
    let local = 0u8;
    (nanos ^ (&local as *const u8 as u64).rotate_left(32)) & MAX_RANDOM_SEED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_seeds_fit_a_double_exactly() {
        for _ in 0..100 {
            let seed = random_seed();
            assert!(seed <= MAX_RANDOM_SEED);
            assert_eq!(seed as f64 as u64, seed);
        }
    }
}
