//! How often each head's guesses are right on text the model wrote itself: the data the tree
//! builder and the tuner need.

use serde::Serialize;

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
}

impl HeadAccuracy {
    pub fn new(heads: usize, top_k: usize) -> Self {
        Self {
            positions: vec![0; heads],
            hits: vec![vec![0; top_k]; heads],
            heads_ms: 0.0,
            heads_runs: 0,
        }
    }

    /// Records head `head`'s ranked guesses against the token that came.
    pub fn record(&mut self, head: usize, guesses: &[i32], actual: i32) {
        self.positions[head] += 1;
        if let Some(rank) = guesses.iter().position(|&g| g == actual) {
            if let Some(hit) = self.hits[head].get_mut(rank) {
                *hit += 1;
            }
        }
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
}
