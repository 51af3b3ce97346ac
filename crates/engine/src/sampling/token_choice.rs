//! How likely the model found a token at one place: for telling a near-tie (two tokens almost
//! equally likely, which a different order of sums can tip) from a fault, and for the
//! log-probabilities a request asks for.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::token::TokenId;

/// One candidate for the next token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct TokenChoice {
    pub token_id: TokenId,
    /// The token's own text.
    pub text: String,
    /// The token's bytes: a piece of a character spanning several tokens is not text alone.
    pub bytes: Vec<u8>,
    /// Natural log of the model's probability for it (temperature 1, nothing filtered).
    pub logprob: f32,
    /// 1 for the model's most likely token, 2 for the next, and so on.
    pub rank: usize,
}

/// A generated token's log-probability and the most likely tokens at its place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct TokenLogprobs {
    pub chosen: TokenChoice,
    /// Most likely first; as many as the request asked for.
    pub top: Vec<TokenChoice>,
}

/// A prompt's tokens as the model reads them: the first, which nothing before it predicts, and
/// how likely each later one was after those before it.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptLogprobs {
    /// The first token's text.
    pub first_token: String,
    pub rest: Vec<TokenLogprobs>,
}

/// The choices for `tokens` from the next-token `logits` (each id must index them).
pub(crate) fn choices(
    logits: &[f32],
    tokens: &[TokenId],
    bytes_of: impl Fn(TokenId) -> Vec<u8>,
) -> Vec<TokenChoice> {
    let log_norm = log_normaliser(logits);
    tokens
        .iter()
        .map(|&token| choice(logits, log_norm, token, &bytes_of))
        .collect()
}

/// `chosen`'s choice and the `top` most likely ones, from the logits it was chosen from.
pub(crate) fn logprobs(
    logits: &[f32],
    chosen: TokenId,
    top: usize,
    bytes_of: impl Fn(TokenId) -> Vec<u8>,
) -> TokenLogprobs {
    let log_norm = log_normaliser(logits);
    let mut best: Vec<usize> = (0..logits.len()).collect();
    let by_logit = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
    let top = top.min(best.len());
    if top > 0 && top < best.len() {
        best.select_nth_unstable_by(top - 1, by_logit);
    }
    best.truncate(top);
    best.sort_unstable_by(by_logit);
    TokenLogprobs {
        chosen: choice(logits, log_norm, chosen, &bytes_of),
        top: best
            .into_iter()
            .map(|i| choice(logits, log_norm, i as TokenId, &bytes_of))
            .collect(),
    }
}

/// log Σ exp(logit), computed without overflow.
fn log_normaliser(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    max + logits
        .iter()
        .map(|&l| (l as f64 - max).exp())
        .sum::<f64>()
        .ln()
}

fn choice(
    logits: &[f32],
    log_norm: f64,
    token: TokenId,
    bytes_of: impl Fn(TokenId) -> Vec<u8>,
) -> TokenChoice {
    let logit = logits[token as usize];
    let bytes = bytes_of(token);
    TokenChoice {
        token_id: token,
        text: String::from_utf8_lossy(&bytes).into_owned(),
        bytes,
        logprob: (logit as f64 - log_norm) as f32,
        rank: 1 + logits.iter().filter(|&&l| l > logit).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_probabilities_and_ranks_come_from_all_the_logits() {
        // Probabilities 1/2, 1/4, 1/4 for logits ln 2, 0, 0.
        let logits = [0.0, std::f32::consts::LN_2, 0.0];
        let got = choices(&logits, &[1, 2], |t| format!("t{t}").into_bytes());
        assert_eq!(got[0].token_id, 1);
        assert_eq!(got[0].text, "t1");
        assert_eq!(got[0].rank, 1);
        assert!((got[0].logprob - 0.5f32.ln()).abs() < 1e-6);
        assert_eq!(got[1].rank, 2);
        assert!((got[1].logprob - 0.25f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn large_logits_do_not_overflow() {
        let got = choices(&[1000.0, 1000.0], &[0], |_| Vec::new());
        assert!((got[0].logprob - 0.5f32.ln()).abs() < 1e-6);
        assert_eq!(got[0].rank, 1);
    }

    #[test]
    fn logprobs_give_the_chosen_token_and_the_best_in_order() {
        // Probabilities 1/8, 1/2, 1/4, 1/8.
        let logits = [0.0, 4f32.ln(), 2f32.ln(), 0.0];
        let got = logprobs(&logits, 3, 3, |t| vec![b'a' + t as u8]);
        assert_eq!(got.chosen.token_id, 3);
        assert_eq!(got.chosen.text, "d");
        assert_eq!(got.chosen.bytes, b"d");
        assert!((got.chosen.logprob - 0.125f32.ln()).abs() < 1e-6);
        let order: Vec<_> = got.top.iter().map(|c| (c.token_id, c.rank)).collect();
        // Tokens 0 and 3 tie: the lower id comes first, both rank 3.
        assert_eq!(order, vec![(1, 1), (2, 2), (0, 3)]);
        assert!((got.top[1].logprob - 0.25f32.ln()).abs() < 1e-6);
        assert!(logprobs(&logits, 1, 0, |_| Vec::new()).top.is_empty());
        assert_eq!(logprobs(&logits, 1, 9, |_| Vec::new()).top.len(), 4);
    }
}
