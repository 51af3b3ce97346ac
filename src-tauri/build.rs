fn main() {
    if let Err(err) = tauri_build::try_build(tauri_build::Attributes::new()) {
        panic!("tauri build step failed: {err:#}");
    }
}
