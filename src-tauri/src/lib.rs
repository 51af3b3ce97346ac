//! Medusa Playground's desktop app: the web UI in a native window, talking to the engine and the
//! run history through Tauri commands (see [`commands`]) instead of HTTP.

pub mod commands;
pub mod conversation_commands;
pub mod locale;
pub mod model_commands;
pub mod remote_commands;
mod shutdown;
pub mod startup;
pub mod training_commands;
mod window_size;

use anyhow::Context;
use tauri::Manager;

pub use startup::StartupOptions;

/// The command handlers, shared by the app and its tests.
pub fn invoke_handler<R: tauri::Runtime>(
) -> impl Fn(tauri::ipc::Invoke<R>) -> bool + Send + Sync + 'static {
    tauri::generate_handler![
        commands::info,
        commands::report_ui_error,
        commands::generate,
        commands::cancel_run,
        commands::list_runs,
        commands::get_run,
        commands::list_comparisons,
        commands::get_comparison,
        commands::create_comparison,
        commands::export_runs,
        commands::load_model,
        commands::set_tree,
        commands::delete_runs,
        commands::import_runs,
        commands::tune,
        commands::divergence,
        commands::pick_file,
        conversation_commands::list_conversations,
        conversation_commands::get_conversation,
        conversation_commands::create_conversation,
        conversation_commands::update_conversation,
        conversation_commands::delete_conversation,
        conversation_commands::export_conversation,
        remote_commands::list_remotes,
        remote_commands::add_remote,
        remote_commands::remove_remote,
        model_commands::list_local_models,
        model_commands::search_catalog,
        model_commands::catalog_files,
        model_commands::download_model,
        model_commands::cancel_download,
        model_commands::delete_model,
        training_commands::start_training,
        training_commands::planned_heads,
        training_commands::list_training_jobs,
        training_commands::get_training_job,
        training_commands::cancel_training,
        training_commands::resume_training,
        training_commands::delete_training_job,
        training_commands::watch_training,
    ]
}

/// Opens the window at once and loads the model behind it; the UI shows the progress.
pub fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,medusa_desktop=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let options = StartupOptions::from_env();
    let app = tauri::Builder::default()
        .plugin(tauri_plugin_dialog::init())
        .invoke_handler(invoke_handler())
        .setup(move |app| {
            if let Some(window) = app.get_webview_window("main") {
                if let Err(err) = window_size::fit_to_screen(&window) {
                    tracing::warn!(error = %err, "could not fit the window to the screen");
                }
            }
            let state = tauri::async_runtime::block_on(startup::start(options))?;
            app.manage(state);
            app.manage(startup::catalog()?);
            Ok(())
        })
        .build(tauri::generate_context!())
        .context("starting the desktop app")?;
    app.run(shutdown::on_run_event);
    Ok(())
}
