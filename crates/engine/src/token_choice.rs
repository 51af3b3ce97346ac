//! How likely the model found a token at one place: for telling a near-tie (two tokens almost
//! equally likely, which a different order of sums can tip) from a fault.

use serde::Serialize;
use ts_rs::TS;

use crate::token::TokenId;

/// One candidate for the next token.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct TokenChoice {
    pub token_id: TokenId,
    /// The token's own text.
    pub text: String,
    /// Natural log of the model's probability for it (temperature 1, nothing filtered).
    pub logprob: f32,
    /// 1 for the model's most likely token, 2 for the next, and so on.
    pub rank: usize,
}

/// The choices for `tokens` from the next-token `logits` (each id must index them).
pub(crate) fn choices(
    logits: &[f32],
    tokens: &[TokenId],
    text_of: impl Fn(TokenId) -> String,
) -> Vec<TokenChoice> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let log_norm = max
        + logits
            .iter()
            .map(|&l| (l as f64 - max).exp())
            .sum::<f64>()
            .ln();
    tokens
        .iter()
        .map(|&token| {
            let logit = logits[token as usize];
            TokenChoice {
                token_id: token,
                text: text_of(token),
                logprob: (logit as f64 - log_norm) as f32,
                rank: 1 + logits.iter().filter(|&&l| l > logit).count(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_probabilities_and_ranks_come_from_all_the_logits() {
        // Probabilities 1/2, 1/4, 1/4 for logits ln 2, 0, 0.
        let logits = [0.0, std::f32::consts::LN_2, 0.0];
        let got = choices(&logits, &[1, 2], |t| format!("t{t}"));
        assert_eq!(got[0].token_id, 1);
        assert_eq!(got[0].text, "t1");
        assert_eq!(got[0].rank, 1);
        assert!((got[0].logprob - 0.5f32.ln()).abs() < 1e-6);
        assert_eq!(got[1].rank, 2);
        assert!((got[1].logprob - 0.25f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn large_logits_do_not_overflow() {
        let got = choices(&[1000.0, 1000.0], &[0], |_| String::new());
        assert!((got[0].logprob - 0.5f32.ln()).abs() < 1e-6);
        assert_eq!(got[0].rank, 1);
    }
}
