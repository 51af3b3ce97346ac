//! What one decoding step puts into llama.cpp's batch: each running request's root and draft
//! tree, with leaf sequences borrowed for the step, then prompt chunks of starting requests.

use crate::error::EngineError;
use crate::speculative::tree::DraftTree;
use crate::step::active_request::{ActiveRequest, StepPlan};
use crate::step::decoder::Decoder;
use crate::step_profile::StepProfile;

/// One step's batch, as it is filled and then decoded.
#[derive(Default)]
pub(crate) struct StepBatch {
    /// Running requests' slots and what each put in: root and tree.
    pub(crate) trees: Vec<(usize, StepPlan)>,
    /// Starting requests' slots and, where the chunk completes the prompt, the batch index of
    /// its last token (whose logits give the first token).
    pub(crate) prefills: Vec<(usize, Option<i32>)>,
    /// Tokens in the batch.
    pub(crate) tokens: usize,
    /// Of which prompt tokens.
    pub(crate) prompt_tokens: usize,
    /// Where this step's time goes.
    pub(crate) profile: StepProfile,
}

impl StepBatch {
    /// Only steps without prompt tokens time what drafts cost: prompt tokens skip the output
    /// layer.
    pub(crate) fn decodes_drafts_only(&self) -> bool {
        self.prompt_tokens == 0 && !self.trees.is_empty()
    }
}

/// Puts a request's root and draft tree into the batch. Every leaf's sequence first shares the
/// request's cells, so each node sees the prompt, the output so far and its own ancestors.
pub(crate) fn add_tree(
    runtime: &mut impl Decoder,
    running: &ActiveRequest<'_>,
    plan: &StepPlan,
) -> Result<(), EngineError> {
    let p = running.pos;
    for &leaf in &plan.leaf_seqs {
        runtime.copy_cells(running.id, leaf, None, Some(p as u32))?;
    }
    let root_seqs: Vec<i32> = std::iter::once(running.id)
        .chain(plan.leaf_seqs.iter().copied())
        .collect();
    runtime.add_to_batch(running.root(), p, &root_seqs, true)?;
    for (node, &token) in plan.tree.tokens.iter().enumerate() {
        let seqs: Vec<i32> = plan.layout.node_leaves[node]
            .iter()
            .map(|&l| plan.leaf_seqs[l])
            .collect();
        runtime.add_to_batch(token, p + plan.layout.depths[node], &seqs, true)?;
    }
    Ok(())
}

/// Drops trailing nodes until the tree's leaves fit the free sequence ids.
pub(crate) fn fit_leaves(mut tree: DraftTree, free_ids: usize) -> DraftTree {
    while !tree.is_empty() && tree.layout().leaves.len() > free_ids {
        tree.truncate(tree.len() - 1);
    }
    tree
}
