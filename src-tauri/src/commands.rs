//! The UI's commands: each maps one IPC call onto one [`Playground`] operation, so the app answers
//! exactly what `medusa serve` answers over HTTP. Errors reject with `{"code", "message"}`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::StreamExt;
use playground::divergence::{Divergence, DivergenceRequest};
use playground::history::{export_filename, ComparisonList, RunList, RunsQuery};
use playground::tuning::TuneRequest;
use playground::{
    AppError, Info, LoadModelRequest, Playground, PlaygroundRequest, RunEvent, SetTreeRequest,
};
use serde::Deserialize;
use tauri::ipc::Channel;
use tauri::{AppHandle, Runtime, State};
use tauri_plugin_dialog::DialogExt;
use tokio::sync::oneshot;

#[tauri::command]
pub fn info(playground: State<'_, Playground>) -> Info {
    // The UI asks first thing after it starts: a sign in the log that the window works.
    static UI_CONNECTED: AtomicBool = AtomicBool::new(false);
    if !UI_CONNECTED.swap(true, Ordering::Relaxed) {
        tracing::info!("the UI is connected");
    }
    playground.info()
}

/// An error the UI could not show itself (a script error), kept in the app's log.
#[tauri::command]
pub fn report_ui_error(message: String) {
    tracing::warn!(%message, "UI error");
}

/// Starts a run; its events (the same as `/api/generate`'s) go to `on_event` in order.
/// Resolves with the run id once the engine accepted the request.
#[tauri::command]
pub async fn generate(
    playground: State<'_, Playground>,
    request: PlaygroundRequest,
    on_event: Channel<RunEvent>,
) -> Result<i64, AppError> {
    start_run(&playground, request, on_event).await
}

/// [`generate`] without the command plumbing.
pub async fn start_run(
    playground: &Playground,
    request: PlaygroundRequest,
    on_event: Channel<RunEvent>,
) -> Result<i64, AppError> {
    let (run_id, events) = playground.start_run(request).await?;
    tauri::async_runtime::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            if on_event.send(event).is_err() {
                // A closed channel drops the events, which cancels the run; it is still recorded.
                break;
            }
        }
    });
    Ok(run_id)
}

#[tauri::command]
pub fn cancel_run(playground: State<'_, Playground>, run_id: i64) -> Result<(), AppError> {
    playground.cancel_run(run_id)
}

#[tauri::command]
pub async fn list_runs(
    playground: State<'_, Playground>,
    query: Option<RunsQuery>,
) -> Result<RunList, AppError> {
    playground.list_runs(&query.unwrap_or_default()).await
}

#[tauri::command]
pub async fn get_run(
    playground: State<'_, Playground>,
    id: i64,
) -> Result<store::RunWithSteps, AppError> {
    playground.get_run(id).await
}

#[tauri::command]
pub async fn list_comparisons(
    playground: State<'_, Playground>,
    limit: Option<i64>,
) -> Result<ComparisonList, AppError> {
    playground.list_comparisons(limit).await
}

#[tauri::command]
pub async fn get_comparison(
    playground: State<'_, Playground>,
    id: i64,
) -> Result<store::Comparison, AppError> {
    playground.get_comparison(id).await
}

#[tauri::command]
pub async fn create_comparison(
    playground: State<'_, Playground>,
    run_ids: Vec<i64>,
) -> Result<store::Comparison, AppError> {
    playground.create_comparison(&run_ids).await
}

/// Adds the runs of an exported history (the JSON export's document) to this one.
#[tauri::command]
pub async fn import_runs(
    playground: State<'_, Playground>,
    document: store::ExportDocument,
) -> Result<store::ImportReport, AppError> {
    playground.import_runs(&document).await
}

#[tauri::command]
pub async fn delete_runs(
    playground: State<'_, Playground>,
    run_ids: Vec<i64>,
) -> Result<store::DeleteReport, AppError> {
    playground.delete_runs(&run_ids).await
}

