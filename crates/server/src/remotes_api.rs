//! `/api/remotes`: the remote engines runs may name, each handler one [`Playground`] operation.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use playground::{AddRemoteRequest, Playground, RemoteInfo};

use crate::error::ApiError;
use crate::extract::JsonBody;

/// Every remote engine, each asked for its models now.
#[tracing::instrument(skip_all)]
pub async fn list(State(playground): State<Playground>) -> Json<Vec<RemoteInfo>> {
    Json(playground.remotes().refresh().await)
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
