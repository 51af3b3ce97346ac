//! The Medusa drafter: heads read the hidden state of the last accepted position, and their
//! top-k guesses fill the token tree.

use std::sync::Arc;

use super::heads::MedusaHeads;
use crate::speculative::drafter::{DraftInput, Drafter};
use crate::speculative::tree::{DraftTree, TreeSpec};
use crate::token::TokenId;

pub struct MedusaDrafter {
    heads: Arc<MedusaHeads>,
    tree: TreeSpec,
    /// Top-k needed per depth, from the tree.
    top_k: Vec<usize>,
}

impl MedusaDrafter {
    pub fn new(heads: Arc<MedusaHeads>, tree: TreeSpec) -> Self {
        let top_k = tree.top_k_per_depth();
        Self { heads, tree, top_k }
    }
}

impl Drafter for MedusaDrafter {
    fn name(&self) -> &'static str {
        "medusa"
    }

    fn acceptance_carries_over(&self) -> bool {
        true
    }

    fn draft(&mut self, input: &DraftInput<'_>, max_nodes: usize) -> DraftTree {
        let Some(hidden) = input.hidden_state else {
            return DraftTree::default();
        };
        let root = input.history.last().copied().unwrap_or_default();
        let mut tree = if self.heads.info().path_input {
            // Each expanded node's children come from the head of its depth reading its path;
            // the nodes of one depth are evaluated together.
            self.tree.fill_by_path(max_nodes, |depth, nodes| {
                let queries: Vec<(Vec<Vec<f32>>, usize)> = nodes
                    .iter()
                    .map(|(path, k)| {
                        let tokens: Vec<TokenId> =
                            std::iter::once(root).chain(path.iter().copied()).collect();
                        (self.heads.token_inputs(&tokens), *k)
                    })
                    .collect();
                self.heads.top_k_each(depth, hidden, &queries)
            })
        } else {
            // Sorted paths: the first `max_nodes` form a tree, and only the heads they reach run.
            let depth = self
                .tree
                .paths()
                .iter()
                .take(max_nodes)
                .map(Vec::len)
                .max()
                .unwrap_or(0)
                .min(self.heads.head_count());
            let inputs = self.heads.token_inputs(&[root]);
            let candidates: Vec<_> = (0..depth)
                .map(|d| self.heads.top_k(d, hidden, &inputs, self.top_k[d]))
                .collect();
            self.tree.fill(&candidates)
        };
        tree.truncate(max_nodes);
        tree
    }
}
