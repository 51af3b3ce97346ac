//! `/api/training`: heads training jobs. Start one, list them, read one, cancel, resume or
//! delete it, and follow it as server-sent events (the job now, then each change until it stops
//! running); `/api/training/heads` says where a new job's heads would go.

use std::convert::Infallible;
use std::path::Path;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use playground::training_figures::{DeletedTrainingJob, PlannedHeads, TrainingRequest};
use serde::Deserialize;
use store::TrainingJob;

use crate::error::ApiError;
use crate::extract::{JsonBody, QueryParams, RecordId};
use crate::state::ServerState;

/// Starts a job for a model the server may load (its heads are written beside it); a prompt
/// file must be in the same folders, since over HTTP a path is somebody else's input.
#[tracing::instrument(skip_all)]
pub async fn start(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<TrainingRequest>,
) -> Result<(StatusCode, Json<TrainingJob>), ApiError> {
    let loaded = state.playground.loaded_files();
    let loadable = crate::paths::Loadable {
        dirs: &state.access.loadable_dirs,
        loaded: &loaded,
    };
    crate::paths::check_loadable(&loadable, Path::new(&body.model))?;
    if let Some(prompts) = &body.prompts {
        crate::paths::check_loadable(&loadable, Path::new(prompts))?;
    }
    let job = state.playground.start_training(body).await?;
    Ok((StatusCode::CREATED, Json(job)))
}

#[derive(Debug, Deserialize)]
pub struct PlannedHeadsQuery {
    model: String,
}

/// Where a job started now for `?model=PATH` would write its heads, for the form to show.
pub async fn planned_heads(
    State(state): State<ServerState>,
    QueryParams(query): QueryParams<PlannedHeadsQuery>,
) -> Result<Json<PlannedHeads>, ApiError> {
    let loaded = state.playground.loaded_files();
    let loadable = crate::paths::Loadable {
        dirs: &state.access.loadable_dirs,
        loaded: &loaded,
    };
    crate::paths::check_loadable(&loadable, Path::new(&query.model))?;
    Ok(Json(state.playground.planned_heads(&query.model).await?))
}

pub async fn list(State(state): State<ServerState>) -> Result<Json<Vec<TrainingJob>>, ApiError> {
    Ok(Json(state.playground.list_training_jobs().await?))
}

pub async fn get(
    State(state): State<ServerState>,
    RecordId(id): RecordId,
) -> Result<Json<TrainingJob>, ApiError> {
    Ok(Json(state.playground.get_training_job(id).await?))
}

/// Deletes a job that is not running and its collected answers (its heads stay).
#[tracing::instrument(skip(state))]
pub async fn delete(
    State(state): State<ServerState>,
    RecordId(id): RecordId,
) -> Result<Json<DeletedTrainingJob>, ApiError> {
    Ok(Json(state.playground.delete_training_job(id).await?))
}

#[tracing::instrument(skip(state, _body))]
pub async fn cancel(
    State(state): State<ServerState>,
    RecordId(id): RecordId,
    _body: axum::body::Bytes,
) -> Result<StatusCode, ApiError> {
    state.playground.cancel_training(id)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Resumes a stored job whose model and prompt file the server may still read: a job's paths
/// may come from an import, so they are checked as a new job's are, each time.
#[tracing::instrument(skip(state, _body))]
pub async fn resume(
    State(state): State<ServerState>,
    RecordId(id): RecordId,
    _body: axum::body::Bytes,
) -> Result<Json<TrainingJob>, ApiError> {
    let job = state.playground.get_training_job(id).await?;
    let loaded = state.playground.loaded_files();
    let loadable = crate::paths::Loadable {
        dirs: &state.access.loadable_dirs,
        loaded: &loaded,
    };
    crate::paths::check_training_job(&loadable, &job)?;
    Ok(Json(state.playground.resume_training(id).await?))
}

pub async fn events(
    State(state): State<ServerState>,
    RecordId(id): RecordId,
) -> Result<Response, ApiError> {
    let updates = state.playground.training_updates(id).await?;
    let events = updates.map(|job| {
        let data = serde_json::to_string(&job).unwrap_or_default();
        Ok::<_, Infallible>(Event::default().data(data))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}
