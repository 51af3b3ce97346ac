//! Closing the window stops runs cleanly: each is cancelled and recorded as `cancelled` with what
//! it produced before the process exits.

use std::time::{Duration, Instant};

use playground::Playground;
use tauri::{AppHandle, Manager, RunEvent};

/// How long exiting waits for cancelled runs to be recorded.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

pub fn on_run_event(app: &AppHandle, event: RunEvent) {
    if let RunEvent::Exit = event {
        if let Some(state) = app.try_state::<Playground>() {
            stop_runs(&state);
        }
    }
}

fn stop_runs(state: &Playground) {
    let cancelled = state.cancel_all();
    if cancelled == 0 {
        return;
    }
    tracing::info!(cancelled, "window closed; stopping runs");
    let start = Instant::now();
    while state.running_count() > 0 && start.elapsed() < DRAIN_LIMIT {
        std::thread::sleep(Duration::from_millis(20));
    }
}
