//! The figures of a comparison, computed from its runs. Pure functions: no database here.
//!
//! A comparison may repeat every mode (rounds interleaved by the caller). Speeds are decode
//! speeds (tokens after the first over the time after the first), so that prompt reading does not
//! blur them; each mode's speed-up is the median, over rounds, of its run's speed over the same
//! round's normal run, with the range of those ratios. A speed-up is only called one when the
//! ranges of the two modes' speeds do not overlap, and when what the mode drafted can explain it
//! (faster or slower alike); otherwise it is the machine's noise.

use std::collections::HashMap;

use crate::records::{ComparisonRun, ModeFigures, RunStatus, SpeedVerdict, SpeedupBounds, Spread};

/// What a comparison needs to know about one of its runs.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub run_id: i64,
    pub mode: String,
    pub status: RunStatus,
    pub tokens_per_second: Option<f64>,
    pub decode_tokens_per_second: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub mean_accepted: Option<f64>,
    pub draft_tokens: Option<i64>,
    pub output: Option<String>,
    /// Steps the history holds for the run (none for normal runs and remote engines).
    pub recorded_steps: i64,
    /// Drafted tree nodes over those steps; `None` without steps.
    pub tree_tokens: Option<i64>,
    /// Time those steps spent drafting and verifying; `None` without steps.
    pub draft_ms: Option<f64>,
    pub verify_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Figures {
    pub runs: Vec<ComparisonRun>,
    pub modes: Vec<ModeFigures>,
    pub repeats: i64,
    pub speedup: Option<f64>,
    pub outputs_identical: Option<bool>,
    pub first_difference: Option<i64>,
}

const BASELINE_MODE: &str = "normal";

/// How far outside what drafting can explain a speed-up must fall to be called the machine's
/// noise: a fifth, either way.
const UNEXPLAINED_MARGIN: f64 = 1.2;

/// The most one drafted token can add to a step's cost, in plain steps. Checking a second token
/// cost 1.6x to 2.3x the first on the 2-core test machine (docs/BENCHMARKS.md), so at most 1.3
/// plain steps; more tokens cost less each.
const EXTRA_TOKEN_COST: f64 = 1.3;

/// Fewer drafted tokens per step than this cannot move the speed by the fifth that
/// [`UNEXPLAINED_MARGIN`] treats as noise, either way: `d` tokens per step move the speed by at
/// most a factor of 1 + [`EXTRA_TOKEN_COST`] d; under 0.15, by under 20%.
const BARELY_DRAFTED_PER_STEP: f64 = 0.15;

/// Figures of `members` (in creation order). The k-th run of a mode belongs to round k; outputs
/// are checked against the first finished `normal` run.
pub(crate) fn compute(members: &[Member]) -> Figures {
    let baseline = members
        .iter()
        .find(|m| m.mode == BASELINE_MODE && m.status == RunStatus::Finished);
    let rounds = rounds(members);
    let normal_runs: Vec<&Member> = members.iter().filter(|m| m.mode == BASELINE_MODE).collect();
    let mut figures = Figures {
        runs: Vec::with_capacity(members.len()),
        modes: Vec::new(),
        repeats: 0,
        speedup: None,
        outputs_identical: None,
        first_difference: None,
    };
    for (member, &round) in members.iter().zip(&rounds) {
        let mut entry = ComparisonRun {
            run_id: member.run_id,
            mode: member.mode.clone(),
            status: member.status,
            tokens_per_second: member.tokens_per_second,
            decode_tokens_per_second: member.decode_tokens_per_second,
            ttft_ms: member.ttft_ms,
            mean_accepted: member.mean_accepted,
            draft_tokens: member.draft_tokens,
            round: round as i64,
            speedup: None,
            output_identical: None,
            first_difference: None,
        };
        if member.mode != BASELINE_MODE {
            entry.speedup = normal_runs
                .get(round)
                .and_then(|normal| ratio(member, normal));
        }
        let against =
            baseline.filter(|b| b.run_id != member.run_id && member.status == RunStatus::Finished);
        if let Some(base) = against {
            if let (Some(output), Some(base_output)) = (&member.output, &base.output) {
                let difference = first_difference(base_output, output);
                entry.output_identical = Some(difference.is_none());
                entry.first_difference = difference;
                figures.outputs_identical =
                    Some(figures.outputs_identical.unwrap_or(true) && difference.is_none());
                figures.first_difference = min_some(figures.first_difference, difference);
            }
        }
        figures.runs.push(entry);
    }
    figures.repeats = rounds.iter().map(|r| r + 1).max().unwrap_or(0) as i64;
    figures.modes = mode_figures(&figures.runs, members);
    figures.speedup = figures
        .modes
        .iter()
        .filter_map(|m| m.speedup.map(|s| s.median))
        .fold(None, |best, s| Some(best.map_or(s, |b: f64| b.max(s))));
    figures
}

