//! Token selection from logits: greedy, or sampled with llama.cpp's usual filters, optionally
//! held to a grammar.
//!
//! Order follows llama.cpp's default chain: logit bias, penalties (repetition, presence,
//! frequency), the grammar, top-k, top-p, min-p, then temperature over the survivors and a seeded
//! draw. Temperature 0 means greedy.

use std::borrow::Cow;

use crate::grammar::Grammar;
use crate::request::SamplingParams;
use crate::sampling::rng::SplitMix64;
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
    grammar: Option<Grammar>,
}

impl Sampler {
    /// `seed` is the resolved seed (the request's, or one picked for it) so a run can be repeated.
    pub fn new(params: SamplingParams, seed: u64) -> Self {
        Self {
            params,
            rng: SplitMix64::new(seed),
            grammar: None,
        }
    }

    /// Holds every choice to `grammar`.
    pub(crate) fn with_grammar(mut self, grammar: Option<Grammar>) -> Self {
        self.grammar = grammar;
        self
    }

    pub fn is_greedy(&self) -> bool {
        self.params.temperature <= 0.0
    }

    /// Picks the next token. `recent` is the token history the penalties look at. The choice is
    /// not yet part of the output: [`Sampler::accept`] makes it so.
    pub fn sample(&mut self, logits: &[f32], recent: &[TokenId]) -> TokenId {
        if !self.is_greedy() {
            let dist = self.distribution(logits, recent);
            return self.draw(&dist);
        }
        let adjusted = self.adjust(logits, recent);
        let best = argmax(&adjusted);
        let Some(grammar) = self.grammar.as_mut() else {
            return best;
        };
        // Most tokens the model prefers are allowed: checking one, then a shortlist, is far
        // cheaper than masking the whole vocabulary.
        if grammar.allows(best, adjusted[best as usize]) {
            return best;
        }
        if let Some(top) = grammar.top_allowed(&adjusted, 1) {
            return top[0].0;
        }
        let mut masked = adjusted.into_owned();
        grammar.mask(&mut masked);
        let best = argmax(&masked);
        if masked[best as usize] == f32::NEG_INFINITY {
            grammar.end_token()
        } else {
            best
        }
    }

    /// Time spent following the grammar since the last call.
    pub(crate) fn take_grammar_time(&mut self) -> std::time::Duration {
        self.grammar
            .as_mut()
            .map_or(std::time::Duration::ZERO, Grammar::take_spent)
    }

    /// Makes `token` part of the output: the grammar, if any, moves past it.
    pub fn accept(&mut self, token: TokenId) {
        if let Some(grammar) = self.grammar.as_mut() {
            grammar.accept(token);
        }
    }

    /// The distribution a sampled draw would use (bias, penalties, grammar and filters
    /// applied), highest first.
    pub fn distribution(&mut self, logits: &[f32], recent: &[TokenId]) -> Vec<TokenProb> {
        let adjusted = self.adjust(logits, recent);
        let Some(grammar) = self.grammar.as_mut() else {
            return self.filtered_distribution(&adjusted);
        };
        let end_token = grammar.end_token();
        // Top-k keeps the k likeliest allowed tokens: when a shortlist holds them, the rest of
        // the vocabulary need not be checked.
        let top_k = self.params.top_k as usize;
        let masked = match (top_k > 0)
            .then(|| grammar.top_allowed(&adjusted, top_k))
            .flatten()
        {
            Some(top) => {
                let mut masked = vec![f32::NEG_INFINITY; adjusted.len()];
                for (token, logit) in top {
                    masked[token as usize] = logit;
                }
                masked
            }
            None => {
                let mut masked = adjusted.into_owned();
                grammar.mask(&mut masked);
                masked
            }
        };
        if masked.iter().all(|&l| l == f32::NEG_INFINITY) {
            return vec![TokenProb {
                token: end_token,
                prob: 1.0,
            }];
        }
        self.filtered_distribution(&masked)
    }

    /// Uniform in [0, 1) from this sampler's seeded stream.
    pub fn uniform(&mut self) -> f32 {
        self.rng.next_f64() as f32
    }

    /// The logits after the bias and the penalties; borrowed when neither applies.
    fn adjust<'l>(&self, logits: &'l [f32], recent: &[TokenId]) -> Cow<'l, [f32]> {
        let p = &self.params;
        let penalised = p.repeat_last_n > 0
            && !recent.is_empty()
            && (p.repeat_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0);
        if p.logit_bias.is_empty() && !penalised {
            return Cow::Borrowed(logits);
        }
        let mut out = logits.to_vec();
        for entry in &p.logit_bias {
            if let Some(logit) = usize::try_from(entry.token)
                .ok()
                .and_then(|i| out.get_mut(i))
            {
                *logit += entry.bias;
            }
        }
        if penalised {
            self.penalise(&mut out, recent);
        }
        Cow::Owned(out)
    }

    /// llama.cpp's rules, once per distinct token in the window: the repetition penalty divides
    /// positive logits and multiplies negative ones; the frequency penalty subtracts per
    /// occurrence, the presence penalty once.
    fn penalise(&self, logits: &mut [f32], recent: &[TokenId]) {
        let p = &self.params;
        let mut window: Vec<TokenId> =
            recent[recent.len().saturating_sub(p.repeat_last_n)..].to_vec();
        window.sort_unstable();
        for run in window.chunk_by(|a, b| a == b) {
            let Some(logit) = usize::try_from(run[0]).ok().and_then(|i| logits.get_mut(i)) else {
                continue;
            };
            if p.repeat_penalty != 1.0 {
                *logit = if *logit > 0.0 {
                    *logit / p.repeat_penalty
                } else {
                    *logit * p.repeat_penalty
                };
            }
            *logit -= run.len() as f32 * p.frequency_penalty + p.presence_penalty;
        }
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
        assert_eq!(s.adjust(&[2.0, -1.0], &[1]).into_owned(), vec![2.0, -2.0]);
    }

    #[test]
    fn presence_and_frequency_penalties_subtract_per_token_and_per_occurrence() {
        let mut p = params(0.0);
        p.presence_penalty = 0.5;
        p.frequency_penalty = 0.25;
        let s = Sampler::new(p, 1);
        // Token 0 twice: 3 - 0.5 - 2 * 0.25; token 2 once: 1 - 0.5 - 0.25; token 1 unseen.
        assert_eq!(
            s.adjust(&[3.0, 2.0, 1.0], &[0, 2, 0]).into_owned(),
            vec![2.0, 2.0, 0.25]
        );
        // Only the window counts.
        let mut p = params(0.0);
        p.frequency_penalty = 1.0;
        p.repeat_last_n = 1;
        let s = Sampler::new(p, 1);
        assert_eq!(
            s.adjust(&[3.0, 2.0], &[0, 0, 1]).into_owned(),
            vec![3.0, 1.0]
        );
    }

    #[test]
    fn logit_bias_moves_a_token_and_minus_100_bans_it() {
        let mut p = params(0.0);
        p.logit_bias = vec![
            crate::request::LogitBias {
                token: 0,
                bias: -100.0,
            },
            crate::request::LogitBias {
                token: 2,
                bias: 2.5,
            },
        ];
        let mut s = Sampler::new(p, 1);
        assert_eq!(s.sample(&[5.0, 1.0, 3.0], &[]), 2);
        let mut p = params(1.0);
        p.logit_bias = vec![crate::request::LogitBias {
            token: 0,
            bias: -100.0,
        }];
        let dist = Sampler::new(p, 1).distribution(&[5.0, 1.0], &[]);
        assert_eq!(dist[0].token, 1);
        assert!(dist[1].prob < 1e-30);
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
