//! Comparisons computed from hand-made runs.

use sqlx::Row;
use store::{ComparisonRun, RunFilter, RunStatus, SpeedVerdict, StepRecord, StoreError};

use crate::common::*;

const NORMAL_TEXT: &str = "The cat sat on the mat.";
const DIFFERENT_TEXT: &str = "The cat sat on a mat.";

#[tokio::test]
async fn comparison_computes_speedup_identity_and_first_difference() {
    let (_dir, store) = temp_store().await;
    let prompt = chat("Where did the cat sit?");
    let normal = finished_run(
        &store,
        &new_run("normal", "m", prompt.clone(), 0),
        &outcome(NORMAL_TEXT, 20.0, 0),
        3,
    )
    .await;
    let medusa = finished_run(
        &store,
        &new_run("medusa", "m", prompt.clone(), 1),
        &outcome(NORMAL_TEXT, 30.0, 1),
        2,
    )
    .await;
    let lookup = finished_run(
        &store,
        &new_run("lookup", "m", prompt.clone(), 2),
        &outcome(DIFFERENT_TEXT, 50.0, 2),
        2,
    )
    .await;

    let comparison = store
        .create_comparison(&prompt, &[medusa, normal, lookup])
        .await
        .unwrap();
    assert_eq!(comparison.prompt, prompt);
    assert_eq!(comparison.run_ids(), [normal, medusa, lookup]);
    // Fastest non-normal run: lookup at 50 tokens/s over normal's 20.
    assert_eq!(comparison.speedup, Some(2.5));
    assert_eq!(comparison.outputs_identical, Some(false));
    // "The cat sat on " is 15 characters; then 't' against 'a'.
    assert_eq!(comparison.first_difference, Some(15));
    let entry = |run_id, mode: &str, tps, speedup, identical, diff| ComparisonRun {
        run_id,
        mode: mode.into(),
        status: RunStatus::Finished,
        tokens_per_second: Some(tps),
        decode_tokens_per_second: Some(tps * 2.0),
        ttft_ms: Some(35.5),
        mean_accepted: Some(1.6),
        draft_tokens: Some(70),
        round: 0,
        speedup,
        output_identical: identical,
        first_difference: diff,
    };
    assert_eq!(
        comparison.runs,
        [
            entry(normal, "normal", 20.0, None, None, None),
            entry(medusa, "medusa", 30.0, Some(1.5), Some(true), None),
            entry(lookup, "lookup", 50.0, Some(2.5), Some(false), Some(15)),
        ]
    );

    assert_eq!(
        store.get_comparison(comparison.id).await.unwrap(),
        comparison
    );
    let listed = store.list_comparisons(None).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0], comparison);
    for id in [normal, medusa, lookup] {
        assert_eq!(
            store.get_run(id).await.unwrap().run.comparison_id,
            Some(comparison.id)
        );
    }

    // The figures are stored, not only computed on the way out.
    let mut conn = raw_connection(&store).await;
    let row = sqlx::query(
        "SELECT speedup, outputs_identical, first_difference FROM comparisons WHERE id = ?",
    )
    .bind(comparison.id)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(row.get::<Option<f64>, _>(0), Some(2.5));
    assert_eq!(row.get::<Option<bool>, _>(1), Some(false));
    assert_eq!(row.get::<Option<i64>, _>(2), Some(15));
}

#[tokio::test]
async fn identical_outputs_have_no_first_difference() {
    let (_dir, store) = temp_store().await;
    let prompt = chat("Say it");
    let normal = finished_run(
        &store,
        &new_run("normal", "m", prompt.clone(), 0),
        &outcome("same words", 16.0, 0),
        1,
    )
    .await;
    let medusa = finished_run(
        &store,
        &new_run("medusa", "m", prompt.clone(), 1),
        &outcome("same words", 24.0, 1),
        1,
    )
    .await;
    let comparison = store
        .create_comparison(&prompt, &[normal, medusa])
        .await
        .unwrap();
    assert_eq!(comparison.speedup, Some(1.5));
    assert_eq!(comparison.outputs_identical, Some(true));
    assert_eq!(comparison.first_difference, None);
}

#[tokio::test]
async fn runs_that_did_not_finish_are_left_out_of_the_figures() {
    let (_dir, store) = temp_store().await;
    let prompt = chat("p");
    let normal = finished_run(
        &store,
        &new_run("normal", "m", prompt.clone(), 0),
        &outcome("abc", 10.0, 0),
        1,
    )
    .await;
    let cancelled = store
        .begin_run(&new_run("medusa", "m", prompt.clone(), 1))
        .await
        .unwrap();
    store
        .cancel_run(cancelled, Some(&outcome("ab", 90.0, 1)))
        .await
        .unwrap();
    let comparison = store
        .create_comparison(&prompt, &[normal, cancelled])
        .await
        .unwrap();
    assert_eq!(comparison.speedup, None);
    assert_eq!(comparison.outputs_identical, None);
    assert_eq!(comparison.first_difference, None);
    assert_eq!(comparison.runs[1].status, RunStatus::Cancelled);
    assert_eq!(comparison.runs[1].speedup, None);
}

