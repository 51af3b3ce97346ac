//! The history when the storage fails or the input is hostile: a full disk (SQLite's page cap),
//! imports of out-of-range runs, and imports large enough to be written in batches.

use chrono::{Duration, Utc};
use store::{ExportDocument, PromptRecord, RunFilter, RunStatus, RunWithSteps, StoreHealth};

use crate::common::*;

/// A prompt big enough to need pages of its own.
fn bulky_prompt(i: usize) -> PromptRecord {
    PromptRecord::Text(format!("{i} {}", "words that fill pages ".repeat(400)))
}

#[tokio::test]
async fn a_full_disk_degrades_the_history_until_space_is_back() {
    let (_dir, store) = temp_store().await;
    let running = store
        .begin_run(&new_run("normal", "m", chat("kept"), 0))
        .await
        .unwrap();
    assert_eq!(store.health().await, StoreHealth::Ok);

    store
        .limit_size(Some(store.size_bytes().await.unwrap()))
        .await
        .unwrap();
    let mut failure = None;
    for i in 0..50 {
        match store
            .begin_run(&new_run("normal", "m", bulky_prompt(i), 1))
            .await
        {
            Ok(_) => continue,
            Err(err) => {
                failure = Some(err);
                break;
            }
        }
    }
    let failure = failure.expect("a capped database fills up");
    assert!(failure.is_storage_failure(), "{failure}");
    assert!(failure.to_string().contains("full"), "{failure}");
    let StoreHealth::Degraded { reason } = store.health().await else {
        panic!("a full database is reported");
    };
    assert!(reason.contains("full"), "{reason}");
    // Still full: the run cannot end either, and stays as it was.
    let ending = outcome(&"long answer ".repeat(2000), 10.0, 1);
    assert!(store
        .finish_run(running, &ending)
        .await
        .unwrap_err()
        .is_storage_failure());
    // Reading goes on.
    assert!(!store
        .list_runs(&RunFilter::default())
        .await
        .unwrap()
        .is_empty());

    store.limit_size(None).await.unwrap();
    assert_eq!(store.health().await, StoreHealth::Ok);
    // Every pooled connection writes again: none was left inside a failed transaction.
    for i in 0..12 {
        store
            .begin_run(&new_run("normal", "m", bulky_prompt(i), 2))
            .await
            .unwrap();
    }
    store.finish_run(running, &ending).await.unwrap();
    let stored = store.get_run(running).await.unwrap().run;
    assert_eq!(stored.status, RunStatus::Finished);
}

#[tokio::test]
async fn partial_output_is_kept_while_a_run_goes_and_read_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.sqlite");
    let store = store::Store::open(&path).await.unwrap();
    let id = store
        .begin_run(&new_run("normal", "m", chat("hi"), 0))
        .await
        .unwrap();
    store.save_partial_output(id, "Once upon", 2).await.unwrap();
    store
        .save_partial_output(id, "Once upon a time", 4)
        .await
        .unwrap();
    store.close().await;

    // The next process finds the run interrupted, with what it had produced.
    let reopened = store::Store::open(&path).await.unwrap();
    let run = reopened.get_run(id).await.unwrap().run;
    assert_eq!(run.status, RunStatus::Interrupted);
    assert_eq!(run.output.as_deref(), Some("Once upon a time"));
    assert_eq!(run.tokens_generated, Some(4));
    // An ended run's output is not overwritten by a late partial write.
    let finished = reopened
        .begin_run(&new_run("normal", "m", chat("again"), 1))
        .await
        .unwrap();
    reopened
        .finish_run(finished, &outcome("The end.", 10.0, 1))
        .await
        .unwrap();
    reopened
        .save_partial_output(finished, "The", 1)
        .await
        .unwrap();
    let run = reopened.get_run(finished).await.unwrap().run;
    assert_eq!(run.output.as_deref(), Some("The end."));
}

/// An export of `count` finished runs with two steps each, made in a scratch database.
async fn export_of(count: usize) -> ExportDocument {
    let (_dir, source) = temp_store().await;
    let id = source
        .begin_run(&new_run("medusa", "m", chat("template"), 0))
        .await
        .unwrap();
    source.append_steps(id, &steps(0..2)).await.unwrap();
    source
        .finish_run(id, &outcome("answer", 10.0, 0))
        .await
        .unwrap();
    let mut document = source.export_document(&RunFilter::default()).await.unwrap();
    let template = document.runs.pop().unwrap();
    document.runs = (0..count)
        .map(|i| {
            let mut entry: RunWithSteps = template.clone();
            entry.run.id = i as i64 + 1;
            entry.run.uid = uuid::Uuid::new_v4();
            entry.run.created_at = at(i as i64);
            entry.run.finished_at = Some(at(i as i64) + Duration::seconds(1));
            entry
        })
        .collect();
    document
}

