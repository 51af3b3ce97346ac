use super::*;

fn stats_with(tried: u32, accepted: u32) -> AcceptanceStats {
    AcceptanceStats {
        tried,
        accepted,
        steps: tried,
        draft_ms: 0.0,
        per_token: false,
        window: usize::MAX,
    }
}

#[test]
fn free_tokens_draft_everything() {
    // A GPU-like cost: extra tokens nearly free.
    let flat = CostModel::new(vec![(1, 10.0), (64, 10.5)]);
    assert_eq!(choose_draft_len(&flat, &stats_with(100, 60), 8), 8);
}

#[test]
fn a_drafter_priced_per_token_drafts_shorter() {
    // Extra tokens are free to verify, but each costs 2 ms to draft: flat, 8 tokens cost
    // 2 ms in all; per token, 16 ms, and the deep guesses (0.6^d) do not pay for theirs.
    let flat = CostModel::new(vec![(1, 10.0), (64, 10.5)]);
    let mut guesses = stats_with(1000, 600);
    guesses.record_draft_time(2.0);
    assert_eq!(guesses.draft_cost(8), 2.0);
    assert_eq!(choose_draft_len(&flat, &guesses, 8), 8);
    let per_token = guesses.priced_per_token();
    assert_eq!(per_token.draft_cost(8), 16.0);
    let len = choose_draft_len(&flat, &per_token, 8);
    assert!((1..8).contains(&len), "{len}");
    // A 4-token draft that took 8 ms: 2 ms a token where priced so, 8 ms a draft otherwise.
    let mut timed = AcceptanceStats::default().priced_per_token();
    timed.record_draft(8.0, 4);
    assert_eq!(timed.draft_ms(), 2.0);
    let mut flat_priced = AcceptanceStats::default();
    flat_priced.record_draft(8.0, 4);
    assert_eq!(flat_priced.draft_ms(), 8.0);
}

#[test]
fn expensive_tokens_with_poor_acceptance_draft_nothing() {
    // Each extra token costs 80% of a step and only 30% are accepted: plain decoding wins.
    let steep = CostModel::new(vec![(1, 10.0), (2, 18.0), (9, 74.0)]);
    assert_eq!(choose_draft_len(&steep, &stats_with(1000, 300), 8), 0);
}

#[test]
fn expensive_tokens_with_near_certain_acceptance_still_pay() {
    let steep = CostModel::new(vec![(1, 10.0), (2, 18.0), (9, 74.0)]);
    assert!(choose_draft_len(&steep, &stats_with(1000, 990), 8) >= 4);
}

#[test]
fn heads_draft_where_extra_tokens_are_cheap_and_not_where_they_cost_nearly_full_price() {
    // Decode costs (ms by tokens in the batch) of the default model widened 4x: on a CPU
    // where 4 tokens cost 1.40x one, and on this 2-core one, where 2 cost 1.81x.
    let flat = CostModel::new(vec![
        (1, 155.0),
        (2, 217.0),
        (4, 217.0),
        (8, 403.0),
        (32, 1193.0),
    ]);
    let steep = CostModel::new(vec![
        (1, 27.1),
        (2, 49.2),
        (4, 77.1),
        (8, 148.9),
        (32, 488.2),
    ]);
    // The heads' held-out prior (a 3-node tree forecast at 1.80 tokens per step) and
    // their time for the tree.
    let heads = AcceptanceStats::with_rate(0.45, 128, 6.0);
    assert_eq!(choose_draft_len(&flat, &heads, 3), 3);
    let heads_here = AcceptanceStats::with_rate(0.45, 128, 3.0);
    assert_eq!(choose_draft_len(&steep, &heads_here, 3), 0);
}

#[test]
fn without_evidence_nothing_is_drafted_where_tokens_cost_something() {
    let steep = CostModel::new(vec![(1, 10.0), (2, 18.0), (9, 74.0)]);
    assert_eq!(choose_draft_len(&steep, &AcceptanceStats::default(), 8), 0);
}

