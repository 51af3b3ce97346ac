fn main() {
    // The config lives at the repository root, next to the UI it points at.
    let attributes = tauri_build::Attributes::new().config_path("../tauri.conf.json");
    if let Err(err) = tauri_build::try_build(attributes) {
        panic!("tauri build step failed: {err:#}");
    }
}