#[tokio::test]
async fn runs_out_of_range_are_rejected_alone_with_the_reason() {
    let mut document = export_of(10).await;
    let runs = &mut document.runs;
    runs[0].run.tokens_generated = Some(-5);
    runs[1].run.total_ms = Some(-1e300);
    runs[2].run.created_at = Utc::now() + Duration::days(3000);
    runs[2].run.finished_at = None;
    runs[3].run.output = Some("x".repeat(5 << 20));
    runs[4].run.tokens_per_second = Some(f64::NAN);
    runs[5].steps[1].verify_ms = -3.0;
    runs[6].run.finished_at = Some(runs[6].run.created_at - Duration::seconds(5));
    runs[7].run.token_ids = Some(vec![1; (4 << 20) + 1]);
    let rejected_uids: Vec<String> = runs[..8].iter().map(|e| e.run.uid.to_string()).collect();

    let (_dir, store) = temp_store().await;
    let report = store.import_document(&document).await.unwrap();
    assert_eq!((report.imported, report.rejected), (2, 8), "{report:?}");
    let reasons: Vec<(&str, &str)> = report
        .rejections
        .iter()
        .map(|r| (r.uid.as_str(), r.reason.as_str()))
        .collect();
    let expected = [
        "tokens_generated is negative",
        "total_ms is -1e300",
        "is in the future",
        "output holds 5242880 bytes (at most 4194304)",
        "tokens_per_second is NaN",
        "verify_ms is -3",
        "is not between created_at and now",
        "token_ids holds 4194305 tokens (at most 4194304)",
    ];
    for (uid, reason) in expected
        .iter()
        .enumerate()
        .map(|(i, r)| (&rejected_uids[i], r))
    {
        assert!(
            reasons.iter().any(|(u, r)| u == uid && r.contains(reason)),
            "{reason} for {uid} in {reasons:?}"
        );
    }
    assert_eq!(
        store.list_runs(&RunFilter::default()).await.unwrap().len(),
        2
    );
}

#[tokio::test]
async fn a_large_import_goes_in_batches_and_repeats_harmlessly() {
    let document = export_of(2_500).await;
    let (_dir, store) = temp_store().await;
    let report = store.import_document(&document).await.unwrap();
    assert_eq!((report.imported, report.rejected), (2_500, 0));
    let all = RunFilter::default();
    assert_eq!(store.list_runs(&all).await.unwrap().len(), 2_500);
    let again = store.import_document(&document).await.unwrap();
    assert_eq!((again.imported, again.skipped_duplicates), (0, 2_500));
    let first = store.list_runs(&all).await.unwrap().pop().unwrap();
    assert_eq!(store.get_run(first.id).await.unwrap().steps.len(), 2);
}

/// A write whose caller gives up while it waits for another process's lock (a client that
/// disconnects, a task cancelled) leaves no connection holding the lock: the next write goes
/// through once the other process lets go.
#[tokio::test]
async fn a_write_cancelled_while_it_waits_for_the_lock_leaves_no_lock_behind() {
    use sqlx::{Connection, SqliteConnection};

    let (dir, store) = temp_store().await;
    let mut other_process = SqliteConnection::connect(&format!(
        "sqlite://{}",
        dir.path().join("history.sqlite").display()
    ))
    .await
    .unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other_process)
        .await
        .unwrap();
    // The history's busy timeout is seconds: this gives up while the write still waits.
    let given_up = tokio::time::timeout(
        std::time::Duration::from_millis(200),
        store.begin_run(&new_run("normal", "m", chat("given up"), 0)),
    )
    .await;
    assert!(given_up.is_err(), "the write waited for the lock");
    sqlx::query("COMMIT")
        .execute(&mut other_process)
        .await
        .unwrap();

    // Time for the abandoned `BEGIN` to take the lock, were it still waiting for it (SQLite's
    // busy handler tries again every 100 ms at most).
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    for i in 0..4 {
        store
            .begin_run(&new_run("normal", "m", chat(&format!("after {i}")), 1))
            .await
            .expect("no connection kept the lock");
    }
}
