//! Tree shapes as Medusa "choices": the built-in trees, parsing them from names and JSON files,
//! their checks, and filling them with the heads' guesses.

use serde::{Deserialize, Serialize};

use super::draft::{DraftTree, TokenSource};
use crate::token::TokenId;

/// A tree shape as Medusa "choices": each path lists, per depth, the rank in that head's top-k.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(try_from = "Vec<Vec<usize>>", into = "Vec<Vec<usize>>")]
#[ts(type = "number[][]")]
pub struct TreeSpec {
    /// Sorted by depth, then lexicographically; every prefix of a path is also a path.
    paths: Vec<Vec<usize>>,
    /// Index of each path's parent path; `None` for depth 1.
    parents: Vec<Option<usize>>,
}

/// Largest tree file read: a tree of thousands of nodes fits in a few kilobytes.
pub const MAX_TREE_FILE_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("the tree is empty")]
    Empty,
    #[error("path {0:?} is empty")]
    EmptyPath(usize),
    #[error("path {path:?} appears twice")]
    Duplicate { path: Vec<usize> },
    #[error("path {path:?} has no parent path {parent:?}")]
    MissingParent {
        path: Vec<usize>,
        parent: Vec<usize>,
    },
    #[error("path {path:?} is {depth} deep but there are only {heads} heads")]
    TooDeep {
        path: Vec<usize>,
        depth: usize,
        heads: usize,
    },
    #[error("rank {rank} in path {path:?} is too large (top-k is limited to {limit})")]
    RankTooLarge {
        path: Vec<usize>,
        rank: usize,
        limit: usize,
    },
    #[error("unknown tree '{0}'; use mc_sim_7b_63, chain-N (N = 1..=8) or a JSON file of paths")]
    UnknownName(String),
    #[error("tree file is not a JSON list of paths: {0}")]
    Parse(String),
}

/// Highest top-k rank a tree may use.
pub const MAX_RANK: usize = 64;

impl TreeSpec {
    pub fn new(mut paths: Vec<Vec<usize>>) -> Result<Self, TreeError> {
        if paths.is_empty() {
            return Err(TreeError::Empty);
        }
        paths.sort_by(|a, b| cmp_paths(a, b));
        let mut parents = Vec::with_capacity(paths.len());
        for (i, path) in paths.iter().enumerate() {
            if path.is_empty() {
                return Err(TreeError::EmptyPath(i));
            }
            if i > 0 && paths[i - 1] == *path {
                return Err(TreeError::Duplicate { path: path.clone() });
            }
            if let Some(&rank) = path.iter().find(|&&r| r >= MAX_RANK) {
                return Err(TreeError::RankTooLarge {
                    path: path.clone(),
                    rank,
                    limit: MAX_RANK,
                });
            }
            let parent = &path[..path.len() - 1];
            if parent.is_empty() {
                parents.push(None);
                continue;
            }
            match paths.binary_search_by(|p| cmp_paths(p, parent)) {
                Ok(index) => parents.push(Some(index)),
                Err(_) => {
                    return Err(TreeError::MissingParent {
                        path: path.clone(),
                        parent: parent.to_vec(),
                    })
                }
            }
        }
        Ok(Self { paths, parents })
    }

    /// The top-1 guess of each of `depth` heads, one after another.
    pub fn chain(depth: usize) -> Self {
        let depth = depth.max(1);
        Self {
            paths: (1..=depth).map(|d| vec![0; d]).collect(),
            parents: (0..depth).map(|d| d.checked_sub(1)).collect(),
        }
    }

    /// The reference sparse tree of the Medusa paper: 63 nodes, depth 4, 42 leaves.
    pub fn mc_sim_7b_63() -> Self {
        let paths = MC_SIM_7B_63.iter().map(|p| p.to_vec()).collect();
        Self::new(paths).unwrap_or_else(|_| Self::chain(1))
    }

