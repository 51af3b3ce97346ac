//! How often each head's guesses are right on text the model wrote itself: the data the tree
//! builder and the tuner need.

use std::collections::HashSet;

use serde::Serialize;

use crate::speculative::tree::TreeSpec;
use crate::speculative::tree_builder::{AccuracyError, AccuracyTable};

/// Counts over evaluated positions: at each, head `d` guessed `top_k` tokens for the token
/// `d + 2` ahead, and `hits[d][r]` counts the positions where its rank-`r` guess was that token.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HeadAccuracy {
    /// Positions evaluated per head (the last ones of a text have no token far enough ahead).
    pub positions: Vec<u64>,
    pub hits: Vec<Vec<u64>>,
    /// Time running every head at one position, summed over positions.
    pub heads_ms: f64,
    pub heads_runs: u64,
    /// Per position where every head had a token to guess: the rank at which each head guessed
    /// it (`None`: not among its guesses). What a tree would really have accepted there.
    #[serde(skip)]
    pub ranks_by_position: Vec<Vec<Option<usize>>>,
}

impl HeadAccuracy {
    pub fn new(heads: usize, top_k: usize) -> Self {
        Self {
            positions: vec![0; heads],
            hits: vec![vec![0; top_k]; heads],
            heads_ms: 0.0,
            heads_runs: 0,
            ranks_by_position: Vec::new(),
        }
    }

    /// Records head `head`'s ranked guesses against the token that came; returns the rank of
    /// the right guess, if any.
    pub fn record(&mut self, head: usize, guesses: &[i32], actual: i32) -> Option<usize> {
        self.positions[head] += 1;
        let rank = guesses.iter().position(|&g| g == actual)?;
        if let Some(hit) = self.hits[head].get_mut(rank) {
            *hit += 1;
        }
        Some(rank)
    }

    /// Keeps the ranks every head guessed at one position (see `accepted_per_step`).
    pub fn record_position(&mut self, ranks: Vec<Option<usize>>) {
        if ranks.len() == self.positions.len() {
            self.ranks_by_position.push(ranks);
        }
    }

    /// Mean tokens per step `tree` would have yielded along the recorded positions with greedy
    /// acceptance, stepping as generation does: each step yields the model's own token plus the
    /// deepest tree path whose every rank was the right guess, and the next step starts after
    /// them. Measured, with no assumption that heads are right independently. Averaging over
    /// every position instead would overstate it: where the heads are right several times in a
    /// row (a repeated phrase), generation spends few steps, but every position would count.
    pub fn accepted_per_step(&self, tree: &TreeSpec) -> Option<f64> {
        if self.ranks_by_position.is_empty() {
            return None;
        }
        let paths: HashSet<&[usize]> = tree.paths().iter().map(Vec::as_slice).collect();
        let yielded_at = |ranks: &[Option<usize>]| {
            let mut path = Vec::with_capacity(ranks.len());
            for &rank in ranks {
                let Some(rank) = rank else { break };
                path.push(rank);
                if !paths.contains(path.as_slice()) {
                    path.pop();
                    break;
                }
            }
            1 + path.len()
        };
        let (mut tokens, mut steps, mut position) = (0usize, 0usize, 0usize);
        while let Some(ranks) = self.ranks_by_position.get(position) {
            let yielded = yielded_at(ranks);
            tokens += yielded;
            steps += 1;
            position += yielded;
        }
        Some(tokens as f64 / steps as f64)
    }

    /// The tree of at most `max_nodes` rank paths that were right most often along the recorded
    /// positions: a path counts the positions where each head on it guessed right at its rank.
    /// Unlike the tree builder's table this assumes nothing about heads being right
    /// independently, which heads that read the drafted path are not. A path never counts more
    /// than its parent, so taking the most counted (shallower first on ties) keeps every
    /// parent. `None` when no head was ever right.
    pub fn tree_of_most_accepted_paths(&self, max_nodes: usize) -> Option<TreeSpec> {
        let mut counts: std::collections::HashMap<Vec<usize>, u64> = Default::default();
        for ranks in &self.ranks_by_position {
            let mut path = Vec::with_capacity(ranks.len());
            for &rank in ranks.iter().map_while(Option::as_ref) {
                path.push(rank);
                *counts.entry(path.clone()).or_default() += 1;
            }
        }
        let mut counted: Vec<(Vec<usize>, u64)> = counts.into_iter().collect();
        counted.sort_unstable_by(|(a, ca), (b, cb)| {
            cb.cmp(ca).then(a.len().cmp(&b.len())).then(a.cmp(b))
        });
        counted.truncate(max_nodes);
        TreeSpec::new(counted.into_iter().map(|(path, _)| path).collect()).ok()
    }

    /// Adds the counts of another measurement of the same heads.
    pub fn absorb(&mut self, other: &Self) {
        for (a, b) in self.positions.iter_mut().zip(&other.positions) {
            *a += b;
        }
        for (row, other_row) in self.hits.iter_mut().zip(&other.hits) {
            for (a, b) in row.iter_mut().zip(other_row) {
                *a += b;
            }
        }
        self.heads_ms += other.heads_ms;
        self.heads_runs += other.heads_runs;
        self.ranks_by_position
            .extend(other.ranks_by_position.iter().cloned());
    }

