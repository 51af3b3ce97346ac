//! A draft model: a smaller model with the served model's vocabulary, run in a llama.cpp context
//! of its own, that guesses the next tokens one decode at a time for the served model to verify.
//!
//! Each request has a sequence of its own in that context. The tokens whose cells a sequence
//! holds are remembered, so a proposal decodes only what the request emitted since its last one;
//! guesses the served model rejected are removed first. A finished request's cells stay until
//! its slot's next request, which keeps whatever prefix the two share.
//!
//! The draft model is continuous-batched like the served model: at the start of a step every
//! drafting request's unread tokens are read in one decode, and their chains grow together, one
//! decode per depth holding a token of each ([`DraftModel::prepare`]). A request then takes its
//! prepared guesses when it drafts.

use std::cell::RefCell;
use std::time::Instant;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use crate::clock::ms_since;
use crate::error::EngineError;
use crate::llama::runtime::LlamaRuntime;
use crate::request::{ChatMessage, Prompt};
use crate::sampling::sampler::argmax;
use crate::speculative::drafter::DraftAsk;
use crate::speculative::model_drafter::{Agreement, Guesses, ModelProposer};
use crate::step::decoder::{Decoder, KvCells};
use crate::token::{common_prefix, TokenId};

/// A guess the draft model gives less probability than this ends its chain: an unsure guess
/// is seldom accepted and costs a draft decode and a verified token (llama.cpp's
/// `--draft-p-min` default).
const MIN_PROBABILITY: f32 = 0.75;

/// Where no single guess is that likely, at most this many of the draft model's top guesses
/// branch from the end of the chain, when together they hold [`MIN_PROBABILITY`]: a tree from
/// its top-k, drafted where it is torn between a few tokens (no draft decode is spent on them).
const MAX_BRANCHES: usize = 3;

/// What a step that drafted leaves for the next proposal to read: its last guess (never decoded
/// by the draft model) when accepted, and the model's own token.
const STEP_READ: usize = 2;

/// Guesses made for a request at the start of the step, before it drafts.
struct Prepared {
    /// The history they follow, by length (the sequence's cells hold it whole).
    history_len: usize,
    guesses: Guesses,
    /// The chain stopped at an unsure guess (rather than at the asked length).
    ended: bool,
}

/// A request's guesses being made in [`DraftModel::prepare`].
struct Lane<'h> {
    seq: usize,
    history: &'h [TokenId],
    n: usize,
    /// Tokens it read that the sequence had not seen.
    read: usize,
    /// Its share of the decodes that read them.
    reading_ms: f64,
    guesses: Guesses,
    /// Its chain grows at the next decode.
    growing: bool,
}

impl<'h> Lane<'h> {
    fn new(ask: &DraftAsk<'h>, n: usize) -> Self {
        Self {
            seq: ask.sequence,
            history: ask.history,
            n,
            read: 0,
            reading_ms: 0.0,
            guesses: Guesses::default(),
            growing: false,
        }
    }
}

/// A token in a decode: its sequence, its position, and whether its logits are wanted.
#[derive(Clone, Copy)]
struct LaneToken {
    seq: usize,
    token: TokenId,
    pos: usize,
    logits: bool,
}

pub(crate) struct DraftModel<'m> {
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    /// By sequence id: the tokens whose cells the sequence holds, in position order.
    held: Vec<Vec<TokenId>>,
    /// By sequence id: this step's guesses, made together for every request that asked.
    prepared: Vec<Option<Prepared>>,
    /// Cells each sequence may use.
    n_ctx_seq: usize,
    n_batch: usize,
    /// Tokens of the served model's vocabulary; a guess beyond it is not proposed.
    target_vocab: usize,
    /// Decodes and their tokens since [`Self::take_counts`] last read them.
    decodes: u64,
    tokens: u64,
}

