//! The playground's own HTTP API (what the web UI uses): runs and their event stream, the run
//! history, comparisons, model information and loading, tuning, health and metrics. Each handler
//! maps HTTP onto one [`Playground`] operation.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use playground::divergence::{Divergence, DivergenceRequest};
use playground::history::{ComparisonList, ExportStream, RunList, RunsQuery};
use playground::tuning::TuneRequest;
use playground::{
    AppError, Health, Info, LoadModelRequest, Playground, PlaygroundRequest, SetTreeRequest,
};
use serde::Deserialize;
use store::ImportReport;
use tokio::io::{AsyncReadExt, DuplexStream};

use crate::error::ApiError;
use crate::extract::{JsonBody, QueryParams, RecordId};
use crate::guard::AccessPolicy;
use crate::import_turn::ImportTurn;
use crate::json_reader::JsonReader;
use crate::metrics::RequestCounts;

#[tracing::instrument(skip_all)]
pub async fn list_runs(
    State(playground): State<Playground>,
    QueryParams(query): QueryParams<RunsQuery>,
) -> Result<Json<RunList>, ApiError> {
    Ok(Json(playground.list_runs(&query).await?))
}

#[tracing::instrument(skip(playground))]
pub async fn get_run(
    State(playground): State<Playground>,
    RecordId(id): RecordId,
) -> Result<Json<store::RunWithSteps>, ApiError> {
    Ok(Json(playground.get_run(id).await?))
}

#[tracing::instrument(skip(playground))]
pub async fn cancel_run(
    State(playground): State<Playground>,
    RecordId(id): RecordId,
    // Read and dropped: a client that sends a body anyway gets the answer, not a reset.
    _body: axum::body::Bytes,
) -> Result<StatusCode, ApiError> {
    playground.cancel_run(id)?;
    Ok(StatusCode::NO_CONTENT)
}

/// The bytes of an export sent at a time.
const EXPORT_CHUNK_BYTES: usize = 64 << 10;

/// The runs matching the query, streamed as the store writes them one run at a time, so that an
/// export's memory does not grow with the history. An export that fails before its first bytes
/// answers an error; one that fails later breaks off the answer (no final chunk), so that a
/// client never takes a cut-short file for a whole one.
#[tracing::instrument(skip_all)]
pub async fn export_runs(
    State(playground): State<Playground>,
    QueryParams(query): QueryParams<RunsQuery>,
) -> Result<Response, ApiError> {
    let ExportStream {
        format,
        filename,
        mut body,
        ended,
    } = playground.export_stream(&query)?;
    let first = read_chunk(&mut body)
        .await
        .map_err(|e| ApiError(AppError::internal("export_failed", e.to_string())))?;
    let headers = [
        (header::CONTENT_TYPE, format.mime_type().to_owned()),
        (
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{filename}\""),
        ),
    ];
    if first.is_empty() {
        export_ending(ended).await?;
        return Ok((headers, Body::empty()).into_response());
    }
    let rest = futures_util::stream::try_unfold((body, ended), |(mut body, ended)| async move {
        let chunk = read_chunk(&mut body).await?;
        if !chunk.is_empty() {
            return Ok(Some((chunk, (body, ended))));
        }
        export_ending(ended).await.map_err(|err| {
            tracing::error!(code = err.0.code, message = %err.0.message, "export failed part-way");
            std::io::Error::other(err.0.message)
        })?;
        Ok(None)
    });
    let stream = futures_util::stream::once(async { Ok::<_, std::io::Error>(first) }).chain(rest);
    Ok((headers, Body::from_stream(stream)).into_response())
}

/// The next bytes of an export; empty at its end.
async fn read_chunk(body: &mut DuplexStream) -> std::io::Result<Bytes> {
    let mut chunk = vec![0; EXPORT_CHUNK_BYTES];
    let read = body.read(&mut chunk).await?;
    chunk.truncate(read);
    Ok(Bytes::from(chunk))
}

/// How an export whose bytes have all been read ended.
async fn export_ending(
    ended: tokio::sync::oneshot::Receiver<Result<usize, AppError>>,
) -> Result<usize, ApiError> {
    match ended.await {
        Ok(written) => Ok(written?),
        Err(_) => Err(ApiError(AppError::internal(
            "export_failed",
            "the export stopped before it was whole",
        ))),
    }
}

/// Imports an export, one at a time (see [`ImportTurn`]), read as it arrives (see
/// [`store::Store::spool_import`]). A training job whose model or prompt file this server may
/// not read is left out (a resume would read them), and said so in the report.
#[tracing::instrument(skip_all)]
pub async fn import_runs(
    State(playground): State<Playground>,
    State(access): State<Arc<AccessPolicy>>,
    _turn: ImportTurn,
    body: JsonReader,
) -> Result<Json<ImportReport>, ApiError> {
    let (reader, body_failure) = body.into_parts();
    let mut spooled = match playground.spool_import(reader).await {
        Ok(spooled) => spooled,
        // A body that failed (too slow, too large) is what went wrong, not the JSON it cut.
        Err(err) => return Err(body_failure.take().unwrap_or(ApiError(err))),
    };
    let loaded = playground.loaded_files();
    let loadable = crate::paths::Loadable {
        dirs: &access.loadable_dirs,
        loaded: &loaded,
    };
    let mut refused = Vec::new();
    spooled.document.training_jobs.retain(|job| {
        match crate::paths::check_training_job(&loadable, job) {
            Ok(()) => true,
            Err(err) => {
                let reason = format!("training job {}: {}", job.id, err.message);
                refused.push((job.uid.to_string(), reason));
                false
            }
        }
    });
    let mut report = playground.import_spooled(spooled).await?;
    for (uid, reason) in refused {
        report.reject(uid, reason);
    }
    Ok(Json(report))
}

