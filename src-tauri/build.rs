//! Tauri's build step: reads `tauri.conf.json` and the capabilities, and prepares what
//! `tauri::generate_context!` embeds in the app.

fn main() {
    if let Err(err) = tauri_build::try_build(tauri_build::Attributes::new()) {
        panic!("tauri build step failed: {err:#}");
    }
}
