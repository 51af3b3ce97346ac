//! The UI's heads training commands, each one [`Playground`] operation, answering what
//! `/api/training` answers over HTTP. A job's updates go to a channel.

use futures_util::StreamExt;
use playground::training_figures::{DeletedTrainingJob, PlannedHeads, TrainingRequest};
use playground::{AppError, Playground};
use store::TrainingJob;
use tauri::ipc::Channel;
use tauri::State;

#[tauri::command]
pub async fn start_training(
    playground: State<'_, Playground>,
    request: TrainingRequest,
) -> Result<TrainingJob, AppError> {
    playground.start_training(request).await
}

#[tauri::command]
pub async fn planned_heads(
    playground: State<'_, Playground>,
    model: String,
) -> Result<PlannedHeads, AppError> {
    playground.planned_heads(&model).await
}

#[tauri::command]
pub async fn list_training_jobs(
    playground: State<'_, Playground>,
) -> Result<Vec<TrainingJob>, AppError> {
    playground.list_training_jobs().await
}

#[tauri::command]
pub async fn get_training_job(
    playground: State<'_, Playground>,
    id: i64,
) -> Result<TrainingJob, AppError> {
    playground.get_training_job(id).await
}

#[tauri::command]
pub fn cancel_training(playground: State<'_, Playground>, id: i64) -> Result<(), AppError> {
    playground.cancel_training(id)
}

#[tauri::command]
pub async fn resume_training(
    playground: State<'_, Playground>,
    id: i64,
) -> Result<TrainingJob, AppError> {
    playground.resume_training(id).await
}

#[tauri::command]
pub async fn delete_training_job(
    playground: State<'_, Playground>,
    id: i64,
) -> Result<DeletedTrainingJob, AppError> {
    playground.delete_training_job(id).await
}

/// Sends the job now, then each change until it stops running; resolves at its last update.
#[tauri::command]
pub async fn watch_training(
    playground: State<'_, Playground>,
    id: i64,
    on_event: Channel<TrainingJob>,
) -> Result<(), AppError> {
    let mut updates = playground.training_updates(id).await?;
    while let Some(job) = updates.next().await {
        if on_event.send(job).is_err() {
            // The window went away; the job goes on.
            break;
        }
    }
    Ok(())
}
