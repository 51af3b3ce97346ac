//! The UI's commands: thin wrappers over `server::service`, so the app answers exactly what
//! `medusa serve` answers over HTTP. Errors reject with `{"code", "message"}`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Deserialize;
use serde_json::Value;
use server::service::{self, LoadModelBody, RunsQuery, UiGenerateRequest};
use server::{ApiError, AppState};
use tauri::ipc::Channel;
use tauri::{AppHandle, Runtime, State};
use tauri_plugin_dialog::DialogExt;
use tokio::sync::oneshot;

#[tauri::command]
pub fn info(state: State<'_, AppState>) -> Value {
    // The UI asks first thing after it starts: a sign in the log that the window works.
    static UI_CONNECTED: AtomicBool = AtomicBool::new(false);
    if !UI_CONNECTED.swap(true, Ordering::Relaxed) {
        tracing::info!("the UI is connected");
    }
    service::info(&state)
}

/// An error the UI could not show itself (a script error), kept in the app's log.
#[tauri::command]
pub fn report_ui_error(message: String) {
    tracing::warn!(%message, "UI error");
}

/// Starts a run; its events (the same objects as `/api/generate`'s) go to `on_event` in order.
/// Resolves with the run id once the engine accepted the request.
#[tauri::command]
pub async fn generate(
    state: State<'_, AppState>,
    request: UiGenerateRequest,
    on_event: Channel<Value>,
) -> Result<i64, ApiError> {
    start_run(&state, request, on_event).await
}

/// [`generate`] without the command plumbing.
pub async fn start_run(
    state: &AppState,
    request: UiGenerateRequest,
    on_event: Channel<Value>,
) -> Result<i64, ApiError> {
    let run = service::start_ui_run(state, request).await?;
    let mut handle = run.handle;
    let run_id = handle.run_id;
    let mut next = Some(run.first);
    tauri::async_runtime::spawn(async move {
        while let Some(event) = next.take() {
            let terminal = service::is_terminal(&event);
            if on_event.send(service::ui_event(run_id, event)).is_err() || terminal {
                // A closed channel drops `handle`, which cancels the run; it is still recorded.
                break;
            }
            next = handle.next().await;
        }
    });
    Ok(run_id)
}

#[tauri::command]
pub fn cancel_run(state: State<'_, AppState>, run_id: i64) -> Result<(), ApiError> {
    state.cancel_run(run_id)
}

#[tauri::command]
pub async fn list_runs(
    state: State<'_, AppState>,
    query: Option<RunsQuery>,
) -> Result<Vec<store::Run>, ApiError> {
    service::list_runs(&state, &query.unwrap_or_default()).await
}

#[tauri::command]
pub async fn get_run(state: State<'_, AppState>, id: i64) -> Result<store::RunWithSteps, ApiError> {
    service::get_run(&state, id).await
}

#[tauri::command]
pub async fn list_comparisons(
    state: State<'_, AppState>,
    limit: Option<i64>,
) -> Result<Vec<store::Comparison>, ApiError> {
    Ok(state.store().list_comparisons(limit).await?)
}

#[tauri::command]
pub async fn get_comparison(
    state: State<'_, AppState>,
    id: i64,
) -> Result<store::Comparison, ApiError> {
    Ok(state.store().get_comparison(id).await?)
}

#[tauri::command]
pub async fn create_comparison(
    state: State<'_, AppState>,
    run_ids: Vec<i64>,
) -> Result<store::Comparison, ApiError> {
    service::create_comparison(&state, &run_ids).await
}

/// Asks where to save the export of the runs matching `query`, then writes it. Resolves with the
/// path written, or null when the user cancelled the dialog.
#[tauri::command]
pub async fn export_runs<R: Runtime>(
    app: AppHandle<R>,
    state: State<'_, AppState>,
    query: Option<RunsQuery>,
    format: String,
) -> Result<Option<PathBuf>, ApiError> {
    let mut query = query.unwrap_or_default();
    query.format = Some(format);
    let format = query.export_format()?;
    let filename = service::export_filename(format);
    let (tx, rx) = oneshot::channel();
    app.dialog()
        .file()
        .set_title("Export runs")
        .set_file_name(&filename)
        .add_filter(format.as_str().to_uppercase(), &[format.as_str()])
        .save_file(move |path| {
            let _ = tx.send(path);
        });
    let Some(path) = rx.await.ok().flatten() else {
        return Ok(None);
    };
    let path = path
        .into_path()
        .map_err(|e| ApiError::invalid_parameter(format!("cannot save there: {e}")))?;
    export_to(&state, &query, &path).await?;
    Ok(Some(path))
}

/// Writes the export of `query` to `path`, through a temporary file so that a failure leaves
/// whatever was at `path` untouched.
pub async fn export_to(state: &AppState, query: &RunsQuery, path: &Path) -> Result<(), ApiError> {
    let (_, _, body) = service::export_runs(state, query).await?;
    let partial = path.with_extension("partial");
    let write = async {
        tokio::fs::write(&partial, &body).await?;
        tokio::fs::rename(&partial, path).await
    };
    write.await.map_err(|e| {
        let _ = std::fs::remove_file(&partial);
        ApiError::internal(
            "export_failed",
            format!("cannot write {}: {e}", path.display()),
        )
    })
}

#[tauri::command]
pub fn load_model(state: State<'_, AppState>, request: LoadModelBody) -> Result<(), ApiError> {
    service::load_model(&state, request)
}

/// Measures the heads and this machine and predicts each tree size's speed (about a minute).
#[tauri::command]
pub async fn tune(
    state: State<'_, AppState>,
    request: Option<service::TuneBody>,
) -> Result<engine::tuning::TuneReport, ApiError> {
    service::tune(&state, request.unwrap_or_default()).await
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    Model,
    Heads,
}

/// A native open dialog for a GGUF model or a heads file; null when cancelled.
#[tauri::command]
pub async fn pick_file<R: Runtime>(app: AppHandle<R>, kind: FileKind) -> Option<PathBuf> {
    let (title, filter) = match kind {
        FileKind::Model => ("Open a GGUF model", "GGUF model"),
        FileKind::Heads => ("Open Medusa heads", "Medusa heads (GGUF)"),
    };
    let (tx, rx) = oneshot::channel();
    app.dialog()
        .file()
        .set_title(title)
        .add_filter(filter, &["gguf"])
        .pick_file(move |path| {
            let _ = tx.send(path);
        });
    rx.await.ok().flatten().and_then(|p| p.into_path().ok())
}