impl<'m> DraftModel<'m> {
    pub(crate) fn new(ctx: LlamaContext<'m>, sequences: usize, target_vocab: usize) -> Self {
        let n_batch = ctx.n_batch() as usize;
        let n_ctx_seq = ctx.n_ctx() as usize / sequences.max(1);
        Self {
            ctx,
            batch: LlamaBatch::new(n_batch, 1),
            held: vec![Vec::new(); sequences],
            prepared: (0..sequences).map(|_| None).collect(),
            n_ctx_seq,
            n_batch,
            target_vocab,
            decodes: 0,
            tokens: 0,
        }
    }

    /// Up to `n` tokens the draft model expects after `history`: a chain of its top guesses,
    /// ending early at a place it is unsure of, where its few likeliest guesses may branch.
    /// Takes what [`Self::prepare`] made for the request this step, and only decodes further
    /// when the request asks for more.
    fn propose(
        &mut self,
        seq: usize,
        history: &[TokenId],
        n: usize,
    ) -> Result<Guesses, EngineError> {
        let _span = tracing::debug_span!("draft_model", seq, n).entered();
        let n = self.room(seq, history, n);
        if n == 0 {
            return Ok(Guesses::default());
        }
        if let Some(prepared) = self.take_prepared(seq, history) {
            let mut guesses = prepared.guesses;
            if guesses.len() < n && !prepared.ended && !guesses.tokens.is_empty() {
                self.extend_chain(seq, &mut guesses, n)?;
            }
            guesses.truncate(n);
            return Ok(guesses);
        }
        let reading = Instant::now();
        let read = self.catch_up(seq, history)?;
        // What a drafting step leaves to read is a step's cost; more is text the draft model
        // had not seen (a new prompt, or steps that did not draft with it).
        let reading_ms = if read > STEP_READ {
            ms_since(reading)
        } else {
            0.0
        };
        let mut guesses = Guesses {
            reading_ms,
            ..Guesses::default()
        };
        let last = self.batch.n_tokens() - 1;
        if guess_at(
            &mut guesses,
            self.ctx.get_logits_ith(last),
            self.target_vocab,
            n,
        ) {
            self.extend_chain(seq, &mut guesses, n)?;
        }
        Ok(guesses)
    }

    /// How many of `n` guesses after `history` fit in sequence `seq`.
    fn room(&self, seq: usize, history: &[TokenId], n: usize) -> usize {
        if history.is_empty() || seq >= self.held.len() {
            return 0;
        }
        n.min(self.n_ctx_seq.saturating_sub(history.len()))
    }

    /// The guesses prepared this step for sequence `seq`, if they follow `history`.
    fn take_prepared(&mut self, seq: usize, history: &[TokenId]) -> Option<Prepared> {
        let prepared = self.prepared[seq].take()?;
        let held = &self.held[seq];
        (prepared.history_len == history.len() && held.starts_with(history)).then_some(prepared)
    }

    /// Decodes the chain's last guess and adds the draft model's next, until `n` guesses or
    /// one it is unsure of.
    fn extend_chain(
        &mut self,
        seq: usize,
        guesses: &mut Guesses,
        n: usize,
    ) -> Result<(), EngineError> {
        while guesses.len() < n {
            let last = *guesses.tokens.last().expect("a chain to extend");
            let pos = self.held[seq].len();
            self.decode(seq, &[last], pos)?;
            self.held[seq].push(last);
            if !guess_at(guesses, self.ctx.get_logits_ith(0), self.target_vocab, n) {
                break;
            }
        }
        Ok(())
    }

