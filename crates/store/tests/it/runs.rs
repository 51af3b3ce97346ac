//! Runs through their life: begin, steps, end, read back, list, recover after a crash.

use sqlx::Row;
use store::{ListedRun, PromptRecord, RunFilter, RunStatus, SortKey, SortOrder, Store, StoreError};

use crate::common::*;

#[tokio::test]
async fn begin_append_finish_get_round_trips_every_field() {
    let (_dir, store) = temp_store().await;
    let new = new_run("medusa", "smollm2", chat("Explain rainbows"), 0);
    let id = store.begin_run(&new).await.unwrap();

    let running = store.get_run(id).await.unwrap();
    assert_eq!(running.run.status, RunStatus::Running);
    assert_eq!(running.run.output, None);
    assert!(running.steps.is_empty());

    // Batches arrive out of order; the run reads back in step order.
    store.append_steps(id, &steps(3..5)).await.unwrap();
    store.append_steps(id, &steps(0..3)).await.unwrap();
    store.append_steps(id, &[]).await.unwrap();
    let done = outcome("Light bends in droplets.", 42.5, 0);
    store.finish_run(id, &done).await.unwrap();

    let got = store.get_run(id).await.unwrap();
    assert_eq!(got.run, expected_finished(id, &new, &done));
    assert_eq!(got.steps, steps(0..5));
    assert_eq!(got.run.seed, Some(u64::MAX));
    assert_eq!(got.run.outcome(), Some(done));
    // The listing has every field but the per-token arrays.
    assert_eq!(
        store.list_runs(&RunFilter::default()).await.unwrap(),
        [ListedRun::from(got.run)]
    );
}

#[tokio::test]
async fn a_failing_batch_of_steps_writes_none_of_them() {
    let (_dir, store) = temp_store().await;
    let id = store
        .begin_run(&new_run("normal", "m", PromptRecord::Text("x".into()), 0))
        .await
        .unwrap();
    store.append_steps(id, &steps(0..2)).await.unwrap();
    // Step 2 is new, step 1 already exists: the whole batch is refused.
    let err = store
        .append_steps(id, &[step(2), step(1)])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidInput(_)), "{err}");
    assert_eq!(store.get_run(id).await.unwrap().steps, steps(0..2));

    let mut bad = step(5);
    bad.verify_ms = f64::NAN;
    assert!(matches!(
        store.append_steps(id, &[step(4), bad]).await,
        Err(StoreError::InvalidInput(_))
    ));
    assert_eq!(store.get_run(id).await.unwrap().steps, steps(0..2));
}

#[tokio::test]
async fn fail_and_cancel_set_status_error_and_partial_outcome() {
    let (_dir, store) = temp_store().await;
    let prompt = || PromptRecord::Text("Once".into());

    let failed = store
        .begin_run(&new_run("medusa", "m", prompt(), 0))
        .await
        .unwrap();
    store
        .fail_run(failed, "heads do not match the model")
        .await
        .unwrap();
    let run = store.get_run(failed).await.unwrap().run;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.as_deref(), Some("heads do not match the model"));
    assert!(run.finished_at.is_some());
    assert_eq!(run.output, None);
    assert_eq!(run.outcome(), None);

    let partial = outcome("Once upon", 10.0, 1);
    let cancelled = store
        .begin_run(&new_run("lookup", "m", prompt(), 1))
        .await
        .unwrap();
    store.append_steps(cancelled, &steps(0..3)).await.unwrap();
    store.cancel_run(cancelled, Some(&partial)).await.unwrap();
    let got = store.get_run(cancelled).await.unwrap();
    assert_eq!(got.run.status, RunStatus::Cancelled);
    assert_eq!(got.run.error, None);
    assert_eq!(got.run.outcome(), Some(partial.clone()));
    assert_eq!(got.steps, steps(0..3));

    let bare = store
        .begin_run(&new_run("normal", "m", prompt(), 2))
        .await
        .unwrap();
    store.cancel_run(bare, None).await.unwrap();
    let run = store.get_run(bare).await.unwrap().run;
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_eq!(run.output, None);
    assert!(run.finished_at.is_some());

    // An ended run stays as it ended.
    for id in [failed, cancelled, bare] {
        let before = store.get_run(id).await.unwrap();
        let err = store.finish_run(id, &partial).await.unwrap_err();
        assert!(matches!(err, StoreError::InvalidInput(_)), "{err}");
        assert!(matches!(
            store.append_steps(id, &[step(9)]).await,
            Err(StoreError::InvalidInput(_))
        ));
        assert!(store.fail_run(id, "late").await.is_err());
        assert_eq!(store.get_run(id).await.unwrap(), before);
    }
}

