//! The original, simple API: `/generate/normal`, `/generate/medusa` and `/compare`, raw text
//! continuation. Defaults: 128 tokens (`max_length`), greedy decoding (so that modes are
//! comparable) with the engine's other sampling defaults.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use engine::{GenerateRequest, GenerationMode, Prompt, SamplingParams};
use playground::runs::prompt_record;
use playground::{AppError, Collected, DraftFields, Playground};
use serde::{Deserialize, Serialize};
use store::{ModeFigures, PromptRecord};

use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::sampling::SamplingFields;

/// Tokens generated when the request gives no `max_length`.
pub const DEFAULT_MAX_LENGTH: u32 = 128;

#[derive(Debug, Deserialize)]
pub struct SimpleRequest {
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    max_length: Option<u32>,
    #[serde(flatten)]
    sampling: SamplingFields,
    /// `/compare` only.
    #[serde(default)]
    modes: Option<Vec<String>>,
    /// `/compare` only: how many times each mode runs (rounds in a balanced order).
    #[serde(default)]
    repeats: Option<u32>,
    #[serde(flatten)]
    draft: DraftFields,
}

impl SimpleRequest {
    fn to_request(&self, mode: GenerationMode) -> Result<GenerateRequest, AppError> {
        let sampling = self.sampling.over(SamplingParams::greedy())?;
        let mut request = GenerateRequest::new(
            Prompt::Text(self.prompt.clone().unwrap_or_default()),
            self.max_length.unwrap_or(DEFAULT_MAX_LENGTH),
        )
        .with_sampling(sampling)
        .with_mode(mode)
        .with_draft(self.draft.policy(mode)?);
        // Runs that are compared read their whole prompt, as the bench's do: none starts warm
        // from another's cells (and, without exact kernels, none could tip a near-tie).
        request.cache_prompt = false;
        Ok(request)
    }
}

#[derive(Debug, Serialize)]
pub struct SimpleResponse {
    text: String,
    /// Seconds from submission to the end.
    generation_time: f64,
    tokens_generated: usize,
    tokens_per_second: f64,
    speedup_factor: Option<f64>,
    acceptance_rate: Option<f64>,
    run_id: i64,
}

pub async fn generate_normal(
    State(playground): State<Playground>,
    JsonBody(body): JsonBody<SimpleRequest>,
) -> Result<Json<SimpleResponse>, ApiError> {
    generate(&playground, &body, GenerationMode::Normal).await
}

pub async fn generate_medusa(
    State(playground): State<Playground>,
    JsonBody(body): JsonBody<SimpleRequest>,
) -> Result<Json<SimpleResponse>, ApiError> {
    generate(&playground, &body, GenerationMode::Medusa).await
}

#[tracing::instrument(skip_all, fields(mode = %mode))]
async fn generate(
    playground: &Playground,
    body: &SimpleRequest,
    mode: GenerationMode,
) -> Result<Json<SimpleResponse>, ApiError> {
    let request = body.to_request(mode)?;
    let prompt = prompt_record(&request.prompt);
    let collected = playground.run_to_end(request).await?;
    Ok(Json(response(playground, &collected, &prompt).await?))
}

async fn response(
    playground: &Playground,
    run: &Collected,
    prompt: &PromptRecord,
) -> Result<SimpleResponse, ApiError> {
    let summary = &run.summary;
    let normal = summary.mode == GenerationMode::Normal;
    let speedup_factor = if normal {
        Some(1.0)
    } else {
        playground
            .latest_normal_speed(prompt)
            .await?
            .filter(|&baseline| baseline > 0.0)
            .map(|baseline| summary.tokens_per_second / baseline)
    };
    Ok(SimpleResponse {
        text: summary.text.clone(),
        generation_time: summary.total_ms / 1000.0,
        tokens_generated: summary.tokens_generated,
        tokens_per_second: summary.tokens_per_second,
        speedup_factor,
        acceptance_rate: if normal {
            None
        } else {
            run.summary.acceptance_rate()
        },
        run_id: run.run_id,
    })
}

/// `/compare`'s answer: each mode's result under its name, and the comparison's figures.
#[derive(Debug, Serialize)]
pub struct CompareResponse {
    #[serde(flatten)]
    /// The first round's run of each mode.
    modes: BTreeMap<&'static str, SimpleResponse>,
    repeats: i64,
    /// Per mode: medians and ranges over the rounds, and the verdict against normal.
    figures: Vec<ModeFigures>,
    speedup: Option<f64>,
    outputs_identical: Option<bool>,
    first_difference: Option<i64>,
    comparison_id: i64,
}

/// Runs the prompt in each mode, `repeats` rounds (see [`Playground::compare`]), and answers
/// with the first round's runs and the comparison's figures.
#[tracing::instrument(skip_all)]
pub async fn compare(
    State(playground): State<Playground>,
    JsonBody(body): JsonBody<SimpleRequest>,
) -> Result<Json<CompareResponse>, ApiError> {
    let modes = match &body.modes {
        Some(names) => names
            .iter()
            .map(|name| name.parse())
            .collect::<Result<Vec<GenerationMode>, _>>()?,
        None => playground.default_compared_modes()?,
    };
    let run = playground
        .compare(&modes, body.repeats.unwrap_or(1), |mode| {
            body.to_request(mode)
        })
        .await?;
    let prompt = prompt_record(&body.to_request(modes[0])?.prompt);
    let mut results = BTreeMap::new();
    for (mode, collected) in &run.first_round {
        results.insert(
            mode.as_str(),
            response(&playground, collected, &prompt).await?,
        );
    }
    let comparison = run.comparison;
    Ok(Json(CompareResponse {
        modes: results,
        repeats: comparison.repeats,
        figures: comparison.modes,
        speedup: comparison.speedup,
        outputs_identical: comparison.outputs_identical,
        first_difference: comparison.first_difference,
        comparison_id: comparison.id,
    }))
}
