//! Probes that decode one text alone from an empty cache: the next-token logits after it, and
//! how often the Medusa heads guess right along it.

use std::ops::Range;
use std::time::Instant;

use crate::clock::ms_since;
use crate::error::EngineError;
use crate::llama::runtime::LlamaRuntime;
use crate::medusa::accuracy::HeadAccuracy;
use crate::medusa::heads::MedusaHeads;
use crate::output::token_bytes;
use crate::request::Prompt;
use crate::sampling::token_choice::{self, PromptLogprobs, TokenChoice};
use crate::step::decoder::{Decoder, KvCells};
use crate::token::TokenId;

/// How likely each of `tokens` is as the next token after `prompt` + `continuation`.
pub(super) fn next_token_choices(
    runtime: &mut LlamaRuntime<'_>,
    prompt: &Prompt,
    continuation: &[TokenId],
    tokens: &[TokenId],
) -> Result<Vec<TokenChoice>, EngineError> {
    let n_vocab = runtime.model().n_vocab();
    if let Some(&bad) = tokens
        .iter()
        .chain(continuation)
        .find(|&&t| !(0..n_vocab).contains(&t))
    {
        return Err(EngineError::InvalidParameter {
            name: "tokens",
            message: format!("token {bad} is not in the model's vocabulary (0..{n_vocab})"),
        });
    }
    let mut context: Vec<TokenId> = runtime.prompt_tokens(prompt, false)?;
    context.extend_from_slice(continuation);
    if context.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    if context.len() >= runtime.n_ctx_seq() {
        return Err(EngineError::PromptTooLong {
            tokens: context.len(),
            limit: runtime.n_ctx_seq() - 1,
        });
    }
    let last = context.len() - 1;
    runtime.clear_cells();
    decode_in_chunks(runtime, &context, last, |_, _| Ok(()))?;
    let model = runtime.model();
    let choices = token_choice::choices(
        runtime.logits(runtime.batch_len() as i32 - 1)?,
        tokens,
        |token| token_bytes(model, token),
    );
    runtime.clear_cells();
    Ok(choices)
}

/// How likely each token of `prompt` was after those before it, with the `top` likeliest at
/// each place (an evaluation's score of a given text).
pub(super) fn prompt_logprobs(
    runtime: &mut LlamaRuntime<'_>,
    prompt: &Prompt,
    top: usize,
) -> Result<PromptLogprobs, EngineError> {
    let tokens: Vec<TokenId> = runtime.prompt_tokens(prompt, false)?;
    let model = runtime.model();
    let first_token = String::from_utf8_lossy(&token_bytes(model, tokens[0])).into_owned();
    let mut rest = Vec::with_capacity(tokens.len() - 1);
    runtime.clear_cells();
    let decoded = decode_in_chunks(runtime, &tokens, 0, |runtime, positions| {
        for (index, position) in positions.enumerate() {
            if let Some(&next) = tokens.get(position + 1) {
                let logits = runtime.logits(index as i32)?;
                rest.push(token_choice::logprobs(logits, next, top, |token| {
                    token_bytes(model, token)
                }));
            }
        }
        Ok(())
    });
    runtime.clear_cells();
    decoded?;
    Ok(PromptLogprobs { first_token, rest })
}

/// How often the heads guess right along `continuation` (text the model wrote after `prompt`):
/// at each position from the prompt's last token on, head `d`'s `top_k` guesses from the hidden
/// state are checked against the token `d + 2` ahead.
pub(super) fn measure_heads(
    runtime: &mut LlamaRuntime<'_>,
    heads: &MedusaHeads,
    prompt: &Prompt,
    continuation: &[TokenId],
    top_k: usize,
) -> Result<HeadAccuracy, EngineError> {
    let mut tally = HeadAccuracy::new(heads.head_count(), top_k);
    decode_along(runtime, prompt, continuation, |tokens, pos, hidden| {
        if pos + 2 >= tokens.len() {
            return;
        }
        let start = Instant::now();
        let mut ranks = Vec::with_capacity(heads.head_count());
        // The root, then the true tokens below it: the path heads that read it would see.
        let inputs =
            heads.token_inputs(&tokens[pos + 1..(pos + 1 + heads.head_count()).min(tokens.len())]);
        for head in 0..heads.head_count() {
            let Some(&actual) = tokens.get(pos + 2 + head) else {
                break;
            };
            // Each head reads as many of these as it has matrices for.
            let guesses = heads.top_k(head, hidden, &inputs, top_k);
            ranks.push(tally.record(head, &guesses, actual));
        }
        tally.record_position(ranks);
        tally.heads_ms += ms_since(start);
        tally.heads_runs += 1;
    })?;
    Ok(tally)
}

/// Decodes `prompt` + `continuation` from an empty cache and hands `visit` the tokens, a
/// position and its final hidden state, for every position from the prompt's last token on.
fn decode_along(
    runtime: &mut LlamaRuntime<'_>,
    prompt: &Prompt,
    continuation: &[TokenId],
    mut visit: impl FnMut(&[TokenId], usize, &[f32]),
) -> Result<(), EngineError> {
    let mut tokens: Vec<TokenId> = runtime.prompt_tokens(prompt, false)?;
    let first = tokens.len() - 1;
    tokens.extend_from_slice(continuation);
    if tokens.len() > runtime.n_ctx_seq() {
        return Err(EngineError::PromptTooLong {
            tokens: tokens.len(),
            limit: runtime.n_ctx_seq(),
        });
    }
    runtime.clear_cells();
    let result = visit_hidden_states(runtime, &tokens, first, &mut visit);
    runtime.clear_cells();
    result
}

fn visit_hidden_states(
    runtime: &mut LlamaRuntime<'_>,
    tokens: &[TokenId],
    first: usize,
    visit: &mut impl FnMut(&[TokenId], usize, &[f32]),
) -> Result<(), EngineError> {
    decode_in_chunks(runtime, tokens, first, |runtime, chunk| {
        // llama.cpp looks hidden states up by batch index, like logits.
        for pos in chunk.clone().filter(|&p| p >= first) {
            visit(
                tokens,
                pos,
                runtime.hidden_state((pos - chunk.start) as i32)?,
            );
        }
        Ok(())
    })
}

/// Decodes `tokens` as sequence 0 from position 0, a batch at a time, with outputs for the
/// positions from `first` on; `after_chunk` sees each decoded chunk's positions.
fn decode_in_chunks(
    runtime: &mut LlamaRuntime<'_>,
    tokens: &[TokenId],
    first: usize,
    mut after_chunk: impl FnMut(&LlamaRuntime<'_>, Range<usize>) -> Result<(), EngineError>,
) -> Result<(), EngineError> {
    let n_batch = runtime.n_batch();
    for (chunk_index, chunk) in tokens.chunks(n_batch).enumerate() {
        let offset = chunk_index * n_batch;
        runtime.clear_batch();
        for (i, &token) in chunk.iter().enumerate() {
            runtime.add_to_batch(token, offset + i, &[0], offset + i >= first)?;
        }
        runtime.decode()?;
        after_chunk(runtime, offset..offset + chunk.len())?;
    }
    Ok(())
}
