//! The UI's remote-engine commands, each one [`Playground`] operation, answering what
//! `/api/remotes` answers over HTTP.

use playground::{AddRemoteRequest, AppError, Playground, RemoteInfo};
use tauri::State;

/// Every remote engine, each asked for its models now.
#[tauri::command]
pub async fn list_remotes(playground: State<'_, Playground>) -> Result<Vec<RemoteInfo>, AppError> {
    // The UI asks only when the user asks to refresh: every engine, now.
    Ok(playground.remotes().refresh_all().await)
}

/// Adds a remote engine; it is saved (key included, in a file only the user can read).
#[tauri::command]
pub async fn add_remote(
    playground: State<'_, Playground>,
    request: AddRemoteRequest,
) -> Result<RemoteInfo, AppError> {
    playground.add_remote(request).await
}

#[tauri::command]
pub fn remove_remote(playground: State<'_, Playground>, name: String) -> Result<(), AppError> {
    playground.remotes().remove(&name)
}
