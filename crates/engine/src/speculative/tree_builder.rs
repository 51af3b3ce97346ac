//! Trees from measured accuracy: the sparse tree that maximises the expected number of accepted
//! tokens for a node budget, and the choice of budget that maximises tokens per second on this
//! machine (falling back to plain decoding when no tree pays).
//!
//! As in the Medusa paper, a head's guesses are taken to be right independently of the other
//! heads': a node whose path picks rank `r_d` at each depth `d` is accepted with probability
//! `prod_d accuracy[d][r_d]`, and the expected tokens per step are one (the model's own) plus the
//! sum over the tree's nodes. Every child is at most as likely as its parent, so the `n` most
//! likely nodes always form a tree, and taking them in order of probability is optimal.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::costs::CostModel;
use super::tree::{TreeSpec, MAX_RANK};

/// Per head (depth), the probability that its rank-`r` guess is the right token, given that the
/// path before it was right. Rows need not be sorted.
#[derive(Debug, Clone, PartialEq)]
pub struct AccuracyTable {
    rows: Vec<Vec<f64>>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccuracyError {
    #[error("the accuracy table has no heads")]
    NoHeads,
    #[error("head {head} has no ranks")]
    NoRanks { head: usize },
    #[error("head {head}, rank {rank}: {value} is not a probability")]
    NotAProbability {
        head: usize,
        rank: usize,
        value: String,
    },
    #[error("head {head}: its ranks add up to {sum}, more than 1")]
    Overfull { head: usize, sum: String },
}

impl AccuracyTable {
    pub fn new(rows: Vec<Vec<f64>>) -> Result<Self, AccuracyError> {
        if rows.is_empty() {
            return Err(AccuracyError::NoHeads);
        }
        for (head, row) in rows.iter().enumerate() {
            if row.is_empty() {
                return Err(AccuracyError::NoRanks { head });
            }
            if let Some((rank, value)) = row
                .iter()
                .enumerate()
                .find(|(_, v)| !(0.0..=1.0).contains(*v))
            {
                return Err(AccuracyError::NotAProbability {
                    head,
                    rank,
                    value: value.to_string(),
                });
            }
            // Ranks are exclusive events: at most one of them is the right token.
            let sum: f64 = row.iter().sum();
            if sum > 1.0 + 1e-9 {
                return Err(AccuracyError::Overfull {
                    head,
                    sum: format!("{sum:.4}"),
                });
            }
        }
        Ok(Self {
            rows: rows
                .into_iter()
                .map(|r| r.into_iter().take(MAX_RANK).collect())
                .collect(),
        })
    }

    pub fn heads(&self) -> usize {
        self.rows.len()
    }

    pub fn rows(&self) -> &[Vec<f64>] {
        &self.rows
    }
}

/// The best tree for a node budget, with what it is expected to yield.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltTree {
    pub tree: TreeSpec,
    /// Expected tokens per step, the model's own included: `1 + sum of node probabilities`.
    pub expected_tokens: f64,
}

/// A candidate node: its path and the probability that the whole path is accepted.
#[derive(Debug, Clone, PartialEq)]
struct Candidate {
    probability: f64,
    path: Vec<usize>,
}

