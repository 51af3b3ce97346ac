//! The UI's model commands: the model files on disk and a model hub's catalog, answering what
//! `/api/models/local` and `/api/catalog` answer over HTTP. A download's events go to a channel;
//! `cancel_download` stops it, keeping what arrived.

use std::ops::ControlFlow;

use models::RepoFiles;
use playground::catalog::{
    Catalog, CatalogSearch, DeleteModelRequest, DownloadEvent, DownloadRequest, ModelsOnDisk,
};
use playground::{AppError, Playground};
use tauri::ipc::Channel;
use tauri::State;

#[tauri::command]
pub fn list_local_models(
    catalog: State<'_, Catalog>,
    playground: State<'_, Playground>,
) -> Result<ModelsOnDisk, AppError> {
    catalog.on_disk(&playground.loaded_files())
}

#[tauri::command]
pub async fn search_catalog(
    catalog: State<'_, Catalog>,
    query: String,
) -> Result<CatalogSearch, AppError> {
    catalog.search(&query).await
}

#[tauri::command]
pub async fn catalog_files(
    catalog: State<'_, Catalog>,
    repo: String,
) -> Result<RepoFiles, AppError> {
    catalog.files(&repo).await
}

/// Downloads a file into the models cache; resolves when it ends, however it ends (the last
/// event says how).
#[tauri::command]
pub async fn download_model(
    catalog: State<'_, Catalog>,
    request: DownloadRequest,
    on_event: Channel<DownloadEvent>,
) -> Result<(), AppError> {
    let result = catalog
        .download(&request, |progress| {
            match on_event.send(DownloadEvent::Progress(progress)) {
                Ok(()) => ControlFlow::Continue(()),
                // The window went away.
                Err(_) => ControlFlow::Break(()),
            }
        })
        .await;
    let last = match result {
        Ok(done) => DownloadEvent::Done(done),
        Err(e) => DownloadEvent::Failed { error: e.body() },
    };
    let _ = on_event.send(last);
    Ok(())
}

#[tauri::command]
pub fn cancel_download(catalog: State<'_, Catalog>, file_name: String) -> Result<(), AppError> {
    if catalog.cancel(&file_name) {
        Ok(())
    } else {
        Err(AppError::not_found(format!(
            "{file_name} is not being downloaded"
        )))
    }
}

#[tauri::command]
pub fn delete_model(
    catalog: State<'_, Catalog>,
    playground: State<'_, Playground>,
    request: DeleteModelRequest,
) -> Result<(), AppError> {
    catalog.delete(&request, &playground.loaded_files())
}