/// The round of each member: how many runs of its mode came before it.
fn rounds(members: &[Member]) -> Vec<usize> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    members
        .iter()
        .map(|m| {
            let count = seen.entry(m.mode.as_str()).or_default();
            *count += 1;
            *count - 1
        })
        .collect()
}

/// `run`'s decode speed over `normal`'s, when both finished.
fn ratio(run: &Member, normal: &Member) -> Option<f64> {
    let finished = run.status == RunStatus::Finished && normal.status == RunStatus::Finished;
    match (
        run.decode_tokens_per_second,
        normal.decode_tokens_per_second,
    ) {
        (Some(run), Some(base)) if finished && base > 0.0 => Some(run / base),
        _ => None,
    }
}

/// Per mode, in order of first appearance: the spread of its finished runs' figures and its
/// verdict against normal.
fn mode_figures(runs: &[ComparisonRun], members: &[Member]) -> Vec<ModeFigures> {
    let mut modes: Vec<&str> = Vec::new();
    for run in runs {
        if !modes.contains(&run.mode.as_str()) {
            modes.push(&run.mode);
        }
    }
    fn finished<'r>(
        runs: &'r [ComparisonRun],
        mode: &'r str,
    ) -> impl Iterator<Item = &'r ComparisonRun> {
        runs.iter()
            .filter(move |r| r.mode == mode && r.status == RunStatus::Finished)
    }
    let normal_speed =
        Spread::of(finished(runs, BASELINE_MODE).filter_map(|r| r.decode_tokens_per_second));
    modes
        .into_iter()
        .map(|mode| {
            let speed = Spread::of(finished(runs, mode).filter_map(|r| r.decode_tokens_per_second));
            let speedup = Spread::of(
                runs.iter()
                    .filter(|r| r.mode == mode)
                    .filter_map(|r| r.speedup),
            );
            let is_normal = mode == BASELINE_MODE;
            let mean_accepted = if is_normal {
                None
            } else {
                Spread::of(finished(runs, mode).filter_map(|r| r.mean_accepted)).map(|s| s.median)
            };
            // Known only when every finished run reported its drafted tokens.
            let drafted = finished(runs, mode)
                .map(|r| r.draft_tokens)
                .sum::<Option<i64>>()
                .filter(|_| !is_normal);
            let finished_members = || {
                members
                    .iter()
                    .filter(move |m| m.mode == mode && m.status == RunStatus::Finished)
            };
            let drafting = ModeDrafting {
                tokens_per_step: mean_accepted,
                drafted,
                per_step: drafted_per_step(finished_members()),
                draft_share: draft_share(finished_members()),
            };
            let explainable = (!is_normal).then(|| explainable(drafting)).flatten();
            let verdict = match (speedup, speed, normal_speed) {
                (Some(speedup), Some(speed), Some(normal)) if !is_normal => {
                    Some(verdict(speedup, drafting, speed, normal))
                }
                _ => None,
            };
            ModeFigures {
                mode: mode.to_owned(),
                runs: finished(runs, mode).count() as i64,
                decode_tokens_per_second: speed,
                ttft_ms: Spread::of(finished(runs, mode).filter_map(|r| r.ttft_ms)),
                mean_accepted,
                drafted_tokens: drafted,
                drafted_per_step: drafting.per_step.filter(|_| !is_normal),
                speedup,
                explainable,
                verdict,
            }
        })
        .collect()
}

