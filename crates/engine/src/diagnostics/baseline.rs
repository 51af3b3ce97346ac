//! The simplest greedy loop over llama-cpp-2, as a yardstick for the engine's overhead.
//! Deliberately free of the engine's machinery: no sampler, no streaming, no text handling.

use std::time::Instant;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use serde::Serialize;

use crate::clock::ms_since;
use crate::error::EngineError;
use crate::events::tokens_per_second;
use crate::token::TokenId;

#[derive(Debug, Clone, Serialize)]
pub struct BaselineRun {
    pub prompt_tokens: usize,
    pub tokens_generated: usize,
    pub ttft_ms: f64,
    pub total_ms: f64,
    pub tokens_per_second: f64,
    pub token_ids: Vec<i32>,
}

pub(super) fn raw_greedy_decode(
    model: &LlamaModel,
    ctx: &mut LlamaContext,
    prompt: &[TokenId],
    max_tokens: usize,
) -> Result<BaselineRun, EngineError> {
    let decode_err = |e: &dyn std::fmt::Display| EngineError::Decode(e.to_string());
    let started = Instant::now();
    ctx.clear_kv_cache();
    // llama.cpp aborts the process on a decode of more than n_batch tokens: the prompt goes in
    // chunks of that many.
    let n_batch = (ctx.n_batch() as usize).max(1);
    let mut batch = LlamaBatch::new(prompt.len().clamp(1, n_batch), 1);
    let last = prompt.len().saturating_sub(1);
    for (start, chunk) in (0..).step_by(n_batch).zip(prompt.chunks(n_batch)) {
        batch.clear();
        for (offset, &token) in chunk.iter().enumerate() {
            let i = start + offset;
            batch
                .add(LlamaToken(token), i as i32, &[0], i == last)
                .map_err(|e| decode_err(&e))?;
        }
        ctx.decode(&mut batch).map_err(|e| decode_err(&e))?;
    }

    let vocab = model.vocab();
    let mut generated = Vec::new();
    let mut ttft_ms = None;
    let mut pos = prompt.len() as i32;
    loop {
        let logits = ctx.get_logits_ith(batch.n_tokens() - 1);
        let token = logits
            .iter()
            .enumerate()
            .fold((0, f32::NEG_INFINITY), |best, (i, &v)| {
                if v > best.1 {
                    (i, v)
                } else {
                    best
                }
            })
            .0 as i32;
        ttft_ms.get_or_insert_with(|| ms_since(started));
        if vocab.is_eog(LlamaToken(token)) {
            break;
        }
        generated.push(token);
        if generated.len() >= max_tokens {
            break;
        }
        batch.clear();
        batch
            .add(LlamaToken(token), pos, &[0], true)
            .map_err(|e| decode_err(&e))?;
        ctx.decode(&mut batch).map_err(|e| decode_err(&e))?;
        pos += 1;
    }
    let total_ms = ms_since(started);
    Ok(BaselineRun {
        prompt_tokens: prompt.len(),
        tokens_generated: generated.len(),
        ttft_ms: ttft_ms.unwrap_or(total_ms),
        total_ms,
        tokens_per_second: tokens_per_second(generated.len(), total_ms),
        token_ids: generated,
    })
}
