//! Sizing the Medusa tree to the heads and the machine: the model answers a prompt set greedily,
//! the heads are checked along its answers, decode costs are measured, and the tree builder
//! predicts tokens per second for every tree size.

use serde::Serialize;

use crate::engine::Engine;
use crate::error::EngineError;
use crate::medusa::accuracy::HeadAccuracy;
use crate::request::{ChatMessage, GenerateRequest, Prompt, SamplingParams};
use crate::speculative::costs::{CostModel, DecodeCosts};
use crate::speculative::tree::TreeSpec;
use crate::speculative::tree_builder::{tune, TuneResult, TunedSize};

/// Short chat requests of different kinds, used to benchmark and tune.
pub const DEFAULT_PROMPTS: &[&str] = &[
    "Write a short story about a robot who learns to paint.",
    "Explain how a rainbow forms, in simple terms.",
    "List five tips for staying focused while studying.",
    "Write a Python function that checks whether a number is prime.",
    "What are the main differences between a cat and a dog as pets?",
    "Describe a typical day in the life of a lighthouse keeper.",
    "Give me a recipe for a simple tomato soup.",
    "Summarize the water cycle in a few sentences.",
];

/// The prompts in a prompt file's text: one per line, trimmed, blank lines skipped.
pub fn prompt_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// How to tune.
#[derive(Debug, Clone)]
pub struct TuneOptions {
    pub prompts: Vec<String>,
    /// Tokens the model writes per prompt.
    pub max_tokens: u32,
    /// Candidates per head measured.
    pub top_k: usize,
    /// Largest tree considered.
    pub max_nodes: usize,
}

impl Default for TuneOptions {
    fn default() -> Self {
        Self {
            prompts: DEFAULT_PROMPTS.iter().map(|p| p.to_string()).collect(),
            max_tokens: 128,
            top_k: 10,
            max_nodes: 64,
        }
    }
}

/// What tuning measured and decided.
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct TuneReport {
    /// The decode costs measured for this tune, with their bands.
    pub decode_costs: DecodeCosts,
    pub ms_per_head: f64,
    pub positions: Vec<u64>,
    pub head_top1_accuracy: Vec<f64>,
    pub head_accuracy_by_rank: Vec<Vec<f64>>,
    pub plain_tokens_per_second: f64,
    pub budgets: Vec<TunedSize>,
    /// Per budget, the tokens per step its tree really would have yielded on these prompts
    /// (the budgets' `expected_tokens` assume heads are right independently of each other).
    pub measured_tokens_per_step: Vec<f64>,
    /// The Medusa paper's `mc_sim_7b_63` tree on these prompts, for heads deep enough for it.
    pub reference_tree: Option<ReferenceTree>,
    /// The fastest tree, when one beats plain decoding.
    pub chosen: Option<ChosenTree>,
    /// The tree of the rank paths most often right on these prompts, as many nodes as the
    /// largest size considered.
    pub counted_tree: Option<CountedTree>,
    pub decision: String,
}

#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct ChosenTree {
    pub nodes: usize,
    pub expected_tokens_per_step: f64,
    pub predicted_speedup: f64,
    /// Medusa choices: per path, the rank at each depth.
    pub tree: Vec<Vec<usize>>,
}

/// A tree of the rank paths that were right most often
/// ([`HeadAccuracy::tree_of_most_accepted_paths`]), which needs no assumption that heads are
/// right independently.
#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct CountedTree {
    pub nodes: usize,
    pub depth: usize,
    /// Tokens per step it yields on the prompts it was counted on.
    pub measured_tokens_per_step: f64,
    /// Counted on half of the prompts and measured on the other half, both ways, averaged:
    /// what to expect on prompts it was not built from. `None` with fewer than two prompts.
    pub cross_checked_tokens_per_step: Option<f64>,
    /// Medusa choices: per path, the rank at each depth.
    pub tree: Vec<Vec<usize>>,
}

impl CountedTree {
    /// Counted on `all` (every prompt's measurement together) and cross-checked between the
    /// even and odd prompts of `per_prompt`.
    fn measure(all: &HeadAccuracy, per_prompt: &[HeadAccuracy], max_nodes: usize) -> Option<Self> {
        let tree = all.tree_of_most_accepted_paths(max_nodes)?;
        let half = |parity: usize| {
            let mut half = HeadAccuracy::default();
            for accuracy in per_prompt.iter().skip(parity).step_by(2) {
                half.absorb(accuracy);
            }
            half
        };
        let (even, odd) = (half(0), half(1));
        let one_way = |built: &HeadAccuracy, measured: &HeadAccuracy| {
            measured.accepted_per_step(&built.tree_of_most_accepted_paths(max_nodes)?)
        };
        let cross_checked = match (one_way(&even, &odd), one_way(&odd, &even)) {
            (Some(a), Some(b)) => Some((a + b) / 2.0),
            _ => None,
        };
        Some(Self {
            nodes: tree.len(),
            depth: tree.depth(),
            measured_tokens_per_step: all.accepted_per_step(&tree).unwrap_or(1.0),
            cross_checked_tokens_per_step: cross_checked,
            tree: tree.paths().to_vec(),
        })
    }
}

#[derive(Debug, Clone, Serialize, ts_rs::TS)]
pub struct ReferenceTree {
    pub name: &'static str,
    pub nodes: usize,
    pub measured_tokens_per_step: f64,
}

