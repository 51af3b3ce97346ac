//! A draft model: a smaller model with the served model's vocabulary, run in a llama.cpp context
//! of its own, that guesses the next tokens one decode at a time for the served model to verify.
//!
//! Each request has a sequence of its own in that context. The tokens whose cells a sequence
//! holds are remembered, so a proposal decodes only what the request emitted since its last one;
//! guesses the served model rejected are removed first. A finished request's cells stay until
//! its slot's next request, which keeps whatever prefix the two share.

use std::cell::RefCell;
use std::time::Instant;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use crate::clock::ms_since;
use crate::error::EngineError;
use crate::llama_runtime::LlamaRuntime;
use crate::request::{ChatMessage, Prompt};
use crate::sampler::argmax;
use crate::speculative::drafter::{Guesses, ModelProposer};
use crate::token::{common_prefix, TokenId};

/// A guess the draft model gives less probability than this ends its chain: an unsure guess
/// is seldom accepted and costs a draft decode and a verified token (llama.cpp's
/// `--draft-p-min` default).
const MIN_PROBABILITY: f32 = 0.75;

/// What a step that drafted leaves for the next proposal to read: its last guess (never decoded
/// by the draft model) when accepted, and the model's own token.
const STEP_READ: usize = 2;

pub(crate) struct DraftModel<'m> {
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    /// By sequence id: the tokens whose cells the sequence holds, in position order.
    held: Vec<Vec<TokenId>>,
    /// Cells each sequence may use.
    n_ctx_seq: usize,
    n_batch: usize,
    /// Tokens of the served model's vocabulary; a guess beyond it is not proposed.
    target_vocab: usize,
}

impl<'m> DraftModel<'m> {
    pub(crate) fn new(ctx: LlamaContext<'m>, sequences: usize, target_vocab: usize) -> Self {
        let n_batch = ctx.n_batch() as usize;
        let n_ctx_seq = ctx.n_ctx() as usize / sequences.max(1);
        Self {
            ctx,
            batch: LlamaBatch::new(n_batch, 1),
            held: vec![Vec::new(); sequences],
            n_ctx_seq,
            n_batch,
            target_vocab,
        }
    }

    /// Up to `n` tokens the draft model expects after `history`, its top guess at each place;
    /// the chain ends early at a guess it is unsure of.
    fn propose(
        &mut self,
        seq: usize,
        history: &[TokenId],
        n: usize,
    ) -> Result<Guesses, EngineError> {
        let _span = tracing::debug_span!("draft_model", seq, n).entered();
        if history.is_empty() || n == 0 || seq >= self.held.len() {
            return Ok(Guesses::default());
        }
        let room = self.n_ctx_seq.saturating_sub(history.len());
        let n = n.min(room);
        if n == 0 {
            return Ok(Guesses::default());
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
        let mut proposal = Vec::with_capacity(n);
        loop {
            let last = self.batch.n_tokens() - 1;
            let Some(token) = confident_top(self.ctx.get_logits_ith(last), self.target_vocab)
            else {
                break;
            };
            proposal.push(token);
            if proposal.len() == n {
                break;
            }
            let pos = self.held[seq].len();
            self.decode(seq, &[token], pos)?;
            self.held[seq].push(token);
        }
        Ok(Guesses {
            tokens: proposal,
            reading_ms,
        })
    }

    /// Makes sequence `seq` hold exactly `history`, decoding what it lacks; the last token is
    /// always decoded, as its logits give the first guess. Returns how many tokens it read.
    fn catch_up(&mut self, seq: usize, history: &[TokenId]) -> Result<usize, EngineError> {
        let held = &self.held[seq];
        let keep = common_prefix(held, history).min(history.len() - 1);
        if keep < held.len() {
            self.ctx
                .kv_cache_seq_rm(seq as i32, Some(keep as u32), None)
                .map_err(failed)?;
            self.held[seq].truncate(keep);
        }
        for start in (keep..history.len()).step_by(self.n_batch) {
            let end = (start + self.n_batch).min(history.len());
            self.decode(seq, &history[start..end], start)?;
        }
        self.held[seq].extend_from_slice(&history[keep..]);
        Ok(history.len() - keep)
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
        self.batch.clear();
        for (i, &token) in tokens.iter().enumerate() {
            self.batch
                .add(
                    LlamaToken(token),
                    (pos + i) as i32,
                    &[seq as i32],
                    i >= first,
                )
                .map_err(failed)?;
        }
        self.ctx.decode(&mut self.batch).map_err(failed)
    }
}

fn failed(e: impl std::fmt::Display) -> EngineError {
    EngineError::Decode(format!("draft model: {e}"))
}

/// How well a draft model guesses the served model's answers, measured when it loads: the
/// starting point of its acceptance before any request has drafted with it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Agreement {
    /// Of the draft model's confident guesses along the served model's greedy answer, the
    /// share that was the served model's token.
    pub(crate) rate: f64,
    /// Confident guesses behind the rate.
    pub(crate) guesses: usize,
    /// One draft decode of a single token.
    pub(crate) ms_per_token: f64,
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
        let prompt: Vec<TokenId> = runtime
            .prompt_tokens(&prompt, false)?
            .iter()
            .map(|t| t.0)
            .collect();
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
    runtime.clear_kv();
    runtime.clear_batch();
    for (pos, &token) in prompt.iter().enumerate() {
        runtime.add(LlamaToken(token), pos, &[0], pos + 1 == prompt.len())?;
    }
    runtime.decode()?;
    let mut answer = Vec::with_capacity(max);
    let mut index = prompt.len() as i32 - 1;
    while answer.len() < max {
        let token = argmax(runtime.logits(index));
        if runtime.model().vocab().is_eog(LlamaToken(token)) {
            break;
        }
        answer.push(token);
        runtime.clear_batch();
        runtime.add(
            LlamaToken(token),
            prompt.len() + answer.len() - 1,
            &[0],
            true,
        )?;
        runtime.decode()?;
        index = 0;
    }
    runtime.clear_kv();
    Ok(answer)
}

