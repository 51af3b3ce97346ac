//! The chat's conversations as IPC commands, answering what `/api/conversations` answers.

use std::path::PathBuf;

use playground::conversations::{ConversationList, ConversationsQuery};
use playground::{AppError, Playground};
use store::{Conversation, ConversationPatch};
use tauri::{AppHandle, Runtime, State};

use crate::commands::{ask_save_path, write_file};

#[tauri::command]
pub async fn list_conversations(
    playground: State<'_, Playground>,
    query: Option<ConversationsQuery>,
) -> Result<ConversationList, AppError> {
    playground
        .list_conversations(&query.unwrap_or_default())
        .await
}

#[tauri::command]
pub async fn get_conversation(
    playground: State<'_, Playground>,
    id: i64,
) -> Result<Conversation, AppError> {
    playground.get_conversation(id).await
}

#[tauri::command]
pub async fn create_conversation(
    playground: State<'_, Playground>,
    patch: Option<ConversationPatch>,
) -> Result<Conversation, AppError> {
    playground
        .create_conversation(&patch.unwrap_or_default())
        .await
}

#[tauri::command]
pub async fn update_conversation(
    playground: State<'_, Playground>,
    id: i64,
    patch: ConversationPatch,
) -> Result<Conversation, AppError> {
    playground.update_conversation(id, &patch).await
}

#[tauri::command]
pub async fn delete_conversation(
    playground: State<'_, Playground>,
    id: i64,
) -> Result<(), AppError> {
    playground.delete_conversation(id).await
}

/// Asks where to save conversation `id` as `format` (`json` or `markdown`), then writes it.
/// Resolves with the path written, or null when the user cancelled the dialog.
#[tauri::command]
pub async fn export_conversation<R: Runtime>(
    app: AppHandle<R>,
    playground: State<'_, Playground>,
    id: i64,
    format: String,
) -> Result<Option<PathBuf>, AppError> {
    let file = playground.export_conversation(id, &format).await?;
    let Some(path) = ask_save_path(&app, "Export conversation", file.filename).await? else {
        return Ok(None);
    };
    write_file(&path, file.body.as_bytes()).await?;
    Ok(Some(path))
}