#[tokio::test]
async fn unknown_ids_are_not_found() {
    let (_dir, store) = temp_store().await;
    let not_found =
        |r: Result<_, StoreError>| matches!(r, Err(StoreError::NotFound { id: 999, .. }));
    assert!(not_found(store.get_run(999).await.map(|_| ())));
    assert!(not_found(store.append_steps(999, &steps(0..1)).await));
    assert!(not_found(
        store.finish_run(999, &outcome("x", 1.0, 0)).await
    ));
    assert!(not_found(store.fail_run(999, "x").await));
    assert!(not_found(store.cancel_run(999, None).await));
    assert!(not_found(store.get_comparison(999).await.map(|_| ())));
    let err = store.get_run(999).await.unwrap_err();
    assert_eq!(err.to_string(), "run 999 not found");
    assert_eq!(err.code(), "not_found");
}

#[tokio::test]
async fn bad_runs_and_outcomes_are_refused() {
    let (_dir, store) = temp_store().await;
    let new = new_run("normal", "m", PromptRecord::Text("x".into()), 0);
    let id = store.begin_run(&new).await.unwrap();
    // The same uid twice.
    assert!(matches!(
        store.begin_run(&new).await,
        Err(StoreError::InvalidInput(_))
    ));
    // A comparison that does not exist.
    let mut orphan = new_run("normal", "m", PromptRecord::Text("x".into()), 0);
    orphan.comparison_id = Some(7);
    assert!(matches!(
        store.begin_run(&orphan).await,
        Err(StoreError::NotFound {
            entity: "comparison",
            id: 7
        })
    ));
    // A NaN speed leaves the run running and unchanged.
    let mut bad = outcome("x", 1.0, 0);
    bad.tokens_per_second = f64::NAN;
    assert!(matches!(
        store.finish_run(id, &bad).await,
        Err(StoreError::InvalidInput(_))
    ));
    assert_eq!(
        store.get_run(id).await.unwrap().run.status,
        RunStatus::Running
    );
    assert_eq!(
        store.list_runs(&RunFilter::default()).await.unwrap().len(),
        1
    );
}

#[tokio::test]
async fn a_run_left_running_is_interrupted_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.sqlite");
    let store = Store::open(&path).await.unwrap();
    let first = new_run("normal", "m", chat("first"), 0);
    let done = outcome("finished text", 20.0, 0);
    let first_id = finished_run(&store, &first, &done, 4).await;
    let before = store.get_run(first_id).await.unwrap();
    let crashed = store
        .begin_run(&new_run("medusa", "m", chat("second"), 1))
        .await
        .unwrap();
    store.append_steps(crashed, &steps(0..2)).await.unwrap();
    // The process dies mid-run: nothing finishes the run, the store is simply dropped.
    drop(store);

    let reopened = Store::open(&path).await.unwrap();
    assert_eq!(reopened.get_run(first_id).await.unwrap(), before);
    let interrupted = reopened.get_run(crashed).await.unwrap();
    assert_eq!(interrupted.run.status, RunStatus::Interrupted);
    assert_eq!(interrupted.run.output, None);
    assert_eq!(interrupted.steps, steps(0..2));
    assert!(matches!(
        reopened.finish_run(crashed, &done).await,
        Err(StoreError::InvalidInput(_))
    ));
    let listed = reopened
        .list_runs(&RunFilter {
            status: Some(RunStatus::Interrupted),
            ..RunFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.iter().map(|r| r.id).collect::<Vec<_>>(), [crashed]);
}

#[tokio::test]
async fn a_second_store_on_the_same_file_interrupts_running_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    let first = Store::open(&path).await.unwrap();
    let id = first
        .begin_run(&new_run("normal", "m", chat("x"), 0))
        .await
        .unwrap();
    let second = Store::open(&path).await.unwrap();
    assert_eq!(
        second.get_run(id).await.unwrap().run.status,
        RunStatus::Interrupted
    );
    // The first process sees it too: one file, one truth.
    assert_eq!(
        first.get_run(id).await.unwrap().run.status,
        RunStatus::Interrupted
    );
    first.close().await;
    second.close().await;
}

