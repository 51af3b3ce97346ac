//! The Medusa drafter: heads read the hidden state of the last accepted position, and their
//! top-k guesses fill the token tree. At each step the trees of every request drafting with
//! the heads are made together: each head is evaluated once per depth for all of them, one
//! matrix product instead of one per request.

use std::sync::Arc;
use std::time::Instant;

use super::heads::{HeadQuery, MedusaHeads};
use crate::clock::ms_since;
use crate::speculative::drafter::{DraftAsk, DrafterTraits, PreparedTrees, Proposal, StepDrafter};
use crate::speculative::drafter_kind::DrafterKind;
use crate::speculative::tree::{DraftTree, TreeSpec};
use crate::token::TokenId;

/// What one request asks of the heads this step.
struct HeadsAsk<'a> {
    sequence: usize,
    /// The base model's final hidden state at the request's last accepted position.
    hidden: &'a [f32],
    /// The last accepted token, the tree's root.
    root: TokenId,
    tree: &'a TreeSpec,
    max_nodes: usize,
}

/// Each ask's tree, at most its `max_nodes`, with every head evaluated once per depth for all
/// of them.
fn draft_trees(heads: &MedusaHeads, asks: &[HeadsAsk<'_>]) -> Vec<DraftTree> {
    let mut trees = if heads.info().path_input {
        trees_by_path(heads, asks)
    } else {
        trees_by_rank(heads, asks)
    };
    for (tree, ask) in trees.iter_mut().zip(asks) {
        tree.truncate(ask.max_nodes);
    }
    trees
}

/// For heads that read the drafted path: each expanded node's children come from the head of
/// its depth reading its path, the nodes of one depth of every tree evaluated together.
fn trees_by_path(heads: &MedusaHeads, asks: &[HeadsAsk<'_>]) -> Vec<DraftTree> {
    let mut fills: Vec<_> = asks.iter().map(|a| a.tree.path_fill(a.max_nodes)).collect();
    let depth = fills.iter().map(|f| f.depth()).max().unwrap_or(0);
    for d in 0..depth.min(heads.head_count()) {
        let nodes: Vec<Vec<(Vec<TokenId>, usize)>> = fills
            .iter_mut()
            .map(|fill| {
                if d < fill.depth() {
                    fill.queries(d)
                } else {
                    Vec::new()
                }
            })
            .collect();
        let queries: Vec<HeadQuery<'_>> = asks
            .iter()
            .zip(&nodes)
            .flat_map(|(ask, nodes)| {
                nodes.iter().map(|(path, k)| {
                    let tokens: Vec<TokenId> = std::iter::once(ask.root)
                        .chain(path.iter().copied())
                        .collect();
                    HeadQuery {
                        hidden: ask.hidden,
                        inputs: heads.token_inputs(&tokens),
                        k: *k,
                    }
                })
            })
            .collect();
        if queries.is_empty() {
            break;
        }
        let mut answers = heads.top_k_each(d, &queries).into_iter();
        for (fill, nodes) in fills.iter_mut().zip(&nodes) {
            let mine: Vec<Vec<TokenId>> = answers.by_ref().take(nodes.len()).collect();
            fill.place(d, &mine);
        }
    }
    fills.into_iter().map(|fill| fill.into_tree()).collect()
}

/// For heads that read the root at most: each head's top-k for every tree at once, then the
/// sorted paths filled; only the heads that the first `max_nodes` paths reach run.
fn trees_by_rank(heads: &MedusaHeads, asks: &[HeadsAsk<'_>]) -> Vec<DraftTree> {
    let depths: Vec<usize> = asks
        .iter()
        .map(|ask| {
            ask.tree.paths()[..ask.max_nodes.min(ask.tree.len())]
                .iter()
                .map(Vec::len)
                .max()
                .unwrap_or(0)
                .min(heads.head_count())
        })
        .collect();
    let top_k: Vec<Vec<usize>> = asks.iter().map(|a| a.tree.top_k_per_depth()).collect();
    let mut candidates: Vec<Vec<Vec<TokenId>>> = vec![Vec::new(); asks.len()];
    for d in 0..depths.iter().copied().max().unwrap_or(0) {
        let asking: Vec<usize> = (0..asks.len()).filter(|&i| depths[i] > d).collect();
        let queries: Vec<HeadQuery<'_>> = asking
            .iter()
            .map(|&i| HeadQuery {
                hidden: asks[i].hidden,
                inputs: heads.token_inputs(&[asks[i].root]),
                k: top_k[i].get(d).copied().unwrap_or(0),
            })
            .collect();
        for (&i, found) in asking.iter().zip(heads.top_k_each(d, &queries)) {
            candidates[i].push(found);
        }
    }
    asks.iter()
        .zip(&candidates)
        .map(|(ask, candidates)| ask.tree.fill(candidates))
        .collect()
}

/// The heads as a step drafter: the trees of every request that drafts with them are made
/// together at the start of the step, and kept until the requests take them.
pub struct HeadsDrafter {
    heads: Arc<MedusaHeads>,
    prepared: PreparedTrees,
}

impl HeadsDrafter {
    pub fn new(heads: Arc<MedusaHeads>) -> Self {
        Self {
            heads,
            prepared: PreparedTrees::default(),
        }
    }
}

/// What the heads need of an ask: the hidden state and a tree to fill.
fn heads_ask<'a>(ask: &DraftAsk<'a>) -> Option<HeadsAsk<'a>> {
    Some(HeadsAsk {
        sequence: ask.sequence,
        hidden: ask.hidden_state?,
        root: ask.history.last().copied().unwrap_or_default(),
        tree: ask.tree?,
        max_nodes: ask.max_nodes,
    })
}

impl StepDrafter for HeadsDrafter {
    fn kind(&self) -> DrafterKind {
        DrafterKind::Medusa
    }

    /// How often the heads are right is theirs (and the model's).
    fn traits(&self) -> DrafterTraits {
        DrafterTraits {
            acceptance_carries_over: true,
            reads_hidden_state: true,
            ..DrafterTraits::default()
        }
    }

    fn prepare(&self, asks: &[DraftAsk<'_>]) {
        let asks: Vec<HeadsAsk<'_>> = asks.iter().filter_map(heads_ask).collect();
        if asks.is_empty() {
            self.prepared.replace(Vec::new(), 0.0);
            return;
        }
        let _span = tracing::debug_span!("heads", requests = asks.len()).entered();
        let started = Instant::now();
        let trees = draft_trees(&self.heads, &asks);
        let made = asks
            .iter()
            .zip(trees)
            .map(|(ask, tree)| (ask.sequence, tree, ask.max_nodes))
            .collect();
        self.prepared.replace(made, ms_since(started));
    }

    /// The tree made for this request with every other's at the start of the step, else its
    /// own (a request that asks for more than was made).
    fn propose(&self, ask: &DraftAsk<'_>) -> Proposal {
        if let Some(prepared) = self.prepared.proposal(ask) {
            return prepared;
        }
        let Some(ask) = heads_ask(ask) else {
            return Proposal::default();
        };
        draft_trees(&self.heads, &[ask])
            .pop()
            .unwrap_or_default()
            .into()
    }

    fn take_counts(&self) -> (u64, u64) {
        self.heads.take_counts()
    }
}
