//! Growing a request's tree by the drafter's own confidence (EAGLE-2's dynamic tree): each node
//! carries the probability of its whole path; at every depth the drafter expands the nodes that
//! are still among the `max_nodes` likeliest, and the tree is those likeliest nodes. A child's
//! path is never likelier than its parent's, so a node outside the likeliest cannot have a
//! child inside them: the pruning loses nothing. Every request's nodes of one depth are
//! evaluated together, one product per matrix.

use std::cmp::Ordering;

use super::layer::Entry;
use super::load::FeatureDrafterModel;
use crate::token::TokenId;

/// Most children one node proposes, and most nodes expanded per depth.
const BRANCHING: usize = 8;
/// Deepest a tree grows.
const MAX_DEPTH: usize = 8;

/// One request's question: its recent positions, oldest first, each the base model's final
/// hidden state there and the token chosen from it. The last is the tree's root: the token the
/// model just chose.
pub struct FeatureAsk<'a> {
    pub window: Vec<(&'a [f32], TokenId)>,
    pub max_nodes: usize,
}

/// A drafted tree, parents before children, likeliest paths first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GrownTree {
    pub tokens: Vec<TokenId>,
    pub parents: Vec<Option<usize>>,
    /// Each node's rank among its siblings as the drafter proposed them (0 = its best).
    pub ranks: Vec<usize>,
    /// The drafter's probability of each node's whole path from the root.
    pub path_probability: Vec<f32>,
}

impl GrownTree {
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// How many tokens of `continuation` the tree drafted, following it from the root.
pub fn accepted_along(tree: &GrownTree, continuation: &[TokenId]) -> usize {
    let mut at: Option<usize> = None;
    let mut accepted = 0;
    for &token in continuation {
        let next = (0..tree.len()).find(|&n| tree.parents[n] == at && tree.tokens[n] == token);
        match next {
            Some(n) => {
                at = Some(n);
                accepted += 1;
            }
            None => break,
        }
    }
    accepted
}

struct Node {
    token: TokenId,
    parent: Option<usize>,
    depth: usize,
    log_probability: f32,
    rank: usize,
    /// Its entry and the feature it predicts, once expanded.
    entry: Option<Entry>,
    feature: Option<Vec<f32>>,
}

/// One request's tree while it grows.
struct Growing {
    window: Vec<Entry>,
    root_feature: Vec<f32>,
    nodes: Vec<Node>,
    max_nodes: usize,
}

impl Growing {
    /// Node indices, likeliest path first (the shallower, then the older, on ties).
    fn likeliest(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.nodes.len()).collect();
        order.sort_by(|&a, &b| {
            let (na, nb) = (&self.nodes[a], &self.nodes[b]);
            nb.log_probability
                .partial_cmp(&na.log_probability)
                .unwrap_or(Ordering::Equal)
                .then(na.depth.cmp(&nb.depth))
                .then(a.cmp(&b))
        });
        order.truncate(self.max_nodes);
        order
    }

    /// The nodes of `depth` worth expanding: among the likeliest, at most [`BRANCHING`].
    fn frontier(&self, depth: usize) -> Vec<usize> {
        self.likeliest()
            .into_iter()
            .filter(|&n| self.nodes[n].depth == depth)
            .take(BRANCHING)
            .collect()
    }

    fn add_children(&mut self, parent: Option<usize>, children: Vec<(TokenId, f32)>) {
        let (depth, base) = match parent {
            Some(p) => (self.nodes[p].depth + 1, self.nodes[p].log_probability),
            None => (1, 0.0),
        };
        for (rank, (token, log_probability)) in children.into_iter().enumerate() {
            self.nodes.push(Node {
                token,
                parent,
                depth,
                log_probability: base + log_probability,
                rank,
                entry: None,
                feature: None,
            });
        }
    }

    /// The entries `node` reads: the window, its path's and its own.
    fn keys(&self, node: usize) -> Vec<&Entry> {
        let mut path = Vec::new();
        let mut at = Some(node);
        while let Some(n) = at {
            path.extend(self.nodes[n].entry.as_ref());
            at = self.nodes[n].parent;
        }
        self.window.iter().chain(path.into_iter().rev()).collect()
    }

    fn into_tree(self) -> GrownTree {
        let kept = self.likeliest();
        let mut index = vec![None; self.nodes.len()];
        for (i, &n) in kept.iter().enumerate() {
            index[n] = Some(i);
        }
        let mut tree = GrownTree::default();
        for &n in &kept {
            let node = &self.nodes[n];
            tree.tokens.push(node.token);
            tree.parents.push(node.parent.and_then(|p| index[p]));
            tree.ranks.push(node.rank);
            tree.path_probability.push(node.log_probability.exp());
        }
        tree
    }
}

impl FeatureDrafterModel {
    /// Milliseconds growing one request's tree of `max_nodes` takes here, the fastest of a few
    /// tries (on made-up states: the work does not depend on them).
    pub fn time_tree(&self, max_nodes: usize) -> f64 {
        let shape = self.shape();
        let state = vec![1.0f32; shape.n_embd];
        let ask = || FeatureAsk {
            window: (0..shape.window)
                .map(|t| (&state[..], t as TokenId))
                .collect(),
            max_nodes,
        };
        let fastest = (0..3)
            .map(|_| {
                let started = std::time::Instant::now();
                self.grow(&[ask()]);
                crate::clock::ms_since(started)
            })
            .fold(f64::INFINITY, f64::min);
        self.take_counts();
        fastest
    }

