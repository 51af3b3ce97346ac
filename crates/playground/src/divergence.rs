//! Where two greedy outputs of one prompt part, and how likely the model found each of the two
//! tokens there: a near-tie (a different order of sums can tip it) or a fault.

use engine::{ChatMessage, TokenChoice, TokenId};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::error::AppError;
use crate::playground::Playground;
use crate::requests::prompt_of;

/// Two outputs of one prompt: `expected` (normal decoding's) and `got` (another mode's, or a
/// remote engine's), as token ids.
#[derive(Debug, Clone, Deserialize, TS)]
#[ts(optional_fields)]
pub struct DivergenceRequest {
    /// The raw prompt both continued, or the chat `messages` both answered (not both).
    #[serde(default)]
    pub prompt: Option<String>,
    #[serde(default)]
    pub messages: Option<Vec<ChatMessage>>,
    pub expected: Vec<TokenId>,
    pub got: Vec<TokenId>,
}

/// The first token where the outputs part, with the model's view of both tokens there.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct Divergence {
    /// Index of the first differing token (0-based, among the generated tokens).
    pub at: usize,
    pub expected: TokenChoice,
    pub got: TokenChoice,
    /// Whether the two tokens were nearly equally likely (log-probabilities less than
    /// [`NEAR_TIE_LOGPROB_GAP`] apart).
    pub near_tie: bool,
}

/// Log-probability gap under which two tokens count as nearly tied: the same logits summed in
/// another order move by a few tenths at most.
pub const NEAR_TIE_LOGPROB_GAP: f32 = 1.0;

impl Divergence {
    pub fn new(at: usize, expected: TokenChoice, got: TokenChoice) -> Self {
        let near_tie = (expected.logprob - got.logprob).abs() < NEAR_TIE_LOGPROB_GAP;
        Self {
            at,
            expected,
            got,
            near_tie,
        }
    }
}

/// The index of the first token where both outputs have a token and they differ.
pub fn first_difference(expected: &[TokenId], got: &[TokenId]) -> Option<usize> {
    expected.iter().zip(got).position(|(a, b)| a != b)
}

impl Playground {
    /// Where `expected` and `got` part and how likely the loaded model finds each token there
    /// (decoded plainly, after the prompt and the tokens both share); `None` when neither
    /// output has a token the other lacks at the same place.
    pub async fn explain_divergence(
        &self,
        request: DivergenceRequest,
    ) -> Result<Option<Divergence>, AppError> {
        let prompt = prompt_of(request.prompt, request.messages)?;
        let Some(at) = first_difference(&request.expected, &request.got) else {
            return Ok(None);
        };
        let shared = request.expected[..at].to_vec();
        let tokens = vec![request.expected[at], request.got[at]];
        let choices = self
            .on_engine("divergence_failed", move |engine| {
                engine.next_token_choices(prompt, shared, tokens)
            })
            .await?;
        let [expected, got]: [TokenChoice; 2] = choices
            .try_into()
            .map_err(|_| AppError::internal("divergence_failed", "two tokens asked, not two"))?;
        Ok(Some(Divergence::new(at, expected, got)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(token_id: TokenId, logprob: f32) -> TokenChoice {
        TokenChoice {
            token_id,
            text: String::new(),
            bytes: Vec::new(),
            logprob,
            rank: 1,
        }
    }

    #[test]
    fn outputs_part_at_the_first_token_both_have_and_differ_on() {
        assert_eq!(first_difference(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_difference(&[1, 2, 3], &[1, 5, 3]), Some(1));
        assert_eq!(first_difference(&[1, 2], &[1, 2, 3]), None);
        assert_eq!(first_difference(&[], &[4]), None);
    }

    #[test]
    fn a_near_tie_is_a_small_log_probability_gap() {
        assert!(Divergence::new(3, choice(1, -0.70), choice(2, -0.72)).near_tie);
        assert!(!Divergence::new(3, choice(1, -0.70), choice(2, -1.70)).near_tie);
        assert!(!Divergence::new(3, choice(1, -0.2), choice(2, -4.0)).near_tie);
    }
}