impl TuneReport {
    fn new(
        accuracy: &HeadAccuracy,
        counted_tree: Option<CountedTree>,
        costs: DecodeCosts,
        result: TuneResult,
    ) -> Self {
        let measured = |tree: &TreeSpec| accuracy.accepted_per_step(tree).unwrap_or(1.0);
        let measured_tokens_per_step = result.trees.iter().map(|t| measured(&t.tree)).collect();
        let reference = TreeSpec::mc_sim_7b_63();
        let reference_tree =
            (reference.depth() <= accuracy.positions.len()).then(|| ReferenceTree {
                name: "mc_sim_7b_63",
                nodes: reference.len(),
                measured_tokens_per_step: measured(&reference),
            });
        let chosen = result.chosen.map(|i| ChosenTree {
            nodes: result.sizes[i].nodes,
            expected_tokens_per_step: result.sizes[i].expected_tokens,
            predicted_speedup: result.sizes[i].predicted_speedup,
            tree: result.trees[i].tree.paths().to_vec(),
        });
        let decision = result.decision();
        Self {
            decode_costs: costs,
            ms_per_head: accuracy.mean_head_ms(),
            positions: accuracy.positions.clone(),
            head_top1_accuracy: accuracy.top1(),
            head_accuracy_by_rank: accuracy.rates(),
            plain_tokens_per_second: result.plain_tokens_per_second,
            budgets: result.sizes,
            measured_tokens_per_step,
            reference_tree,
            chosen,
            counted_tree,
            decision,
        }
    }
}

/// Runs the whole measurement on `engine` (blocking; other requests wait while the heads are
/// measured). `progress` hears `(prompt done, prompts)`.
pub fn tune_engine(
    engine: &Engine,
    options: &TuneOptions,
    mut progress: impl FnMut(usize, usize),
) -> Result<TuneReport, EngineError> {
    let heads_info = engine
        .info()
        .heads
        .as_ref()
        .ok_or(EngineError::NoMedusaHeads)?;
    let heads = heads_info.head_count;
    let invalid = |name, message: String| Err(EngineError::InvalidParameter { name, message });
    if options.prompts.is_empty() {
        return invalid("prompts", "there are no prompts to tune on".into());
    }
    if !(1..=crate::speculative::tree::MAX_RANK).contains(&options.top_k) {
        return invalid(
            "top_k",
            format!(
                "must be between 1 and {}",
                crate::speculative::tree::MAX_RANK
            ),
        );
    }
    if !(1..=256).contains(&options.max_nodes) {
        return invalid("max_nodes", "must be between 1 and 256".into());
    }
    let mut accuracy = HeadAccuracy::new(heads, options.top_k);
    let mut per_prompt = Vec::with_capacity(options.prompts.len());
    for (i, text) in options.prompts.iter().enumerate() {
        let prompt = Prompt::Chat(vec![ChatMessage::new("user", text.as_str())]);
        // The model's own greedy answer is what the heads must predict.
        let answer = engine
            .generate(
                GenerateRequest::new(prompt.clone(), options.max_tokens)
                    .with_sampling(SamplingParams::greedy()),
            )?
            .wait()?;
        let measured = engine.measure_heads(prompt, answer.token_ids, options.top_k)?;
        accuracy.absorb(&measured);
        per_prompt.push(measured);
        progress(i + 1, options.prompts.len());
    }
    let costs = engine.measure_decode_costs()?;
    let table = accuracy
        .table()
        .map_err(|e| EngineError::Heads(e.to_string()))?;
    let head_cost = heads_info.head_cost(accuracy.mean_head_ms());
    let model = CostModel::with_bands(costs.points.clone(), costs.source, costs.busy.clone());
    let result = tune(&table, &model, head_cost, options.max_nodes);
    let counted_tree = CountedTree::measure(&accuracy, &per_prompt, options.max_nodes);
    Ok(TuneReport::new(&accuracy, counted_tree, costs, result))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn positions(ranks: &[[Option<usize>; 2]]) -> HeadAccuracy {
        let mut accuracy = HeadAccuracy::new(2, 3);
        for r in ranks {
            accuracy.record_position(r.to_vec());
        }
        accuracy
    }

    #[test]
    fn the_counted_tree_is_checked_on_the_prompts_it_was_not_built_from() {
        // Prompt 1: head 1 right at rank 0, then head 2 at rank 0. Prompt 2: head 1 right at
        // rank 1 only.
        let first = positions(&[[Some(0), Some(0)]; 6]);
        let second = positions(&[[Some(1), None]; 6]);
        let mut both = first.clone();
        both.absorb(&second);
        let counted = CountedTree::measure(&both, &[first.clone(), second], 2).unwrap();
        // Built from both: [0], [0, 0] and [1] are each right 6 times; the shallower first.
        assert_eq!(counted.tree, vec![vec![0], vec![1]]);
        assert_eq!((counted.nodes, counted.depth), (2, 1));
        // Over all 12 positions: steps of 2 tokens each.
        assert_eq!(counted.measured_tokens_per_step, 2.0);
        // Built from one prompt, each tree misses the other prompt's rank: 1 token per step.
        assert_eq!(counted.cross_checked_tokens_per_step, Some(1.0));
        // One prompt cannot be split.
        let alone = CountedTree::measure(&first, std::slice::from_ref(&first), 2).unwrap();
        assert_eq!(alone.cross_checked_tokens_per_step, None);
        let never = positions(&[[None, None]]);
        assert!(CountedTree::measure(&never, std::slice::from_ref(&never), 2).is_none());
    }

    #[test]
    fn prompt_files_hold_one_trimmed_prompt_per_line() {
        assert_eq!(
            prompt_lines("  first \n\n\tsecond\r\n   \nthird"),
            vec!["first", "second", "third"]
        );
        assert!(prompt_lines("\n \n").is_empty());
    }
}