/// Asks where to save the export of the runs matching `query`, then writes it. Resolves with the
/// path written, or null when the user cancelled the dialog.
#[tauri::command]
pub async fn export_runs<R: Runtime>(
    app: AppHandle<R>,
    playground: State<'_, Playground>,
    query: Option<RunsQuery>,
    format: String,
) -> Result<Option<PathBuf>, AppError> {
    let mut query = query.unwrap_or_default();
    query.format = Some(format);
    let format = query.export_format()?;
    let Some(path) = ask_save_path(&app, "Export runs", export_filename(format)).await? else {
        return Ok(None);
    };
    export_to(&playground, &query, &path).await?;
    Ok(Some(path))
}

/// The save dialog, offering `file_name` and files with its extension. `None`: cancelled.
pub async fn ask_save_path<R: Runtime>(
    app: &AppHandle<R>,
    title: &str,
    file_name: String,
) -> Result<Option<PathBuf>, AppError> {
    let extension = Path::new(&file_name)
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (tx, rx) = oneshot::channel();
    app.dialog()
        .file()
        .set_title(title)
        .set_file_name(file_name)
        .add_filter(extension.to_uppercase(), &[extension.as_str()])
        .save_file(move |path| {
            let _ = tx.send(path);
        });
    let Some(path) = rx.await.ok().flatten() else {
        return Ok(None);
    };
    path.into_path()
        .map(Some)
        .map_err(|e| AppError::invalid_parameter(format!("cannot save there: {e}")))
}

/// Writes the export of `query` to `path`, a run at a time, through a temporary file, so that
/// memory does not grow with the history and a failure leaves whatever was at `path` untouched.
pub async fn export_to(
    playground: &Playground,
    query: &RunsQuery,
    path: &Path,
) -> Result<(), AppError> {
    let partial = path.with_extension("partial");
    let failed = |e: std::io::Error| {
        let _ = std::fs::remove_file(&partial);
        AppError::internal(
            "export_failed",
            format!("cannot write {}: {e}", path.display()),
        )
    };
    let file = tokio::fs::File::create(&partial).await.map_err(failed)?;
    let mut out = tokio::io::BufWriter::new(file);
    if let Err(err) = playground.write_export(query, &mut out).await {
        let _ = std::fs::remove_file(&partial);
        return Err(err);
    }
    tokio::io::AsyncWriteExt::flush(&mut out)
        .await
        .map_err(failed)?;
    drop(out);
    tokio::fs::rename(&partial, path).await.map_err(failed)
}

/// Writes `body` to `path` through a temporary file, so that a failure leaves whatever was at
/// `path` untouched.
pub async fn write_file(path: &Path, body: &[u8]) -> Result<(), AppError> {
    let partial = path.with_extension("partial");
    let write = async {
        tokio::fs::write(&partial, body).await?;
        tokio::fs::rename(&partial, path).await
    };
    write.await.map_err(|e| {
        let _ = std::fs::remove_file(&partial);
        AppError::internal(
            "export_failed",
            format!("cannot write {}: {e}", path.display()),
        )
    })
}

#[tauri::command]
pub fn load_model(
    playground: State<'_, Playground>,
    request: LoadModelRequest,
) -> Result<(), AppError> {
    playground.load_model(request.into_load_request()?)
}

/// Settings' tree, applied without reloading the model.
#[tauri::command]
pub fn set_tree(
    playground: State<'_, Playground>,
    request: SetTreeRequest,
) -> Result<Info, AppError> {
    playground.set_default_tree(request.tree)
}

/// Measures the heads and this machine and predicts each tree size's speed (about a minute).
#[tauri::command]
pub async fn tune(
    playground: State<'_, Playground>,
    request: Option<TuneRequest>,
) -> Result<engine::tuning::TuneReport, AppError> {
    playground.tune(request.unwrap_or_default()).await
}

/// Where two greedy outputs of one prompt part, and how likely the model finds each token there.
#[tauri::command]
pub async fn divergence(
    playground: State<'_, Playground>,
    request: DivergenceRequest,
) -> Result<Option<Divergence>, AppError> {
    playground.explain_divergence(request).await
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
