//! `/api/models/local` and `/api/catalog`: the model files the server may load, and a model
//! hub's catalog with downloads into the models cache. A download answers with its progress as
//! newline-delimited JSON ([`DownloadEvent`]s); closing the connection cancels it, keeping what
//! arrived for the next attempt.

use std::convert::Infallible;
use std::ops::ControlFlow;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use playground::catalog::{
    Catalog, CatalogSearch, DeleteModelRequest, DownloadEvent, DownloadRequest, ModelsOnDisk,
};
use playground::{AppError, ErrorKind, Playground};
use serde::Deserialize;

use crate::error::ApiError;
use crate::extract::{JsonBody, QueryParams};

#[tracing::instrument(skip_all)]
pub async fn on_disk(
    State(catalog): State<Arc<Catalog>>,
    State(playground): State<Playground>,
) -> Result<Json<ModelsOnDisk>, ApiError> {
    Ok(Json(catalog.on_disk(&playground.loaded_files())?))
}

#[derive(Debug, Default, Deserialize)]
pub struct DeleteQuery {
    #[serde(default)]
    partial: bool,
}

#[tracing::instrument(skip(catalog, playground))]
pub async fn delete(
    State(catalog): State<Arc<Catalog>>,
    State(playground): State<Playground>,
    Path(file_name): Path<String>,
    QueryParams(query): QueryParams<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    let request = DeleteModelRequest {
        file_name,
        partial: query.partial,
    };
    catalog.delete(&request, &playground.loaded_files())?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Default, Deserialize)]
pub struct SearchQuery {
    #[serde(default)]
    q: String,
}

#[tracing::instrument(skip(catalog))]
pub async fn search(
    State(catalog): State<Arc<Catalog>>,
    QueryParams(query): QueryParams<SearchQuery>,
) -> Result<Json<CatalogSearch>, ApiError> {
    Ok(Json(catalog.search(&query.q).await?))
}

#[tracing::instrument(skip(catalog))]
pub async fn files(
    State(catalog): State<Arc<Catalog>>,
    Path((owner, name)): Path<(String, String)>,
) -> Result<Json<models::RepoFiles>, ApiError> {
    Ok(Json(catalog.files(&format!("{owner}/{name}")).await?))
}

#[derive(Debug, Deserialize)]
pub struct CancelRequest {
    file_name: String,
}

#[tracing::instrument(skip_all)]
pub async fn cancel(
    State(catalog): State<Arc<Catalog>>,
    JsonBody(body): JsonBody<CancelRequest>,
) -> Result<StatusCode, ApiError> {
    if catalog.cancel(&body.file_name) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(AppError::not_found(format!("{} is not being downloaded", body.file_name)).into())
    }
}

/// Progress reports waiting for a slow reader; when they pile up, later ones replace them.
const QUEUED_EVENTS: usize = 16;

#[tracing::instrument(skip_all, fields(repo = %body.repo, file = %body.file))]
pub async fn download(
    State(catalog): State<Arc<Catalog>>,
    JsonBody(body): JsonBody<DownloadRequest>,
) -> Result<Response, ApiError> {
    // Malformed names are refused before the answer starts; what the hub says comes as events.
    models::check_repo_id(&body.repo)
        .and_then(|()| models::check_file_path(&body.file))
        .map_err(|e| AppError::new(ErrorKind::Invalid, "invalid_input", e.to_string()))?;
    let (events, mut received) = tokio::sync::mpsc::channel::<DownloadEvent>(QUEUED_EVENTS);
    tokio::spawn(async move {
        let reports = events.clone();
        let result = catalog
            .download(&body, |progress| {
                if reports.is_closed() {
                    // The client went away: stop, keeping what arrived.
                    return ControlFlow::Break(());
                }
                let _ = reports.try_send(DownloadEvent::Progress(progress));
                ControlFlow::Continue(())
            })
            .await;
        let last = match result {
            Ok(done) => DownloadEvent::Done(done),
            Err(e) => DownloadEvent::Failed { error: e.body() },
        };
        let _ = events.send(last).await;
    });
    let lines = futures_util::stream::poll_fn(move |cx| {
        received.poll_recv(cx).map(|event| {
            event.map(|event| {
                let mut line = serde_json::to_vec(&event).expect("events serialize");
                line.push(b'\n');
                Ok::<_, Infallible>(Bytes::from(line))
            })
        })
    });
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(lines),
    )
        .into_response())
}