    /// `mc_sim_7b_63`, `chain-N`, or a path to a JSON file holding a list of paths.
    pub fn from_name_or_file(name: &str) -> Result<Self, TreeError> {
        if name == "mc_sim_7b_63" {
            return Ok(Self::mc_sim_7b_63());
        }
        if let Some(n) = name.strip_prefix("chain-") {
            return match n.parse::<usize>() {
                Ok(depth @ 1..=8) => Ok(Self::chain(depth)),
                _ => Err(TreeError::UnknownName(name.into())),
            };
        }
        let path = std::path::Path::new(name);
        if !path.is_file() {
            return Err(TreeError::UnknownName(name.into()));
        }
        let size = std::fs::metadata(path).map_or(0, |m| m.len());
        if size > MAX_TREE_FILE_BYTES {
            return Err(TreeError::Parse(format!(
                "the file holds {size} bytes; a tree file holds at most {MAX_TREE_FILE_BYTES}"
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| TreeError::Parse(format!("cannot read it as text ({})", e.kind())))?;
        // Where the JSON went wrong, never what it says: the file may be anything.
        let paths: Vec<Vec<usize>> = serde_json::from_str(&text).map_err(|e| {
            TreeError::Parse(format!(
                "not a JSON list of paths such as [[0], [0, 1]] (at line {}, column {})",
                e.line(),
                e.column()
            ))
        })?;
        Self::new(paths)
    }

    /// Whether `name` is in the namespace of the built-in trees rather than a file path.
    pub fn is_builtin_name(name: &str) -> bool {
        name == "mc_sim_7b_63" || name.starts_with("chain-")
    }

    pub fn paths(&self) -> &[Vec<usize>] {
        &self.paths
    }

    pub fn len(&self) -> usize {
        self.paths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    pub fn depth(&self) -> usize {
        self.paths.last().map_or(0, Vec::len)
    }

    /// Refuses a tree deeper than the number of heads that fill it.
    pub fn check_heads(&self, heads: usize) -> Result<(), TreeError> {
        match self.paths.iter().find(|p| p.len() > heads) {
            Some(path) => Err(TreeError::TooDeep {
                path: path.clone(),
                depth: path.len(),
                heads,
            }),
            None => Ok(()),
        }
    }

    /// How many top-k candidates each depth needs (the largest rank used, plus one).
    pub fn top_k_per_depth(&self) -> Vec<usize> {
        let mut k = vec![0; self.depth()];
        for path in &self.paths {
            let d = path.len() - 1;
            k[d] = k[d].max(path[d] + 1);
        }
        k
    }

    /// Nodes that have children, by depth (the root at 0): the queries heads that read the
    /// drafted path answer at each depth to fill the tree.
    pub fn expanded_per_depth(&self) -> Vec<usize> {
        let mut parents: Vec<Option<usize>> = self.parents.clone();
        parents.sort_unstable();
        parents.dedup();
        let mut per_depth = vec![0; self.depth()];
        for parent in parents {
            per_depth[parent.map_or(0, |p| self.paths[p].len())] += 1;
        }
        per_depth
    }

    /// The tree filled node by node, for heads that read the drafted path: at each depth d,
    /// `guesses(d, queries)` answers, for every filled node of depth d that has children among
    /// the first `max_nodes` paths, its best tokens given `(tokens on its path below the root,
    /// how many)`. A node without a guess at its rank is left out with everything below it.
    pub fn fill_by_path(
        &self,
        max_nodes: usize,
        mut guesses: impl FnMut(usize, &[(Vec<TokenId>, usize)]) -> Vec<Vec<TokenId>>,
    ) -> DraftTree {
        let mut fill = self.path_fill(max_nodes);
        for d in 0..fill.depth() {
            let queries = fill.queries(d);
            let answers = if queries.is_empty() {
                Vec::new()
            } else {
                guesses(d, &queries)
            };
            fill.place(d, &answers);
        }
        fill.into_tree()
    }

    /// [`Self::fill_by_path`] a depth at a time, so that several trees can be filled in
    /// lockstep and each depth's head asked once for all of them.
    pub fn path_fill(&self, max_nodes: usize) -> PathFill<'_> {
        let count = max_nodes.min(self.paths.len());
        PathFill {
            spec: self,
            count,
            depth: self.paths[..count].iter().map(Vec::len).max().unwrap_or(0),
            placed: vec![None; count],
            tokens_of: vec![Vec::new(); count],
            expanding: Vec::new(),
            tree: DraftTree::default(),
        }
    }

    /// The tree filled with tokens: `top_k[d][r]` is the rank-`r` guess for depth `d + 1`.
    /// Stops at the first path with no candidate (any prefix of the sorted paths is a tree).
    pub fn fill(&self, top_k: &[Vec<TokenId>]) -> DraftTree {
        let mut tree = DraftTree::default();
        for (path, &parent) in self.paths.iter().zip(&self.parents) {
            let d = path.len() - 1;
            let Some(&token) = top_k.get(d).and_then(|ranks| ranks.get(path[d])) else {
                break;
            };
            tree.push(token, parent, TokenSource::Head(d as u8), path[d]);
        }
        tree
    }
}

/// A tree being filled depth by depth for heads that read the drafted path (see
/// [`TreeSpec::path_fill`]): ask [`Self::queries`] of depth d, then [`Self::place`] the
/// answers, for d in `0..depth()`.
pub struct PathFill<'s> {
    spec: &'s TreeSpec,
    /// The first paths filled.
    count: usize,
    depth: usize,
    /// The tree node each of the first `count` paths became, and its tokens from depth 1.
    placed: Vec<Option<usize>>,
    tokens_of: Vec<Vec<TokenId>>,
    /// The expanded nodes of the depth being filled (`None`: the root) and the children each
    /// needs.
    expanding: Vec<(Option<usize>, usize)>,
    tree: DraftTree,
}

impl PathFill<'_> {
    /// How many depths the tree has: the rounds of queries.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The nodes of depth `d` that have children: `(tokens on the path below the root, how
    /// many guesses)` for each.
    pub fn queries(&mut self, d: usize) -> Vec<(Vec<TokenId>, usize)> {
        let spec = self.spec;
        self.expanding.clear();
        for (i, path) in spec.paths[..self.count].iter().enumerate() {
            let parent = spec.parents[i];
            let reachable = parent.is_none_or(|p| self.placed[p].is_some());
            if path.len() != d + 1 || !reachable {
                continue;
            }
            let k = path[d] + 1;
            match self.expanding.iter_mut().find(|(p, _)| *p == parent) {
                Some((_, most)) => *most = (*most).max(k),
                None => self.expanding.push((parent, k)),
            }
        }
        self.expanding
            .iter()
            .map(|&(p, k)| (p.map_or_else(Vec::new, |p| self.tokens_of[p].clone()), k))
            .collect()
    }

    /// Places depth `d`'s nodes from the answers to [`Self::queries`], in their order.
    pub fn place(&mut self, d: usize, answers: &[Vec<TokenId>]) {
        let spec = self.spec;
        for (i, path) in spec.paths[..self.count].iter().enumerate() {
            if path.len() != d + 1 {
                continue;
            }
            let parent = spec.parents[i];
            let Some(q) = self.expanding.iter().position(|(p, _)| *p == parent) else {
                continue;
            };
            let Some(&token) = answers.get(q).and_then(|a| a.get(path[d])) else {
                continue;
            };
            let node_parent = parent.and_then(|p| self.placed[p]);
            self.placed[i] =
                Some(
                    self.tree
                        .push(token, node_parent, TokenSource::Head(d as u8), path[d]),
                );
            let mut tokens = parent.map_or_else(Vec::new, |p| self.tokens_of[p].clone());
            tokens.push(token);
            self.tokens_of[i] = tokens;
        }
    }

    pub fn into_tree(self) -> DraftTree {
        self.tree
    }
}

fn cmp_paths(a: &[usize], b: &[usize]) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

impl TryFrom<Vec<Vec<usize>>> for TreeSpec {
    type Error = TreeError;

