//! The desktop app's entry point: gives the web view a usable language tag, then runs the app.

// No console window on Windows release builds.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

fn main() {
    medusa_desktop::locale::ensure_language_tag();
    if let Err(err) = medusa_desktop::run() {
        eprintln!("medusa-playground: {err:#}");
        std::process::exit(1);
    }
}