impl Eq for Candidate {}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        // Most likely first; ties go to the shorter, then lexicographically smaller path, so the
        // result does not depend on the heap's order.
        self.probability
            .total_cmp(&other.probability)
            .then_with(|| other.path.len().cmp(&self.path.len()))
            .then_with(|| other.path.cmp(&self.path))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The trees of every size up to `max_nodes`: entry `n - 1` is the best tree of `n` nodes (fewer
/// when the table allows no more). Each is the previous one plus its most likely candidate.
pub fn best_trees(accuracy: &AccuracyTable, max_nodes: usize) -> Vec<BuiltTree> {
    let rows = accuracy.rows();
    let mut frontier: BinaryHeap<Candidate> = rows[0]
        .iter()
        .enumerate()
        .map(|(rank, &p)| Candidate {
            probability: p,
            path: vec![rank],
        })
        .collect();
    let mut chosen: Vec<Vec<usize>> = Vec::new();
    let mut expected = 1.0;
    let mut trees = Vec::new();
    while chosen.len() < max_nodes {
        let Some(best) = frontier.pop() else { break };
        if best.probability <= 0.0 {
            break;
        }
        expected += best.probability;
        if let Some(row) = rows.get(best.path.len()) {
            frontier.extend(row.iter().enumerate().map(|(rank, &p)| {
                let mut path = best.path.clone();
                path.push(rank);
                Candidate {
                    probability: best.probability * p,
                    path,
                }
            }));
        }
        chosen.push(best.path);
        let tree = TreeSpec::new(chosen.clone()).expect("the most likely nodes form a tree");
        trees.push(BuiltTree {
            tree,
            expected_tokens: expected,
        });
    }
    trees
}

/// One tree size as the tuner sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, ts_rs::TS)]
pub struct TunedSize {
    pub nodes: usize,
    pub expected_tokens: f64,
    /// Deepest head the tree uses (heads run one per depth).
    pub depth: usize,
    /// Drafting (the heads up to `depth`) plus one decode of the root and the tree.
    pub step_ms: f64,
    pub tokens_per_second: f64,
    /// Over plain decoding (one token per decode of one token).
    pub predicted_speedup: f64,
    /// The speed-up at the top and the bottom of the decode costs' measured band.
    pub speedup_low: f64,
    pub speedup_high: f64,
}

/// What the tuner found: each size's prediction and the chosen one (none: decode plainly).
#[derive(Debug, Clone, PartialEq)]
pub struct TuneResult {
    pub plain_tokens_per_second: f64,
    pub sizes: Vec<TunedSize>,
    /// Index into `sizes` of the best size, when it beats plain decoding even at the top of
    /// the decode costs' band.
    pub chosen: Option<usize>,
    pub trees: Vec<BuiltTree>,
}

impl TuneResult {
    pub fn chosen_tree(&self) -> Option<&BuiltTree> {
        self.chosen.map(|i| &self.trees[i])
    }

    /// Index into `sizes` of the fastest tree predicted, whether or not it beats plain decoding.
    pub fn fastest(&self) -> Option<usize> {
        self.chosen.or_else(|| {
            (0..self.sizes.len()).max_by(|&a, &b| {
                self.sizes[a]
                    .predicted_speedup
                    .total_cmp(&self.sizes[b].predicted_speedup)
            })
        })
    }

    /// The outcome in words: the chosen tree and its prediction, or why plain decoding stays.
    pub fn decision(&self) -> String {
        if let Some(size) = self.chosen.map(|i| &self.sizes[i]) {
            return format!(
                "medusa with a {}-node tree sized for this machine ({:.2} tokens per step, \
                 {:.2}x predicted)",
                size.nodes, size.expected_tokens, size.predicted_speedup
            );
        }
        let best = self.fastest().map(|i| &self.sizes[i]);
        let reason = match best {
            Some(best) => format!(
                "its best tree, {} node{} at {:.2} tokens per step, would run at {:.2}x \
                 ({:.2}x to {:.2}x as decode costs vary here)",
                best.nodes,
                if best.nodes == 1 { "" } else { "s" },
                best.expected_tokens,
                best.predicted_speedup,
                best.speedup_low,
                best.speedup_high
            ),
            None => "the heads' accuracy allows no tree".to_owned(),
        };
        let verdict = match best.map(|b| Verdict::of(b.speedup_low, b.speedup_high)) {
            Some(Verdict::Uncertain) => "surely faster",
            _ => "faster",
        };
        format!("plain decoding: no tree is {verdict} on this machine ({reason})")
    }
}

/// What drafting a tree costs in head evaluations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeadCost {
    /// One head evaluation, in milliseconds.
    pub ms: f64,
    /// For heads that read the drafted path (one query per node that has children, the nodes
    /// of a depth sent together): what each query after the first adds to a depth's
    /// evaluation. `None` for other heads, which run once per depth for all its nodes.
    pub per_extra_node_ms: Option<f64>,
}

impl HeadCost {
    /// Heads that see only the hidden state (and the root): one evaluation per depth.
    pub fn per_depth(ms: f64) -> Self {
        Self {
            ms,
            per_extra_node_ms: None,
        }
    }

    /// The heads' time to draft `tree`.
    pub fn draft_ms(&self, tree: &TreeSpec) -> f64 {
        match self.per_extra_node_ms {
            None => self.ms * tree.depth() as f64,
            Some(extra) => tree
                .expanded_per_depth()
                .iter()
                .filter(|&&nodes| nodes > 0)
                .map(|&nodes| self.ms + extra * (nodes - 1) as f64)
                .sum(),
        }
    }
}

