//! Which tree Medusa mode drafts with on this machine: the one the user gave, the one stored
//! with the heads, or, for heads that record their held-out accuracy, the tree with the most
//! expected tokens per second under the decode costs measured here. When no tree beats plain
//! decoding, Medusa mode decodes plainly and says why.

use serde::Serialize;

use super::heads::HeadsInfo;
use crate::speculative::costs::{CostModel, DecodeCosts};
use crate::speculative::tree::TreeSpec;
use crate::speculative::tree_builder::{forecast, tune, AccuracyTable, TreeForecast};

/// Largest tree the load-time sizing considers (the Medusa paper's trees have 63 nodes).
pub const MAX_TUNED_NODES: usize = 64;

/// Where Medusa mode's tree came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum TreeOrigin {
    /// Given with the model (`--tree`): drafted in full at every step, whatever it costs.
    Given,
    /// Stored in the heads file, for heads without a held-out accuracy record: drafted in full
    /// (up to a cap), as nothing tells how much of it pays.
    Stored,
    /// Sized here from the heads' held-out accuracy and this machine's decode costs.
    Tuned,
}

/// Medusa mode's tree and the reason for it.
#[derive(Debug, Clone, PartialEq, Serialize, ts_rs::TS)]
pub struct MedusaPlan {
    pub origin: TreeOrigin,
    /// The tree Medusa mode drafts with; `None` when it decodes plainly because no tree pays.
    pub tree: Option<TreeSpec>,
    /// For a tuned plan: expected tokens per step with its tree (1 when plain).
    pub expected_tokens_per_step: Option<f64>,
    /// For a tuned plan: predicted speed-up over plain decoding (1 when plain).
    pub predicted_speedup: Option<f64>,
    /// The decision in words.
    pub decision: String,
    /// For a tuned plan: what each named tree would do here drafted in full at every step.
    pub forecasts: Vec<TreeForecast>,
    /// For a tuned plan: the fastest tree predicted here, even when plain decoding is faster
    /// still. Requests name it `tuned` to see it drafted in full.
    pub tuned_tree: Option<TreeSpec>,
    /// For a tuned plan: the decode costs it was sized from, with their bands.
    pub decode_costs: Option<DecodeCosts>,
}

impl MedusaPlan {
    /// Drafts a tuned tree whole by default (its size was chosen for this machine), and a given
    /// one (the user chose it). A stored tree is capped at `cap`.
    pub fn default_max_draft(&self, cap: usize) -> usize {
        match (&self.tree, self.origin) {
            (Some(tree), TreeOrigin::Tuned | TreeOrigin::Given) => tree.len(),
            (Some(tree), _) => tree.len().min(cap),
            (None, _) => 0,
        }
    }
}

