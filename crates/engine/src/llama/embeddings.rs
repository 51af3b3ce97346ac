//! Text embeddings from the served model: the mean of the final hidden states over a text's
//! tokens, scaled to unit length (llama-server's default and OpenAI's convention).
//!
//! An embedding call is work on the engine thread like a generation, so it is bounded and
//! shared: its texts are tokenized and weighed on the caller's thread (a call over the token
//! budget is refused before it queues), it takes a queue place, and the engine reads it in
//! chunks of [`EMBEDDING_CHUNK`] tokens, one chunk between two decoding steps, so that running
//! generations never wait for more than one chunk. A caller that goes away ends its call at the
//! next chunk. It reads in a context of its own, so that embedding never touches the KV cache
//! that generation uses.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use llama_cpp_2::context::params::{LlamaContextParams, LlamaPoolingType};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use tokio::sync::oneshot;

use crate::error::EngineError;
use crate::llama::prompt;
use crate::llama_process::backend;
use crate::request::Prompt;
use crate::token::TokenId;

/// Most texts one call may embed.
pub const MAX_EMBEDDING_INPUTS: usize = 256;

/// Tokens read in one decode of an embedding call: as many as a prompt chunk decoded beside
/// running requests, so an embedding holds them up no longer than a prompt does. Fixed, so a
/// text's vector does not depend on what else was running.
pub const EMBEDDING_CHUNK: usize = 64;

/// What to embed: a text, or token ids of the model's own vocabulary (OpenAI takes both).
#[derive(Debug, Clone, PartialEq)]
pub enum EmbeddingInput {
    Text(String),
    Tokens(Vec<TokenId>),
    /// Token ids that may be another tokenizer's, which reads them as `text` (a client that
    /// tokenized with OpenAI's tokenizer). They are taken as this model's own ids only where
    /// they are exactly how this model tokenizes what they spell in its vocabulary; otherwise
    /// `text` is embedded.
    TokensOrText {
        ids: Vec<TokenId>,
        text: String,
    },
}

impl From<String> for EmbeddingInput {
    fn from(text: String) -> Self {
        Self::Text(text)
    }
}

/// One text's embedding.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedding {
    /// Unit length.
    pub vector: Vec<f32>,
    /// The text's tokens.
    pub tokens: usize,
}

/// What one call's embeddings come back as.
pub(crate) type EmbeddingReply = oneshot::Sender<Result<Vec<Embedding>, EngineError>>;

/// An embedding call the engine has queued; await it for the vectors. Dropping it cancels the
/// call.
pub struct EmbeddingCall {
    pub(crate) answer: oneshot::Receiver<Result<Vec<Embedding>, EngineError>>,
}

impl Future for EmbeddingCall {
    type Output = Result<Vec<Embedding>, EngineError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.answer)
            .poll(cx)
            .map(|answer| answer.unwrap_or(Err(EngineError::EngineStopped)))
    }
}

/// Texts tokenized and weighed, waiting for the engine.
pub(crate) struct EmbeddingJob {
    pub(crate) texts: Vec<Vec<LlamaToken>>,
    pub(crate) reply: EmbeddingReply,
    pub(crate) queued_at: Instant,
}

