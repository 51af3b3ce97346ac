//! Deciding which drafted tokens the base model accepts, from the logits of one tree decode.
//!
//! - Greedy (temperature 0): a child is accepted when it is the base model's argmax. Lossless.
//! - Lossless speculative sampling (temperature > 0): each child, in order, is accepted with the
//!   probability the base distribution gives it; a rejected child's mass is removed and the rest
//!   renormalised before the next sibling is tried; when all are rejected the token is drawn from
//!   what is left. The emitted tokens follow the base model's distribution exactly.
//! - Typical acceptance (opt-in): a child is accepted when its probability exceeds
//!   min(threshold, alpha * exp(-entropy)). Faster with sampling, but not distribution-preserving.

use crate::request::AcceptanceRule;
use crate::sampling::sampler::{Sampler, TokenProb};
use crate::speculative::tree::{DraftTree, TreeLayout};
use crate::token::TokenId;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Accepted nodes, root to deepest.
    pub accepted: Vec<usize>,
    /// The base model's own token after the last accepted node: the next root.
    pub next_token: TokenId,
}

/// Walks the tree from the root. `logits_at(None)` are the root's logits, `logits_at(Some(i))`
/// node i's. `history` ends with the root token; it is extended while walking (the penalties
/// must see accepted tokens) and restored before returning. The sampler accepts every token of
/// the verdict (its grammar moves past them), so they must all be emitted.
pub fn verify<'l>(
    tree: &DraftTree,
    layout: &TreeLayout,
    logits_at: impl Fn(Option<usize>) -> &'l [f32],
    sampler: &mut Sampler,
    history: &mut Vec<TokenId>,
    rule: AcceptanceRule,
) -> Verdict {
    let restore_len = history.len();
    let mut accepted = Vec::new();
    let mut node = None;
    let next_token = loop {
        let children = layout.children_of(node);
        let logits = logits_at(node);
        let (chosen, next) = if sampler.is_greedy() {
            let target = sampler.sample(logits, history);
            let hit = children.iter().copied().find(|&c| tree.tokens[c] == target);
            (hit, target)
        } else {
            let dist = sampler.distribution(logits, history);
            match rule {
                AcceptanceRule::Lossless => accept_lossless(tree, children, dist, sampler),
                AcceptanceRule::Typical { threshold, alpha } => {
                    accept_typical(tree, children, dist, sampler, threshold, alpha)
                }
            }
        };
        match chosen {
            Some(child) => {
                accepted.push(child);
                history.push(tree.tokens[child]);
                sampler.accept(tree.tokens[child]);
                node = Some(child);
            }
            None => {
                sampler.accept(next);
                break next;
            }
        }
    };
    history.truncate(restore_len);
    Verdict {
        accepted,
        next_token,
    }
}

/// Returns the accepted child, or none and the token drawn from the residual distribution.
fn accept_lossless(
    tree: &DraftTree,
    children: &[usize],
    mut dist: Vec<TokenProb>,
    sampler: &mut Sampler,
) -> (Option<usize>, TokenId) {
    let fallback = dist.clone();
    for &child in children {
        let token = tree.tokens[child];
        let Some(at) = dist.iter().position(|c| c.token == token) else {
            continue; // probability 0: rejected for certain
        };
        if sampler.uniform() < dist[at].prob {
            return (Some(child), token);
        }
        dist.remove(at);
        let rest: f32 = dist.iter().map(|c| c.prob).sum();
        if rest <= 0.0 {
            break;
        }
        dist.iter_mut().for_each(|c| c.prob /= rest);
    }
    let residual = if dist.is_empty() { &fallback } else { &dist };
    (None, sampler.draw(residual))
}

