//! Comparing modes on one prompt: each mode's run one after another, so that their timings do
//! not interfere, for several rounds in a balanced order (every mode in every place and after
//! every other equally often), linked in the history as a comparison with its figures.

use engine::{GenerateRequest, GenerationMode, LookupMemoryUse};
use store::{Comparison, PromptRecord, RunFilter, RunStatus};

use crate::error::AppError;
use crate::playground::Playground;
use crate::run_order::balanced_order;
use crate::runs::{prompt_record, Collected};

/// Most rounds one comparison may run.
pub const MAX_ROUNDS: u32 = 20;

/// A comparison that ran: each mode's first-round run, in the order the modes were given, and
/// the comparison as the history keeps it.
pub struct ComparisonRun {
    pub first_round: Vec<(GenerationMode, Collected)>,
    pub comparison: Comparison,
}

impl Playground {
    /// The modes a comparison runs when it names none: normal against Medusa with heads, else
    /// against lookup.
    pub fn default_compared_modes(&self) -> Result<Vec<GenerationMode>, AppError> {
        let speculative = if self.model()?.has_heads() {
            GenerationMode::Medusa
        } else {
            GenerationMode::Lookup
        };
        Ok(vec![GenerationMode::Normal, speculative])
    }

    /// Runs `request_in(mode)` for each of `modes`, `rounds` times, and links the runs as a
    /// comparison. Every request is checked before anything runs.
    pub async fn compare(
        &self,
        modes: &[GenerationMode],
        rounds: u32,
        request_in: impl Fn(GenerationMode) -> Result<GenerateRequest, AppError>,
    ) -> Result<ComparisonRun, AppError> {
        if modes.is_empty() {
            return Err(AppError::invalid_parameter("modes must not be empty"));
        }
        if let Some(mode) = modes
            .iter()
            .enumerate()
            .find_map(|(i, mode)| modes[..i].contains(mode).then_some(mode))
        {
            return Err(AppError::invalid_parameter(format!(
                "mode '{mode}' is listed twice"
            )));
        }
        if !(1..=MAX_ROUNDS).contains(&rounds) {
            return Err(AppError::invalid_parameter(format!(
                "repeats must be between 1 and {MAX_ROUNDS}"
            )));
        }
        for &mode in modes {
            self.check(request_in(mode)?)?;
        }
        let prompt = prompt_record(&request_in(modes[0])?.prompt);
        let mut first_round: Vec<Option<Collected>> = modes.iter().map(|_| None).collect();
        let mut run_ids = Vec::new();
        for round in 0..rounds as usize {
            for m in balanced_order(modes.len(), round) {
                // One mode's answer must not be drafted for another from lookup's memory.
                let request = GenerateRequest {
                    lookup_memory: LookupMemoryUse::ReadOnly,
                    ..request_in(modes[m])?
                };
                let collected = self.run_to_end(request).await?;
                run_ids.push(collected.run_id);
                if round == 0 {
                    first_round[m] = Some(collected);
                }
            }
        }
        let comparison = self.store().create_comparison(&prompt, &run_ids).await?;
        Ok(ComparisonRun {
            first_round: modes
                .iter()
                .copied()
                .zip(first_round)
                .filter_map(|(mode, run)| Some((mode, run?)))
                .collect(),
            comparison,
        })
    }

    /// Tokens per second of the most recent finished normal run of `prompt`, if any: the
    /// baseline a lone speculative run is measured against.
    pub async fn latest_normal_speed(
        &self,
        prompt: &PromptRecord,
    ) -> Result<Option<f64>, AppError> {
        const PAGE: i64 = 200;
        let mut filter = RunFilter {
            mode: Some("normal".into()),
            status: Some(RunStatus::Finished),
            limit: Some(PAGE),
            offset: Some(0),
            ..RunFilter::default()
        };
        loop {
            let runs = self.store().list_runs(&filter).await?;
            if let Some(run) = runs.iter().find(|r| &r.prompt == prompt) {
                return Ok(run.tokens_per_second);
            }
            if (runs.len() as i64) < PAGE {
                return Ok(None);
            }
            filter.offset = Some(filter.offset.unwrap_or(0) + PAGE);
        }
    }
}
