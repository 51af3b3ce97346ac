//! The live status line on stderr while text streams on stdout.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use engine::{RunSummary, StepEvent, TokenSource};

pub struct LiveLine {
    enabled: bool,
    started: Instant,
    tokens: usize,
    steps: usize,
    stepped_tokens: usize,
    last_draw: Option<Instant>,
}

impl LiveLine {
    pub fn new() -> Self {
        Self {
            enabled: std::io::stderr().is_terminal(),
            started: Instant::now(),
            tokens: 0,
            steps: 0,
            stepped_tokens: 0,
            last_draw: None,
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
        let secs = self.started.elapsed().as_secs_f64();
        // Save the cursor, draw on the bottom line, restore: the streamed text is not disturbed.
        let accepted = if self.steps > 0 {
            format!(
                ", {:.2} tokens/step",
                self.stepped_tokens as f64 / self.steps as f64
            )
        } else {
            String::new()
        };
        eprint!(
            "\x1b7\x1b[999;1H\x1b[2K[{} tokens, {:.1} tok/s{accepted}]\x1b8",
            self.tokens,
            self.tokens as f64 / secs.max(1e-9)
        );
        let _ = std::io::stderr().flush();
    }

    pub fn finish(&self, summary: &RunSummary) {
        if self.enabled {
            eprint!("\x1b7\x1b[999;1H\x1b[2K\x1b8");
        }
        eprintln!("\n{}", stats_line(summary));
    }
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