/// Tokenizes `texts` and checks them against the limits: at most [`MAX_EMBEDDING_INPUTS`] texts,
/// each at most `max_text_tokens`, all together at most `max_call_tokens`.
pub(crate) fn tokenize_inputs(
    model: &LlamaModel,
    inputs: &[EmbeddingInput],
    max_text_tokens: usize,
    max_call_tokens: usize,
) -> Result<Vec<Vec<LlamaToken>>, EngineError> {
    if inputs.is_empty() || inputs.len() > MAX_EMBEDDING_INPUTS {
        return Err(EngineError::InvalidParameter {
            name: "input",
            message: format!(
                "give 1 to {MAX_EMBEDDING_INPUTS} texts to embed, got {}",
                inputs.len()
            ),
        });
    }
    // No token spells more than MAX_BYTES_PER_TOKEN bytes: a call far over the budget is
    // refused from its length, before megabytes are tokenized.
    let at_least: usize = inputs
        .iter()
        .map(|input| match input {
            EmbeddingInput::Text(text) => text.len() / MAX_BYTES_PER_TOKEN,
            EmbeddingInput::Tokens(ids) => ids.len(),
            EmbeddingInput::TokensOrText { ids, text } => {
                ids.len().min(text.len() / MAX_BYTES_PER_TOKEN)
            }
        })
        .sum();
    if at_least > max_call_tokens {
        return Err(over_budget(at_least, max_call_tokens));
    }
    let n_vocab = model.n_vocab().max(0);
    let mut total = 0usize;
    inputs
        .iter()
        .map(|input| {
            let tokens = match input {
                EmbeddingInput::Text(text) => text_tokens(model, text)?,
                EmbeddingInput::Tokens(ids) => own_tokens(ids, n_vocab)?,
                EmbeddingInput::TokensOrText { ids, text } => {
                    if is_own_tokenization(model, ids, n_vocab) {
                        own_tokens(ids, n_vocab)?
                    } else {
                        text_tokens(model, text)?
                    }
                }
            };
            if tokens.is_empty() {
                return Err(EngineError::EmptyPrompt);
            }
            if tokens.len() > max_text_tokens {
                return Err(EngineError::PromptTooLong {
                    tokens: tokens.len(),
                    limit: max_text_tokens,
                });
            }
            total += tokens.len();
            if total > max_call_tokens {
                return Err(over_budget(total, max_call_tokens));
            }
            Ok(tokens)
        })
        .collect()
}

/// A text's tokens, as a prompt of that text has them.
fn text_tokens(model: &LlamaModel, text: &str) -> Result<Vec<LlamaToken>, EngineError> {
    let rendered = prompt::render(model, None, &Prompt::Text(text.to_owned()), false)?;
    Ok(prompt::tokenize(model, &rendered))
}

/// Token ids of this model's vocabulary, checked.
fn own_tokens(ids: &[TokenId], n_vocab: i32) -> Result<Vec<LlamaToken>, EngineError> {
    ids.iter()
        .map(|&id| match id {
            0.. if id < n_vocab => Ok(LlamaToken::new(id)),
            _ => Err(EngineError::InvalidParameter {
                name: "input",
                message: format!(
                    "token id {id} is not in this model's vocabulary (0 to {})",
                    n_vocab - 1
                ),
            }),
        })
        .collect()
}

/// Whether `ids` are this model's vocabulary and exactly what it makes of the text they spell
/// in it: ids a tokenizer wrote for its own vocabulary read back so, while another
/// tokenizer's ids spell a patchwork this model would cut differently.
fn is_own_tokenization(model: &LlamaModel, ids: &[TokenId], n_vocab: i32) -> bool {
    if ids.iter().any(|&id| !(0..n_vocab).contains(&id)) {
        return false;
    }
    let vocab = model.vocab();
    let mut spelt = Vec::new();
    for &id in ids {
        vocab.token_to_piece_into(LlamaToken::new(id), &mut spelt, false, None);
    }
    let again: Vec<TokenId> = vocab
        .tokenize(&spelt, false, false)
        .into_iter()
        .map(|token| token.0)
        .collect();
    again == ids
}

/// More bytes than any token of a real vocabulary spells.
const MAX_BYTES_PER_TOKEN: usize = 64;

fn over_budget(tokens: usize, limit: usize) -> EngineError {
    EngineError::TooMuchWork {
        name: "input",
        message: format!(
            "these texts take at least {tokens} tokens; one embedding call may take at most \
             {limit} (--max-embedding-tokens): split them over several calls"
        ),
    }
}

/// An embedding call being read, a chunk at a time.
pub(crate) struct RunningEmbedding<'m> {
    job: EmbeddingJob,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    /// The text being read, and how many of its tokens were.
    text: usize,
    read: usize,
    /// Sum of the hidden states read so far of the text being read.
    sum: Vec<f32>,
    done: Vec<Embedding>,
}

