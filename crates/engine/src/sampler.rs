//! Token selection from logits: greedy, or sampled with llama.cpp's usual filters.
//!
//! Order follows llama.cpp's default chain: repetition penalty, top-k, top-p, min-p, then
//! temperature over the survivors and a seeded draw. Temperature 0 means greedy.

use crate::request::SamplingParams;
use crate::rng::SplitMix64;
use crate::token::TokenId;

/// One candidate of a filtered distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenProb {
    pub token: TokenId,
    pub prob: f32,
}

#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: SplitMix64,
}

impl Sampler {
    /// `seed` is the resolved seed (the request's, or one picked for it) so a run can be repeated.
    pub fn new(params: SamplingParams, seed: u64) -> Self {
        Self {
            params,
            rng: SplitMix64::new(seed),
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.params.temperature <= 0.0
    }

    /// Picks the next token. `recent` is the token history the repetition penalty looks at.
    pub fn sample(&mut self, logits: &[f32], recent: &[TokenId]) -> TokenId {
        let penalised;
        let logits = if self.penalty_applies(recent) {
            penalised = self.penalise(logits, recent);
            &penalised[..]
        } else {
            logits
        };
        if self.is_greedy() {
            return argmax(logits);
        }
        let dist = self.filtered_distribution(logits);
        self.draw(&dist)
    }

    /// The distribution a sampled draw would use (penalty and filters applied), highest first.
    pub fn distribution(&self, logits: &[f32], recent: &[TokenId]) -> Vec<TokenProb> {
        if self.penalty_applies(recent) {
            self.filtered_distribution(&self.penalise(logits, recent))
        } else {
            self.filtered_distribution(logits)
        }
    }

    /// Uniform in [0, 1) from this sampler's seeded stream.
    pub fn uniform(&mut self) -> f32 {
        self.rng.next_f64() as f32
    }

    fn penalty_applies(&self, recent: &[TokenId]) -> bool {
        self.params.repeat_penalty != 1.0 && self.params.repeat_last_n > 0 && !recent.is_empty()
    }

    /// llama.cpp's rule: divide positive logits, multiply negative ones, once per distinct token.
    fn penalise(&self, logits: &[f32], recent: &[TokenId]) -> Vec<f32> {
        let mut out = logits.to_vec();
        let window = &recent[recent.len().saturating_sub(self.params.repeat_last_n)..];
        let mut seen: Vec<TokenId> = window.to_vec();
        seen.sort_unstable();
        seen.dedup();
        let penalty = self.params.repeat_penalty;
        for token in seen {
            if let Some(logit) = usize::try_from(token).ok().and_then(|i| out.get_mut(i)) {
                *logit = if *logit > 0.0 {
                    *logit / penalty
                } else {
                    *logit * penalty
                };
            }
        }
        out
    }

    /// The distribution the draw uses, sorted by probability (highest first), summing to 1.
    pub fn filtered_distribution(&self, logits: &[f32]) -> Vec<TokenProb> {
        let p = &self.params;
        let mut candidates: Vec<(TokenId, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as TokenId, l))
            .collect();
        let by_logit_desc =
            |a: &(TokenId, f32), b: &(TokenId, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let k = p.top_k as usize;
        if k > 0 && k < candidates.len() {
            candidates.select_nth_unstable_by(k - 1, by_logit_desc);
            candidates.truncate(k);
        }
        candidates.sort_unstable_by(by_logit_desc);

        // top-p and min-p act on the untempered softmax, as in llama.cpp.
        let probs = softmax(candidates.iter().map(|c| c.1));
        let mut keep = candidates.len();
        if p.top_p < 1.0 {
            let mut cumulative = 0.0;
            for (i, prob) in probs.iter().enumerate() {
                cumulative += prob;
                if cumulative >= p.top_p {
                    keep = i + 1;
                    break;
                }
            }
        }
        if p.min_p > 0.0 {
            let threshold = probs[0] * p.min_p;
            keep = keep.min(probs.iter().take_while(|&&q| q >= threshold).count().max(1));
        }
        candidates.truncate(keep);

        let temperature = p.temperature.max(f32::MIN_POSITIVE);
        let tempered = softmax(candidates.iter().map(|c| c.1 / temperature));
        candidates
            .iter()
            .zip(tempered)
            .map(|(&(token, _), prob)| TokenProb { token, prob })
            .collect()
    }

    /// Draws from a distribution whose probabilities sum to 1.
    pub fn draw(&mut self, dist: &[TokenProb]) -> TokenId {
        let target = self.uniform();
        let mut cumulative = 0.0;
        for candidate in dist {
            cumulative += candidate.prob;
            if target < cumulative {
                return candidate.token;
            }
        }
        // Rounding left the sum a hair under 1: the last candidate takes the remainder.
        dist.last().map_or(0, |c| c.token)
    }
}

/// Index of the largest logit; the lowest index wins a tie so greedy runs are reproducible.
pub fn argmax(logits: &[f32]) -> TokenId {
    let mut best = 0;
    let mut best_value = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_value {
            best_value = v;
            best = i;
        }
    }
    best as TokenId
}