#[test]
fn the_cautious_rate_rises_toward_the_observed_one_with_evidence() {
    assert_eq!(AcceptanceStats::default().cautious_rate(CONFIDENCE_Z), 0.0);
    let rates: Vec<f64> = [10, 100, 1000, 100_000]
        .iter()
        .map(|&n| stats_with(n, n * 7 / 10).cautious_rate(CONFIDENCE_Z))
        .collect();
    assert!(rates.windows(2).all(|w| w[0] < w[1]), "{rates:?}");
    assert!(rates.iter().all(|&r| r < 0.7), "{rates:?}");
    assert!(rates[3] > 0.69, "{rates:?}");
    // 7 of 10 is weak evidence: about 0.5 at 1.28 standard deviations.
    assert!((rates[0] - 0.4976).abs() < 1e-3, "{rates:?}");
    assert!(stats_with(50, 50).cautious_rate(CONFIDENCE_Z) < 1.0);
}

#[test]
fn drafting_starts_once_the_evidence_is_strong_enough() {
    // Each extra token costs 60% of a step: a rate of 0.75 pays, if it is sure.
    let cost = CostModel::new(vec![(1, 10.0), (2, 16.0), (9, 58.0)]);
    assert_eq!(choose_draft_len(&cost, &stats_with(4, 3), 8), 0);
    assert!(choose_draft_len(&cost, &stats_with(400, 300), 8) > 0);
}

#[test]
fn a_higher_confidence_waits_for_more_evidence() {
    // 30 of 40 accepted: the bound is 0.68 at 1 standard deviation, 0.59 at 2; a second token
    // pays from 0.6.
    let cost = CostModel::new(vec![(1, 10.0), (2, 16.0), (9, 58.0)]);
    let stats = stats_with(40, 30);
    let len_at = |confidence_z| {
        choose_draft_lens(
            &cost,
            &[DraftOption {
                stats: &stats,
                cap: 8,
                confidence_z,
            }],
            8,
            BatchLoad::default(),
        )
        .lens[0]
    };
    assert_eq!(len_at(2.0), 0);
    assert_eq!(len_at(1.0), 1);
    assert_eq!(len_at(0.0), 1);
}

#[test]
fn a_wide_cost_band_keeps_a_draft_from_paying_on_hope() {
    use super::super::costs::{CostPoint, CostSource};
    // Centrally a second token costs 10%, but it has been seen costing 100%.
    let point = |tokens, low_ms, ms, high_ms| CostPoint {
        tokens,
        ms,
        low_ms,
        high_ms,
    };
    let unsure = CostModel::with_bands(
        vec![point(1, 10.0, 10.0, 10.0), point(2, 10.5, 11.0, 20.0)],
        CostSource::Measured,
        None,
    );
    let stats = stats_with(1000, 600);
    assert_eq!(choose_draft_len(&unsure, &stats, 1), 0);
    let sure = CostModel::new(vec![(1, 10.0), (2, 11.0)]);
    assert_eq!(choose_draft_len(&sure, &stats, 1), 1);
}

#[test]
fn the_choice_says_what_it_expected() {
    let flat = CostModel::new(vec![(1, 10.0), (64, 10.0)]);
    let stats = stats_with(1000, 1000);
    let choice = choose_draft_lens(
        &flat,
        &[DraftOption {
            stats: &stats,
            cap: 2,
            confidence_z: CONFIDENCE_Z,
        }],
        2,
        BatchLoad::default(),
    );
    assert_eq!(choice.lens, vec![2]);
    assert!(choice.drafts());
    assert!(choice.expected_tokens > 2.9 && choice.expected_tokens < 3.0);
    assert_eq!((choice.step_ms, choice.plain_ms), (10.0, 10.0));
}

#[test]
fn window_grows_on_full_acceptance_and_shrinks_on_a_miss() {
    let mut s = AcceptanceStats::default();
    s.record(&[true; 4]);
    assert_eq!(s.window, 8);
    s.record(&[true, true, true, false, false]);
    assert_eq!(s.window, 4);
    s.record(&[false]);
    assert_eq!(s.window, 2);
}

