//! Where a decoding step's time goes, summed over the engine's steps: what to shorten first.

use serde::Serialize;

/// Milliseconds spent in each part of the steps that decoded no prompt tokens, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct StepProfile {
    /// Steps counted.
    pub steps: u64,
    /// Tokens those steps decoded (roots and draft trees).
    pub batch_tokens: u64,
    /// Drafting: lookup and the heads, run on the last step's hidden state.
    pub draft_ms: f64,
    /// Putting roots and trees into the batch, with each leaf's share of the request's cells.
    pub batch_ms: f64,
    /// `llama_decode`: the graph built and submitted (on a CPU, also computed).
    pub decode_ms: f64,
    /// Waiting for the backend to finish, logits and hidden states copied back included.
    pub wait_ms: f64,
    /// Reading the logits and accepting the drafted path. (A step's `verify_ms` elsewhere is
    /// its whole decode and this.)
    pub accept_ms: f64,
    /// Keeping the accepted path's KV cells and dropping the leaves'.
    pub kv_ms: f64,
    /// Keeping the next hidden state and emitting the tokens.
    pub emit_ms: f64,
}

impl StepProfile {
    /// What was spent after `earlier`, a profile read before.
    pub fn since(&self, earlier: &StepProfile) -> StepProfile {
        StepProfile {
            steps: self.steps - earlier.steps,
            batch_tokens: self.batch_tokens - earlier.batch_tokens,
            draft_ms: self.draft_ms - earlier.draft_ms,
            batch_ms: self.batch_ms - earlier.batch_ms,
            decode_ms: self.decode_ms - earlier.decode_ms,
            wait_ms: self.wait_ms - earlier.wait_ms,
            accept_ms: self.accept_ms - earlier.accept_ms,
            kv_ms: self.kv_ms - earlier.kv_ms,
            emit_ms: self.emit_ms - earlier.emit_ms,
        }
    }

    /// Adds another profile's steps to this one's.
    pub fn add(&mut self, other: &StepProfile) {
        self.steps += other.steps;
        self.batch_tokens += other.batch_tokens;
        self.draft_ms += other.draft_ms;
        self.batch_ms += other.batch_ms;
        self.decode_ms += other.decode_ms;
        self.wait_ms += other.wait_ms;
        self.accept_ms += other.accept_ms;
        self.kv_ms += other.kv_ms;
        self.emit_ms += other.emit_ms;
    }

    /// Each part's name and mean milliseconds per step, in step order.
    pub fn per_step(&self) -> Vec<(&'static str, f64)> {
        let n = self.steps.max(1) as f64;
        [
            ("draft", self.draft_ms),
            ("batch", self.batch_ms),
            ("decode", self.decode_ms),
            ("wait", self.wait_ms),
            ("accept", self.accept_ms),
            ("kv", self.kv_ms),
            ("emit", self.emit_ms),
        ]
        .into_iter()
        .map(|(name, ms)| (name, ms / n))
        .collect()
    }

    /// One line: mean tokens per decode and each part's mean time per step.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .per_step()
            .into_iter()
            .map(|(name, ms)| format!("{name} {ms:.3}"))
            .collect();
        format!(
            "{} steps, {:.1} tokens/decode; ms/step: {}",
            self.steps,
            self.batch_tokens as f64 / self.steps.max(1) as f64,
            parts.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_averaged_over_the_steps_counted_since() {
        let earlier = StepProfile {
            steps: 2,
            batch_tokens: 4,
            draft_ms: 1.0,
            ..StepProfile::default()
        };
        let now = StepProfile {
            steps: 6,
            batch_tokens: 20,
            draft_ms: 3.0,
            wait_ms: 8.0,
            ..StepProfile::default()
        };
        let mut run = now.since(&earlier);
        assert_eq!(run.steps, 4);
        assert_eq!(run.batch_tokens, 16);
        assert_eq!(run.per_step()[0], ("draft", 0.5));
        assert_eq!(run.per_step()[3], ("wait", 2.0));
        assert_eq!(
            run.summary(),
            "4 steps, 4.0 tokens/decode; ms/step: draft 0.500, batch 0.000, decode 0.000, \
             wait 2.000, accept 0.000, kv 0.000, emit 0.000"
        );
        run.add(&earlier);
        assert_eq!(run.steps, 6);
        assert_eq!(run.draft_ms, 3.0);
    }

    #[test]
    fn no_steps_reads_as_zero_not_nan() {
        let empty = StepProfile::default();
        assert!(empty.per_step().iter().all(|&(_, ms)| ms == 0.0));
    }
}
