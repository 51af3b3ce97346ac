//! Text embeddings from the served model: the mean of the final hidden states over a text's
//! tokens, scaled to unit length (llama-server's default and OpenAI's convention). They come
//! from a context of their own, made for each batch of texts, so that embedding never touches
//! the KV cache that generation uses.

use std::num::NonZeroU32;

use llama_cpp_2::context::params::{LlamaContextParams, LlamaPoolingType};
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;

use crate::backend::backend;
use crate::error::EngineError;
use crate::prompt;
use crate::request::Prompt;

/// Most texts one call may embed.
pub const MAX_EMBEDDING_INPUTS: usize = 256;

/// One text's embedding.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedding {
    /// Unit length.
    pub vector: Vec<f32>,
    /// The text's tokens.
    pub tokens: usize,
}

/// Embeds each text; none may take more than `max_tokens` tokens.
pub(crate) fn embed(
    model: &LlamaModel,
    threads: usize,
    max_tokens: usize,
    texts: &[String],
) -> Result<Vec<Embedding>, EngineError> {
    if texts.is_empty() || texts.len() > MAX_EMBEDDING_INPUTS {
        return Err(EngineError::InvalidParameter {
            name: "input",
            message: format!(
                "give 1 to {MAX_EMBEDDING_INPUTS} texts to embed, got {}",
                texts.len()
            ),
        });
    }
    let tokenized = texts
        .iter()
        .map(|text| {
            let rendered = prompt::render(model, None, &Prompt::Text(text.clone()), false)?;
            let tokens = prompt::tokenize(model, &rendered);
            if tokens.is_empty() {
                return Err(EngineError::EmptyPrompt);
            }
            if tokens.len() > max_tokens {
                return Err(EngineError::PromptTooLong {
                    tokens: tokens.len(),
                    limit: max_tokens,
                });
            }
            Ok(tokens)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let longest = tokenized.iter().map(Vec::len).max().unwrap_or(1);
    // Pooling reads the whole text from one micro-batch.
    let cells = NonZeroU32::new(longest as u32);
    let params = LlamaContextParams::default()
        .with_embeddings(true)
        .with_pooling_type(LlamaPoolingType::Mean)
        .with_n_ctx(cells)
        .with_n_batch(longest as u32)
        .with_n_ubatch(longest as u32)
        .with_n_seq_max(1)
        .with_n_threads(threads as i32)
        .with_n_threads_batch(threads as i32);
    let mut ctx = model
        .new_context(backend()?, params)
        .map_err(|e| EngineError::Context(format!("cannot make an embedding context: {e}")))?;
    let mut batch = LlamaBatch::new(longest, 1);
    tokenized
        .into_iter()
        .map(|tokens| {
            batch.clear();
            for (pos, token) in tokens.iter().enumerate() {
                batch
                    .add(*token, pos as i32, &[0], true)
                    .map_err(|e| EngineError::Decode(e.to_string()))?;
            }
            ctx.clear_kv_cache();
            ctx.decode(&mut batch)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
            let pooled = ctx
                .embeddings_seq_ith(0)
                .map_err(|e| EngineError::Decode(format!("no embedding: {e}")))?;
            Ok(Embedding {
                vector: unit_length(pooled),
                tokens: tokens.len(),
            })
        })
        .collect()
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
}
