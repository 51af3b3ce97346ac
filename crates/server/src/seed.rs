//! The original playground API: `/generate/normal`, `/generate/medusa` and `/compare`, raw text
//! continuation, greedy unless asked otherwise so that modes are comparable.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use engine::{GenerateRequest, GenerationMode, Prompt, SamplingParams};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use store::{PromptRecord, RunFilter, RunStatus};

use crate::driver::{self, Collected};
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::sampling::SamplingFields;
use crate::state::AppState;

/// Tokens generated when the request gives no `max_length`.
pub const DEFAULT_MAX_LENGTH: u32 = 128;

#[derive(Debug, Deserialize)]
pub struct SeedRequest {
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    max_length: Option<u32>,
    #[serde(flatten)]
    sampling: SamplingFields,
    /// `/compare` only.
    #[serde(default)]
    modes: Option<Vec<String>>,
}

impl SeedRequest {
    fn to_request(&self, mode: GenerationMode) -> GenerateRequest {
        let sampling = self.sampling.over(SamplingParams::greedy());
        GenerateRequest::new(
            Prompt::Text(self.prompt.clone().unwrap_or_default()),
            self.max_length.unwrap_or(DEFAULT_MAX_LENGTH),
        )
        .with_sampling(sampling)
        .with_mode(mode)
    }
}

#[derive(Debug, Serialize)]
pub struct SeedResponse {
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
    State(state): State<AppState>,
    JsonBody(body): JsonBody<SeedRequest>,
) -> Result<Json<SeedResponse>, ApiError> {
    generate(&state, &body, GenerationMode::Normal).await
}

pub async fn generate_medusa(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<SeedRequest>,
) -> Result<Json<SeedResponse>, ApiError> {
    generate(&state, &body, GenerationMode::Medusa).await
}

#[tracing::instrument(skip_all, fields(mode = %mode))]
async fn generate(
    state: &AppState,
    body: &SeedRequest,
    mode: GenerationMode,
) -> Result<Json<SeedResponse>, ApiError> {
    let request = body.to_request(mode);
    request.validate()?;
    let prompt = driver::prompt_record(&request.prompt);
    let collected = run_one(state, request, None).await?;
    Ok(Json(response(state, &collected, &prompt).await?))
}

async fn run_one(
    state: &AppState,
    request: GenerateRequest,
    comparison_id: Option<i64>,
) -> Result<Collected, ApiError> {
    driver::start(state, request, comparison_id)
        .await?
        .collect()
        .await
}

async fn response(
    state: &AppState,
    run: &Collected,
    prompt: &PromptRecord,
) -> Result<SeedResponse, ApiError> {
    let summary = &run.summary;
    let normal = summary.mode == GenerationMode::Normal;
    let speedup_factor = if normal {
        Some(1.0)
    } else {
        latest_normal_speed(state, prompt)
            .await?
            .filter(|&baseline| baseline > 0.0)
            .map(|baseline| summary.tokens_per_second / baseline)
    };
    Ok(SeedResponse {
        text: summary.text.clone(),
        generation_time: summary.total_ms / 1000.0,
        tokens_generated: summary.tokens_generated,
        tokens_per_second: summary.tokens_per_second,
        speedup_factor,
        acceptance_rate: if normal {
            None
        } else {
            run.stats.acceptance_rate()
        },
        run_id: run.run_id,
    })
}

/// Tokens per second of the most recent finished normal run of `prompt`, if any.
async fn latest_normal_speed(
    state: &AppState,
    prompt: &PromptRecord,
) -> Result<Option<f64>, ApiError> {
    const PAGE: i64 = 200;
    let mut filter = RunFilter {
        mode: Some("normal".into()),
        status: Some(RunStatus::Finished),
        limit: Some(PAGE),
        offset: Some(0),
        ..RunFilter::default()
    };
    loop {
        let runs = state.store().list_runs(&filter).await?;
        if let Some(run) = runs.iter().find(|r| &r.prompt == prompt) {
            return Ok(run.tokens_per_second);
        }
        if (runs.len() as i64) < PAGE {
            return Ok(None);
        }
        filter.offset = Some(filter.offset.unwrap_or(0) + PAGE);
    }
}

/// Runs the prompt in each mode, one after another so that their timings do not interfere, and
/// links the runs as a comparison.
#[tracing::instrument(skip_all)]
pub async fn compare(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<SeedRequest>,
) -> Result<Json<Value>, ApiError> {
    let has_heads = state.model()?.has_heads();
    let modes = match &body.modes {
        Some(names) => parse_modes(names)?,
        None if has_heads => vec![GenerationMode::Normal, GenerationMode::Medusa],
        None => vec![GenerationMode::Normal, GenerationMode::Lookup],
    };
    // Refuse bad input before anything runs.
    for &mode in &modes {
        let request = body.to_request(mode);
        request.validate()?;
        if mode == GenerationMode::Medusa && !has_heads {
            return Err(engine::EngineError::NoMedusaHeads.into());
        }
    }
    let mut results: BTreeMap<&'static str, SeedResponse> = BTreeMap::new();
    let mut run_ids = Vec::new();
    let prompt = driver::prompt_record(&body.to_request(GenerationMode::Normal).prompt);
    for &mode in &modes {
        let collected = run_one(&state, body.to_request(mode), None).await?;
        run_ids.push(collected.run_id);
        results.insert(mode.as_str(), response(&state, &collected, &prompt).await?);
    }
    let comparison = state.store().create_comparison(&prompt, &run_ids).await?;
    let mut answer = serde_json::Map::new();
    for (mode, result) in results {
        answer.insert(
            mode.to_owned(),
            serde_json::to_value(result).unwrap_or(Value::Null),
        );
    }
    answer.insert("speedup".into(), comparison.speedup.into());
    answer.insert(
        "outputs_identical".into(),
        comparison.outputs_identical.into(),
    );
    answer.insert(
        "first_difference".into(),
        comparison.first_difference.into(),
    );
    answer.insert("comparison_id".into(), comparison.id.into());
    Ok(Json(Value::Object(answer)))
}

fn parse_modes(names: &[String]) -> Result<Vec<GenerationMode>, ApiError> {
    if names.is_empty() {
        return Err(ApiError::invalid_parameter("modes must not be empty"));
    }
    let mut modes = Vec::new();
    for name in names {
        let mode: GenerationMode = name.parse()?;
        if modes.contains(&mode) {
            return Err(ApiError::invalid_parameter(format!(
                "mode '{mode}' is listed twice"
            )));
        }
        modes.push(mode);
    }
    Ok(modes)
}