    /// Each ask's tree, grown together.
    pub fn grow(&self, asks: &[FeatureAsk<'_>]) -> Vec<GrownTree> {
        self.pool().install(|| self.grow_here(asks))
    }

    fn grow_here(&self, asks: &[FeatureAsk<'_>]) -> Vec<GrownTree> {
        let layer = self.layer();
        // The window's entries, every request's at once.
        let embedded: Vec<Vec<Vec<f32>>> = asks
            .iter()
            .map(|ask| ask.window.iter().map(|&(_, t)| self.embed(t)).collect())
            .collect();
        let inputs: Vec<(&[f32], &[f32])> = asks
            .iter()
            .zip(&embedded)
            .flat_map(|(ask, es)| ask.window.iter().zip(es).map(|(&(f, _), e)| (f, &e[..])))
            .collect();
        let mut entries = layer.entries(&inputs).into_iter();
        let windows: Vec<Vec<Entry>> = asks
            .iter()
            .map(|ask| entries.by_ref().take(ask.window.len()).collect())
            .collect();
        // The root reads the window, itself last.
        let queries: Vec<(&Entry, Vec<&Entry>)> = windows
            .iter()
            .filter_map(|w| Some((w.last()?, w.iter().collect())))
            .collect();
        let mut root_features = layer.outputs(&queries).into_iter();
        self.count(1, queries.len());
        let mut growing: Vec<Growing> = asks
            .iter()
            .zip(windows)
            .map(|(ask, window)| Growing {
                root_feature: if window.is_empty() {
                    Vec::new()
                } else {
                    root_features.next().unwrap_or_default()
                },
                window,
                nodes: Vec::new(),
                max_nodes: ask.max_nodes,
            })
            .collect();
        let rooted: Vec<usize> = (0..growing.len())
            .filter(|&i| !growing[i].root_feature.is_empty() && growing[i].max_nodes > 0)
            .collect();
        let features: Vec<&[f32]> = rooted
            .iter()
            .map(|&i| &growing[i].root_feature[..])
            .collect();
        let wanted: Vec<usize> = rooted
            .iter()
            .map(|&i| growing[i].max_nodes.min(BRANCHING))
            .collect();
        let found = self.children(&features, wanted.into_iter());
        for (&i, children) in rooted.iter().zip(found) {
            growing[i].add_children(None, children);
        }
        for depth in 1..MAX_DEPTH {
            let frontiers: Vec<Vec<usize>> = growing.iter().map(|g| g.frontier(depth)).collect();
            if frontiers.iter().all(Vec::is_empty) {
                break;
            }
            self.expand(&mut growing, &frontiers);
        }
        growing.into_iter().map(Growing::into_tree).collect()
    }

    /// Expands each request's `frontiers` nodes: their entries, features and children.
    fn expand(&self, growing: &mut [Growing], frontiers: &[Vec<usize>]) {
        let layer = self.layer();
        let embedded: Vec<Vec<f32>> = growing
            .iter()
            .zip(frontiers)
            .flat_map(|(g, nodes)| nodes.iter().map(|&n| self.embed(g.nodes[n].token)))
            .collect();
        let mut embedded = embedded.iter();
        let mut inputs: Vec<(&[f32], &[f32])> = Vec::new();
        for (g, nodes) in growing.iter().zip(frontiers) {
            for &n in nodes {
                let feature = match g.nodes[n].parent {
                    Some(p) => g.nodes[p].feature.as_deref().unwrap_or(&[]),
                    None => &g.root_feature,
                };
                inputs.push((feature, embedded.next().map_or(&[][..], Vec::as_slice)));
            }
        }
        let mut entries = layer.entries(&inputs).into_iter();
        for (g, nodes) in growing.iter_mut().zip(frontiers) {
            for &n in nodes {
                g.nodes[n].entry = entries.next();
            }
        }
        let queries: Vec<(&Entry, Vec<&Entry>)> = growing
            .iter()
            .zip(frontiers)
            .flat_map(|(g, nodes)| {
                nodes
                    .iter()
                    .filter_map(move |&n| Some((g.nodes[n].entry.as_ref()?, g.keys(n))))
            })
            .collect();
        self.count(1, queries.len());
        let features = layer.outputs(&queries);
        let wanted = growing
            .iter()
            .zip(frontiers)
            .flat_map(|(g, nodes)| nodes.iter().map(move |_| g.max_nodes.min(BRANCHING)));
        let mut children = self
            .children(
                &features.iter().map(Vec::as_slice).collect::<Vec<_>>(),
                wanted,
            )
            .into_iter();
        let mut features = features.into_iter();
        for (g, nodes) in growing.iter_mut().zip(frontiers) {
            for &n in nodes {
                g.nodes[n].feature = features.next();
                let found = children.next().unwrap_or_default();
                g.add_children(Some(n), found);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feature_drafter::{FeatureLayer, FeatureShape, FeatureWeights};
    use crate::weights::matrix::{QuantMatrix, GGML_TYPE_F32};

    const D: usize = 8;
    const VOCAB: usize = 6;

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x as f32 / u32::MAX as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn drafter() -> FeatureDrafterModel {
        let shape = FeatureShape {
            n_embd: D,
            heads: 2,
            ff: 12,
            window: 3,
        };
        let mut matrices: [Vec<f32>; 8] = Default::default();
        for (i, (m, (rows, cols))) in matrices.iter_mut().zip(shape.matrix_dims()).enumerate() {
            *m = values(rows * cols, i as u32 + 1);
        }
        let weights = FeatureWeights {
            matrices,
            norms: [vec![1.0; D], vec![1.0; D], vec![3.0; D]],
        };
        let layer = FeatureLayer::new(shape, &weights, GGML_TYPE_F32).unwrap();
        let matrix = |seed| {
            QuantMatrix::quantize(GGML_TYPE_F32, VOCAB, D, &values(VOCAB * D, seed)).unwrap()
        };
        FeatureDrafterModel::from_parts(layer, matrix(20), matrix(21))
    }

    #[test]
    fn a_request_s_tree_is_the_same_alone_and_grown_beside_others() {
        let drafter = drafter();
        let states = values(4 * D, 30);
        let ask = |tokens: &[TokenId], max_nodes| FeatureAsk {
            window: states.chunks(D).zip(tokens.iter().copied()).collect(),
            max_nodes,
        };
        let alone = drafter.grow(&[ask(&[1, 2, 3], 12)]);
        drafter.take_counts();
        let together = drafter.grow(&[ask(&[4, 0], 5), ask(&[1, 2, 3], 12), ask(&[5], 30)]);
        assert_eq!(alone[0], together[1]);
        for (tree, max_nodes) in together.iter().zip([5, 12, 30]) {
            assert!(!tree.is_empty() && tree.len() <= max_nodes, "{tree:?}");
            for (n, parent) in tree.parents.iter().enumerate() {
                if let Some(p) = *parent {
                    assert!(p < n, "parents come first");
                    assert!(tree.path_probability[n] <= tree.path_probability[p]);
                }
            }
        }
        // Every depth of every tree was one evaluation for all three.
        let (evaluations, _) = drafter.take_counts();
        let deepest = together.iter().map(depth).max().unwrap();
        assert!(
            evaluations as usize <= deepest + 1,
            "{evaluations} evaluations for depth {deepest}"
        );
    }

    fn depth(tree: &GrownTree) -> usize {
        (0..tree.len())
            .map(|mut n| {
                let mut d = 1;
                while let Some(p) = tree.parents[n] {
                    n = p;
                    d += 1;
                }
                d
            })
            .max()
            .unwrap_or(0)
    }

    fn tree(tokens: &[TokenId], parents: &[Option<usize>]) -> GrownTree {
        GrownTree {
            tokens: tokens.to_vec(),
            parents: parents.to_vec(),
            ranks: vec![0; tokens.len()],
            path_probability: vec![1.0; tokens.len()],
        }
    }

    #[test]
    fn acceptance_follows_the_continuation_down_one_path() {
        // 5 -> 6 -> 7, and 5 -> 8; 9 beside 5.
        let t = tree(&[5, 9, 6, 8, 7], &[None, None, Some(0), Some(0), Some(2)]);
        assert_eq!(accepted_along(&t, &[5, 6, 7, 1]), 3);
        assert_eq!(accepted_along(&t, &[5, 8, 7]), 2);
        assert_eq!(accepted_along(&t, &[9, 6]), 1);
        assert_eq!(accepted_along(&t, &[6]), 0);
        assert_eq!(accepted_along(&GrownTree::default(), &[5]), 0);
    }

    fn growing(log_probabilities: &[(Option<usize>, f32)], max_nodes: usize) -> Growing {
        let mut g = Growing {
            window: Vec::new(),
            root_feature: Vec::new(),
            nodes: Vec::new(),
            max_nodes,
        };
        for (i, &(parent, lp)) in log_probabilities.iter().enumerate() {
            g.nodes.push(Node {
                token: i as TokenId,
                parent,
                depth: parent.map_or(1, |p| g.nodes[p].depth + 1),
                log_probability: lp,
                rank: 0,
                entry: None,
                feature: None,
            });
        }
        g
    }

    #[test]
    fn the_likeliest_paths_are_kept_parents_first() {
        // A child as likely as its parent (a sure token) comes after it.
        let g = growing(
            &[(None, -0.1), (None, -2.0), (Some(0), -0.1), (Some(2), -0.5)],
            3,
        );
        assert_eq!(g.likeliest(), vec![0, 2, 3]);
        assert_eq!(g.frontier(1), vec![0]);
        assert_eq!(g.frontier(2), vec![2]);
        let t = g.into_tree();
        assert_eq!(t.tokens, vec![0, 2, 3]);
        assert_eq!(t.parents, vec![None, Some(0), Some(1)]);
    }
}
