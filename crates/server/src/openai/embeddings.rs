//! `/v1/embeddings`: the served model's embedding of each input text, as numbers or base64.

use axum::extract::State;
use axum::Json;
use base64::Engine as _;
use openai_wire::{EmbeddingData, EmbeddingList, EmbeddingUsage, EmbeddingVector};
use playground::Playground;
use serde::Deserialize;
use serde_json::Value;

use super::openai_error;
use super::refusals::{invalid, unsupported};
use super::token_ids::EmbeddingTokenIds;
use crate::error::ApiError;
use crate::extract::JsonBody;
use engine::EmbeddingInput;

#[derive(Debug, Deserialize)]
pub struct EmbeddingRequest {
    /// A text, token ids, or a list of either.
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    model: Option<String>,
    /// `float` (the default) or `base64`.
    #[serde(default)]
    encoding_format: Option<String>,
    /// Fewer dimensions than the model's: refused, the model has no such embeddings.
    #[serde(default)]
    dimensions: Option<u32>,
}

impl EmbeddingRequest {
    /// A text, a list of token ids, or a list of texts or token-id lists, as OpenAI takes them;
    /// token ids read as `token_ids` says.
    fn inputs(&self, token_ids: EmbeddingTokenIds) -> Result<Vec<EmbeddingInput>, ApiError> {
        let not_input = || {
            invalid(
                "input",
                "input must be a text, a list of token ids, or a list of texts or of token-id lists",
            )
        };
        let token_ids = |items: &[Value]| {
            let ids = items
                .iter()
                .map(|v| {
                    v.as_i64()
                        .and_then(|id| i32::try_from(id).ok())
                        .ok_or_else(not_input)
                })
                .collect::<Result<Vec<_>, _>>()?;
            token_ids.read(ids, self.model.as_deref())
        };
        match &self.input {
            None | Some(Value::Null) => Err(invalid("input", "input is required")),
            Some(Value::String(text)) => Ok(vec![EmbeddingInput::Text(text.clone())]),
            Some(Value::Array(items))
                if !items.is_empty() && items.iter().all(Value::is_number) =>
            {
                Ok(vec![token_ids(items)?])
            }
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| match item {
                    Value::String(text) => Ok(EmbeddingInput::Text(text.clone())),
                    Value::Array(ids) => token_ids(ids),
                    _ => Err(not_input()),
                })
                .collect(),
            Some(_) => Err(not_input()),
        }
    }
}

#[tracing::instrument(skip_all)]
pub async fn embeddings(
    State(playground): State<Playground>,
    State(token_ids): State<EmbeddingTokenIds>,
    JsonBody(body): JsonBody<EmbeddingRequest>,
) -> Result<Json<EmbeddingList>, ApiError> {
    let base64 = match body.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(invalid(
                "encoding_format",
                format!("encoding_format must be float or base64, got '{other}'"),
            ))
        }
    };
    if body.dimensions.is_some() {
        return Err(unsupported(
            "dimensions",
            "dimensions: embeddings have the model's own width; leave dimensions out",
        ));
    }
    let inputs = body.inputs(token_ids)?;
    if inputs.is_empty() || inputs.len() > engine::MAX_EMBEDDING_INPUTS {
        return Err(invalid(
            "input",
            format!(
                "give 1 to {} texts to embed, got {}",
                engine::MAX_EMBEDDING_INPUTS,
                inputs.len()
            ),
        ));
    }
    let embeddings = playground
        .embed(body.model.as_deref(), inputs)
        .await
        .map_err(|e| openai_error(ApiError(e), "input"))?;
    let tokens: u64 = embeddings.iter().map(|e| e.tokens as u64).sum();
    let data = (0u32..)
        .zip(embeddings)
        .map(|(index, embedding)| EmbeddingData {
            object: "embedding".into(),
            index,
            embedding: if base64 {
                let bytes: Vec<u8> = embedding
                    .vector
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect();
                EmbeddingVector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                EmbeddingVector::Float(embedding.vector)
            },
        })
        .collect();
    Ok(Json(EmbeddingList {
        object: "list".into(),
        data,
        model: playground.model_info()?.name,
        usage: EmbeddingUsage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
    }))
}