impl<'m> RunningEmbedding<'m> {
    /// Makes the call's context, sized for its longest text, with the kernels the engine
    /// decodes with (`exact`).
    pub(crate) fn start(
        model: &'m LlamaModel,
        threads: usize,
        exact: bool,
        job: EmbeddingJob,
    ) -> Result<Self, EngineError> {
        let longest = job.texts.iter().map(Vec::len).max().unwrap_or(1).max(1);
        let chunk = EMBEDDING_CHUNK as u32;
        // Every token is an output: its final hidden state, summed here.
        let params = LlamaContextParams::default()
            .with_embeddings(true)
            .with_pooling_type(LlamaPoolingType::None)
            .with_n_ctx(NonZeroU32::new(longest as u32))
            .with_n_batch(chunk)
            .with_n_ubatch(chunk)
            .with_n_seq_max(1)
            .with_n_threads(threads as i32)
            .with_n_threads_batch(threads as i32);
        let backend = backend()?;
        let ctx = crate::llama::exact_kernels::creating_context(exact, || {
            model.new_context(backend, params)
        })?
        .map_err(|e| EngineError::Context(format!("cannot make an embedding context: {e}")))?;
        let width = model.n_embd().max(0) as usize;
        let texts = job.texts.len();
        Ok(Self {
            job,
            ctx,
            batch: LlamaBatch::new(EMBEDDING_CHUNK, 1),
            text: 0,
            read: 0,
            sum: vec![0.0; width],
            done: Vec::with_capacity(texts),
        })
    }

    /// Whether the caller has gone away.
    pub(crate) fn is_abandoned(&self) -> bool {
        self.job.reply.is_closed()
    }

    pub(crate) fn queued_at(&self) -> Instant {
        self.job.queued_at
    }

    /// Reads the next chunk; whether every text is now read, and the tokens the chunk read.
    pub(crate) fn read_chunk(&mut self) -> Result<(bool, usize), EngineError> {
        let Some(tokens) = self.job.texts.get(self.text) else {
            return Ok((true, 0));
        };
        if self.read == 0 {
            self.ctx.clear_kv_cache();
            self.sum.fill(0.0);
        }
        let end = (self.read + EMBEDDING_CHUNK).min(tokens.len());
        self.batch.clear();
        for (pos, token) in tokens.iter().enumerate().take(end).skip(self.read) {
            self.batch
                .add(*token, pos as i32, &[0], true)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
        }
        self.ctx
            .decode(&mut self.batch)
            .map_err(|e| EngineError::Decode(e.to_string()))?;
        for i in 0..(end - self.read) {
            let hidden = self
                .ctx
                .embeddings_ith(i as i32)
                .map_err(|e| EngineError::Decode(format!("no hidden state: {e}")))?;
            for (total, x) in self.sum.iter_mut().zip(hidden) {
                *total += x;
            }
        }
        let read = end - self.read;
        self.read = end;
        if self.read == tokens.len() {
            let count = tokens.len();
            let mean: Vec<f32> = self.sum.iter().map(|x| x / count as f32).collect();
            self.done.push(Embedding {
                vector: unit_length(&mean),
                tokens: count,
            });
            self.text += 1;
            self.read = 0;
        }
        Ok((self.text == self.job.texts.len(), read))
    }

    /// Answers the caller with every vector, or with `failure`.
    pub(crate) fn finish(self, failure: Option<EngineError>) {
        let answer = match failure {
            Some(err) => Err(err),
            None => Ok(self.done),
        };
        let _ = self.job.reply.send(answer);
    }
}

fn unit_length(vector: &[f32]) -> Vec<f32> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm == 0.0 {
        return vector.to_vec();
    }
    vector.iter().map(|x| x / norm).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_scaled_to_unit_length() {
        assert_eq!(unit_length(&[3.0, 4.0]), vec![0.6, 0.8]);
        assert_eq!(unit_length(&[0.0, 0.0]), vec![0.0, 0.0]);
    }

    #[test]
    fn a_call_far_over_the_budget_names_the_limit_and_the_flag() {
        let err = over_budget(200_000, 8192);
        assert_eq!(err.code(), "request_too_large");
        let text = err.to_string();
        assert!(text.contains("200000") && text.contains("8192"), "{text}");
        assert!(text.contains("--max-embedding-tokens"), "{text}");
    }
}