/// Six runs with known times, modes, models, speeds and statuses.
async fn listing_fixture(store: &Store) -> Vec<i64> {
    let text = |s: &str| PromptRecord::Text(s.into());
    let plan = [
        // (mode, model, minute, tokens per second; 0 = leave running); llama runs on the remote
        // engine "lab".
        ("normal", "smollm2", 0, 20.0),
        ("medusa", "smollm2", 10, 35.0),
        ("lookup", "smollm2", 20, 28.0),
        ("normal", "llama", 30, 8.0),
        ("medusa", "llama", 40, 12.0),
        ("medusa", "smollm2", 50, 0.0),
    ];
    let mut ids = Vec::new();
    for (mode, model, minute, tps) in plan {
        let mut new = new_run(mode, model, text(mode), minute);
        new.engine = (model == "llama").then(|| "lab".to_owned());
        let id = if tps > 0.0 {
            finished_run(store, &new, &outcome("out", tps, minute), 1).await
        } else {
            store.begin_run(&new).await.unwrap()
        };
        ids.push(id);
    }
    ids
}

async fn ids(store: &Store, filter: RunFilter) -> Vec<i64> {
    store
        .list_runs(&filter)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect()
}

#[tokio::test]
async fn list_filters_return_exactly_the_matching_runs() {
    let (_dir, store) = temp_store().await;
    let all = listing_fixture(&store).await;
    let [a, b, c, d, e, f] = all[..] else {
        panic!("six runs")
    };

    // Newest first by default.
    assert_eq!(ids(&store, RunFilter::default()).await, [f, e, d, c, b, a]);
    let by_mode = |mode: &str| RunFilter {
        mode: Some(mode.into()),
        ..RunFilter::default()
    };
    assert_eq!(ids(&store, by_mode("medusa")).await, [f, e, b]);
    assert_eq!(ids(&store, by_mode("lookup")).await, [c]);
    assert!(ids(&store, by_mode("MEDUSA")).await.is_empty());
    let by_model = RunFilter {
        model: Some("llama".into()),
        ..RunFilter::default()
    };
    assert_eq!(ids(&store, by_model).await, [e, d]);
    let both = RunFilter {
        mode: Some("medusa".into()),
        model: Some("smollm2".into()),
        ..RunFilter::default()
    };
    assert_eq!(ids(&store, both).await, [f, b]);
    let running = RunFilter {
        status: Some(RunStatus::Running),
        ..RunFilter::default()
    };
    assert_eq!(ids(&store, running).await, [f]);
    let by_engine = |engine: &str| RunFilter {
        engine: Some(engine.into()),
        ..RunFilter::default()
    };
    assert_eq!(ids(&store, by_engine("lab")).await, [e, d]);
    assert_eq!(
        ids(&store, by_engine(store::LOCAL_ENGINE)).await,
        [f, c, b, a]
    );
    assert!(ids(&store, by_engine("elsewhere")).await.is_empty());

    // Since is inclusive, until exclusive.
    let range = RunFilter {
        since: Some(at(10)),
        until: Some(at(40)),
        ..RunFilter::default()
    };
    assert_eq!(ids(&store, range).await, [d, c, b]);
    let since = RunFilter {
        since: Some(at(45)),
        ..RunFilter::default()
    };
    assert_eq!(ids(&store, since).await, [f]);

    let page = |limit, offset| RunFilter {
        limit: Some(limit),
        offset: Some(offset),
        ..RunFilter::default()
    };
    assert_eq!(ids(&store, page(2, 0)).await, [f, e]);
    assert_eq!(ids(&store, page(2, 2)).await, [d, c]);
    assert_eq!(ids(&store, page(2, 5)).await, [a]);
    assert!(ids(&store, page(2, 6)).await.is_empty());
    let offset_only = RunFilter {
        offset: Some(4),
        ..RunFilter::default()
    };
    assert_eq!(ids(&store, offset_only).await, [b, a]);
    assert!(matches!(
        store.list_runs(&page(-1, 0)).await,
        Err(StoreError::InvalidInput(_))
    ));
}

