//! The playground's own HTTP API over [`crate::service`]: run history, comparisons, model
//! information and loading, the UI's event stream, health and metrics.

use std::convert::Infallible;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::GenerationEvent;
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use serde_json::{json, Value};
use store::{ExportDocument, ImportReport};

use crate::driver::RunHandle;
use crate::error::ApiError;
use crate::extract::{JsonBody, QueryParams};
use crate::service::{self, LoadModelBody, RunsQuery, UiGenerateRequest};
use crate::state::AppState;

#[tracing::instrument(skip_all)]
pub async fn list_runs(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<RunsQuery>,
) -> Result<Json<Value>, ApiError> {
    let runs = service::list_runs(&state, &query).await?;
    Ok(Json(json!({ "runs": runs })))
}

#[tracing::instrument(skip(state))]
pub async fn get_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<store::RunWithSteps>, ApiError> {
    Ok(Json(service::get_run(&state, parse_id(&id, "run")?).await?))
}

#[tracing::instrument(skip(state))]
pub async fn cancel_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.cancel_run(parse_id(&id, "run")?)?;
    Ok(StatusCode::NO_CONTENT)
}

fn parse_id(text: &str, what: &str) -> Result<i64, ApiError> {
    // A malformed id names no record, so it is answered like an unknown one.
    text.parse()
        .map_err(|_| ApiError::not_found(format!("{what} {text:?} not found")))
}

#[tracing::instrument(skip_all)]
pub async fn export_runs(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<RunsQuery>,
) -> Result<Response, ApiError> {
    let (format, filename, body) = service::export_runs(&state, &query).await?;
    Ok((
        [
            (header::CONTENT_TYPE, format.mime_type().to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{filename}\""),
            ),
        ],
        body,
    )
        .into_response())
}

#[tracing::instrument(skip_all)]
pub async fn import_runs(
    State(state): State<AppState>,
    JsonBody(document): JsonBody<ExportDocument>,
) -> Result<Json<ImportReport>, ApiError> {
    Ok(Json(state.store().import_document(&document).await?))
}

#[derive(Debug, Default, Deserialize)]
pub struct ComparisonsQuery {
    limit: Option<i64>,
}

pub async fn list_comparisons(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<ComparisonsQuery>,
) -> Result<Json<Value>, ApiError> {
    let comparisons = state.store().list_comparisons(query.limit).await?;
    Ok(Json(json!({ "comparisons": comparisons })))
}

pub async fn get_comparison(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<store::Comparison>, ApiError> {
    let id = parse_id(&id, "comparison")?;
    Ok(Json(state.store().get_comparison(id).await?))
}

#[derive(Debug, Deserialize)]
pub struct NewComparison {
    run_ids: Vec<i64>,
}

#[tracing::instrument(skip_all)]
pub async fn create_comparison(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<NewComparison>,
) -> Result<(StatusCode, Json<store::Comparison>), ApiError> {
    let comparison = service::create_comparison(&state, &body.run_ids).await?;
    Ok((StatusCode::CREATED, Json(comparison)))
}

pub async fn info(State(state): State<AppState>) -> Json<Value> {
    Json(service::info(&state))
}

#[tracing::instrument(skip_all)]
pub async fn load_model(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<LoadModelBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    service::load_model(&state, body)?;
    Ok((StatusCode::ACCEPTED, Json(service::info(&state))))
}

#[tracing::instrument(skip_all)]
pub async fn tune(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<service::TuneBody>,
) -> Result<Json<engine::tuning::TuneReport>, ApiError> {
    Ok(Json(service::tune(&state, body).await?))
}

pub async fn health(State(state): State<AppState>) -> Json<Value> {
    match state.model() {
        Ok(model) => Json(json!({"status": "ok", "model": model.engine.info().name})),
        Err(err) => Json(json!({"status": "loading", "message": err.message})),
    }
}

pub async fn metrics(State(state): State<AppState>) -> Response {
    let engine_metrics = state
        .model_slot()
        .current_if_loaded()
        .map(|m| m.engine.metrics())
        .unwrap_or_default();
    let text = state.metrics().render(&engine_metrics);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

#[tracing::instrument(skip_all)]
pub async fn generate(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<UiGenerateRequest>,
) -> Result<Response, ApiError> {
    let run = service::start_ui_run(&state, body).await?;
    Ok(Sse::new(ui_events(run.handle, run.first))
        .keep_alive(KeepAlive::default())
        .into_response())
}

fn ui_events(
    handle: RunHandle,
    first: GenerationEvent,
) -> impl Stream<Item = Result<Event, Infallible>> {
    stream::unfold(
        (handle, Some(first), false),
        |(mut handle, pending, done)| async move {
            if done {
                return None;
            }
            let event = match pending {
                Some(event) => event,
                None => handle
                    .next()
                    .await
                    .unwrap_or(GenerationEvent::Failed(engine::EngineError::EngineStopped)),
            };
            let terminal = service::is_terminal(&event);
            let value = service::ui_event(handle.run_id, event);
            Some((
                Ok(Event::default().data(value.to_string())),
                (handle, None, terminal),
            ))
        },
    )
}