#[derive(Debug, Default, Deserialize)]
pub struct ComparisonsQuery {
    limit: Option<i64>,
}

pub async fn list_comparisons(
    State(playground): State<Playground>,
    QueryParams(query): QueryParams<ComparisonsQuery>,
) -> Result<Json<ComparisonList>, ApiError> {
    Ok(Json(playground.list_comparisons(query.limit).await?))
}

pub async fn get_comparison(
    State(playground): State<Playground>,
    RecordId(id): RecordId,
) -> Result<Json<store::Comparison>, ApiError> {
    Ok(Json(playground.get_comparison(id).await?))
}

#[derive(Debug, Deserialize)]
pub struct NewComparison {
    run_ids: Vec<i64>,
}

#[tracing::instrument(skip_all)]
pub async fn create_comparison(
    State(playground): State<Playground>,
    JsonBody(body): JsonBody<NewComparison>,
) -> Result<(StatusCode, Json<store::Comparison>), ApiError> {
    let comparison = playground.create_comparison(&body.run_ids).await?;
    Ok((StatusCode::CREATED, Json(comparison)))
}

/// The runs `POST /api/runs/delete` deletes.
#[derive(Debug, Deserialize)]
pub struct DeletedRuns {
    run_ids: Vec<i64>,
}

#[tracing::instrument(skip_all)]
pub async fn delete_runs(
    State(playground): State<Playground>,
    JsonBody(body): JsonBody<DeletedRuns>,
) -> Result<Json<store::DeleteReport>, ApiError> {
    Ok(Json(playground.delete_runs(&body.run_ids).await?))
}

#[tracing::instrument(skip_all)]
pub async fn delete_run(
    State(playground): State<Playground>,
    RecordId(id): RecordId,
) -> Result<Json<store::DeleteReport>, ApiError> {
    Ok(Json(playground.delete_runs(&[id]).await?))
}

pub async fn info(State(playground): State<Playground>) -> Json<Info> {
    Json(playground.info())
}

#[tracing::instrument(skip_all)]
pub async fn load_model(
    State(playground): State<Playground>,
    State(access): State<Arc<AccessPolicy>>,
    JsonBody(body): JsonBody<LoadModelRequest>,
) -> Result<(StatusCode, Json<Info>), ApiError> {
    // The files the server runs now were the operator's choice: they may load again (with
    // another context size, say).
    let loaded = playground.loaded_files();
    // A context size out of range is said before where the files are (which are never opened
    // before that check).
    body.check_ctx_size()?;
    let loadable = crate::paths::Loadable {
        dirs: &access.loadable_dirs,
        loaded: &loaded,
    };
    crate::paths::check_load_request(&loadable, &body)?;
    playground.load_model(body.into_load_request()?)?;
    Ok((StatusCode::ACCEPTED, Json(playground.info())))
}

/// Settings' tree, applied without reloading the model.
#[tracing::instrument(skip_all)]
pub async fn set_tree(
    State(playground): State<Playground>,
    JsonBody(body): JsonBody<SetTreeRequest>,
) -> Result<Json<Info>, ApiError> {
    Ok(Json(playground.set_default_tree(body.tree)?))
}

/// Tunes the heads; the body must say `"confirm": true`, since tuning slows every generation
/// for about a minute and an empty body is easily sent by mistake.
#[tracing::instrument(skip_all)]
pub async fn tune(
    State(playground): State<Playground>,
    JsonBody(body): JsonBody<TuneRequest>,
) -> Result<Json<engine::tuning::TuneReport>, ApiError> {
    if body.confirm != Some(true) {
        return Err(ApiError::bad_request(
            "confirmation_required",
            "tuning measures the model for about a minute and slows every generation meanwhile; \
             send {\"confirm\": true} to start it",
        ));
    }
    Ok(Json(playground.tune(body).await?))
}

/// Where two greedy outputs of one prompt part, and how likely the loaded model finds each of
/// the two tokens there (`null` when they do not part).
#[tracing::instrument(skip_all)]
pub async fn divergence(
    State(playground): State<Playground>,
    JsonBody(body): JsonBody<DivergenceRequest>,
) -> Result<Json<Option<Divergence>>, ApiError> {
    Ok(Json(playground.explain_divergence(body).await?))
}

/// `ok`; `loading` until a model is ready; `degraded` with the reason while the history cannot
/// be written (generations are refused then, since they could not be recorded).
pub async fn health(State(playground): State<Playground>) -> Json<Health> {
    Json(playground.health().await)
}

pub async fn metrics(
    State(playground): State<Playground>,
    State(requests): State<Arc<RequestCounts>>,
) -> Response {
    let runs = playground.counters().snapshot();
    let text = requests.render(runs, playground.engine_metrics());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// Starts a run and streams its events (the playground's [`playground::RunEvent`]s) as
/// server-sent events. A refusal before the first event (such as a prompt longer than the
/// context) is an error answer instead of a stream.
#[tracing::instrument(skip_all)]
pub async fn generate(
    State(playground): State<Playground>,
    JsonBody(body): JsonBody<PlaygroundRequest>,
) -> Result<Response, ApiError> {
    let (_, events) = playground.start_run(body).await?;
    let events = events.map(|event| {
        let data = serde_json::to_string(&event).unwrap_or_default();
        Ok::<_, Infallible>(Event::default().data(data))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}