/// Settles Medusa mode's tree. `measure` gives this machine's decode costs and the time one head
/// takes to draft; it is only called when a tree is to be sized, as measuring takes a moment.
pub fn plan_tree<E>(
    heads: &HeadsInfo,
    given: Option<TreeSpec>,
    measure: impl FnOnce() -> Result<(CostModel, f64), E>,
) -> Result<MedusaPlan, E> {
    if let Some(tree) = given {
        return Ok(MedusaPlan {
            origin: TreeOrigin::Given,
            decision: format!(
                "medusa with the given {}-node tree, drafted in full at every step",
                tree.len()
            ),
            tree: Some(tree),
            expected_tokens_per_step: None,
            predicted_speedup: None,
            forecasts: Vec::new(),
            tuned_tree: None,
            decode_costs: None,
        });
    }
    let table = heads
        .training
        .as_ref()
        .filter(|t| t.heldout_by_rank.len() == heads.head_count)
        .and_then(|t| AccuracyTable::new(t.heldout_by_rank.clone()).ok());
    let Some(table) = table else {
        let tree = heads.default_tree.clone();
        return Ok(MedusaPlan {
            origin: TreeOrigin::Stored,
            decision: format!(
                "medusa with the heads' stored {}-node tree, drafted in full at every step (no \
                 held-out accuracy to size one from; `medusa tune` measures one)",
                tree.len()
            ),
            tree: Some(tree),
            expected_tokens_per_step: None,
            predicted_speedup: None,
            forecasts: Vec::new(),
            tuned_tree: None,
            decode_costs: None,
        });
    };
    let (costs, head_ms) = measure()?;
    let head_cost = heads.head_cost(head_ms);
    let result = tune(&table, &costs, head_cost, MAX_TUNED_NODES);
    let decision = result.decision();
    let forecasts = named_trees(heads.head_count)
        .iter()
        .map(|(name, tree)| forecast(name, tree, &table, &costs, head_cost))
        .collect();
    let tuned_tree = result.fastest().map(|i| result.trees[i].tree.clone());
    Ok(match result.chosen {
        Some(i) => MedusaPlan {
            origin: TreeOrigin::Tuned,
            tree: Some(result.trees[i].tree.clone()),
            expected_tokens_per_step: Some(result.sizes[i].expected_tokens),
            predicted_speedup: Some(result.sizes[i].predicted_speedup),
            decision,
            forecasts,
            tuned_tree,
            decode_costs: Some(costs.report()),
        },
        None => MedusaPlan {
            origin: TreeOrigin::Tuned,
            tree: None,
            expected_tokens_per_step: Some(1.0),
            predicted_speedup: Some(1.0),
            decision,
            forecasts,
            tuned_tree,
            decode_costs: Some(costs.report()),
        },
    })
}

/// What a request may name as its tree for heads of `head_count` heads: `auto`, `tuned` where
/// the tuner found a tree, then the named trees the heads can draft.
pub fn request_tree_names(head_count: usize, tuned: bool) -> Vec<String> {
    let mut names = vec!["auto".to_owned()];
    if head_count > 0 && tuned {
        names.push("tuned".to_owned());
    }
    names.extend(named_trees(head_count).into_iter().map(|(name, _)| name));
    names
}