    fn try_from(paths: Vec<Vec<usize>>) -> Result<Self, Self::Error> {
        Self::new(paths)
    }
}

impl From<TreeSpec> for Vec<Vec<usize>> {
    fn from(spec: TreeSpec) -> Self {
        spec.paths
    }
}

const MC_SIM_7B_63: &[&[usize]] = &[
    &[0],
    &[0, 0],
    &[1],
    &[0, 1],
    &[2],
    &[0, 0, 0],
    &[1, 0],
    &[0, 2],
    &[3],
    &[0, 3],
    &[4],
    &[0, 4],
    &[2, 0],
    &[0, 5],
    &[0, 0, 1],
    &[5],
    &[0, 6],
    &[6],
    &[0, 7],
    &[0, 1, 0],
    &[1, 1],
    &[7],
    &[0, 8],
    &[0, 0, 2],
    &[3, 0],
    &[0, 9],
    &[8],
    &[9],
    &[1, 0, 0],
    &[0, 2, 0],
    &[1, 2],
    &[0, 0, 3],
    &[4, 0],
    &[2, 1],
    &[0, 0, 4],
    &[0, 0, 5],
    &[0, 0, 0, 0],
    &[0, 1, 1],
    &[0, 0, 6],
    &[0, 3, 0],
    &[5, 0],
    &[1, 3],
    &[0, 0, 7],
    &[0, 0, 8],
    &[0, 0, 9],
    &[6, 0],
    &[0, 4, 0],
    &[1, 4],
    &[7, 0],
    &[0, 1, 2],
    &[2, 0, 0],
    &[3, 1],
    &[2, 2],
    &[8, 0],
    &[0, 5, 0],
    &[1, 5],
    &[1, 0, 1],
    &[0, 2, 1],
    &[9, 0],
    &[0, 6, 0],
    &[0, 0, 0, 1],
    &[1, 6],
    &[0, 7, 0],
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_layout() {
        let tree = TreeSpec::chain(3).fill(&[vec![10], vec![11], vec![12]]);
        assert_eq!(tree.tokens, vec![10, 11, 12]);
        assert_eq!(tree.parents, vec![None, Some(0), Some(1)]);
        let layout = tree.layout();
        assert_eq!(layout.depths, vec![1, 2, 3]);
        assert_eq!(layout.root_children, vec![0]);
        assert_eq!(layout.leaves, vec![2]);
        // One path, so every node is on the single leaf's sequence.
        assert_eq!(layout.node_leaves, vec![vec![0], vec![0], vec![0]]);
    }

    #[test]
    fn small_tree_layout_exactly() {
        // root -> a(0) -> c(0,0)
        //      -> b(1)
        //      a -> d(0,1)
        let spec = TreeSpec::new(vec![vec![0, 1], vec![1], vec![0], vec![0, 0]]).unwrap();
        assert_eq!(spec.paths(), &[vec![0], vec![1], vec![0, 0], vec![0, 1]]);
        assert_eq!(spec.top_k_per_depth(), vec![2, 2]);
        let tree = spec.fill(&[vec![100, 101], vec![200, 201]]);
        assert_eq!(tree.tokens, vec![100, 101, 200, 201]);
        assert_eq!(tree.parents, vec![None, None, Some(0), Some(0)]);
        assert_eq!(tree.sources[2], TokenSource::Head(1));
        let layout = tree.layout();
        assert_eq!(layout.depths, vec![1, 1, 2, 2]);
        assert_eq!(layout.leaves, vec![1, 2, 3]);
        assert_eq!(layout.children_of(None), &[0, 1]);
        assert_eq!(layout.children_of(Some(0)), &[2, 3]);
        assert_eq!(
            layout.node_leaves,
            vec![vec![1, 2], vec![0], vec![1], vec![2]]
        );
    }

    #[test]
    fn mc_sim_7b_63_shape() {
        let spec = TreeSpec::mc_sim_7b_63();
        assert_eq!(spec.len(), 63);
        assert_eq!(spec.depth(), 4);
        assert_eq!(spec.top_k_per_depth(), vec![10, 10, 10, 2]);
        let top_k: Vec<Vec<TokenId>> = (0..4)
            .map(|d| (0..10).map(|r| d * 100 + r).collect())
            .collect();
        let tree = spec.fill(&top_k);
        assert_eq!(tree.len(), 63);
        let layout = tree.layout();
        assert_eq!(layout.leaves.len(), 42);
        assert_eq!(layout.root_children.len(), 10);
        assert_eq!(layout.depths.iter().filter(|&&d| d == 4).count(), 2);
        // [0] heads the biggest subtree; every leaf is below exactly one depth-1 node.
        let under_depth1: usize = layout
            .root_children
            .iter()
            .map(|&c| layout.node_leaves[c].len())
            .sum();
        assert_eq!(under_depth1, 42);
        // Parents precede children, and each node's token comes from its depth's head.
        for (i, parent) in tree.parents.iter().enumerate() {
            assert!(parent.is_none_or(|p| p < i));
            assert_eq!(
                tree.sources[i],
                TokenSource::Head(layout.depths[i] as u8 - 1)
            );
        }
        // [0,0,0,1] is the last path: node 62, under [0,0,0].
        assert_eq!(tree.tokens[62], 301);
        assert_eq!(tree.tokens[tree.parents[62].unwrap()], 200);
    }

    #[test]
    fn invalid_trees_are_refused() {
        assert_eq!(TreeSpec::new(vec![]), Err(TreeError::Empty));
        assert!(matches!(
            TreeSpec::new(vec![vec![0, 0]]),
            Err(TreeError::MissingParent { .. })
        ));
        assert!(matches!(
            TreeSpec::new(vec![vec![0], vec![0]]),
            Err(TreeError::Duplicate { .. })
        ));
        assert!(matches!(
            TreeSpec::new(vec![vec![]]),
            Err(TreeError::EmptyPath(_))
        ));
        assert!(matches!(
            TreeSpec::new(vec![vec![99]]),
            Err(TreeError::RankTooLarge { .. })
        ));
        let deep = TreeSpec::mc_sim_7b_63();
        assert!(matches!(
            deep.check_heads(3),
            Err(TreeError::TooDeep {
                depth: 4,
                heads: 3,
                ..
            })
        ));
        assert_eq!(deep.check_heads(4), Ok(()));
    }

    #[test]
    fn names_and_json() {
        assert_eq!(
            TreeSpec::from_name_or_file("chain-3").unwrap(),
            TreeSpec::chain(3)
        );
        assert!(TreeSpec::from_name_or_file("chain-0").is_err());
        assert!(matches!(
            TreeSpec::from_name_or_file("nope"),
            Err(TreeError::UnknownName(_))
        ));
        assert!(TreeSpec::is_builtin_name("chain-0"));
        assert!(!TreeSpec::is_builtin_name("/tmp/tree.json"));
        let spec: TreeSpec = serde_json::from_str("[[1],[0],[0,0]]").unwrap();
        assert_eq!(spec.paths(), &[vec![0], vec![1], vec![0, 0]]);
        assert!(serde_json::from_str::<TreeSpec>("[[0,0]]").is_err());
    }

    #[test]
    fn tree_files_are_capped_and_never_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret.json");
        std::fs::write(&secret, r#"["sk-SECRET-token-123"]"#).unwrap();
        let Err(TreeError::Parse(message)) = TreeSpec::from_name_or_file(secret.to_str().unwrap())
        else {
            panic!("a list of strings is no tree");
        };
        assert!(!message.contains("SECRET"), "{message}");
        assert!(message.contains("line 1, column 2"), "{message}");
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; (MAX_TREE_FILE_BYTES + 1) as usize]).unwrap();
        let Err(TreeError::Parse(message)) = TreeSpec::from_name_or_file(big.to_str().unwrap())
        else {
            panic!("an oversized file is refused");
        };
        assert!(message.contains("at most 1048576"), "{message}");
        let good = dir.path().join("good.json");
        std::fs::write(&good, "[[0], [1], [0, 0]]").unwrap();
        assert_eq!(
            TreeSpec::from_name_or_file(good.to_str().unwrap())
                .unwrap()
                .len(),
            3
        );
    }

    #[test]
    fn truncated_tree_stays_a_tree() {
        let mut tree = TreeSpec::mc_sim_7b_63().fill(&[
            (0..10).collect(),
            (0..10).collect(),
            (0..10).collect(),
            (0..2).collect(),
        ]);
        tree.truncate(8);
        let layout = tree.layout();
        assert_eq!(layout.depths.len(), 8);
        assert!(tree.parents.iter().all(|p| p.is_none_or(|p| p < 8)));
    }

    #[test]
    fn path_reading_heads_fill_each_node_knowing_its_path() {
        let spec =
            TreeSpec::new(vec![vec![0], vec![1], vec![0, 0], vec![0, 1], vec![1, 0]]).unwrap();
        assert_eq!(spec.expanded_per_depth(), vec![1, 2]);
        let mut asked = Vec::new();
        // A guess encodes the path it was made below: 10 * (1 + sum of the path) + rank.
        let tree = spec.fill_by_path(16, |depth, queries| {
            asked.push((depth, queries.to_vec()));
            queries
                .iter()
                .map(|(path, k)| {
                    let base = 10 * (1 + path.iter().sum::<i32>());
                    (0..*k as i32).map(|r| base + r).collect()
                })
                .collect()
        });
        assert_eq!(tree.tokens, vec![10, 11, 110, 111, 120]);
        assert_eq!(tree.parents, vec![None, None, Some(0), Some(0), Some(1)]);
        assert_eq!(tree.ranks, vec![0, 1, 0, 1, 0]);
        assert_eq!(tree.sources[2], TokenSource::Head(1));
        assert_eq!(
            asked,
            vec![
                (0, vec![(vec![], 2)]),
                (1, vec![(vec![10], 2), (vec![11], 1)]),
            ]
        );
        // Three nodes: only the root is expanded, and a missing guess drops its subtree.
        let small = spec.fill_by_path(3, |_, queries| queries.iter().map(|_| vec![7]).collect());
        assert_eq!(small.tokens, vec![7, 7]);
        assert_eq!(small.parents, vec![None, Some(0)]);
    }
}
