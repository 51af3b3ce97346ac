//! The playground's own operations, independent of HTTP: the axum handlers in `api` and the
//! desktop app's commands both call these, so the browser and the app see the same answers.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use engine::{ChatMessage, GenerateRequest, GenerationEvent, Prompt, SamplingParams, TreeSpec};
use serde::Deserialize;
use serde_json::{json, Value};
use store::{Comparison, ExportFormat, Run, RunFilter, RunWithSteps};

use crate::driver::{self, source_name, RunHandle};
use crate::error::ApiError;
use crate::model_slot::{LoadRequest, ModelSource};
use crate::state::AppState;

/// Filters, order and paging of the run history (`/api/runs`, `/api/runs/export`).
#[derive(Debug, Default, Clone, Deserialize)]
pub struct RunsQuery {
    pub mode: Option<String>,
    pub model: Option<String>,
    pub status: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
    pub sort: Option<String>,
    pub order: Option<String>,
    /// Export only: json, jsonl or csv.
    pub format: Option<String>,
}

impl RunsQuery {
    pub fn filter(&self) -> Result<RunFilter, ApiError> {
        let time =
            |name: &str, value: &Option<String>| -> Result<Option<DateTime<Utc>>, ApiError> {
                value
                    .as_deref()
                    .map(|v| {
                        DateTime::parse_from_rfc3339(v)
                            .map(|t| t.with_timezone(&Utc))
                            .map_err(|e| {
                                ApiError::invalid_parameter(format!(
                                "{name} must be an RFC 3339 time such as 2025-01-31T12:00:00Z: {e}"
                            ))
                            })
                    })
                    .transpose()
            };
        let invalid = |e: store::StoreError| ApiError::invalid_parameter(e.to_string());
        if self.limit.is_some_and(|l| l < 0) || self.offset.is_some_and(|o| o < 0) {
            return Err(ApiError::invalid_parameter(
                "limit and offset must not be negative",
            ));
        }
        Ok(RunFilter {
            since: time("since", &self.since)?,
            until: time("until", &self.until)?,
            mode: self.mode.clone(),
            model: self.model.clone(),
            status: self
                .status
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(invalid)?,
            limit: self.limit,
            offset: self.offset,
            sort: self
                .sort
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(invalid)?
                .unwrap_or_default(),
            order: self
                .order
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(invalid)?
                .unwrap_or_default(),
        })
    }

    pub fn export_format(&self) -> Result<ExportFormat, ApiError> {
        self.format
            .as_deref()
            .unwrap_or("json")
            .parse()
            .map_err(|e: store::StoreError| ApiError::invalid_parameter(e.to_string()))
    }
}

pub async fn list_runs(state: &AppState, query: &RunsQuery) -> Result<Vec<Run>, ApiError> {
    Ok(state.store().list_runs(&query.filter()?).await?)
}

pub async fn get_run(state: &AppState, id: i64) -> Result<RunWithSteps, ApiError> {
    Ok(state.store().get_run(id).await?)
}

/// The runs matching `query` in its format, with a file name for them.
pub async fn export_runs(
    state: &AppState,
    query: &RunsQuery,
) -> Result<(ExportFormat, String, Vec<u8>), ApiError> {
    let format = query.export_format()?;
    let filter = query.filter()?;
    let mut body = Vec::new();
    state.store().export(&filter, format, &mut body).await?;
    Ok((format, export_filename(format), body))
}

/// A file name for an export made now.
pub fn export_filename(format: ExportFormat) -> String {
    format!(
        "medusa-runs-{}.{}",
        Utc::now().format("%Y%m%d-%H%M%S"),
        format.as_str()
    )
}

/// Links finished runs of one prompt as a comparison; a `normal` run among them is the baseline.
pub async fn create_comparison(state: &AppState, run_ids: &[i64]) -> Result<Comparison, ApiError> {
    if run_ids.len() < 2 {
        return Err(ApiError::invalid_parameter(
            "a comparison needs at least two runs",
        ));
    }
    let mut prompt = None;
    for &id in run_ids {
        let run = state.store().get_run(id).await?.run;
        match &prompt {
            None => prompt = Some(run.prompt),
            Some(first) if *first != run.prompt => {
                return Err(ApiError::invalid_parameter(format!(
                    "run {id} has another prompt than run {}; only runs of one prompt compare",
                    run_ids[0]
                )))
            }
            Some(_) => {}
        }
    }
    let prompt = prompt.expect("at least two runs were read");
    Ok(state.store().create_comparison(&prompt, run_ids).await?)
}

/// Everything the UI shows about the backend: the model (or the load in progress), heads, tree,
/// modes, engine metrics and the database.
pub fn info(state: &AppState) -> Value {
    let slot = state.model_slot();
    let model = slot.current_if_loaded();
    let info = model.as_ref().map(|m| m.engine.info());
    let modes: Vec<&str> = engine::GenerationMode::ALL
        .into_iter()
        .filter(|m| {
            *m != engine::GenerationMode::Medusa || model.as_ref().is_some_and(|m| m.has_heads())
        })
        .map(|m| m.as_str())
        .collect();
    json!({
        "model": info,
        "heads": info.and_then(|i| i.heads.as_ref()),
        "heads_path": model.as_ref().and_then(|m| m.heads_path.as_ref()),
        "tree": info.and_then(|i| i.medusa_tree.as_ref()),
        "modes": if model.is_some() { modes } else { Vec::new() },
        "metrics": model.as_ref().map(|m| m.engine.metrics()),
        "database": state.store().path(),
        "loading": slot.loading_status(),
        "error": slot.last_error(),
    })
}

