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
            let drafting = Drafting {
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
pub(crate) struct Drafting {
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
pub(crate) fn explainable(drafting: Drafting) -> Option<SpeedupBounds> {
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
    drafting: Drafting,
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
mod tests {
    use super::*;

    fn member(id: i64, mode: &str, status: RunStatus, tps: f64, output: &str) -> Member {
        Member {
            run_id: id,
            mode: mode.into(),
            status,
            tokens_per_second: Some(tps * 0.9),
            decode_tokens_per_second: Some(tps),
            ttft_ms: Some(100.0),
            mean_accepted: Some(if mode == "normal" { 1.0 } else { 2.0 }),
            draft_tokens: Some(if mode == "normal" { 0 } else { 7 }),
            output: Some(output.into()),
            recorded_steps: if mode == "normal" { 0 } else { 4 },
            tree_tokens: (mode != "normal").then_some(8),
            draft_ms: (mode != "normal").then_some(4.0),
            verify_ms: (mode != "normal").then_some(40.0),
        }
    }

    /// Drafting at `tokens_per_step` whose drafted count was not reported.
    fn per_step(tokens_per_step: f64) -> Drafting {
        Drafting {
            tokens_per_step: Some(tokens_per_step),
            drafted: None,
            per_step: None,
            draft_share: None,
        }
    }

    fn spread(median: f64, min: f64, max: f64, count: i64) -> Spread {
        Spread {
            median,
            min,
            max,
            count,
        }
    }

    #[test]
    fn first_difference_counts_characters() {
        assert_eq!(first_difference("abc", "abc"), None);
        assert_eq!(first_difference("abc", "abd"), Some(2));
        assert_eq!(first_difference("abc", "ab"), Some(2));
        assert_eq!(first_difference("", "x"), Some(0));
        // Multi-byte characters count once.
        assert_eq!(first_difference("héllo", "héllø"), Some(4));
    }

    #[test]
    fn figures_are_against_the_finished_normal_run() {
        let members = [
            member(1, "normal", RunStatus::Finished, 20.0, "the cat sat"),
            member(2, "medusa", RunStatus::Finished, 30.0, "the cat sat"),
            member(3, "lookup", RunStatus::Finished, 50.0, "the cat ran"),
            member(4, "medusa", RunStatus::Cancelled, 90.0, "the"),
        ];
        let figures = compute(&members);
        assert_eq!(figures.speedup, Some(2.5));
        assert_eq!(figures.repeats, 2);
        assert_eq!(figures.outputs_identical, Some(false));
        assert_eq!(figures.first_difference, Some(8));
        let per_run: Vec<_> = figures
            .runs
            .iter()
            .map(|r| {
                (
                    r.run_id,
                    r.round,
                    r.speedup,
                    r.output_identical,
                    r.first_difference,
                )
            })
            .collect();
        assert_eq!(
            per_run,
            [
                (1, 0, None, None, None),
                (2, 0, Some(1.5), Some(true), None),
                (3, 0, Some(2.5), Some(false), Some(8)),
                // Round 1 has no normal run.
                (4, 1, None, None, None),
            ]
        );
        let medusa = &figures.modes[1];
        assert_eq!(medusa.runs, 1);
        assert_eq!(medusa.speedup, Some(spread(1.5, 1.5, 1.5, 1)));
        assert_eq!(medusa.verdict, Some(SpeedVerdict::SingleRun));
    }

    #[test]
    fn no_finished_baseline_means_no_figures() {
        let members = [
            member(1, "normal", RunStatus::Failed, 20.0, ""),
            member(2, "medusa", RunStatus::Finished, 30.0, "x"),
        ];
        let figures = compute(&members);
        assert_eq!(figures.speedup, None);
        assert_eq!(figures.outputs_identical, None);
        assert_eq!(figures.first_difference, None);
        assert!(figures.runs.iter().all(|r| r.speedup.is_none()));
        assert!(figures.modes.iter().all(|m| m.verdict.is_none()));
    }

    #[test]
    fn a_second_normal_run_is_compared_but_not_a_speedup() {
        let members = [
            member(1, "normal", RunStatus::Finished, 20.0, "same"),
            member(2, "normal", RunStatus::Finished, 40.0, "same"),
        ];
        let figures = compute(&members);
        assert_eq!(figures.speedup, None);
        assert_eq!(figures.outputs_identical, Some(true));
        assert_eq!(figures.runs[1].speedup, None);
        assert_eq!(
            figures.modes[0].decode_tokens_per_second,
            Some(spread(30.0, 20.0, 40.0, 2))
        );
        assert_eq!(figures.modes[0].mean_accepted, None);
    }

    #[test]
    fn repeats_pair_runs_by_round_and_take_medians() {
        // Rotating order: round 0 normal first, round 1 medusa first, round 2 normal first.
        let members = [
            member(1, "normal", RunStatus::Finished, 100.0, "a"),
            member(2, "medusa", RunStatus::Finished, 150.0, "a"),
            member(3, "medusa", RunStatus::Finished, 120.0, "a"),
            member(4, "normal", RunStatus::Finished, 80.0, "a"),
            member(5, "normal", RunStatus::Finished, 90.0, "a"),
            member(6, "medusa", RunStatus::Finished, 180.0, "a"),
        ];
        let figures = compute(&members);
        assert_eq!(figures.repeats, 3);
        let speedups: Vec<_> = figures.runs.iter().map(|r| r.speedup).collect();
        assert_eq!(
            speedups,
            [None, Some(1.5), Some(1.5), None, None, Some(2.0)]
        );
        let medusa = &figures.modes[1];
        assert_eq!(medusa.mode, "medusa");
        assert_eq!(medusa.speedup, Some(spread(1.5, 1.5, 2.0, 3)));
        assert_eq!(
            medusa.decode_tokens_per_second,
            Some(spread(150.0, 120.0, 180.0, 3))
        );
        assert_eq!(medusa.ttft_ms, Some(spread(100.0, 100.0, 100.0, 3)));
        assert_eq!(medusa.mean_accepted, Some(2.0));
        assert_eq!(medusa.verdict, Some(SpeedVerdict::Faster));
        assert_eq!(figures.speedup, Some(1.5));
        assert_eq!(figures.outputs_identical, Some(true));
    }

    #[test]
    fn overlapping_ranges_are_within_noise() {
        let normal = spread(100.0, 90.0, 110.0, 3);
        // Faster in every round, yet the speeds' ranges overlap.
        assert_eq!(
            verdict(
                spread(1.05, 1.01, 1.1, 3),
                per_step(1.0),
                spread(102.0, 95.0, 109.0, 3),
                normal
            ),
            SpeedVerdict::WithinNoise
        );
        // Touching ranges overlap too.
        assert_eq!(
            verdict(
                spread(1.2, 1.05, 1.3, 3),
                per_step(2.0),
                spread(120.0, 110.0, 130.0, 3),
                normal
            ),
            SpeedVerdict::WithinNoise
        );
        assert_eq!(
            verdict(
                spread(1.3, 1.2, 1.4, 3),
                per_step(2.0),
                spread(130.0, 111.0, 140.0, 3),
                normal
            ),
            SpeedVerdict::Faster
        );
        assert_eq!(
            verdict(
                spread(0.5, 0.4, 0.6, 3),
                per_step(2.0),
                spread(50.0, 40.0, 60.0, 3),
                normal
            ),
            SpeedVerdict::Slower
        );
    }

    #[test]
    fn a_speedup_the_tokens_per_step_cannot_explain_is_noise() {
        let normal = spread(10.0, 9.0, 11.0, 3);
        let fast = spread(97.5, 90.0, 99.0, 3);
        assert_eq!(
            verdict(spread(9.75, 8.0, 11.0, 3), per_step(1.0), fast, normal),
            SpeedVerdict::Unexplained
        );
        assert_eq!(
            verdict(spread(9.75, 8.0, 11.0, 1), per_step(1.02), fast, normal),
            SpeedVerdict::Unexplained
        );
        // Not at 1.06 tokens per step either: a step costs at least a plain one.
        assert_eq!(
            verdict(spread(9.75, 8.0, 11.0, 3), per_step(1.06), fast, normal),
            SpeedVerdict::Unexplained
        );
        // Enough tokens per step to explain it.
        assert_eq!(
            verdict(spread(9.75, 8.0, 11.0, 3), per_step(9.0), fast, normal),
            SpeedVerdict::Faster
        );
        // Small gains at one token per step are left to the ranges.
        assert_eq!(
            verdict(
                spread(1.1, 1.02, 1.2, 3),
                per_step(1.0),
                spread(11.0, 10.0, 12.0, 3),
                normal
            ),
            SpeedVerdict::WithinNoise
        );
    }

    #[test]
    fn a_slowdown_what_was_drafted_cannot_explain_is_noise() {
        let normal = spread(100.0, 95.0, 105.0, 3);
        // 1.15 tokens per step from 0.5 drafted per step with a tenth of each step spent drafting:
        // at worst 1.15 / (1.65 * 1.1), 0.63x. Slower in every round at 0.27x is the machine's.
        let drafting = Drafting {
            tokens_per_step: Some(1.15),
            drafted: Some(30),
            per_step: Some(0.5),
            draft_share: Some(0.1),
        };
        let bounds = explainable(drafting).unwrap();
        assert_eq!(bounds.fastest, 1.15);
        assert!((bounds.slowest.unwrap() - 1.15 / (1.65 * 1.1)).abs() < 1e-12);
        assert_eq!(
            verdict(
                spread(0.27, 0.25, 0.3, 3),
                drafting,
                spread(27.0, 25.0, 30.0, 3),
                normal
            ),
            SpeedVerdict::Unexplained
        );
        // Within a fifth of the bound it is measured.
        assert_eq!(
            verdict(
                spread(0.55, 0.53, 0.57, 3),
                drafting,
                spread(55.0, 53.0, 57.0, 3),
                normal
            ),
            SpeedVerdict::Slower
        );
        // A drafter that takes most of each step explains more: the heads' share is measured.
        let costly = Drafting {
            draft_share: Some(2.0),
            ..drafting
        };
        assert_eq!(
            verdict(
                spread(0.27, 0.25, 0.3, 3),
                costly,
                spread(27.0, 25.0, 30.0, 3),
                normal
            ),
            SpeedVerdict::Slower
        );
        // Without recorded steps (a remote engine) the slowest is unknown: the ranges decide.
        let remote = Drafting {
            per_step: None,
            draft_share: None,
            ..drafting
        };
        assert_eq!(explainable(remote).unwrap().slowest, None);
        assert_eq!(
            verdict(
                spread(0.27, 0.25, 0.3, 3),
                remote,
                spread(27.0, 25.0, 30.0, 3),
                normal
            ),
            SpeedVerdict::Slower
        );
    }

    #[test]
    fn figures_carry_the_speedups_drafting_explains() {
        let figures = compute(&[
            member(1, "normal", RunStatus::Finished, 100.0, "a"),
            member(2, "medusa", RunStatus::Finished, 150.0, "a"),
        ]);
        assert_eq!(figures.modes[0].explainable, None);
        // Two tokens per step from two drafted nodes, a tenth of each step drafting.
        let bounds = figures.modes[1].explainable.unwrap();
        assert_eq!(bounds.fastest, 2.0);
        assert!((bounds.slowest.unwrap() - 2.0 / (3.6 * 1.1)).abs() < 1e-12);
    }

    #[test]
    fn a_mode_that_drafted_nothing_is_noise_in_either_direction() {
        let normal = spread(100.0, 95.0, 105.0, 3);
        let plain = Drafting {
            tokens_per_step: Some(1.0),
            drafted: Some(0),
            per_step: Some(0.0),
            draft_share: None,
        };
        for (speedup, speed) in [
            (spread(0.39, 0.07, 0.54, 3), spread(39.0, 7.0, 54.0, 3)),
            (spread(1.5, 1.3, 1.6, 3), spread(150.0, 130.0, 160.0, 3)),
            (spread(1.5, 1.5, 1.5, 1), spread(150.0, 150.0, 150.0, 1)),
        ] {
            assert_eq!(
                verdict(speedup, plain, speed, normal),
                SpeedVerdict::DraftedNothing
            );
        }
        // Drafting that was all rejected can explain a slowdown: it is measured.
        let rejected = Drafting {
            tokens_per_step: Some(1.0),
            drafted: Some(40),
            per_step: Some(2.0),
            draft_share: None,
        };
        assert_eq!(
            verdict(
                spread(0.5, 0.4, 0.6, 3),
                rejected,
                spread(50.0, 40.0, 60.0, 3),
                normal
            ),
            SpeedVerdict::Slower
        );
    }

    #[test]
    fn a_mode_that_drafted_nothing_says_so_in_its_figures() {
        let mut lookup = member(2, "lookup", RunStatus::Finished, 300.0, "same");
        lookup.draft_tokens = Some(0);
        let figures = compute(&[
            member(1, "normal", RunStatus::Finished, 100.0, "same"),
            lookup,
            member(3, "medusa", RunStatus::Finished, 150.0, "same"),
        ]);
        assert_eq!(figures.modes[0].drafted_tokens, None);
        assert_eq!(figures.modes[1].verdict, Some(SpeedVerdict::DraftedNothing));
        assert_eq!(figures.modes[1].drafted_tokens, Some(0));
        assert_eq!(figures.modes[2].drafted_tokens, Some(7));
    }

    #[test]
    fn a_mode_that_barely_drafted_is_noise_in_either_direction() {
        let normal = spread(10.0, 3.0, 10.7, 2);
        let barely = Drafting {
            tokens_per_step: Some(1.03),
            drafted: Some(12),
            per_step: Some(0.1),
            draft_share: None,
        };
        // Slower in both rounds, with ranges apart: 0.1 drafted tokens per step cannot cost 27%.
        assert_eq!(
            verdict(
                spread(0.73, 0.72, 0.74, 2),
                barely,
                spread(2.0, 1.9, 2.1, 2),
                normal
            ),
            SpeedVerdict::BarelyDrafted
        );
        // Nor gain 50%, and one round is enough to say so.
        assert_eq!(
            verdict(
                spread(1.5, 1.5, 1.5, 1),
                barely,
                spread(15.0, 15.0, 15.0, 1),
                spread(10.0, 10.0, 10.0, 1)
            ),
            SpeedVerdict::BarelyDrafted
        );
        // At the threshold drafting can explain a small slowdown: the ranges decide.
        let enough = Drafting {
            per_step: Some(BARELY_DRAFTED_PER_STEP),
            draft_share: None,
            ..barely
        };
        assert_eq!(
            verdict(
                spread(0.8, 0.78, 0.82, 2),
                enough,
                spread(2.4, 2.3, 2.5, 2),
                spread(3.0, 2.9, 3.1, 2)
            ),
            SpeedVerdict::Slower
        );
        // Unknown per step (a remote engine records no steps): the other rules decide.
        let unknown = Drafting {
            per_step: None,
            draft_share: None,
            ..barely
        };
        assert_eq!(
            verdict(
                spread(0.5, 0.45, 0.55, 2),
                unknown,
                spread(1.5, 1.4, 1.6, 2),
                spread(3.0, 2.9, 3.1, 2)
            ),
            SpeedVerdict::Slower
        );
    }

    #[test]
    fn rounds_on_both_sides_of_one_are_noise() {
        let drafting = Drafting {
            tokens_per_step: Some(1.8),
            drafted: Some(60),
            per_step: Some(3.0),
            draft_share: None,
        };
        // Paired by round: 1.2x in one, 0.9x in another, whatever the speeds' ranges say.
        assert_eq!(
            verdict(
                spread(1.1, 0.9, 1.2, 3),
                drafting,
                spread(30.0, 29.0, 31.0, 3),
                spread(20.0, 19.0, 21.0, 3)
            ),
            SpeedVerdict::RoundsDisagree
        );
        // A round at exactly 1.0 is no evidence of speed either.
        assert_eq!(
            verdict(
                spread(1.2, 1.0, 1.3, 2),
                drafting,
                spread(30.0, 29.0, 31.0, 2),
                spread(20.0, 19.0, 21.0, 2)
            ),
            SpeedVerdict::RoundsDisagree
        );
        // Every round faster, ranges apart.
        assert_eq!(
            verdict(
                spread(1.5, 1.4, 1.6, 3),
                drafting,
                spread(30.0, 29.0, 31.0, 3),
                spread(20.0, 19.0, 21.0, 3)
            ),
            SpeedVerdict::Faster
        );
    }

    #[test]
    fn drafted_per_step_counts_whole_trees_over_recorded_steps() {
        let mut first = member(2, "medusa", RunStatus::Finished, 30.0, "a");
        (first.recorded_steps, first.tree_tokens) = (10, Some(1));
        let mut second = member(4, "medusa", RunStatus::Finished, 30.0, "a");
        (second.recorded_steps, second.tree_tokens) = (30, Some(3));
        // A cancelled run's steps do not count.
        let mut cancelled = member(6, "medusa", RunStatus::Cancelled, 30.0, "a");
        (cancelled.recorded_steps, cancelled.tree_tokens) = (5, Some(50));
        let mut remote = member(3, "lookup", RunStatus::Finished, 30.0, "a");
        (remote.recorded_steps, remote.tree_tokens) = (0, None);
        let figures = compute(&[
            member(1, "normal", RunStatus::Finished, 20.0, "a"),
            first,
            remote,
            member(5, "normal", RunStatus::Finished, 21.0, "a"),
            second,
            cancelled,
        ]);
        let per_step: Vec<_> = figures
            .modes
            .iter()
            .map(|m| (m.mode.as_str(), m.drafted_per_step, m.verdict))
            .collect();
        assert_eq!(
            per_step,
            [
                ("normal", None, None),
                // 4 nodes over 40 steps: 0.1 per step, 1.5x is noise.
                ("medusa", Some(0.1), Some(SpeedVerdict::BarelyDrafted)),
                ("lookup", None, Some(SpeedVerdict::SingleRun)),
            ]
        );
    }

    #[test]
    fn one_run_each_cannot_tell_speed_from_noise() {
        let one = |v| spread(v, v, v, 1);
        assert_eq!(
            verdict(one(1.1), per_step(1.5), one(110.0), one(100.0)),
            SpeedVerdict::SingleRun
        );
    }

    #[test]
    fn spreads_take_the_middle_and_skip_non_finite_values() {
        assert_eq!(Spread::of([3.0, 1.0, 2.0]), Some(spread(2.0, 1.0, 3.0, 3)));
        assert_eq!(
            Spread::of([4.0, 1.0, 2.0, f64::NAN, 3.0]),
            Some(spread(2.5, 1.0, 4.0, 4))
        );
        assert_eq!(Spread::of([]), None);
    }
}