#[tokio::test]
async fn list_sorts_by_whitelisted_columns_with_missing_values_last() {
    let (_dir, store) = temp_store().await;
    let all = listing_fixture(&store).await;
    let [a, b, c, d, e, f] = all[..] else {
        panic!("six runs")
    };
    let sorted = |sort, order| RunFilter {
        sort,
        order,
        ..RunFilter::default()
    };
    // f is still running: it has no speed and sorts last either way.
    assert_eq!(
        ids(&store, sorted(SortKey::TokensPerSecond, SortOrder::Desc)).await,
        [b, c, a, e, d, f]
    );
    assert_eq!(
        ids(&store, sorted(SortKey::TokensPerSecond, SortOrder::Asc)).await,
        [d, e, a, c, b, f]
    );
    // Total time is the inverse of speed here (64 tokens each).
    assert_eq!(
        ids(&store, sorted(SortKey::TotalMs, SortOrder::Asc)).await,
        [b, c, a, e, d, f]
    );
    assert_eq!(
        ids(&store, sorted(SortKey::CreatedAt, SortOrder::Asc)).await,
        [a, b, c, d, e, f]
    );
    let top_two_fast_medusa = RunFilter {
        mode: Some("medusa".into()),
        sort: "tokens_per_second".parse().unwrap(),
        order: "desc".parse().unwrap(),
        limit: Some(2),
        ..RunFilter::default()
    };
    assert_eq!(ids(&store, top_two_fast_medusa).await, [b, e]);
    assert!("prompt; DROP TABLE runs".parse::<SortKey>().is_err());
}

#[tokio::test]
async fn the_database_file_is_in_wal_mode() {
    let (_dir, store) = temp_store().await;
    store
        .begin_run(&new_run("normal", "m", chat("x"), 0))
        .await
        .unwrap();
    let mut conn = raw_connection(&store).await;
    let mode: String = sqlx::query("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get(0);
    assert_eq!(mode, "wal");
    assert!(store.path().with_extension("sqlite-wal").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_wait_for_each_other_instead_of_failing() {
    let (_dir, store) = temp_store().await;
    let mut tasks = Vec::new();
    for n in 0..8 {
        let store = store.clone();
        // Spawning also checks that the store's futures are Send, as a server needs.
        tasks.push(tokio::spawn(async move {
            let new = new_run("medusa", "m", chat(&format!("prompt {n}")), n);
            let id = store.begin_run(&new).await?;
            for batch in 0..5 {
                store
                    .append_steps(id, &steps(batch * 4..batch * 4 + 4))
                    .await?;
            }
            store
                .finish_run(id, &outcome("done", 10.0 + n as f64, n))
                .await?;
            Ok::<i64, StoreError>(id)
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap().unwrap());
    }
    for id in ids {
        let run = store.get_run(id).await.unwrap();
        assert_eq!(run.run.status, RunStatus::Finished);
        assert_eq!(run.steps, steps(0..20));
    }
}

#[tokio::test]
async fn recent_answers_are_a_models_own_finished_local_runs_newest_first() {
    let (_dir, store) = temp_store().await;
    let text = |t: &str| PromptRecord::Text(t.into());
    let older = finished_run(
        &store,
        &new_run("normal", "m", text("older"), 0),
        &outcome("a", 20.0, 0),
        0,
    )
    .await;
    let newer = finished_run(
        &store,
        &new_run("lookup", "m", text("newer"), 2),
        &outcome("b", 20.0, 2),
        0,
    )
    .await;
    // Another model's, a remote engine's, a failed one and a comparison's: none of them.
    finished_run(
        &store,
        &new_run("normal", "other", text("other"), 3),
        &outcome("c", 20.0, 3),
        0,
    )
    .await;
    let mut remote = new_run("normal", "m", text("remote"), 4);
    remote.engine = Some("lab".into());
    finished_run(&store, &remote, &outcome("d", 20.0, 4), 0).await;
    let failed = store
        .begin_run(&new_run("normal", "m", text("failed"), 5))
        .await
        .unwrap();
    store.fail_run(failed, "context full").await.unwrap();
    let compared = finished_run(
        &store,
        &new_run("normal", "m", text("compared"), 6),
        &outcome("e", 20.0, 6),
        0,
    )
    .await;
    store
        .create_comparison(&text("compared"), &[compared])
        .await
        .unwrap();
    assert!(older < newer);

    let answers = store.recent_answers("/models/m.gguf", 10).await.unwrap();
    let token_ids = outcome("", 1.0, 0).token_ids.unwrap();
    assert_eq!(
        answers,
        [
            (text("newer"), token_ids.clone()),
            (text("older"), token_ids)
        ]
    );
    assert_eq!(
        store
            .recent_answers("/models/m.gguf", 1)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(store
        .recent_answers("/models/none.gguf", 10)
        .await
        .unwrap()
        .is_empty());
}
