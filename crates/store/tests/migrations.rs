//! Histories written by earlier versions open with everything in them, and their exports import.

mod common;

use common::*;
use sqlx::Executor;
use store::{ExportDocument, ExportFormat, RunFilter, Store};

#[tokio::test]
async fn a_history_from_before_the_acceptance_rename_keeps_its_acceptance() {
    let (dir, store) = temp_store().await;
    let new = new_run("medusa", "m", chat("hi"), 0);
    let id = finished_run(&store, &new, &outcome("answer", 10.0, 1), 2).await;
    // Put the file back as the first schema left it.
    let mut raw = raw_connection(&store).await;
    raw.execute(
        "ALTER TABLE runs RENAME COLUMN acceptance_by_depth TO acceptance_by_head; \
         DELETE FROM _sqlx_migrations WHERE version = 2;",
    )
    .await
    .unwrap();
    drop(raw);
    let path = store.path().to_path_buf();
    drop(store);

    let reopened = Store::open(&path).await.unwrap();
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
    let report = target.import_json(older.as_bytes()).await.unwrap();
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