/// Picks the tree size with the most expected tokens per second, given decode costs on this
/// machine and what the heads take to draft it. Keeps plain decoding when no tree is faster.
pub fn tune(
    accuracy: &AccuracyTable,
    costs: &CostModel,
    head_cost: HeadCost,
    max_nodes: usize,
) -> TuneResult {
    let plain_ms = costs.cost(1);
    let plain_tokens_per_second = 1000.0 / plain_ms;
    let trees = best_trees(accuracy, max_nodes);
    let sizes: Vec<TunedSize> = trees
        .iter()
        .map(|built| {
            let nodes = built.tree.len();
            let depth = built.tree.depth();
            let draft_ms = head_cost.draft_ms(&built.tree);
            let step_ms = draft_ms + costs.cost(nodes + 1);
            let tokens_per_second = built.expected_tokens * 1000.0 / step_ms;
            let (speedup_low, speedup_high) =
                speedup_band(built.expected_tokens, nodes, draft_ms, costs);
            TunedSize {
                nodes,
                depth,
                expected_tokens: built.expected_tokens,
                step_ms,
                tokens_per_second,
                predicted_speedup: tokens_per_second / plain_tokens_per_second,
                speedup_low,
                speedup_high,
            }
        })
        .collect();
    let chosen = sizes
        .iter()
        .enumerate()
        .filter(|(_, s)| s.speedup_low > 1.0)
        .max_by(|a, b| a.1.tokens_per_second.total_cmp(&b.1.tokens_per_second))
        .map(|(i, _)| i);
    TuneResult {
        plain_tokens_per_second,
        sizes,
        chosen,
        trees,
    }
}

/// What a given tree is predicted to do on this machine when drafted in full at every step.
#[derive(Debug, Clone, PartialEq, serde::Serialize, ts_rs::TS)]
pub struct TreeForecast {
    /// The tree's name (`mc_sim_7b_63`, `chain-N`).
    pub name: String,
    pub nodes: usize,
    /// Tokens per step, the model's own included, from the heads' held-out accuracy.
    pub expected_tokens: f64,
    /// Drafting plus one decode of the root and the tree.
    pub step_ms: f64,
    /// Over plain decoding.
    pub predicted_speedup: f64,
    /// What each drafted token adds to a decode here.
    pub extra_token_ms: f64,
    /// The speed-up at the top and the bottom of the decode costs' measured band.
    pub speedup_low: f64,
    pub speedup_high: f64,
    /// Faster or slower than plain decoding, or uncertain where the band allows both.
    pub verdict: Verdict,
}

/// Whether a tree is faster than plain decoding, across the decode costs' measured band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Faster,
    Slower,
    /// Faster at one end of the band, slower at the other: not drafted on.
    Uncertain,
}

impl Verdict {
    pub fn of(speedup_low: f64, speedup_high: f64) -> Self {
        if speedup_low > 1.0 {
            Self::Faster
        } else if speedup_high < 1.0 {
            Self::Slower
        } else {
            Self::Uncertain
        }
    }
}

/// A tree's speed-up over plain decoding with its decode priced at the top and at the bottom
/// of the measured band (plain decoding at its central figure).
fn speedup_band(expected: f64, nodes: usize, draft_ms: f64, costs: &CostModel) -> (f64, f64) {
    let plain_ms = costs.cost(1);
    (
        expected * plain_ms / (draft_ms + costs.cautious_cost(nodes + 1)),
        expected * plain_ms / (draft_ms + costs.hopeful_cost(nodes + 1)),
    )
}

/// Tokens per step expected from `tree`: 1 for the model's own, plus each node's chance that its
/// whole path is accepted (ranks the table does not cover count as never right).
pub fn expected_tokens(tree: &TreeSpec, accuracy: &AccuracyTable) -> f64 {
    let rows = accuracy.rows();
    1.0 + tree
        .paths()
        .iter()
        .map(|path| {
            path.iter()
                .enumerate()
                .map(|(depth, &rank)| {
                    rows.get(depth)
                        .and_then(|row| row.get(rank))
                        .copied()
                        .unwrap_or(0.0)
                })
                .product::<f64>()
        })
        .sum::<f64>()
}