    /// Makes every request's guesses for this step together: one decode reads what each
    /// sequence has not seen (more when the batch is too small for it all), then one decode
    /// per depth extends every chain still growing. The time of each decode is shared among
    /// its tokens, so each request pays its part. Guesses not taken this step are dropped
    /// at the next.
    pub(crate) fn prepare(&mut self, asks: &[DraftAsk<'_>]) {
        self.prepared.iter_mut().for_each(|p| *p = None);
        let mut lanes: Vec<Lane<'_>> = asks
            .iter()
            .filter_map(|ask| {
                let n = self.room(ask.sequence, ask.history, ask.max_nodes);
                (n > 0).then(|| Lane::new(ask, n))
            })
            .collect();
        if lanes.is_empty() {
            return;
        }
        let _span = tracing::debug_span!("draft_model_batch", requests = lanes.len()).entered();
        if let Err(err) = self.prepare_lanes(&mut lanes) {
            // Their cells may not match what is remembered: each reads its text again.
            tracing::warn!(%err, "the draft model failed to prepare guesses");
            for lane in &lanes {
                let _ = self.forget(lane.seq);
            }
            return;
        }
        for lane in lanes {
            let ended = lane.guesses.len() < lane.n || !lane.guesses.branches.is_empty();
            let mut guesses = lane.guesses;
            guesses.reading_ms = if lane.read > STEP_READ {
                lane.reading_ms
            } else {
                0.0
            };
            self.prepared[lane.seq] = Some(Prepared {
                history_len: lane.history.len(),
                guesses,
                ended,
            });
        }
    }

    fn prepare_lanes(&mut self, lanes: &mut [Lane<'_>]) -> Result<(), EngineError> {
        // Each lane's unread tokens: (lane, position).
        let mut unread = Vec::new();
        for (l, lane) in lanes.iter_mut().enumerate() {
            let keep = self.drop_after_common_prefix(lane.seq, lane.history)?;
            lane.read = lane.history.len() - keep;
            unread.extend((keep..lane.history.len()).map(|pos| (l, pos)));
            self.held[lane.seq].extend_from_slice(&lane.history[keep..]);
        }
        for chunk in unread.chunks(self.n_batch) {
            let tokens: Vec<LaneToken> = chunk
                .iter()
                .map(|&(l, pos)| LaneToken {
                    seq: lanes[l].seq,
                    token: lanes[l].history[pos],
                    pos,
                    logits: pos + 1 == lanes[l].history.len(),
                })
                .collect();
            let share = self.decode_lanes(&tokens)?;
            for (i, &(l, _)) in chunk.iter().enumerate() {
                let lane = &mut lanes[l];
                lane.reading_ms += share;
                lane.guesses.prepared_ms += share;
                if tokens[i].logits {
                    let logits = self.ctx.get_logits_ith(i as i32);
                    lane.growing = guess_at(&mut lane.guesses, logits, self.target_vocab, lane.n);
                }
            }
        }
        loop {
            let growing: Vec<usize> = (0..lanes.len()).filter(|&l| lanes[l].growing).collect();
            if growing.is_empty() {
                return Ok(());
            }
            let tokens: Vec<LaneToken> = growing
                .iter()
                .map(|&l| {
                    let seq = lanes[l].seq;
                    LaneToken {
                        seq,
                        token: *lanes[l].guesses.tokens.last().expect("a growing chain"),
                        pos: self.held[seq].len(),
                        logits: true,
                    }
                })
                .collect();
            let share = self.decode_lanes(&tokens)?;
            for (i, &l) in growing.iter().enumerate() {
                let lane = &mut lanes[l];
                self.held[lane.seq].push(tokens[i].token);
                lane.guesses.prepared_ms += share;
                let logits = self.ctx.get_logits_ith(i as i32);
                lane.growing = guess_at(&mut lane.guesses, logits, self.target_vocab, lane.n);
            }
        }
    }

    /// One decode of tokens of several sequences; returns each token's share of its time.
    fn decode_lanes(&mut self, tokens: &[LaneToken]) -> Result<f64, EngineError> {
        let started = Instant::now();
        self.decode_tokens(tokens.iter().copied())?;
        Ok(ms_since(started) / tokens.len().max(1) as f64)
    }

    /// Makes sequence `seq` hold exactly `history`, decoding what it lacks; the last token is
    /// always decoded, as its logits give the first guess. Returns how many tokens it read.
    fn catch_up(&mut self, seq: usize, history: &[TokenId]) -> Result<usize, EngineError> {
        let keep = self.drop_after_common_prefix(seq, history)?;
        for start in (keep..history.len()).step_by(self.n_batch) {
            let end = (start + self.n_batch).min(history.len());
            self.decode(seq, &history[start..end], start)?;
        }
        self.held[seq].extend_from_slice(&history[keep..]);
        Ok(history.len() - keep)
    }

    /// Removes the cells of sequence `seq` after the longest prefix it shares with `history`,
    /// short of `history`'s last token (whose logits give the first guess); returns the prefix's
    /// length.
    fn drop_after_common_prefix(
        &mut self,
        seq: usize,
        history: &[TokenId],
    ) -> Result<usize, EngineError> {
        let held = &self.held[seq];
        let keep = common_prefix(held, history).min(history.len() - 1);
        if keep < held.len() {
            self.ctx
                .kv_cache_seq_rm(seq as i32, Some(keep as u32), None)
                .map_err(failed)?;
            self.held[seq].truncate(keep);
        }
        Ok(keep)
    }

    /// One decode of `tokens` at positions from `pos` in sequence `seq`, with logits for the
    /// last token.
    fn decode(&mut self, seq: usize, tokens: &[TokenId], pos: usize) -> Result<(), EngineError> {
        self.decode_with_logits_from(seq, tokens, pos, tokens.len().saturating_sub(1))
    }

    /// [`Self::decode`], with logits for every token from index `first` of `tokens`.
    fn decode_with_logits_from(
        &mut self,
        seq: usize,
        tokens: &[TokenId],
        pos: usize,
        first: usize,
    ) -> Result<(), EngineError> {
        self.decode_tokens(tokens.iter().enumerate().map(|(i, &token)| LaneToken {
            seq,
            token,
            pos: pos + i,
            logits: i >= first,
        }))
    }

    /// One decode of `tokens`, counted.
    fn decode_tokens(
        &mut self,
        tokens: impl IntoIterator<Item = LaneToken>,
    ) -> Result<(), EngineError> {
        self.batch.clear();
        for t in tokens {
            self.batch
                .add(LlamaToken(t.token), t.pos as i32, &[t.seq as i32], t.logits)
                .map_err(failed)?;
        }
        self.decodes += 1;
        self.tokens += self.batch.n_tokens() as u64;
        self.ctx.decode(&mut self.batch).map_err(failed)
    }

    /// Decodes and their tokens since the last call.
    pub(crate) fn take_counts(&mut self) -> (u64, u64) {
        (
            std::mem::take(&mut self.decodes),
            std::mem::take(&mut self.tokens),
        )
    }
}

fn failed(e: impl std::fmt::Display) -> EngineError {
    EngineError::Decode(format!("draft model: {e}"))
}

/// A question whose answer the served model writes when a draft model loads.
const PROBE_QUESTION: &str = "Explain in a few sentences how a bicycle stays upright.";
/// Tokens of that answer the draft model is checked against.
const PROBE_TOKENS: usize = 48;

impl<'m> DraftModel<'m> {
    /// The draft model's agreement with the served model along the served model's own greedy
    /// answer to [`PROBE_QUESTION`], and the time of one draft decode. Clears the served
    /// model's KV cache, so it runs before any request.
    pub(crate) fn measure_agreement(
        &mut self,
        runtime: &mut LlamaRuntime<'_>,
    ) -> Result<Option<Agreement>, EngineError> {
        let _span = tracing::info_span!("draft_model_agreement").entered();
        let prompt = if runtime.has_chat_template() {
            Prompt::Chat(vec![ChatMessage::new("user", PROBE_QUESTION)])
        } else {
            Prompt::Text(PROBE_QUESTION.to_owned())
        };
        let prompt: Vec<TokenId> = runtime.prompt_tokens(&prompt, false)?;
        let answer = greedy_answer(runtime, &prompt, PROBE_TOKENS)?;
        // The draft model reads the prompt and the answer in one decode, a guess at each place.
        let mut text = prompt.clone();
        text.extend(&answer);
        let text = &text[..text.len().min(self.n_batch).min(self.n_ctx_seq)];
        let first = prompt.len() - 1;
        if text.len() <= first + 1 {
            // A batch too small for the question: nothing to start from.
            return Ok(None);
        }
        self.forget(0)?;
        self.decode_with_logits_from(0, text, 0, first)?;
        let (mut guesses, mut right) = (0, 0);
        for (i, &expected) in text[first + 1..].iter().enumerate() {
            let logits = self.ctx.get_logits_ith((first + i) as i32);
            if let Some(guess) = confident_top(logits, self.target_vocab) {
                guesses += 1;
                right += usize::from(guess == expected);
            }
        }
        // One-token decodes after the text, as a drafted chain runs them.
        let mut times = Vec::with_capacity(5);
        for k in 0..5 {
            let started = Instant::now();
            self.decode(0, &[text[first + 1]], text.len() + k)?;
            times.push(ms_since(started));
        }
        self.forget(0)?;
        times.sort_by(f64::total_cmp);
        let agreement = (guesses > 0).then(|| Agreement {
            rate: right as f64 / guesses as f64,
            guesses,
            ms_per_token: times[times.len() / 2],
        });
        tracing::info!(?agreement, "draft model measured");
        Ok(agreement)
    }

    /// Frees every cell of sequence `seq`.
    fn forget(&mut self, seq: usize) -> Result<(), EngineError> {
        self.ctx
            .kv_cache_seq_rm(seq as i32, None, None)
            .map_err(failed)?;
        self.held[seq].clear();
        Ok(())
    }
}

/// The served model's greedy answer of at most `max` tokens to `prompt`, decoded alone; leaves
/// its KV cache empty.
fn greedy_answer(
    runtime: &mut LlamaRuntime<'_>,
    prompt: &[TokenId],
    max: usize,
) -> Result<Vec<TokenId>, EngineError> {
    runtime.clear_cells();
    runtime.clear_batch();
    for (pos, &token) in prompt.iter().enumerate() {
        runtime.add_to_batch(token, pos, &[0], pos + 1 == prompt.len())?;
    }
    runtime.decode()?;
    let mut answer = Vec::with_capacity(max);
    let mut index = prompt.len() as i32 - 1;
    while answer.len() < max {
        let token = argmax(runtime.logits(index)?);
        if runtime.model().vocab().is_eog(LlamaToken(token)) {
            break;
        }
        answer.push(token);
        runtime.clear_batch();
        runtime.add_to_batch(token, prompt.len() + answer.len() - 1, &[0], true)?;
        runtime.decode()?;
        index = 0;
    }
    runtime.clear_cells();
    Ok(answer)
}

impl ModelProposer for RefCell<DraftModel<'_>> {
    fn prepare(&self, asks: &[DraftAsk<'_>]) {
        self.borrow_mut().prepare(asks);
    }

    fn propose(&self, seq: usize, history: &[TokenId], n: usize) -> Result<Guesses, EngineError> {
        self.borrow_mut().propose(seq, history, n)
    }

    fn take_counts(&self) -> (u64, u64) {
        self.borrow_mut().take_counts()
    }
}

/// What the draft model guesses at the next place.
#[derive(Debug, Clone, PartialEq)]
enum NextGuess {
    /// Its top token, at least [`MIN_PROBABILITY`] likely.
    Sure(TokenId),
    /// Its few likeliest tokens, none that likely alone, together at least that likely.
    Torn(Vec<TokenId>),
    Unsure,
}

/// The draft model's guess from its `logits`, branching into at most `max_branches` tokens;
/// tokens beyond the served model's vocabulary are never guessed.
fn next_guess(logits: &[f32], target_vocab: usize, max_branches: usize) -> NextGuess {
    if logits.is_empty() {
        return NextGuess::Unsure;
    }
    let top = top_tokens(logits, MAX_BRANCHES);
    let max = logits[top[0] as usize];
    let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    let probability = |t: TokenId| (logits[t as usize] - max).exp() / sum;
    if probability(top[0]) >= MIN_PROBABILITY {
        return if (top[0] as usize) < target_vocab {
            NextGuess::Sure(top[0])
        } else {
            NextGuess::Unsure
        };
    }
    let mut held = 0.0;
    let mut branches = Vec::new();
    for &t in top.iter().filter(|&&t| (t as usize) < target_vocab) {
        if branches.len() == max_branches {
            break;
        }
        branches.push(t);
        held += probability(t);
        if held >= MIN_PROBABILITY {
            return if branches.len() > 1 {
                NextGuess::Torn(branches)
            } else {
                NextGuess::Unsure
            };
        }
    }
    NextGuess::Unsure
}

/// The `k` tokens with the highest logits, highest first (the lower id first on a tie, as
/// greedy decoding breaks one).
fn top_tokens(logits: &[f32], k: usize) -> Vec<TokenId> {
    let mut top: Vec<TokenId> = Vec::with_capacity(k + 1);
    for (t, &l) in logits.iter().enumerate() {
        if top.len() == k && l <= logits[top[k - 1] as usize] {
            continue;
        }
        let at = top.partition_point(|&u| logits[u as usize] >= l);
        top.insert(at, t as TokenId);
        top.truncate(k);
    }
    top
}

/// The most likely token, when the draft model gives it at least [`MIN_PROBABILITY`] and the
/// served model's vocabulary has it.
fn confident_top(logits: &[f32], target_vocab: usize) -> Option<TokenId> {
    match next_guess(logits, target_vocab, 1) {
        NextGuess::Sure(token) => Some(token),
        _ => None,
    }
}

/// Adds the draft model's guess at the next place to `guesses`, at most `n` in all: its top
/// token when it is sure of it, or its likeliest few as branches, which end the chain. Returns
/// whether the chain may grow on.
fn guess_at(guesses: &mut Guesses, logits: &[f32], target_vocab: usize, n: usize) -> bool {
    let room = n.saturating_sub(guesses.len());
    if room == 0 {
        return false;
    }
    match next_guess(logits, target_vocab, room.min(MAX_BRANCHES)) {
        NextGuess::Sure(token) => {
            guesses.tokens.push(token);
            guesses.len() < n
        }
        NextGuess::Torn(branches) => {
            guesses.branches = branches;
            false
        }
        NextGuess::Unsure => false,
    }
}

/// What a vocabulary must agree on for one model to draft for another.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VocabSummary {
    pub(crate) kind: String,
    pub(crate) bos: TokenId,
    pub(crate) eos: TokenId,
    /// Each token's text, by id.
    pub(crate) texts: Vec<Vec<u8>>,
}

/// Vocabularies may differ in size by this many tokens (padding at the end), as llama.cpp's
/// own speculative decoding allows.
const MAX_VOCAB_SIZE_DIFFERENCE: usize = 128;

impl VocabSummary {
    pub(crate) fn of(model: &LlamaModel) -> Self {
        let vocab = model.vocab();
        Self {
            kind: format!("{:?}", vocab.vocab_type()),
            bos: vocab.bos().0,
            eos: vocab.eos().0,
            texts: vocab
                .tokens()
                .map(|token| {
                    vocab
                        .text(token)
                        .map_or_else(Vec::new, |t| t.to_bytes().to_vec())
                })
                .collect(),
        }
    }

