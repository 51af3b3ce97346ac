//! How a tree is laid out for one decode: every root-to-leaf path gets its own sequence id; a
//! node belongs to the sequences of all leaves below it, so each node attends to the prefix and
//! its own ancestors only.

/// Derived structure of a tree: depths, children, leaves and sequence membership.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeLayout {
    /// Depth of each node; the root's children have depth 1.
    pub depths: Vec<usize>,
    /// Children of the root.
    pub root_children: Vec<usize>,
    /// Children of each node, in node order.
    pub children: Vec<Vec<usize>>,
    /// Leaf nodes, in node order. Leaf `j` gets sequence id `first_leaf_seq + j`.
    pub leaves: Vec<usize>,
    /// For each node, the indices (into `leaves`) of the leaves in its subtree.
    pub node_leaves: Vec<Vec<usize>>,
}

impl TreeLayout {
    pub fn new(parents: &[Option<usize>]) -> Self {
        let n = parents.len();
        let mut depths = vec![0; n];
        let mut children = vec![Vec::new(); n];
        let mut root_children = Vec::new();
        for (node, parent) in parents.iter().enumerate() {
            match *parent {
                None => {
                    depths[node] = 1;
                    root_children.push(node);
                }
                Some(p) => {
                    depths[node] = depths[p] + 1;
                    children[p].push(node);
                }
            }
        }
        let leaves: Vec<usize> = (0..n).filter(|&i| children[i].is_empty()).collect();
        let mut node_leaves = vec![Vec::new(); n];
        for (leaf_index, &leaf) in leaves.iter().enumerate() {
            let mut node = Some(leaf);
            while let Some(current) = node {
                node_leaves[current].push(leaf_index);
                node = parents[current];
            }
        }
        Self {
            depths,
            root_children,
            children,
            leaves,
            node_leaves,
        }
    }

    pub fn depth(&self) -> usize {
        self.depths.iter().copied().max().unwrap_or(0)
    }

    /// Children of `node`, or of the root for `None`.
    pub fn children_of(&self, node: Option<usize>) -> &[usize] {
        match node {
            None => &self.root_children,
            Some(i) => &self.children[i],
        }
    }

    /// Any leaf below `node`: its sequence holds exactly the path through `node`.
    pub fn leaf_below(&self, node: usize) -> usize {
        self.node_leaves[node][0]
    }
}
