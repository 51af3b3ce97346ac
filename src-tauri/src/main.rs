//! The desktop app's entry point: gives the web view a usable language tag, then runs the app.

// No console window on Windows release builds.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

fn main() {
    // A grammar check started by the app runs here and exits; otherwise grammars are checked in
    // such children, which can be stopped.
    engine::serve_grammar_checks();
    medusa_desktop::locale::ensure_language_tag();
    if let Err(err) = medusa_desktop::run() {
        eprintln!("medusa-playground: {err:#}");
        std::process::exit(1);
    }
}
