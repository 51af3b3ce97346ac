//! `/api/remotes`: the remote engines runs may name, each handler one [`Playground`] operation.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use playground::{AddRemoteRequest, Playground, RemoteInfo};
use serde::Deserialize;

use crate::error::ApiError;
use crate::extract::{JsonBody, QueryParams};

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    /// `true` asks every engine for its models now; otherwise only those whose list has
    /// expired are asked (the others answer as last seen).
    #[serde(default)]
    refresh: bool,
}

/// Every remote engine with its models: kept lists, asked afresh once expired or when
/// `?refresh=true` asks for it (so listings do not each download every engine's list).
#[tracing::instrument(skip(playground))]
pub async fn list(
    State(playground): State<Playground>,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<Vec<RemoteInfo>>, ApiError> {
    let remotes = playground.remotes();
    Ok(Json(if query.refresh {
        remotes.refresh_all().await
    } else {
        remotes.refresh().await
    }))
}

#[tracing::instrument(skip_all)]
pub async fn add(
    State(playground): State<Playground>,
    JsonBody(body): JsonBody<AddRemoteRequest>,
) -> Result<(StatusCode, Json<RemoteInfo>), ApiError> {
    let added = playground.add_remote(body).await?;
    Ok((StatusCode::CREATED, Json(added)))
}

#[tracing::instrument(skip(playground))]
pub async fn remove(
    State(playground): State<Playground>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    playground.remotes().remove(&name)?;
    Ok(StatusCode::NO_CONTENT)
}