fn accept_typical(
    tree: &DraftTree,
    children: &[usize],
    dist: Vec<TokenProb>,
    sampler: &mut Sampler,
    threshold: f32,
    alpha: f32,
) -> (Option<usize>, TokenId) {
    let entropy: f32 = dist
        .iter()
        .filter(|c| c.prob > 0.0)
        .map(|c| -c.prob * c.prob.ln())
        .sum();
    let bar = threshold.min(alpha * (-entropy).exp());
    let prob_of = |token| {
        dist.iter()
            .find(|c| c.token == token)
            .map_or(0.0, |c| c.prob)
    };
    match children
        .iter()
        .copied()
        .find(|&c| prob_of(tree.tokens[c]) > bar)
    {
        Some(child) => (Some(child), tree.tokens[child]),
        None => (None, sampler.draw(&dist)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::SamplingParams;
    use crate::speculative::tree::TokenSource;

    fn sampling(temperature: f32) -> SamplingParams {
        SamplingParams::unfiltered(temperature)
    }

    /// root -> 0:[tok 1] -> 2:[tok 3]
    ///      -> 1:[tok 2]
    fn tree() -> DraftTree {
        let mut t = DraftTree::default();
        t.push(1, None, TokenSource::Head(0), 0);
        t.push(2, None, TokenSource::Head(0), 1);
        t.push(3, Some(0), TokenSource::Head(1), 0);
        t
    }

    fn one_hot(vocab: usize, hot: usize) -> Vec<f32> {
        (0..vocab)
            .map(|i| if i == hot { 5.0 } else { 0.0 })
            .collect()
    }

    #[test]
    fn greedy_accepts_the_matching_path_and_adds_the_base_token() {
        let t = tree();
        let layout = t.layout();
        // Root prefers 1 (node 0), node 0 prefers 3 (node 2), node 2 prefers 4.
        let logits = [one_hot(5, 1), one_hot(5, 3), one_hot(5, 0), one_hot(5, 4)];
        let at = |n: Option<usize>| -> &[f32] { &logits[n.map_or(0, |i| i + 1)] };
        let mut history = vec![9];
        let v = verify(
            &t,
            &layout,
            at,
            &mut Sampler::new(sampling(0.0), 0),
            &mut history,
            AcceptanceRule::Lossless,
        );
        assert_eq!(
            v,
            Verdict {
                accepted: vec![0, 2],
                next_token: 4
            }
        );
        assert_eq!(history, vec![9]);
    }

    #[test]
    fn greedy_rejection_at_the_root_yields_the_base_token_only() {
        let t = tree();
        let layout = t.layout();
        let logits = [one_hot(5, 4), one_hot(5, 0), one_hot(5, 0), one_hot(5, 0)];
        let at = |n: Option<usize>| -> &[f32] { &logits[n.map_or(0, |i| i + 1)] };
        let v = verify(
            &t,
            &layout,
            at,
            &mut Sampler::new(sampling(0.0), 0),
            &mut vec![9],
            AcceptanceRule::Lossless,
        );
        assert_eq!(
            v,
            Verdict {
                accepted: vec![],
                next_token: 4
            }
        );
    }

    #[test]
    fn greedy_sees_accepted_tokens_in_the_repetition_penalty() {
        let t = tree();
        let layout = t.layout();
        // At node 0 (token 1 accepted), logits favour token 1 slightly over 3; a penalty
        // on the accepted token 1 flips the choice to 3.
        let node0 = vec![0.0, 2.0, 0.0, 1.5, 0.0];
        let logits = [one_hot(5, 1), node0, one_hot(5, 0), one_hot(5, 0)];
        let at = |n: Option<usize>| -> &[f32] { &logits[n.map_or(0, |i| i + 1)] };
        let mut params = sampling(0.0);
        params.repeat_penalty = 2.0;
        let v = verify(
            &t,
            &layout,
            at,
            &mut Sampler::new(params, 0),
            &mut vec![9],
            AcceptanceRule::Lossless,
        );
        assert_eq!(v.accepted, vec![0, 2]);
    }

    #[test]
    fn typical_accepts_likely_children_and_refuses_unlikely_ones() {
        let t = tree();
        let layout = t.layout();
        // Root: token 2 has p ~ 0.6 (accepted: node 1); token 1 tiny.
        let root = vec![0.0f32, -5.0, 2.0, 0.0, 0.0];
        let logits = [root, one_hot(5, 0), one_hot(5, 0), one_hot(5, 0)];
        let at = |n: Option<usize>| -> &[f32] { &logits[n.map_or(0, |i| i + 1)] };
        let v = verify(
            &t,
            &layout,
            at,
            &mut Sampler::new(sampling(1.0), 3),
            &mut vec![9],
            AcceptanceRule::TYPICAL_DEFAULT,
        );
        assert_eq!(v.accepted, vec![1]);
        // Flat root distribution over 5 tokens: p = 0.2 > min(0.09, ...), so node 0 is accepted.
        let flat = vec![0.0f32; 5];
        let logits = [
            flat,
            vec![0.0, 0.0, 0.0, -9.0, 0.0],
            one_hot(5, 0),
            one_hot(5, 0),
        ];
        let at = |n: Option<usize>| -> &[f32] { &logits[n.map_or(0, |i| i + 1)] };
        let v = verify(
            &t,
            &layout,
            at,
            &mut Sampler::new(sampling(1.0), 3),
            &mut vec![9],
            AcceptanceRule::TYPICAL_DEFAULT,
        );
        // Token 3 at node 0 has p ~ 0.00003: refused.
        assert_eq!(v.accepted, vec![0]);
        assert_ne!(v.next_token, 3);
    }

    /// Pearson chi-square statistic of observed counts against expected probabilities.
    fn chi_square(counts: &[usize], probs: &[f64]) -> f64 {
        let n: usize = counts.iter().sum();
        counts
            .iter()
            .zip(probs)
            .map(|(&c, &p)| {
                let e = p * n as f64;
                (c as f64 - e).powi(2) / e
            })
            .sum()
    }

    fn softmax(logits: &[f32]) -> Vec<f64> {
        let exps: Vec<f64> = logits.iter().map(|&l| (l as f64).exp()).collect();
        let sum: f64 = exps.iter().sum();
        exps.iter().map(|e| e / sum).collect()
    }

    #[test]
    fn lossless_sampling_keeps_the_base_distribution() {
        let t = tree();
        let layout = t.layout();
        let root = vec![0.3f32, 1.2, -0.4, 0.8, 0.0];
        let node0 = vec![1.0f32, -1.0, 0.5, 0.2, 0.7];
        let logits = [root.clone(), node0.clone(), vec![0.0; 5], vec![0.0; 5]];
        let at = |n: Option<usize>| -> &[f32] { &logits[n.map_or(0, |i| i + 1)] };
        let draws = 40_000;
        let mut first = vec![0usize; 5];
        let mut second_after_1 = vec![0usize; 5];
        for seed in 0..draws {
            let mut sampler = Sampler::new(sampling(1.0), seed);
            let v = verify(
                &t,
                &layout,
                at,
                &mut sampler,
                &mut vec![9],
                AcceptanceRule::Lossless,
            );
            let emitted: Vec<TokenId> = v
                .accepted
                .iter()
                .map(|&n| t.tokens[n])
                .chain([v.next_token])
                .collect();
            first[emitted[0] as usize] += 1;
            if emitted[0] == 1 {
                second_after_1[emitted[1] as usize] += 1;
            }
        }
        // 4 degrees of freedom: 18.47 is the 0.1% critical value.
        let first_stat = chi_square(&first, &softmax(&root));
        assert!(
            first_stat < 18.47,
            "first token chi-square {first_stat}, counts {first:?}"
        );
        let second_stat = chi_square(&second_after_1, &softmax(&node0));
        assert!(
            second_stat < 18.47,
            "second token chi-square {second_stat}, counts {second_after_1:?}"
        );
        // Both drafted children really were accepted some of the time.
        assert!(first[1] > 0 && first[2] > 0);
    }
}
