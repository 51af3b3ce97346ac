//! The live status line on stderr while text streams on stdout.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use engine::{RunSummary, StepEvent, TokenSource};

/// A status line on the terminal's last row while an answer streams above it. The rows above
/// are made the scrolling region, so the streamed text scrolls within them and the status line
/// never covers it; the region is given back when the answer ends (or the line is dropped).
pub struct LiveLine {
    enabled: bool,
    started: Instant,
    tokens: usize,
    steps: usize,
    stepped_tokens: usize,
    last_draw: Option<Instant>,
    /// The terminal's height when the scrolling region was set; `None` while none is set.
    region_rows: Option<u16>,
}

/// Below this many rows there is no room for a region and a status line.
const MIN_ROWS: u16 = 3;

impl LiveLine {
    pub fn new() -> Self {
        Self {
            enabled: std::io::stderr().is_terminal(),
            started: Instant::now(),
            tokens: 0,
            steps: 0,
            stepped_tokens: 0,
            last_draw: None,
            region_rows: None,
        }
    }

    pub fn step(&mut self, accepted: usize) {
        self.steps += 1;
        self.stepped_tokens += accepted;
    }

    pub fn tokens(&mut self, n: usize) {
        self.tokens += n;
        if !self.enabled
            || self
                .last_draw
                .is_some_and(|t| t.elapsed().as_millis() < 100)
        {
            return;
        }
        self.last_draw = Some(Instant::now());
        // A terminal that gives no height has no last row to keep: the figures follow the answer.
        let Some(rows) = terminal_rows().filter(|&rows| rows >= MIN_ROWS) else {
            return;
        };
        let mut out = String::new();
        if self.region_rows != Some(rows) {
            // First draw, or the terminal was resized.
            if let Some(old) = self.region_rows {
                out.push_str(&row_text(old, ""));
            }
            out.push_str(&reserve_last_row(rows));
            self.region_rows = Some(rows);
        }
        let secs = self.started.elapsed().as_secs_f64();
        let accepted = if self.steps > 0 {
            format!(
                ", {:.2} tokens/step",
                self.stepped_tokens as f64 / self.steps as f64
            )
        } else {
            String::new()
        };
        let status = format!(
            "[{} tokens, {:.1} tok/s{accepted}]",
            self.tokens,
            self.tokens as f64 / secs.max(1e-9)
        );
        out.push_str(&row_text(rows, &status));
        eprint!("{out}");
        let _ = std::io::stderr().flush();
    }

    pub fn finish(&mut self, summary: &RunSummary) {
        self.release();
        eprintln!("\n{}", stats_line(summary));
    }

    /// Clears the status line and gives the whole screen back to scrolling.
    fn release(&mut self) {
        if let Some(rows) = self.region_rows.take() {
            // Resetting the region moves the cursor home: save and restore it around.
            eprint!("{}\x1b7\x1b[r\x1b8", row_text(rows, ""));
            let _ = std::io::stderr().flush();
        }
    }
}

impl Drop for LiveLine {
    fn drop(&mut self) {
        self.release();
    }
}

fn terminal_rows() -> Option<u16> {
    terminal_size::terminal_size_of(std::io::stderr()).map(|(_, rows)| rows.0)
}

/// `text` alone on row `row`: save the cursor, write there, restore, so the streamed text is not
/// disturbed.
fn row_text(row: u16, text: &str) -> String {
    format!("\x1b7\x1b[{row};1H\x1b[2K{text}\x1b8")
}

/// Frees the last row and makes the rows above it the scrolling region, the cursor kept where it
/// was (moved up a row with the text if it was on the last one).
fn reserve_last_row(rows: u16) -> String {
    // Index then reverse index: the screen scrolls up a line if the cursor is on the last row,
    // and the cursor ends on the row above it in the same column; elsewhere nothing moves.
    // Setting the region homes the cursor, hence save and restore around it.
    format!("\x1bD\x1bM\x1b7\x1b[1;{}r\x1b8", rows - 1)
}

pub fn stats_line(s: &RunSummary) -> String {
    let mut line = format!(
        "[{} prompt tokens, {} generated, {:.1} tok/s, first token {:.0} ms, total {:.0} ms, stop: {}, seed {}",
        s.prompt_tokens,
        s.tokens_generated,
        s.tokens_per_second,
        s.ttft_ms,
        s.total_ms,
        s.stop_reason.as_str(),
        s.seed
    );
    if s.mode != engine::GenerationMode::Normal {
        let by_head: Vec<String> = s
            .acceptance_by_depth
            .iter()
            .map(|a| format!("{:.0}%", a * 100.0))
            .collect();
        line.push_str(&format!(
            "; {}: {:.2} tokens/step over {} steps, accepted by depth [{}]",
            s.mode,
            s.mean_accepted,
            s.steps,
            by_head.join(" ")
        ));
    }
    line.push(']');
    line
}

/// One speculative step for `--steps`: accepted tokens, who drafted them, and timings.
pub fn step_line(step: &StepEvent) -> String {
    let sources: Vec<String> = step
        .sources
        .iter()
        .map(|s| match s {
            TokenSource::Base => "base".to_owned(),
            TokenSource::Head(k) => format!("head{k}"),
            TokenSource::Lookup => "lookup".to_owned(),
            TokenSource::DraftModel => "draft".to_owned(),
            TokenSource::Eagle => "eagle".to_owned(),
        })
        .collect();
    format!(
        "step {}: drafted {} (depth {}), emitted {} [{}], draft {:.2} ms, verify {:.1} ms",
        step.index,
        step.tree_size,
        step.tree_depth,
        step.accepted_len,
        sources.join(" "),
        step.draft_ms,
        step.verify_ms
    )
}

/// A bar of tensors written on stderr, redrawn in place on a terminal and every 50 tensors in a
/// log; the caller ends its line.
pub fn tensor_bar() -> impl FnMut(usize, usize) + Send + 'static {
    let terminal = std::io::stderr().is_terminal();
    move |done: usize, total: usize| {
        let width = 30;
        let filled = done * width / total.max(1);
        let bar = format!(
            "[{}{}] {done}/{total} tensors",
            "#".repeat(filled),
            " ".repeat(width - filled)
        );
        if terminal {
            eprint!("\r{bar}");
        } else if done == total || done.is_multiple_of(50) {
            eprintln!("{bar}");
        }
        let _ = std::io::stderr().flush();
    }
}