    /// Share of positions where each head's rank-`r` guess was right.
    pub fn rates(&self) -> Vec<Vec<f64>> {
        self.hits
            .iter()
            .zip(&self.positions)
            .map(|(row, &n)| {
                row.iter()
                    .map(|&h| if n == 0 { 0.0 } else { h as f64 / n as f64 })
                    .collect()
            })
            .collect()
    }

    /// Top-1 accuracy per head.
    pub fn top1(&self) -> Vec<f64> {
        self.rates()
            .iter()
            .map(|r| r.first().copied().unwrap_or(0.0))
            .collect()
    }

    /// The rates as the tree builder's table. Each head's rate is used as if it held given that
    /// the heads before it were right, as the Medusa authors do.
    pub fn table(&self) -> Result<AccuracyTable, AccuracyError> {
        AccuracyTable::new(self.rates())
    }

    /// Mean time one head takes to guess at one position (a tree of depth `d` runs `d` heads).
    pub fn mean_head_ms(&self) -> f64 {
        let runs = self.heads_runs * self.positions.len() as u64;
        if runs == 0 {
            0.0
        } else {
            self.heads_ms / runs as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_accepted_paths_make_the_tree() {
        let mut a = HeadAccuracy::new(3, 4);
        // Head 1 right at rank 0 four times in five, head 2 at rank 1 after it three times,
        // head 3 at rank 0 after that twice; once head 1 at rank 2.
        for ranks in [
            [Some(0), Some(1), Some(0)],
            [Some(0), Some(1), Some(0)],
            [Some(0), Some(1), None],
            [Some(0), None, Some(0)],
            [Some(2), Some(0), Some(0)],
        ] {
            a.record_position(ranks.to_vec());
        }
        let tree = a.tree_of_most_accepted_paths(3).unwrap();
        assert_eq!(tree.paths(), &[vec![0], vec![0, 1], vec![0, 1, 0]]);
        // Two more nodes: head 1's rank-2 guess and head 2's below it, each right once.
        let tree = a.tree_of_most_accepted_paths(5).unwrap();
        assert_eq!(
            tree.paths(),
            &[vec![0], vec![2], vec![0, 1], vec![2, 0], vec![0, 1, 0]]
        );
        assert!(HeadAccuracy::new(3, 4)
            .tree_of_most_accepted_paths(4)
            .is_none());
    }

    #[test]
    fn counts_ranks_and_merges() {
        let mut a = HeadAccuracy::new(2, 3);
        a.record(0, &[5, 6, 7], 5);
        a.record(0, &[5, 6, 7], 7);
        a.record(0, &[5, 6, 7], 9);
        a.record(1, &[1, 2, 3], 2);
        let mut b = HeadAccuracy::new(2, 3);
        b.record(0, &[5, 6, 7], 5);
        a.absorb(&b);
        assert_eq!(a.positions, vec![4, 1]);
        assert_eq!(a.hits, vec![vec![2, 0, 1], vec![0, 1, 0]]);
        assert_eq!(a.top1(), vec![0.5, 0.0]);
        assert_eq!(a.rates()[1], vec![0.0, 1.0, 0.0]);
        assert_eq!(a.table().unwrap().heads(), 2);
    }

    #[test]
    fn accepted_length_follows_the_tree_paths_that_were_right_step_by_step() {
        let mut a = HeadAccuracy::new(3, 4);
        assert_eq!(a.accepted_per_step(&TreeSpec::chain(3)), None);
        a.record_position(vec![None, Some(0), Some(0)]); // 0: nothing, head 1 missed
        a.record_position(vec![Some(0), Some(0), Some(0)]); // 1: chain-3 takes all three...
        for _ in 2..5 {
            // ...so generation never starts a step at 2, 3 or 4.
            a.record_position(vec![None, None, None]);
        }
        a.record_position(vec![Some(0), Some(1), Some(0)]); // 5: only the first: no [0, 1] in a chain
        a.record_position(vec![Some(0), Some(0)]); // a position near the end: not kept
        assert_eq!(a.ranks_by_position.len(), 6);
        // Steps at 0, 1 and 5: 1 + 4 + 2 tokens.
        assert_eq!(a.accepted_per_step(&TreeSpec::chain(3)), Some(7.0 / 3.0));
        // A branch at depth 2 catches position 5's rank-1 guess; its child is not in the tree.
        let branchy = TreeSpec::new(vec![vec![0], vec![0, 0], vec![0, 1], vec![0, 0, 0]]).unwrap();
        assert_eq!(a.accepted_per_step(&branchy), Some((1.0 + 4.0 + 3.0) / 3.0));
        // Positions measured later follow on: chain-3 steps at 7 after the 2 tokens at 5.
        let mut b = HeadAccuracy::new(3, 4);
        b.record_position(vec![Some(0), None, None]);
        b.record_position(vec![Some(1), None, None]);
        a.absorb(&b);
        assert_eq!(
            a.accepted_per_step(&TreeSpec::chain(3)),
            Some((1.0 + 4.0 + 2.0 + 1.0) / 4.0)
        );
    }
}
