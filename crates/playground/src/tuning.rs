//! Tuning the loaded heads for this machine, one tuning at a time.

use engine::tuning::{TuneOptions, TuneReport};
use serde::Deserialize;
use ts_rs::TS;

use crate::error::AppError;
use crate::playground::Playground;

/// How long an answer each tuning prompt gets and the largest tree considered; the engine's
/// tuning defaults for what is left out.
#[derive(Debug, Default, Clone, Deserialize, TS)]
#[ts(optional_fields)]
pub struct TuneRequest {
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub max_nodes: Option<usize>,
    // Tuning slows every generation for about a minute: the HTTP API starts it only when asked
    // in so many words, so that a stray or replayed request does not.
    #[serde(default)]
    pub confirm: Option<bool>,
}

impl Playground {
    /// Measures the loaded heads and this machine's decode costs and predicts each tree size's
    /// speed (see `engine::tuning`). Takes about a minute on a small model.
    pub async fn tune(&self, request: TuneRequest) -> Result<TuneReport, AppError> {
        // Without a model, that is the answer, whatever the request.
        self.model()?;
        let mut options = TuneOptions::default();
        if let Some(max_tokens) = request.max_tokens {
            if !(8..=1024).contains(&max_tokens) {
                return Err(AppError::invalid_parameter(
                    "max_tokens must be between 8 and 1024",
                ));
            }
            options.max_tokens = max_tokens;
        }
        if let Some(max_nodes) = request.max_nodes {
            options.max_nodes = max_nodes;
        }
        let _guard = self.begin_tuning()?;
        self.on_engine("tune_failed", move |engine| {
            engine::tuning::tune_engine(engine, &options, |done, total| {
                tracing::info!(done, total, "tuning: prompt measured");
            })
        })
        .await
    }
}