/// Drafted tree nodes per recorded step over `runs`; `None` when they recorded no step.
fn drafted_per_step<'m>(runs: impl Iterator<Item = &'m Member>) -> Option<f64> {
    let (steps, nodes) = runs.fold((0, 0), |(steps, nodes), m| {
        (steps + m.recorded_steps, nodes + m.tree_tokens.unwrap_or(0))
    });
    (steps > 0).then(|| nodes as f64 / steps as f64)
}

/// The time `runs`' recorded steps spent drafting over the time they spent verifying; `None`
/// when they recorded no verifying time. Both are measured in the same steps, so a busy machine
/// slows both and leaves the share.
fn draft_share<'m>(runs: impl Iterator<Item = &'m Member>) -> Option<f64> {
    let (draft, verify) = runs.fold((0.0, 0.0), |(draft, verify), m| {
        (
            draft + m.draft_ms.unwrap_or(0.0),
            verify + m.verify_ms.unwrap_or(0.0),
        )
    });
    (verify > 0.0).then(|| draft / verify)
}

/// What a mode drafted over its finished runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ModeDrafting {
    /// Median tokens per step.
    pub tokens_per_step: Option<f64>,
    /// Drafted tokens on the verified paths, all runs together; `None` when not reported.
    pub drafted: Option<i64>,
    /// Drafted tree nodes per step; `None` when no step was recorded.
    pub per_step: Option<f64>,
    /// Drafting time over verifying time in the recorded steps; `None` when none was recorded.
    pub draft_share: Option<f64>,
}

/// The speed-ups that `drafting` can explain. No step costs less than a plain one, so a mode is
/// at most its tokens per step as fast; at worst each drafted node costs [`EXTRA_TOKEN_COST`]
/// plain steps and drafting adds its measured share on top.
pub(crate) fn explainable(drafting: ModeDrafting) -> Option<SpeedupBounds> {
    let tokens_per_step = drafting.tokens_per_step?;
    let slowest = drafting.per_step.map(|per_step| {
        let step_cost =
            (1.0 + EXTRA_TOKEN_COST * per_step) * (1.0 + drafting.draft_share.unwrap_or(0.0));
        tokens_per_step / step_cost
    });
    Some(SpeedupBounds {
        slowest,
        fastest: tokens_per_step,
    })
}

/// What a mode's speed-up over normal means, given both modes' decode speeds over the rounds.
pub(crate) fn verdict(
    speedup: Spread,
    drafting: ModeDrafting,
    speed: Spread,
    normal: Spread,
) -> SpeedVerdict {
    if drafting.drafted == Some(0) {
        // It decoded exactly as normal does: a difference either way is the machine's.
        SpeedVerdict::DraftedNothing
    } else if drafting
        .per_step
        .is_some_and(|d| d < BARELY_DRAFTED_PER_STEP)
    {
        SpeedVerdict::BarelyDrafted
    } else if explainable(drafting).is_some_and(|bounds| {
        speedup.median > bounds.fastest * UNEXPLAINED_MARGIN
            || bounds
                .slowest
                .is_some_and(|slowest| speedup.median < slowest / UNEXPLAINED_MARGIN)
    }) {
        SpeedVerdict::Unexplained
    } else if speed.count < 2 || normal.count < 2 {
        SpeedVerdict::SingleRun
    } else if speedup.count >= 2 && speedup.min <= 1.0 && speedup.max >= 1.0 {
        // Faster in some rounds and slower in others: the rounds' conditions, not drafting.
        SpeedVerdict::RoundsDisagree
    } else if speed.min <= normal.max && normal.min <= speed.max {
        SpeedVerdict::WithinNoise
    } else if speedup.median > 1.0 {
        SpeedVerdict::Faster
    } else {
        SpeedVerdict::Slower
    }
}

/// Index, in characters, of the first place where `a` and `b` differ; `None` when they are
/// equal. When one is a prefix of the other, the difference is where the shorter one ends.
pub fn first_difference(a: &str, b: &str) -> Option<i64> {
    let mut a_chars = a.chars();
    let mut b_chars = b.chars();
    let mut index: i64 = 0;
    loop {
        match (a_chars.next(), b_chars.next()) {
            (None, None) => return None,
            (Some(x), Some(y)) if x == y => index += 1,
            _ => return Some(index),
        }
    }
}

fn min_some(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests;
