//! Histories written by earlier versions open with everything in them, and their exports import.

use std::io::Cursor;

use sqlx::Executor;
use store::{ExportDocument, ExportFormat, RunFilter, Store};

use crate::common::*;

/// Runs `sql` on the store's file behind its back (to put it back as an older version left it),
/// then opens it again, which migrates it.
async fn reopen_after(store: Store, sql: &str) -> Store {
    let mut raw = raw_connection(&store).await;
    raw.execute(sql).await.unwrap();
    drop(raw);
    let path = store.path().to_path_buf();
    drop(store);
    Store::open(&path).await.unwrap()
}

#[tokio::test]
async fn a_history_from_before_the_acceptance_rename_keeps_its_acceptance() {
    let (dir, store) = temp_store().await;
    let new = new_run("medusa", "m", chat("hi"), 0);
    let id = finished_run(&store, &new, &outcome("answer", 10.0, 1), 2).await;
    // Put the file back as the first schema left it.
    let reopened = reopen_after(
        store,
        "ALTER TABLE runs RENAME COLUMN acceptance_by_depth TO acceptance_by_head; \
         DELETE FROM _sqlx_migrations WHERE version = 2;",
    )
    .await;
    let run = reopened.get_run(id).await.unwrap().run;
    assert_eq!(run.acceptance_by_depth, Some(vec![0.5, 0.25, 0.125]));
    drop(dir);
}

#[tokio::test]
async fn an_export_naming_acceptance_by_head_imports() {
    let (_src_dir, source) = temp_store().await;
    let new = new_run("medusa", "m", chat("hi"), 0);
    finished_run(&source, &new, &outcome("answer", 10.0, 1), 2).await;
    let mut bytes = Vec::new();
    source
        .export(&RunFilter::default(), ExportFormat::Json, &mut bytes)
        .await
        .unwrap();
    let older = String::from_utf8(bytes)
        .unwrap()
        .replace("acceptance_by_depth", "acceptance_by_head");
    assert!(older.contains("acceptance_by_head"));

    let (_dst_dir, target) = temp_store().await;
    let report = target
        .import_json(Cursor::new(older.clone()))
        .await
        .unwrap();
    assert_eq!(report.imported, 1);
    let document: ExportDocument = serde_json::from_str(&older).unwrap();
    let imported = target.list_runs(&RunFilter::default()).await.unwrap();
    assert_eq!(
        imported[0].acceptance_by_depth,
        document.runs[0].run.acceptance_by_depth
    );
    assert_eq!(
        imported[0].acceptance_by_depth,
        Some(vec![0.5, 0.25, 0.125])
    );
}

#[tokio::test]
async fn a_history_from_before_step_trees_opens_with_derived_decode_speeds() {
    let (dir, store) = temp_store().await;
    let new = new_run("medusa", "m", chat("hi"), 0);
    let finished = outcome("answer", 10.0, 1);
    let id = finished_run(&store, &new, &finished, 2).await;
    // Put the file back as the third schema left it.
    let reopened = reopen_after(
        store,
        "ALTER TABLE steps DROP COLUMN tree; ALTER TABLE steps DROP COLUMN skip; \
         ALTER TABLE runs DROP COLUMN decode_tokens_per_second; \
         DELETE FROM _sqlx_migrations WHERE version = 4;",
    )
    .await;
    let stored = reopened.get_run(id).await.unwrap();
    // 63 tokens after the first in (6400 - 35.5) ms.
    let expected = 63.0 * 1000.0 / (finished.total_ms - finished.ttft_ms);
    let decode = stored.run.decode_tokens_per_second.unwrap();
    assert!(
        (decode - expected).abs() < 1e-9,
        "{decode} against {expected}"
    );
    assert_eq!(stored.steps.len(), 2);
    assert!(stored
        .steps
        .iter()
        .all(|s| s.tree.is_none() && s.skip.is_none()));
    assert_eq!(stored.steps[0].tokens, step(0).tokens);
    drop(dir);
}