#[tokio::test]
async fn a_run_joining_a_comparison_updates_its_figures_when_it_finishes() {
    let (_dir, store) = temp_store().await;
    let prompt = chat("p");
    let normal = finished_run(
        &store,
        &new_run("normal", "m", prompt.clone(), 0),
        &outcome("abcdef", 10.0, 0),
        1,
    )
    .await;
    let comparison = store.create_comparison(&prompt, &[normal]).await.unwrap();
    assert_eq!(comparison.speedup, None);

    let mut joining = new_run("medusa", "m", prompt.clone(), 1);
    joining.comparison_id = Some(comparison.id);
    let id = store.begin_run(&joining).await.unwrap();
    let pending = store.get_comparison(comparison.id).await.unwrap();
    assert_eq!(pending.run_ids(), [normal, id]);
    assert_eq!(pending.speedup, None);

    store
        .finish_run(id, &outcome("abcxyz", 25.0, 1))
        .await
        .unwrap();
    let updated = store.get_comparison(comparison.id).await.unwrap();
    assert_eq!(updated.speedup, Some(2.5));
    assert_eq!(updated.outputs_identical, Some(false));
    assert_eq!(updated.first_difference, Some(3));

    let mut conn = raw_connection(&store).await;
    let stored: Option<f64> = sqlx::query_scalar("SELECT speedup FROM comparisons WHERE id = ?")
        .bind(comparison.id)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(stored, Some(2.5));
}

#[tokio::test]
async fn bad_comparisons_are_refused_and_write_nothing() {
    let (_dir, store) = temp_store().await;
    let prompt = chat("p");
    let a = finished_run(
        &store,
        &new_run("normal", "m", prompt.clone(), 0),
        &outcome("x", 10.0, 0),
        1,
    )
    .await;
    let b = finished_run(
        &store,
        &new_run("medusa", "m", prompt.clone(), 1),
        &outcome("x", 12.0, 1),
        1,
    )
    .await;

    // The unknown run comes last: the comparison row and the first links must not survive.
    assert!(matches!(
        store.create_comparison(&prompt, &[a, b, 999]).await,
        Err(StoreError::NotFound {
            entity: "run",
            id: 999
        })
    ));
    assert!(matches!(
        store.create_comparison(&prompt, &[]).await,
        Err(StoreError::InvalidInput(_))
    ));
    assert!(matches!(
        store.create_comparison(&prompt, &[a, a]).await,
        Err(StoreError::InvalidInput(_))
    ));
    assert!(store.list_comparisons(None).await.unwrap().is_empty());
    let runs = store.list_runs(&RunFilter::default()).await.unwrap();
    assert!(runs.iter().all(|r| r.comparison_id.is_none()));

    let first = store.create_comparison(&prompt, &[a, b]).await.unwrap();
    let err = store.create_comparison(&prompt, &[b]).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidInput(_)), "{err}");
    assert_eq!(store.list_comparisons(None).await.unwrap(), [first]);
}

#[tokio::test]
async fn comparisons_list_newest_first_with_a_limit() {
    let (_dir, store) = temp_store().await;
    let mut created = Vec::new();
    for minute in 0..3 {
        let prompt = chat(&format!("prompt {minute}"));
        let id = finished_run(
            &store,
            &new_run("normal", "m", prompt.clone(), minute),
            &outcome("x", 10.0, minute),
            1,
        )
        .await;
        created.push(store.create_comparison(&prompt, &[id]).await.unwrap().id);
    }
    let listed: Vec<i64> = store
        .list_comparisons(Some(2))
        .await
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(listed, [created[2], created[1]]);
    assert!(matches!(
        store.list_comparisons(Some(-1)).await,
        Err(StoreError::InvalidInput(_))
    ));
}

#[tokio::test]
async fn a_slowdown_its_recorded_steps_cannot_explain_is_noise_in_every_route() {
    let (_dir, store) = temp_store().await;
    let prompt = chat("Name a colour.");
    // Each drafted step checked one node and spent a tenth of its verifying time drafting.
    let drafted_steps: Vec<StepRecord> = steps(0..4)
        .into_iter()
        .map(|step| StepRecord {
            tree_size: 1,
            draft_ms: 1.0,
            verify_ms: 10.0,
            ..step
        })
        .collect();
    let mut ids = Vec::new();
    for (minute, (mode, speed)) in [
        ("normal", 100.0),
        ("medusa", 27.0),
        ("medusa", 26.0),
        ("normal", 98.0),
    ]
    .into_iter()
    .enumerate()
    {
        let id = store
            .begin_run(&new_run(mode, "m", prompt.clone(), minute as i64))
            .await
            .unwrap();
        if mode == "medusa" {
            store.append_steps(id, &drafted_steps).await.unwrap();
        }
        store
            .finish_run(id, &outcome("Red.", speed, minute as i64))
            .await
            .unwrap();
        ids.push(id);
    }
    let comparison = store.create_comparison(&prompt, &ids).await.unwrap();
    let medusa = &comparison.modes[1];
    // 1.6 tokens per step from one node per step, a tenth of each step drafting: drafting can
    // slow it to 1.6 / (2.3 * 1.1) = 0.63x at the worst, not to 0.27x.
    let slowest = medusa.explainable.unwrap().slowest.unwrap();
    assert!((slowest - 1.6 / (2.3 * 1.1)).abs() < 1e-9, "{slowest}");
    assert_eq!(medusa.verdict, Some(SpeedVerdict::Unexplained));

    // The same figures through every route that shows them.
    assert_eq!(
        store.get_comparison(comparison.id).await.unwrap(),
        comparison
    );
    assert_eq!(
        store.list_comparisons(None).await.unwrap(),
        std::slice::from_ref(&comparison)
    );
    let run = store.get_run(ids[1]).await.unwrap().run;
    assert_eq!(run.comparison_id, Some(comparison.id));
}