impl ModelProposer for RefCell<DraftModel<'_>> {
    fn propose(&self, seq: usize, history: &[TokenId], n: usize) -> Result<Guesses, EngineError> {
        self.borrow_mut().propose(seq, history, n)
    }
}

/// The most likely token, when the draft model gives it at least [`MIN_PROBABILITY`] and the
/// served model's vocabulary has it.
fn confident_top(logits: &[f32], target_vocab: usize) -> Option<TokenId> {
    if logits.is_empty() {
        return None;
    }
    let best = argmax(logits);
    let max = logits[best as usize];
    let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    // The top token's softmax probability is 1 / sum.
    (sum * MIN_PROBABILITY <= 1.0 && (best as usize) < target_vocab).then_some(best)
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
mod tests {
    use super::*;

    fn vocab(texts: &[&str]) -> VocabSummary {
        VocabSummary {
            kind: "BPE".into(),
            bos: 1,
            eos: 2,
            texts: texts.iter().map(|t| t.as_bytes().to_vec()).collect(),
        }
    }

    #[test]
    fn the_same_vocabulary_drafts_and_padding_at_the_end_is_allowed() {
        let model = vocab(&["<unk>", "<s>", "</s>", "a", "b"]);
        assert_eq!(model.difference(&model.clone()), None);
        let padded = vocab(&["<unk>", "<s>", "</s>", "a", "b", "<pad0>", "<pad1>"]);
        assert_eq!(model.difference(&padded), None);
    }

    #[test]
    fn another_tokenizer_special_tokens_size_or_text_is_refused() {
        let model = vocab(&["<unk>", "<s>", "</s>", "a", "b"]);
        let mut spm = model.clone();
        spm.kind = "SPM".into();
        assert_eq!(
            model.difference(&spm).as_deref(),
            Some("its tokenizer is SPM, the model's is BPE")
        );
        let mut eos = model.clone();
        eos.eos = 0;
        assert_eq!(
            model.difference(&eos).as_deref(),
            Some("its start and end tokens are 1 and 0, the model's 1 and 2")
        );
        let mut big = model.clone();
        big.texts
            .resize(5 + MAX_VOCAB_SIZE_DIFFERENCE + 1, b"x".to_vec());
        assert_eq!(
            model.difference(&big).as_deref(),
            Some("its vocabulary has 134 tokens, the model's 5")
        );
        let other = vocab(&["<unk>", "<s>", "</s>", "a", "c"]);
        assert_eq!(
            model.difference(&other).as_deref(),
            Some("its token 4 is \"c\", the model's is \"b\"")
        );
    }

    #[test]
    fn only_a_confident_guess_the_model_knows_is_proposed() {
        // Softmax of [4, 0, 0]: the top token has about 0.96.
        assert_eq!(confident_top(&[4.0, 0.0, 0.0], 3), Some(0));
        // Of [1, 0, 0]: about 0.58, below the threshold.
        assert_eq!(confident_top(&[1.0, 0.0, 0.0], 3), None);
        // A confident guess beyond the served model's vocabulary.
        assert_eq!(confident_top(&[0.0, 0.0, 6.0], 2), None);
        assert_eq!(confident_top(&[], 2), None);
    }
}
