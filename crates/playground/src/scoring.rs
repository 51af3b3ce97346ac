//! Scoring a given text: how likely the model served here finds each of its tokens.

use engine::{Prompt, PromptLogprobs};

use crate::{AppError, Playground, RunTarget};

impl Playground {
    /// Each token of `prompt` with its log-probability after those before it and the `top`
    /// likeliest at its place, from the model served here (remote engines' are not read).
    pub async fn prompt_logprobs(
        &self,
        target: &RunTarget,
        prompt: Prompt,
        top: usize,
    ) -> Result<PromptLogprobs, AppError> {
        if let RunTarget::Remote { engine, .. } = target {
            return Err(AppError::invalid_parameter(format!(
                "a prompt's log-probabilities come from the model served here, not from the remote engine '{engine}'"
            ))
            .with_param("echo"));
        }
        self.on_engine("scoring_failed", move |engine| {
            engine.prompt_logprobs(prompt, top)
        })
        .await
    }
}