fn softmax(values: impl Iterator<Item = f32> + Clone) -> Vec<f32> {
    let max = values.clone().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = values.map(|v| (v - max).exp()).collect();
    let sum: f32 = exps.iter().sum();
    exps.into_iter().map(|e| e / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32) -> SamplingParams {
        SamplingParams::unfiltered(temperature)
    }

    #[test]
    fn greedy_takes_argmax_and_lowest_index_on_ties() {
        let mut s = Sampler::new(params(0.0), 1);
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 3.0], &[]), 1);
    }

    #[test]
    fn repetition_penalty_changes_greedy_choice() {
        let mut p = params(0.0);
        p.repeat_penalty = 2.0;
        let mut s = Sampler::new(p, 1);
        // Token 1 (logit 3.0) was just used: 3.0 / 2 = 1.5 < 2.0, so token 0 wins.
        assert_eq!(s.sample(&[2.0, 3.0, -1.0], &[1, 1]), 0);
        // Negative logits are multiplied, pushing them further down.
        assert_eq!(s.penalise(&[2.0, -1.0], &[1]), vec![2.0, -2.0]);
    }

    #[test]
    fn top_k_keeps_k_best() {
        let mut p = params(1.0);
        p.top_k = 2;
        let dist = Sampler::new(p, 0).filtered_distribution(&[1.0, 4.0, 3.0, 2.0]);
        let tokens: Vec<_> = dist.iter().map(|c| c.token).collect();
        assert_eq!(tokens, vec![1, 2]);
        let e = (1.0f32).exp();
        assert!((dist[0].prob - e / (e + 1.0)).abs() < 1e-6);
    }

    #[test]
    fn top_p_keeps_smallest_prefix_reaching_p() {
        let mut p = params(1.0);
        p.top_p = 0.7;
        // ln of probabilities 0.5, 0.3, 0.2: cumulative 0.5, 0.8 -> keep two.
        let logits = [0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()];
        let dist = Sampler::new(p, 0).filtered_distribution(&logits);
        assert_eq!(dist.len(), 2);
        assert!((dist[0].prob - 0.625).abs() < 1e-6);
        assert!((dist[1].prob - 0.375).abs() < 1e-6);
    }

    #[test]
    fn min_p_drops_tokens_below_fraction_of_best() {
        let mut p = params(1.0);
        p.min_p = 0.5;
        let logits = [0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()];
        let dist = Sampler::new(p, 0).filtered_distribution(&logits);
        // 0.3 >= 0.25 stays, 0.2 < 0.25 goes.
        assert_eq!(dist.iter().map(|c| c.token).collect::<Vec<_>>(), vec![0, 1]);
    }

    #[test]
    fn temperature_sharpens_after_filtering() {
        let p = params(0.5);
        let dist = Sampler::new(p, 0).filtered_distribution(&[0.0, 1.0]);
        // softmax([0, 2]) = [1/(1+e^2), e^2/(1+e^2)], highest first.
        let e2 = (2.0f32).exp();
        assert_eq!(dist[0].token, 1);
        assert!((dist[0].prob - e2 / (1.0 + e2)).abs() < 1e-6);
    }

    #[test]
    fn same_seed_repeats_and_draws_follow_the_distribution() {
        let logits = [0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()];
        let run = |seed| {
            let mut s = Sampler::new(params(1.0), seed);
            (0..20_000)
                .map(|_| s.sample(&logits, &[]))
                .collect::<Vec<_>>()
        };
        let a = run(42);
        assert_eq!(a, run(42));
        assert_ne!(a, run(43));
        let freq = |t| a.iter().filter(|&&x| x == t).count() as f32 / a.len() as f32;
        assert!(
            (freq(0) - 0.5).abs() < 0.02,
            "token 0 frequency {}",
            freq(0)
        );
        assert!(
            (freq(1) - 0.3).abs() < 0.02,
            "token 1 frequency {}",
            freq(1)
        );
        assert!(
            (freq(2) - 0.2).abs() < 0.02,
            "token 2 frequency {}",
            freq(2)
        );
    }
}