    /// Why tokens of `draft` would not mean the same to the served model (`self`), if they
    /// would not: another kind of tokenizer, other special tokens, sizes too far apart, or a
    /// token with other text.
    pub(crate) fn difference(&self, draft: &VocabSummary) -> Option<String> {
        if self.kind != draft.kind {
            return Some(format!(
                "its tokenizer is {}, the model's is {}",
                draft.kind, self.kind
            ));
        }
        if (self.bos, self.eos) != (draft.bos, draft.eos) {
            return Some(format!(
                "its start and end tokens are {} and {}, the model's {} and {}",
                draft.bos, draft.eos, self.bos, self.eos
            ));
        }
        let (model_size, draft_size) = (self.texts.len(), draft.texts.len());
        if model_size.abs_diff(draft_size) > MAX_VOCAB_SIZE_DIFFERENCE {
            return Some(format!(
                "its vocabulary has {draft_size} tokens, the model's {model_size}"
            ));
        }
        let differing = self
            .texts
            .iter()
            .zip(&draft.texts)
            .position(|(a, b)| a != b)?;
        Some(format!(
            "its token {differing} is {:?}, the model's is {:?}",
            String::from_utf8_lossy(&draft.texts[differing]),
            String::from_utf8_lossy(&self.texts[differing])
        ))
    }
}

#[cfg(test)]
mod tests;