/// Body of `/api/model`: another model (and heads, tree) to load.
#[derive(Debug, Deserialize)]
pub struct LoadModelBody {
    pub model: PathBuf,
    #[serde(default)]
    pub heads: Option<PathBuf>,
    #[serde(default)]
    pub tree: Option<String>,
}

pub fn load_model(state: &AppState, body: LoadModelBody) -> Result<(), ApiError> {
    let tree = body
        .tree
        .as_deref()
        .filter(|t| !t.trim().is_empty())
        .map(TreeSpec::from_name_or_file)
        .transpose()
        .map_err(|e| ApiError::invalid_parameter(format!("tree: {e}")))?;
    state.load_model(LoadRequest {
        model: ModelSource::Path(body.model),
        heads: body.heads,
        tree,
    })
}

/// Body of `/api/generate`: a raw prompt or chat messages, and how to generate.
#[derive(Debug, Deserialize)]
pub struct UiGenerateRequest {
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    messages: Option<Vec<ChatMessage>>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    stop: Vec<String>,
    #[serde(default)]
    sampling: Option<SamplingParams>,
    #[serde(default)]
    max_draft_tokens: Option<usize>,
}

/// Tokens generated when a UI request gives no `max_tokens`.
const UI_DEFAULT_MAX_TOKENS: u32 = 256;

/// A started UI run: its id, its first event (already received, so that a refusal such as a
/// prompt longer than the context is an error here rather than inside the stream) and the rest.
pub struct UiRun {
    pub handle: RunHandle,
    pub first: GenerationEvent,
}

pub async fn start_ui_run(state: &AppState, body: UiGenerateRequest) -> Result<UiRun, ApiError> {
    let prompt = match (body.prompt, body.messages) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid_parameter(
                "send either prompt or messages, not both",
            ))
        }
        (None, Some(messages)) => Prompt::Chat(messages),
        (prompt, None) => Prompt::Text(prompt.unwrap_or_default()),
    };
    let mut request =
        GenerateRequest::new(prompt, body.max_tokens.unwrap_or(UI_DEFAULT_MAX_TOKENS))
            .with_sampling(body.sampling.unwrap_or_default())
            .with_stop(body.stop);
    if let Some(mode) = &body.mode {
        request = request.with_mode(mode.parse()?);
    }
    request.max_draft_tokens = body.max_draft_tokens;
    request.validate()?;
    let mut handle = driver::start(state, request, None).await?;
    let first = handle.first().await?;
    Ok(UiRun { handle, first })
}

/// Whether `event` ends a run.
pub fn is_terminal(event: &GenerationEvent) -> bool {
    matches!(
        event,
        GenerationEvent::Finished(_) | GenerationEvent::Failed(_)
    )
}

/// An engine event as the UI receives it: `{"type": ..., ...}`.
pub fn ui_event(run_id: i64, event: GenerationEvent) -> Value {
    match event {
        GenerationEvent::Started { prompt_tokens } => {
            json!({"type": "started", "run_id": run_id, "prompt_tokens": prompt_tokens})
        }
        GenerationEvent::Text {
            text,
            token_ids,
            sources,
        } => json!({
            "type": "text",
            "text": text,
            "token_ids": token_ids,
            "sources": sources.into_iter().map(source_name).collect::<Vec<_>>(),
        }),
        GenerationEvent::Step(step) => {
            let mut value = serde_json::to_value(&step).unwrap_or_else(|_| json!({}));
            value["type"] = "step".into();
            value["sources"] = step.sources.into_iter().map(source_name).collect();
            value
        }
        GenerationEvent::Finished(summary) => {
            let mut value = serde_json::to_value(&summary).unwrap_or_else(|_| json!({}));
            value["type"] = "finished".into();
            value["run_id"] = run_id.into();
            value
        }
        GenerationEvent::Failed(err) => json!({
            "type": "failed", "run_id": run_id, "code": err.code(), "message": err.to_string(),
        }),
    }
}

/// Body of `/api/tune`: how long an answer each prompt gets and the largest tree considered.
#[derive(Debug, Default, Deserialize)]
pub struct TuneBody {
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub max_nodes: Option<usize>,
}

/// Measures the loaded heads and this machine's decode costs and predicts each tree size's speed
/// (see `engine::tuning`). One at a time; takes about a minute on a small model.
pub async fn tune(
    state: &AppState,
    body: TuneBody,
) -> Result<engine::tuning::TuneReport, ApiError> {
    let model = state.model()?;
    if !model.has_heads() {
        return Err(engine::EngineError::NoMedusaHeads.into());
    }
    let mut options = engine::tuning::TuneOptions::default();
    if let Some(max_tokens) = body.max_tokens {
        if !(8..=1024).contains(&max_tokens) {
            return Err(ApiError::invalid_parameter(
                "max_tokens must be between 8 and 1024",
            ));
        }
        options.max_tokens = max_tokens;
    }
    if let Some(max_nodes) = body.max_nodes {
        options.max_nodes = max_nodes;
    }
    let _guard = state.begin_tuning()?;
    let engine = model.engine.clone();
    tokio::task::spawn_blocking(move || {
        engine::tuning::tune_engine(&engine, &options, |done, total| {
            tracing::info!(done, total, "tuning: prompt measured");
        })
    })
    .await
    .map_err(|e| ApiError::internal("tune_failed", e.to_string()))?
    .map_err(ApiError::from)
}