#[test]
fn trees_shrink_when_the_batch_is_already_busy() {
    // Cheap while the batch is small, each token a full step's cost beyond 8 tokens.
    let knee = CostModel::new(vec![(1, 10.0), (8, 12.0), (16, 28.0), (32, 60.0)]);
    let stats = stats_with(100, 70);
    let alone = choose_draft_len_in_batch(&knee, &stats, 8, BatchLoad::default());
    let busy = choose_draft_len_in_batch(
        &knee,
        &stats,
        8,
        BatchLoad {
            tokens: 16,
            requests: 16,
        },
    );
    assert!(alone > busy, "alone {alone}, busy {busy}");
    assert_eq!(busy, 0);
}

/// Draft lengths of `streams` requests as the scheduler fills one batch: each sees the
/// trees of those before it and the roots of those after it.
fn fill_batch(cost: &CostModel, stats: &AcceptanceStats, streams: usize) -> Vec<usize> {
    let mut tokens = 0;
    (0..streams)
        .map(|k| {
            let batch = BatchLoad {
                tokens: tokens + streams - k - 1,
                requests: streams - 1,
            };
            let len = choose_draft_len_in_batch(cost, stats, 64, batch);
            tokens += 1 + len;
            len
        })
        .collect()
}

#[test]
fn on_a_gpu_trees_stay_large_alone_and_shrink_as_streams_fill_the_batch() {
    // GPU-shaped: up to 64 tokens cost about one; beyond, each token adds its share.
    let gpu = CostModel::new(vec![
        (1, 1.40),
        (16, 1.45),
        (64, 1.60),
        (128, 2.70),
        (256, 4.90),
        (512, 9.30),
    ]);
    let stats = stats_with(1000, 700);
    let mean = |lens: &[usize]| lens.iter().sum::<usize>() as f64 / lens.len() as f64;
    let alone = fill_batch(&gpu, &stats, 1);
    let eight = fill_batch(&gpu, &stats, 8);
    let thirty_two = fill_batch(&gpu, &stats, 32);
    assert!(alone[0] >= 8, "alone {alone:?}");
    assert!(eight.iter().all(|&len| len > 0), "8 streams {eight:?}");
    assert!(mean(&eight) < alone[0] as f64, "8 streams {eight:?}");
    assert!(
        mean(&thirty_two) < mean(&eight),
        "32 streams {thirty_two:?}"
    );
    assert!(mean(&thirty_two) <= alone[0] as f64 / 2.0, "{thirty_two:?}");
    // Where every token costs its share of a step (a compute-bound batch), guesses right
    // 70% of the time add less than the same time gives the other requests.
    let linear = CostModel::new(vec![(1, 0.5), (512, 256.0)]);
    assert!(fill_batch(&linear, &stats, 32).iter().all(|&len| len == 0));
}

#[test]
fn slow_drafts_must_pay_for_themselves() {
    let flat = CostModel::new(vec![(1, 10.0), (64, 10.5)]);
    let mut stats = stats_with(100, 30);
    assert!(choose_draft_len(&flat, &stats, 8) > 0);
    // A draft that takes as long as a step, guessing right 30% of the time, does not pay.
    stats.record_draft_time(10.0);
    assert_eq!(choose_draft_len(&flat, &stats, 8), 0);
}

#[test]
fn priors_keep_the_rate_but_not_the_weight() {
    let mut learnt = stats_with(1000, 10);
    learnt.record_draft_time(4.0);
    let prior = learnt.as_prior(20);
    assert_eq!((prior.tried, prior.accepted, prior.steps), (20, 0, 20));
    assert_eq!(prior.window, INITIAL_WINDOW);
    assert_eq!(prior.draft_ms, 4.0);
    let mut total = AcceptanceStats::default();
    total.absorb(&stats_with(10, 5));
    total.absorb(&stats_with(10, 1));
    assert_eq!((total.tried, total.accepted), (20, 6));
}

#[test]
fn record_counts_depths_up_to_the_first_miss() {
    let mut s = AcceptanceStats::default();
    s.record(&[true, false, false]);
    s.record(&[true, true]);
    assert_eq!((s.tried, s.accepted, s.steps), (4, 3, 2));
}