/// The trees a user can name for heads of `head_count` heads.
pub fn named_trees(head_count: usize) -> Vec<(String, TreeSpec)> {
    let reference = TreeSpec::mc_sim_7b_63();
    let mut trees = Vec::new();
    if reference.depth() <= head_count {
        trees.push(("mc_sim_7b_63".to_owned(), reference));
    }
    for depth in 1..=head_count.min(8) {
        trees.push((format!("chain-{depth}"), TreeSpec::chain(depth)));
    }
    trees
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::medusa::heads::{BaseIdentity, HeadsCompute, TrainingRecord};
    use std::convert::Infallible;

    #[test]
    fn requests_may_name_the_trees_the_heads_can_fill() {
        assert_eq!(request_tree_names(0, false), ["auto"]);
        assert_eq!(request_tree_names(2, false), ["auto", "chain-1", "chain-2"]);
        assert_eq!(
            request_tree_names(4, false),
            [
                "auto",
                "mc_sim_7b_63",
                "chain-1",
                "chain-2",
                "chain-3",
                "chain-4"
            ]
        );
        assert_eq!(request_tree_names(1, true), ["auto", "tuned", "chain-1"]);
        assert_eq!(request_tree_names(0, true), ["auto"]);
    }

    fn plan_with(
        heads: &HeadsInfo,
        given: Option<TreeSpec>,
        costs: CostModel,
        head_ms: f64,
    ) -> MedusaPlan {
        plan_tree(heads, given, || Ok::<_, Infallible>((costs, head_ms))).unwrap()
    }

    fn heads(by_rank: Vec<Vec<f64>>) -> HeadsInfo {
        HeadsInfo {
            head_count: 2,
            layers_per_head: 1,
            shared_projection: true,
            root_token_input: false,
            path_input: false,
            default_tree: TreeSpec::chain(2),
            base: BaseIdentity {
                n_embd: 8,
                n_vocab: 16,
                tokenizer_sha256: String::new(),
            },
            projection_type: "f16".into(),
            vocab_subset: None,
            training: Some(TrainingRecord {
                prompts: 10,
                train_positions: 100,
                heldout_positions: 10,
                epochs: 1,
                heldout_top1: vec![0.6, 0.5],
                heldout_top5: vec![0.8, 0.8],
                heldout_by_rank: by_rank,
                heldout_loss: 1.0,
                command: "medusa train-heads".into(),
            }),
            compute: HeadsCompute::default(),
        }
    }

    fn accurate() -> Vec<Vec<f64>> {
        vec![vec![0.6, 0.2], vec![0.5, 0.3]]
    }

    #[test]
    fn cheap_tokens_get_a_tuned_tree() {
        // A GPU-like machine: a 6-token decode costs about what one does.
        let flat = CostModel::new(vec![(1, 10.0), (64, 10.5)]);
        let plan = plan_with(&heads(accurate()), None, flat, 0.0);
        assert_eq!(plan.origin, TreeOrigin::Tuned);
        // All four nodes the table allows past depth 0: .6, .3, .2, .18 (+ .1, .06 at depth 2).
        let tree = plan.tree.clone().expect("a tree pays");
        assert_eq!(tree.len(), 6);
        let expected = plan.expected_tokens_per_step.unwrap();
        assert!((expected - (1.0 + 0.6 + 0.2 + 0.3 + 0.18 + 0.1 + 0.06)).abs() < 1e-9);
        assert!(plan.predicted_speedup.unwrap() > 2.0);
        assert_eq!(plan.default_max_draft(4), 6);
        assert!(plan.decision.starts_with("medusa with a 6-node tree"));
        // Two heads: the chains they fill, not the 4-deep reference tree.
        let names: Vec<&str> = plan.forecasts.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["chain-1", "chain-2"]);
        let chain2 = &plan.forecasts[1];
        assert!((chain2.expected_tokens - (1.0 + 0.6 + 0.6 * 0.5)).abs() < 1e-9);
    }

    #[test]
    fn named_trees_fit_the_heads() {
        let names = |heads| {
            named_trees(heads)
                .into_iter()
                .map(|(name, _)| name)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(1), ["chain-1"]);
        assert_eq!(
            names(4),
            ["mc_sim_7b_63", "chain-1", "chain-2", "chain-3", "chain-4"]
        );
    }

    #[test]
    fn costly_tokens_fall_back_to_plain_decoding() {
        // Every extra token costs a whole step: no tree can pay.
        let steep = CostModel::new(vec![(1, 10.0), (2, 20.0), (64, 640.0)]);
        let plan = plan_with(&heads(accurate()), None, steep, 0.5);
        assert_eq!(plan.tree, None);
        assert_eq!(plan.predicted_speedup, Some(1.0));
        assert_eq!(plan.default_max_draft(16), 0);
        assert!(
            plan.decision.starts_with(
                "plain decoding: no tree is faster on this machine (its best tree, 1 node at 1.60"
            ),
            "{}",
            plan.decision
        );
    }

    #[test]
    fn a_given_tree_wins_and_unrecorded_heads_keep_their_stored_tree() {
        let flat = CostModel::new(vec![(1, 10.0), (64, 10.5)]);
        let given = plan_with(
            &heads(accurate()),
            Some(TreeSpec::chain(1)),
            flat.clone(),
            0.0,
        );
        assert_eq!(
            (given.origin, given.tree),
            (TreeOrigin::Given, Some(TreeSpec::chain(1)))
        );
        // Files written before the record held accuracy by rank, and imported heads.
        let stored = plan_with(&heads(Vec::new()), None, flat.clone(), 0.0);
        assert_eq!(
            (stored.origin, stored.tree.clone()),
            (TreeOrigin::Stored, Some(TreeSpec::chain(2)))
        );
        assert_eq!(stored.default_max_draft(1), 1);
        let mut imported = heads(accurate());
        imported.training = None;
        assert_eq!(
            plan_with(&imported, None, flat, 0.0).origin,
            TreeOrigin::Stored
        );
    }
}