#[tokio::test]
async fn an_export_from_before_step_trees_imports() {
    let (_src_dir, source) = temp_store().await;
    let new = new_run("medusa", "m", chat("hi"), 0);
    let finished = outcome("answer", 10.0, 1);
    finished_run(&source, &new, &finished, 2).await;
    let document = source.export_document(&RunFilter::default()).await.unwrap();
    let mut value = serde_json::to_value(&document).unwrap();
    // What an older version wrote: no decode speed, no trees, no skips.
    let entry = &mut value["runs"][0];
    entry["run"]
        .as_object_mut()
        .unwrap()
        .remove("decode_tokens_per_second");
    for step in entry["steps"].as_array_mut().unwrap() {
        let step = step.as_object_mut().unwrap();
        step.remove("tree");
        step.remove("skip");
    }

    let (_dst_dir, target) = temp_store().await;
    let report = target
        .import_json(Cursor::new(value.to_string()))
        .await
        .unwrap();
    assert_eq!(report.imported, 1);
    let imported = &target.list_runs(&RunFilter::default()).await.unwrap()[0];
    let expected = 63.0 * 1000.0 / (finished.total_ms - finished.ttft_ms);
    assert!((imported.decode_tokens_per_second.unwrap() - expected).abs() < 1e-9);
    let steps = target.get_run(imported.id).await.unwrap().steps;
    assert!(steps.iter().all(|s| s.tree.is_none()));
}

/// A Medusa run as versions that counted reading the prompt as a step stored it: 14 steps and
/// 24 tokens, where its 13 decode steps yielded 23 tokens.
const PROMPT_READ_AS_A_STEP: (i64, f64) = (14, 24.0 / 14.0);

#[tokio::test]
async fn a_history_that_counted_the_prompt_as_a_step_counts_the_steps_after_it() {
    let (dir, store) = temp_store().await;
    let id = finished_run(
        &store,
        &new_run("medusa", "m", chat("hi"), 0),
        &outcome("answer", 10.0, 1),
        2,
    )
    .await;
    let new = new_run("medusa", "m", chat("hi"), 1);
    let one_token = finished_run(&store, &new, &outcome("a", 10.0, 1), 0).await;
    let (steps, mean) = PROMPT_READ_AS_A_STEP;
    let reopened = reopen_after(
        store,
        &format!(
            "UPDATE runs SET steps = {steps}, mean_accepted = {mean} WHERE id = {id}; \
             UPDATE runs SET steps = 1, mean_accepted = 1.0 WHERE id = {one_token}; \
             DELETE FROM _sqlx_migrations WHERE version = 13;"
        ),
    )
    .await;
    let run = reopened.get_run(id).await.unwrap().run;
    assert_eq!(run.steps, Some(13));
    assert!((run.mean_accepted.unwrap() - 23.0 / 13.0).abs() < 1e-12);
    // A run that ended at its first token ran no step: plain decoding's 1.0.
    let run = reopened.get_run(one_token).await.unwrap().run;
    assert_eq!((run.steps, run.mean_accepted), (Some(0), Some(1.0)));
    drop(dir);
}

#[tokio::test]
async fn an_export_that_counted_the_prompt_as_a_step_imports_counting_the_steps_after_it() {
    let (_src_dir, source) = temp_store().await;
    let new = new_run("medusa", "m", chat("hi"), 0);
    finished_run(&source, &new, &outcome("answer", 10.0, 1), 2).await;
    let mut document = source.export_document(&RunFilter::default()).await.unwrap();
    let (steps, mean) = PROMPT_READ_AS_A_STEP;
    document.version = 1;
    document.runs[0].run.steps = Some(steps);
    document.runs[0].run.mean_accepted = Some(mean);
    let older = serde_json::to_vec(&document).unwrap();

    let (_dst_dir, target) = temp_store().await;
    assert_eq!(
        target
            .import_json(Cursor::new(older.clone()))
            .await
            .unwrap()
            .imported,
        1
    );
    let imported = &target.list_runs(&RunFilter::default()).await.unwrap()[0];
    assert_eq!(imported.steps, Some(13));
    assert!((imported.mean_accepted.unwrap() - 23.0 / 13.0).abs() < 1e-12);

    // What this version exports imports as it is.
    let (_again_dir, again) = temp_store().await;
    let current = target.export_document(&RunFilter::default()).await.unwrap();
    assert_eq!(current.version, store::EXPORT_VERSION);
    again.import_document(&current).await.unwrap();
    let kept = &again.list_runs(&RunFilter::default()).await.unwrap()[0];
    assert_eq!(kept.steps, Some(13));
}
