//! What an imported run may hold: values no run of this program has (negative counts or times,
//! dates more than a day ahead) and sizes beyond any real run's are rejected, run by run.

use chrono::{DateTime, Duration, Utc};

use crate::records::{PromptRecord, Run, RunWithSteps, StepRecord};

/// Largest prompt, output or error text an imported run may hold.
pub(crate) const MAX_TEXT_BYTES: usize = 4 << 20;
/// Most generated token ids an imported run may hold: a token writes a byte of output at least
/// (or part of one character with its neighbours), so no more than the largest output's bytes.
const MAX_TOKEN_IDS: usize = MAX_TEXT_BYTES;
/// Most nodes an imported step's tree may hold (the engine drafts at most 128).
const MAX_TREE_NODES: usize = 1024;

/// Most steps an imported run may hold.
const MAX_STEPS: usize = 100_000;

/// Why an exported run cannot be stored, if it cannot: values no run of this program has
/// (negative counts or times, dates more than a day ahead) or sizes beyond any real run's.
pub(crate) fn check_imported(entry: &RunWithSteps, now: DateTime<Utc>) -> Result<(), String> {
    let run = &entry.run;
    check_run(run, now + Duration::days(1))?;
    if entry.steps.len() > MAX_STEPS {
        return Err(format!("{} steps (at most {MAX_STEPS})", entry.steps.len()));
    }
    entry.steps.iter().try_for_each(check_step)
}

fn check_run(run: &Run, latest: DateTime<Utc>) -> Result<(), String> {
    if run.created_at > latest {
        return Err(format!("created_at {} is in the future", run.created_at));
    }
    if let Some(finished_at) = run.finished_at {
        if finished_at > latest || finished_at < run.created_at {
            return Err(format!(
                "finished_at {finished_at} is not between created_at and now"
            ));
        }
    }
    let counts = [
        ("prompt_tokens", run.prompt_tokens),
        ("tokens_generated", run.tokens_generated),
        ("steps", run.steps),
        ("draft_tokens", run.draft_tokens),
        ("accepted_draft_tokens", run.accepted_draft_tokens),
    ];
    for (name, value) in counts {
        if value.is_some_and(|v| v < 0) {
            return Err(format!("{name} is negative"));
        }
    }
    let figures = [
        ("queue_ms", run.queue_ms),
        ("ttft_ms", run.ttft_ms),
        ("total_ms", run.total_ms),
        ("tokens_per_second", run.tokens_per_second),
        ("decode_tokens_per_second", run.decode_tokens_per_second),
        ("mean_accepted", run.mean_accepted),
    ];
    for (name, value) in figures {
        check_figure(name, value)?;
    }
    for &rate in run.acceptance_by_depth.iter().flatten() {
        check_figure("acceptance_by_depth", Some(rate))?;
    }
    let token_count = run.token_ids.as_ref().map_or(0, Vec::len);
    if token_count > MAX_TOKEN_IDS {
        return Err(format!(
            "token_ids holds {token_count} tokens (at most {MAX_TOKEN_IDS})"
        ));
    }
    let logprob_count = run.logprobs.as_ref().map_or(0, Vec::len);
    if logprob_count > MAX_TOKEN_IDS {
        return Err(format!(
            "logprobs holds {logprob_count} tokens (at most {MAX_TOKEN_IDS})"
        ));
    }
    let prompt_bytes = match &run.prompt {
        PromptRecord::Text(text) => text.len(),
        PromptRecord::Chat(messages) => messages.iter().map(|m| m.content.len()).sum(),
    };
    let texts = [
        ("prompt", prompt_bytes),
        ("output", run.output.as_ref().map_or(0, String::len)),
        ("error", run.error.as_ref().map_or(0, String::len)),
    ];
    for (name, bytes) in texts {
        if bytes > MAX_TEXT_BYTES {
            return Err(format!(
                "{name} holds {bytes} bytes (at most {MAX_TEXT_BYTES})"
            ));
        }
    }
    Ok(())
}

fn check_step(step: &StepRecord) -> Result<(), String> {
    if step.step_index < 0 || step.tree_size < 0 || step.tree_depth < 0 || step.accepted_len < 0 {
        return Err(format!("step {} has a negative count", step.step_index));
    }
    check_figure("draft_ms", Some(step.draft_ms))?;
    check_figure("verify_ms", Some(step.verify_ms))?;
    let Some(tree) = &step.tree else {
        return Ok(());
    };
    if tree.nodes.len() > MAX_TREE_NODES {
        return Err(format!(
            "step {} drafted {} nodes (at most {MAX_TREE_NODES})",
            step.step_index,
            tree.nodes.len()
        ));
    }
    // A parent comes before its children: what the inspector relies on to draw the tree.
    let misplaced = tree
        .nodes
        .iter()
        .enumerate()
        .find(|(i, node)| node.parent.is_some_and(|p| p as usize >= *i));
    match misplaced {
        Some((i, _)) => Err(format!(
            "step {} node {i} comes before its parent",
            step.step_index
        )),
        None => Ok(()),
    }
}

/// A time, rate or ratio: finite and not negative.
fn check_figure(name: &str, value: Option<f64>) -> Result<(), String> {
    match value {
        Some(v) if !v.is_finite() || v < 0.0 => Err(format!("{name} is {v:?}")),
        _ => Ok(()),
    }
}
