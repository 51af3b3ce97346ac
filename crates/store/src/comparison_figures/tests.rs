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
fn per_step(tokens_per_step: f64) -> ModeDrafting {
    ModeDrafting {
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
    let drafting = ModeDrafting {
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
    let costly = ModeDrafting {
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
    let remote = ModeDrafting {
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
    let plain = ModeDrafting {
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
    let rejected = ModeDrafting {
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
    let barely = ModeDrafting {
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
    let enough = ModeDrafting {
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
    let unknown = ModeDrafting {
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
    let drafting = ModeDrafting {
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
