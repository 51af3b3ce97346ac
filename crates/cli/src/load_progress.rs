//! What a model load is doing, on stderr: a bar per stage on a terminal, a line as each stage
//! starts otherwise (a log keeps those). A first load with heads times decodes on this machine,
//! which takes a while on a large model and would otherwise pass in silence.

use std::io::IsTerminal;
use std::sync::{Mutex, PoisonError};

use engine::{LoadProgress, LoadStage};
use indicatif::{ProgressBar, ProgressStyle};

/// Steps of a stage's bar: shares come as fractions.
const BAR_STEPS: u64 = 1000;

pub fn load_progress() -> LoadProgress {
    let terminal = std::io::stderr().is_terminal();
    let shown: Mutex<Option<(LoadStage, ProgressBar)>> = Mutex::new(None);
    LoadProgress::new(move |stage, share| {
        let mut shown = shown.lock().unwrap_or_else(PoisonError::into_inner);
        if shown.as_ref().map(|(showing, _)| *showing) != Some(stage) {
            if let Some((_, bar)) = shown.take() {
                bar.finish();
            }
            let label = playground::load_stage_name(stage);
            if !terminal {
                eprintln!("{label}…");
            }
            *shown = Some((stage, stage_bar(label)));
        }
        if let Some((_, bar)) = shown.as_ref() {
            bar.set_position((share * BAR_STEPS as f32) as u64);
            if share >= 1.0 {
                bar.finish();
            }
        }
    })
}

/// A bar that draws only on a terminal (indicatif hides it elsewhere).
fn stage_bar(label: &'static str) -> ProgressBar {
    ProgressBar::new(BAR_STEPS)
        .with_style(
            ProgressStyle::with_template("{msg} [{bar:32}] {percent}% {elapsed}")
                .expect("a valid template")
                .progress_chars("=> "),
        )
        .with_message(label)
}