/// The forecast of `tree` drafted in full, from the heads' accuracy, their drafting cost and the
/// decode costs measured here.
pub fn forecast(
    name: &str,
    tree: &TreeSpec,
    accuracy: &AccuracyTable,
    costs: &CostModel,
    head_cost: HeadCost,
) -> TreeForecast {
    let nodes = tree.len();
    let plain_ms = costs.cost(1);
    let decode_ms = costs.cost(nodes + 1);
    let draft_ms = head_cost.draft_ms(tree);
    let step_ms = draft_ms + decode_ms;
    let expected = expected_tokens(tree, accuracy);
    let (speedup_low, speedup_high) = speedup_band(expected, nodes, draft_ms, costs);
    TreeForecast {
        name: name.to_owned(),
        nodes,
        expected_tokens: expected,
        step_ms,
        predicted_speedup: expected * plain_ms / step_ms,
        extra_token_ms: (decode_ms - plain_ms) / nodes.max(1) as f64,
        speedup_low,
        speedup_high,
        verdict: Verdict::of(speedup_low, speedup_high),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_tree_is_forecast_from_the_table_and_the_costs() {
        // Head 1: rank 0 right 60%, rank 1 20%; head 2: 50%, 30%.
        let accuracy = table(&[&[0.6, 0.2], &[0.5, 0.3]]);
        let tree = TreeSpec::new(vec![vec![0], vec![1], vec![0, 0], vec![0, 2]]).unwrap();
        // 1 + 0.6 + 0.2 + 0.6 * 0.5 + 0.6 * 0 (rank 2 is not in the table).
        assert!((expected_tokens(&tree, &accuracy) - 2.1).abs() < 1e-12);
        let costs = CostModel::new(vec![(1, 10.0), (5, 18.0)]);
        let f = forecast("four", &tree, &accuracy, &costs, HeadCost::per_depth(0.5));
        assert_eq!((f.name.as_str(), f.nodes), ("four", 4));
        // Two heads at 0.5 ms, then a decode of 5 tokens at 18 ms.
        assert!((f.step_ms - 19.0).abs() < 1e-12);
        assert!((f.predicted_speedup - 2.1 * 10.0 / 19.0).abs() < 1e-12);
        assert!((f.extra_token_ms - 2.0).abs() < 1e-12);
        // Heads that read the path run below the root and below [0], the two nodes with
        // children: one query per depth here; a wider tree asks more at once.
        let path_heads = HeadCost {
            ms: 0.5,
            per_extra_node_ms: Some(0.25),
        };
        assert_eq!(
            forecast("four", &tree, &accuracy, &costs, path_heads).step_ms,
            19.0
        );
        let wide = TreeSpec::new(vec![vec![0], vec![1], vec![0, 0], vec![1, 0]]).unwrap();
        assert_eq!(path_heads.draft_ms(&wide), 1.25);
        assert_eq!(HeadCost::per_depth(0.5).draft_ms(&wide), 1.0);
    }

    fn table(rows: &[&[f64]]) -> AccuracyTable {
        AccuracyTable::new(rows.iter().map(|r| r.to_vec()).collect()).unwrap()
    }

    fn paths(tree: &BuiltTree) -> Vec<Vec<usize>> {
        tree.tree.paths().to_vec()
    }

    #[test]
    fn builds_the_known_optimum_of_a_hand_made_table() {
        // Head 1: rank 0 right 60%, rank 1 20%; head 2: 50%, 30%; head 3: 40%.
        let accuracy = table(&[&[0.6, 0.2], &[0.5, 0.3], &[0.4]]);
        let trees = best_trees(&accuracy, 5);
        // Node probabilities in order: [0]=.6, [0,0]=.3, [1]=.2, [0,1]=.18, [0,0,0]=.12.
        assert_eq!(paths(&trees[0]), vec![vec![0]]);
        assert_eq!(paths(&trees[1]), vec![vec![0], vec![0, 0]]);
        assert_eq!(paths(&trees[2]), vec![vec![0], vec![1], vec![0, 0]]);
        assert_eq!(
            paths(&trees[4]),
            vec![vec![0], vec![1], vec![0, 0], vec![0, 1], vec![0, 0, 0]]
        );
        let expected: Vec<f64> = trees.iter().map(|t| t.expected_tokens).collect();
        let want = [1.6, 1.9, 2.1, 2.28, 2.4];
        for (got, want) in expected.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{expected:?}");
        }
    }

    #[test]
    fn every_smaller_budget_is_beaten_by_no_other_tree() {
        // Exhaustive check on a small table: no valid tree of n nodes has a larger expectation.
        let accuracy = table(&[&[0.5, 0.3, 0.1], &[0.7, 0.1], &[0.2, 0.2]]);
        let trees = best_trees(&accuracy, 6);
        let all_nodes: Vec<(Vec<usize>, f64)> = {
            let mut nodes = Vec::new();
            for a in 0..3 {
                let pa = accuracy.rows()[0][a];
                nodes.push((vec![a], pa));
                for b in 0..2 {
                    let pb = pa * accuracy.rows()[1][b];
                    nodes.push((vec![a, b], pb));
                    for c in 0..2 {
                        nodes.push((vec![a, b, c], pb * accuracy.rows()[2][c]));
                    }
                }
            }
            nodes
        };
        for (n, built) in trees.iter().enumerate() {
            let n = n + 1;
            let mut best = 0.0f64;
            for mask in 0u32..(1 << all_nodes.len()) {
                if mask.count_ones() as usize != n {
                    continue;
                }
                let set: Vec<&(Vec<usize>, f64)> = (0..all_nodes.len())
                    .filter(|i| mask & (1 << i) != 0)
                    .map(|i| &all_nodes[i])
                    .collect();
                let closed = set.iter().all(|(p, _)| {
                    p.len() == 1 || set.iter().any(|(q, _)| q[..] == p[..p.len() - 1])
                });
                if closed {
                    best = best.max(1.0 + set.iter().map(|(_, p)| p).sum::<f64>());
                }
            }
            assert!((built.expected_tokens - best).abs() < 1e-12, "n = {n}");
        }
    }

    #[test]
    fn the_tuner_picks_the_fastest_size_and_falls_back_when_none_pays() {
        let accuracy = table(&[&[0.8, 0.1], &[0.7, 0.1], &[0.6], &[0.5]]);
        // Cheap extra tokens (a GPU-like curve): a large tree wins.
        let flat = CostModel::new(vec![(1, 10.0), (4, 10.5), (16, 11.0), (64, 13.0)]);
        let result = tune(&accuracy, &flat, HeadCost::per_depth(0.5), 12);
        let chosen = result.chosen.expect("a tree pays");
        assert!(result.sizes[chosen].predicted_speedup > 2.0);
        assert!(result.sizes[chosen].nodes >= 4);
        // Every extra token costing as much as the first (a busy CPU): nothing pays.
        let linear = CostModel::new(vec![(1, 10.0), (2, 20.0), (4, 40.0), (16, 160.0)]);
        let result = tune(&accuracy, &linear, HeadCost::per_depth(0.5), 12);
        assert_eq!(result.chosen, None);
        assert!(result.chosen_tree().is_none());
        assert!(result.sizes.iter().all(|s| s.predicted_speedup <= 1.0));
    }

    #[test]
    fn on_a_gpu_path_heads_batched_per_depth_get_a_large_tree() {
        // Held-out accuracy by rank of heads like the shipped ones (top-1 43/36/33/31%).
        let accuracy = table(&[
            &[0.43, 0.10, 0.05, 0.03, 0.02, 0.015, 0.01, 0.01],
            &[0.36, 0.09, 0.05, 0.03, 0.02, 0.015, 0.01, 0.01],
            &[0.33, 0.08, 0.04, 0.03, 0.02, 0.015, 0.01, 0.01],
            &[0.31, 0.08, 0.04, 0.03, 0.02, 0.015, 0.01, 0.01],
        ]);
        // GPU-shaped decode costs: 64 tokens cost little more than one.
        let gpu = CostModel::new(vec![(1, 1.40), (16, 1.45), (64, 1.60), (128, 2.70)]);
        // The nodes of a depth evaluated together on the device: further nodes nearly free.
        let batched = HeadCost {
            ms: 0.05,
            per_extra_node_ms: Some(0.002),
        };
        let result = tune(&accuracy, &gpu, batched, 64);
        let large = result.sizes[result.chosen.expect("a tree pays")].nodes;
        assert!(large >= 32, "{large} nodes");
        // The same heads evaluated node by node at a whole evaluation each: a smaller tree.
        let one_by_one = HeadCost {
            ms: 0.05,
            per_extra_node_ms: Some(0.05),
        };
        let result = tune(&accuracy, &gpu, one_by_one, 64);
        let smaller = result.sizes[result.chosen.expect("a tree pays")].nodes;
        assert!(smaller < large, "{smaller} against {large} nodes");
    }

    #[test]
    fn bad_tables_are_refused() {
        assert_eq!(AccuracyTable::new(vec![]), Err(AccuracyError::NoHeads));
        assert_eq!(
            AccuracyTable::new(vec![vec![]]),
            Err(AccuracyError::NoRanks { head: 0 })
        );
        assert!(matches!(
            AccuracyTable::new(vec![vec![1.5]]),
            Err(AccuracyError::NotAProbability { .. })
        ));
        assert!(matches!(
            AccuracyTable::new(vec![vec![0.7, 0.6]]),
            Err(AccuracyError::Overfull { .. })
        ));
    }
}
