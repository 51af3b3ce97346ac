//! `/api/conversations`: the chat's conversations, each handler one [`Playground`] operation.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use playground::conversations::{ConversationList, ConversationsQuery};
use playground::Playground;
use serde::Deserialize;
use store::{Conversation, ConversationPatch};

use crate::error::ApiError;
use crate::extract::{JsonBody, QueryParams, RecordId};

#[tracing::instrument(skip_all)]
pub async fn list(
    State(playground): State<Playground>,
    QueryParams(query): QueryParams<ConversationsQuery>,
) -> Result<Json<ConversationList>, ApiError> {
    Ok(Json(playground.list_conversations(&query).await?))
}

#[tracing::instrument(skip_all)]
pub async fn create(
    State(playground): State<Playground>,
    JsonBody(patch): JsonBody<ConversationPatch>,
) -> Result<(StatusCode, Json<Conversation>), ApiError> {
    let conversation = playground.create_conversation(&patch).await?;
    Ok((StatusCode::CREATED, Json(conversation)))
}

#[tracing::instrument(skip(playground))]
pub async fn get(
    State(playground): State<Playground>,
    RecordId(id): RecordId,
) -> Result<Json<Conversation>, ApiError> {
    Ok(Json(playground.get_conversation(id).await?))
}

#[tracing::instrument(skip(playground, patch))]
pub async fn update(
    State(playground): State<Playground>,
    RecordId(id): RecordId,
    JsonBody(patch): JsonBody<ConversationPatch>,
) -> Result<Json<Conversation>, ApiError> {
    Ok(Json(playground.update_conversation(id, &patch).await?))
}

#[tracing::instrument(skip(playground))]
pub async fn delete(
    State(playground): State<Playground>,
    RecordId(id): RecordId,
) -> Result<StatusCode, ApiError> {
    playground.delete_conversation(id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Default, Deserialize)]
pub struct ExportQuery {
    format: Option<String>,
}

/// One conversation as a download: `?format=json` (the default) or `markdown`.
#[tracing::instrument(skip(playground, query))]
pub async fn export(
    State(playground): State<Playground>,
    RecordId(id): RecordId,
    QueryParams(query): QueryParams<ExportQuery>,
) -> Result<Response, ApiError> {
    let format = query.format.as_deref().unwrap_or("json");
    let file = playground.export_conversation(id, format).await?;
    Ok((
        [
            (header::CONTENT_TYPE, file.mime_type.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{}\"", file.filename),
            ),
        ],
        file.body,
    )
        .into_response())
}
