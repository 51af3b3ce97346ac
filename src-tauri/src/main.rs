// No console window on Windows release builds.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

fn main() {
    if let Err(err) = medusa_desktop::run() {
        eprintln!("medusa-playground: {err:#}");
        std::process::exit(1);
    }
}