#[test]
fn misses_stop_drafting() {
    let steep = CostModel::new(vec![(1, 10.0), (2, 18.0), (9, 74.0)]);
    let mut s = stats_with(40, 36);
    assert!(choose_draft_len(&steep, &s, 8) > 0);
    for _ in 0..30 {
        s.record(&[false]);
    }
    assert_eq!(choose_draft_len(&steep, &s, 8), 0);
}

fn both<'a>(
    lookup: (&'a AcceptanceStats, usize),
    medusa: &'a AcceptanceStats,
) -> [DraftOption<'a>; 2] {
    [
        DraftOption {
            stats: lookup.0,
            cap: lookup.1,
            confidence_z: CONFIDENCE_Z,
        },
        DraftOption {
            stats: medusa,
            cap: 16,
            confidence_z: CONFIDENCE_Z,
        },
    ]
}

#[test]
fn merged_drafting_decodes_plainly_when_every_draft_costs_more_than_it_yields() {
    // This CPU: each extra token costs about a whole step.
    let steep = CostModel::new(vec![(1, 10.0), (2, 19.0), (9, 85.0), (17, 170.0)]);
    let (lookup, medusa) = (stats_with(1000, 600), stats_with(1000, 450));
    assert_eq!(
        choose_draft_lens(
            &steep,
            &both((&lookup, 8), &medusa),
            16,
            BatchLoad::default()
        )
        .lens,
        vec![0, 0]
    );
}

#[test]
fn merged_drafting_takes_lookup_alone_on_repeated_text() {
    let steep = CostModel::new(vec![(1, 10.0), (2, 11.0), (9, 30.0), (17, 170.0)]);
    let lookup = stats_with(1000, 990);
    let mut medusa = stats_with(1000, 300);
    medusa.record_draft_time(3.0);
    let lens = choose_draft_lens(
        &steep,
        &both((&lookup, 8), &medusa),
        16,
        BatchLoad::default(),
    )
    .lens;
    assert!(lens[0] >= 4 && lens[1] == 0, "{lens:?}");
    // Without a match lookup has nothing to add, and Medusa still does not pay.
    assert_eq!(
        choose_draft_lens(
            &steep,
            &both((&lookup, 0), &medusa),
            16,
            BatchLoad::default()
        )
        .lens,
        vec![0, 0]
    );
}

#[test]
fn merged_drafting_uses_both_where_tokens_are_cheap() {
    let flat = CostModel::new(vec![(1, 10.0), (64, 10.5)]);
    let (lookup, medusa) = (stats_with(100, 60), stats_with(100, 60));
    let lens = choose_draft_lens(
        &flat,
        &both((&lookup, 6), &medusa),
        16,
        BatchLoad::default(),
    )
    .lens;
    assert!(lens[0] > 0 && lens[1] > 0, "{lens:?}");
    assert!(lens.iter().sum::<usize>() <= 16);
    assert!(lens[0] <= 6, "lookup drafts no more than it found");
    // A tight total budget is shared, never exceeded.
    let lens = choose_draft_lens(&flat, &both((&lookup, 6), &medusa), 3, BatchLoad::default()).lens;
    assert!(lens.iter().sum::<usize>() <= 3, "{lens:?}");
}

#[test]
fn a_second_drafter_adds_only_where_the_first_would_miss() {
    // Lookup nearly always right: a Medusa guess at the same depths adds almost nothing,
    // so where extra tokens cost something, Medusa does not draft beside it.
    let gentle = CostModel::new(vec![(1, 10.0), (32, 20.0)]);
    let lookup = stats_with(10_000, 9_990);
    let medusa = stats_with(10_000, 5_000);
    let lens = choose_draft_lens(
        &gentle,
        &both((&lookup, 16), &medusa),
        32,
        BatchLoad::default(),
    )
    .lens;
    assert_eq!(lens[1], 0, "{lens:?}");
    assert!(lens[0] > 8, "{lens:?}");
}
