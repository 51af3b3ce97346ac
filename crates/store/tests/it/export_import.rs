//! Export in every format, and import of the JSON export into another database.

use std::collections::HashMap;
use std::io::{self, Cursor};
use std::pin::Pin;
use std::task::{Context, Poll};

use store::{
    ExportDocument, ExportFormat, PromptRecord, Run, RunFilter, RunStatus, RunWithSteps, Store,
    StoreError, MAX_IMPORT_TOKENS,
};
use tokio::io::AsyncWrite;
use uuid::Uuid;

use crate::common::*;

const TRICKY_PROMPT: &str = "Hello, \"world\",\nsecond line, 'quoted'";

struct Fixture {
    normal: i64,
    medusa: i64,
    failed: i64,
    cancelled: i64,
    running: i64,
    comparison: i64,
}

/// A normal and a medusa run linked as a comparison, a failed, a cancelled and a running run.
async fn populate(store: &Store) -> Fixture {
    let prompt = chat(TRICKY_PROMPT);
    let normal = finished_run(
        store,
        &new_run("normal", "smollm2", prompt.clone(), 0),
        &outcome("Hi, \"there\"\nbye", 20.0, 0),
        4,
    )
    .await;
    let medusa = finished_run(
        store,
        &new_run("medusa", "smollm2", prompt.clone(), 1),
        &outcome("Hi, \"there\"\nbye", 31.0, 1),
        3,
    )
    .await;
    let failed = store
        .begin_run(&new_run(
            "lookup",
            "smollm2",
            PromptRecord::Text("plain".into()),
            2,
        ))
        .await
        .unwrap();
    store.fail_run(failed, "context full").await.unwrap();
    // A run on a remote engine, which names it.
    let mut remote = new_run("normal", "llama", PromptRecord::Text("stop me".into()), 3);
    remote.engine = Some("lab".into());
    let cancelled = store.begin_run(&remote).await.unwrap();
    store.append_steps(cancelled, &steps(0..2)).await.unwrap();
    store
        .cancel_run(cancelled, Some(&outcome("partial", 5.0, 3)))
        .await
        .unwrap();
    let running = store
        .begin_run(&new_run(
            "medusa",
            "llama",
            PromptRecord::Text("still going".into()),
            4,
        ))
        .await
        .unwrap();
    store.append_steps(running, &steps(0..1)).await.unwrap();
    let comparison = store
        .create_comparison(&prompt, &[normal, medusa])
        .await
        .unwrap()
        .id;
    Fixture {
        normal,
        medusa,
        failed,
        cancelled,
        running,
        comparison,
    }
}

async fn export_bytes(store: &Store, filter: &RunFilter, format: ExportFormat) -> Vec<u8> {
    let mut out = Vec::new();
    store.export(filter, format, &mut out).await.unwrap();
    out
}

async fn all_with_steps(store: &Store) -> HashMap<Uuid, RunWithSteps> {
    let mut by_uid = HashMap::new();
    for run in store.list_runs(&RunFilter::default()).await.unwrap() {
        by_uid.insert(run.uid, store.get_run(run.id).await.unwrap());
    }
    by_uid
}

/// A run with its local ids blanked, for comparing across databases.
fn portable(run: &Run) -> Run {
    let mut portable = run.clone();
    portable.id = 0;
    portable.comparison_id = None;
    portable
}

#[tokio::test]
async fn json_export_imports_into_a_fresh_database_and_only_once() {
    let (_src_dir, source) = temp_store().await;
    let fixture = populate(&source).await;
    let bytes = export_bytes(&source, &RunFilter::default(), ExportFormat::Json).await;

    let document: ExportDocument = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(document.version, store::EXPORT_VERSION);
    assert_eq!(document.runs.len(), 5);
    assert_eq!(document.comparisons.len(), 1);
    let raw: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert!(raw["exported_at"].is_string());
    assert_eq!(raw["runs"][0]["run"]["status"], "running");

    let (_dst_dir, target) = temp_store().await;
    // Ids in the target must differ from the source's: give it a run of its own first.
    let local = target
        .begin_run(&new_run(
            "normal",
            "other",
            PromptRecord::Text("local".into()),
            9,
        ))
        .await
        .unwrap();
    target.fail_run(local, "local run").await.unwrap();

    let report = target
        .import_json(Cursor::new(bytes.clone()))
        .await
        .unwrap();
    assert_eq!(report.imported, 5);
    assert_eq!(report.skipped_duplicates, 0);
    assert_eq!(report.comparisons_imported, 1);
    assert_eq!(report.comparisons_skipped, 0);

    let source_runs = all_with_steps(&source).await;
    let target_runs = all_with_steps(&target).await;
    assert_eq!(target_runs.len(), 6);
    let running_uid = source_runs
        .values()
        .find(|r| r.run.id == fixture.running)
        .unwrap()
        .run
        .uid;
    for (uid, original) in &source_runs {
        let copy = &target_runs[uid];
        assert_ne!(
            copy.run.id, original.run.id,
            "imported runs get new local ids"
        );
        let mut expected = portable(&original.run);
        if *uid == running_uid {
            // Nothing here will finish it.
            expected.status = RunStatus::Interrupted;
        }
        assert_eq!(portable(&copy.run), expected);
        assert_eq!(copy.steps, original.steps);
    }

    // The comparison links the local copies of the same two runs, with the same figures.
    let original = source.get_comparison(fixture.comparison).await.unwrap();
    let copies = target.list_comparisons(None).await.unwrap();
    assert_eq!(copies.len(), 1);
    let copy = &copies[0];
    let uid_of = |runs: &HashMap<Uuid, RunWithSteps>, id: i64| {
        runs.values().find(|r| r.run.id == id).unwrap().run.uid
    };
    let original_uids: Vec<Uuid> = original
        .run_ids()
        .iter()
        .map(|&id| uid_of(&source_runs, id))
        .collect();
    let copy_uids: Vec<Uuid> = copy
        .run_ids()
        .iter()
        .map(|&id| uid_of(&target_runs, id))
        .collect();
    assert_eq!(copy_uids, original_uids);
    assert_eq!(copy.created_at, original.created_at);
    assert_eq!(copy.prompt, original.prompt);
    assert_eq!(copy.speedup, Some(31.0 / 20.0));
    assert_eq!(copy.speedup, original.speedup);
    assert_eq!(copy.modes, original.modes);
    assert_eq!(copy.outputs_identical, Some(true));
    for id in copy.run_ids() {
        assert_eq!(
            target.get_run(id).await.unwrap().run.comparison_id,
            Some(copy.id)
        );
    }

    // The same file again: every run is a duplicate, and nothing changes.
    let before = all_with_steps(&target).await;
    let again = target
        .import_json(Cursor::new(bytes.clone()))
        .await
        .unwrap();
    assert_eq!(again.imported, 0);
    assert_eq!(again.skipped_duplicates, 5);
    assert_eq!(again.comparisons_imported, 0);
    assert_eq!(again.comparisons_skipped, 1);
    assert_eq!(all_with_steps(&target).await, before);
    assert_eq!(target.list_comparisons(None).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_comparison_whose_runs_are_not_all_exported_is_skipped() {
    let (_src_dir, source) = temp_store().await;
    let fixture = populate(&source).await;
    let only_medusa = RunFilter {
        mode: Some("medusa".into()),
        model: Some("smollm2".into()),
        ..RunFilter::default()
    };
    let bytes = export_bytes(&source, &only_medusa, ExportFormat::Json).await;
    let document: ExportDocument = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(document.runs.len(), 1);
    assert_eq!(document.runs[0].run.id, fixture.medusa);
    assert_eq!(document.comparisons.len(), 1);

    let (_dst_dir, target) = temp_store().await;
    let report = target
        .import_json(Cursor::new(bytes.clone()))
        .await
        .unwrap();
    assert_eq!(report.imported, 1);
    assert_eq!(report.comparisons_imported, 0);
    assert_eq!(report.comparisons_skipped, 1);
    assert!(target.list_comparisons(None).await.unwrap().is_empty());
    let runs = target.list_runs(&RunFilter::default()).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].comparison_id, None);
}

#[tokio::test]
async fn jsonl_has_one_parseable_line_per_run_with_its_steps() {
    let (_dir, store) = temp_store().await;
    populate(&store).await;
    let bytes = export_bytes(&store, &RunFilter::default(), ExportFormat::Jsonl).await;
    let text = String::from_utf8(bytes).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5);
    assert!(text.ends_with('\n'));
    let listed = store.list_runs(&RunFilter::default()).await.unwrap();
    for (line, run) in lines.iter().zip(&listed) {
        let parsed: RunWithSteps = serde_json::from_str(line).unwrap();
        assert_eq!(parsed, store.get_run(run.id).await.unwrap());
    }
    let step_counts: Vec<usize> = lines
        .iter()
        .map(|l| serde_json::from_str::<RunWithSteps>(l).unwrap().steps.len())
        .collect();
    // Newest first: running, cancelled, failed, medusa, normal.
    assert_eq!(step_counts, [1, 2, 0, 3, 4]);
}

#[tokio::test]
async fn csv_parses_back_with_header_rows_and_quoted_values() {
    let (_dir, store) = temp_store().await;
    let fixture = populate(&store).await;
    let bytes = export_bytes(&store, &RunFilter::default(), ExportFormat::Csv).await;
    let mut reader = csv::Reader::from_reader(bytes.as_slice());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(
        header,
        [
            "id",
            "uid",
            "created_at",
            "status",
            "mode",
            "engine",
            "model",
            "heads",
            "prompt",
            "output",
            "stop_reason",
            "prompt_tokens",
            "tokens_generated",
            "queue_ms",
            "ttft_ms",
            "total_ms",
            "tokens_per_second",
            "mean_accepted",
            "draft_tokens",
            "accepted_draft_tokens",
            "acceptance_by_depth",
            "steps",
            "seed",
            "comparison_id",
        ]
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.unwrap()).collect();
    assert_eq!(rows.len(), 5);
    let column = |name: &str| header.iter().position(|h| h == name).unwrap();
    let ids: Vec<i64> = rows
        .iter()
        .map(|r| r[column("id")].parse().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            fixture.running,
            fixture.cancelled,
            fixture.failed,
            fixture.medusa,
            fixture.normal
        ]
    );

    let medusa = &rows[3];
    let stored = store.get_run(fixture.medusa).await.unwrap().run;
    assert_eq!(&medusa[column("uid")], stored.uid.to_string());
    assert_eq!(
        &medusa[column("created_at")],
        "2025-03-01T12:01:00.123456789Z"
    );
    assert_eq!(&medusa[column("status")], "finished");
    assert_eq!(&medusa[column("mode")], "medusa");
    assert_eq!(&medusa[column("model")], "smollm2");
    assert_eq!(&medusa[column("heads")], "/models/heads.medusa.gguf");
    // A chat prompt exports its last user message, commas, quotes and newline intact.
    assert_eq!(&medusa[column("prompt")], TRICKY_PROMPT);
    assert_eq!(&medusa[column("output")], "Hi, \"there\"\nbye");
    assert_eq!(&medusa[column("stop_reason")], "max_tokens");
    assert_eq!(&medusa[column("prompt_tokens")], "12");
    assert_eq!(&medusa[column("tokens_generated")], "64");
    // The queue time written when the run finished.
    assert_eq!(&medusa[column("queue_ms")], "2.0");
    assert_eq!(&medusa[column("ttft_ms")], "35.5");
    assert_eq!(
        medusa[column("tokens_per_second")].parse::<f64>().unwrap(),
        31.0
    );
    assert_eq!(
        medusa[column("total_ms")].parse::<f64>().unwrap(),
        stored.total_ms.unwrap()
    );
    assert_eq!(&medusa[column("mean_accepted")], "1.6");
    assert_eq!(&medusa[column("engine")], "");
    assert_eq!(&medusa[column("draft_tokens")], "70");
    assert_eq!(&medusa[column("accepted_draft_tokens")], "24");
    assert_eq!(&rows[1][column("engine")], "lab");
    assert_eq!(&medusa[column("acceptance_by_depth")], "[0.5,0.25,0.125]");
    assert_eq!(&medusa[column("steps")], "40");
    assert_eq!(&medusa[column("seed")], u64::MAX.to_string());
    assert_eq!(
        &medusa[column("comparison_id")],
        fixture.comparison.to_string()
    );

    // Runs without an outcome leave those cells empty.
    let failed = &rows[2];
    assert_eq!(&failed[column("status")], "failed");
    assert_eq!(&failed[column("prompt")], "plain");
    assert_eq!(&failed[column("heads")], "");
    assert_eq!(&failed[column("output")], "");
    assert_eq!(&failed[column("tokens_per_second")], "");
    assert_eq!(&failed[column("seed")], "");
    assert_eq!(&failed[column("comparison_id")], "");
}

#[tokio::test]
async fn an_unknown_export_format_is_an_error() {
    let err = "xml".parse::<ExportFormat>().unwrap_err();
    assert!(matches!(err, StoreError::InvalidInput(_)));
    assert_eq!(err.code(), "invalid_input");
    assert!("".parse::<ExportFormat>().is_err());
    assert_eq!(
        "JSONL".parse::<ExportFormat>().unwrap(),
        ExportFormat::Jsonl
    );
}

#[tokio::test]
async fn a_malformed_import_is_refused_and_imports_nothing() {
    let (_src_dir, source) = temp_store().await;
    populate(&source).await;
    let bytes = export_bytes(&source, &RunFilter::default(), ExportFormat::Json).await;
    let (_dst_dir, target) = temp_store().await;
    let nothing_imported = || async {
        assert!(target
            .list_runs(&RunFilter::default())
            .await
            .unwrap()
            .is_empty());
        assert!(target.list_comparisons(None).await.unwrap().is_empty());
    };

    // Cut short.
    let truncated = &bytes[..bytes.len() / 2];
    let err = target
        .import_json(Cursor::new(truncated.to_vec()))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotAnExport(_)), "{err}");
    assert_eq!(err.code(), "invalid_json");
    nothing_imported().await;

    // Not an export at all.
    for text in ["", "[]", "{\"version\":1}", "{\"runs\": 5}"] {
        assert!(matches!(
            target.import_json(Cursor::new(text)).await,
            Err(StoreError::NotAnExport(_))
        ));
    }
    nothing_imported().await;

    // A version this build does not know.
    let mut document: ExportDocument = serde_json::from_slice(&bytes).unwrap();
    document.version = store::EXPORT_VERSION + 1;
    let newer = serde_json::to_vec(&document).unwrap();
    assert!(matches!(
        target.import_json(Cursor::new(newer.clone())).await,
        Err(StoreError::InvalidInput(_))
    ));
    nothing_imported().await;

    // Well-formed JSON that fails half-way through writing: the last run repeats a step index,
    // after four runs went in. The transaction takes them back out.
    let mut document: ExportDocument = serde_json::from_slice(&bytes).unwrap();
    let last = document.runs.last_mut().unwrap();
    let repeated = last.steps[0].clone();
    last.steps.push(repeated);
    let broken = serde_json::to_vec(&document).unwrap();
    assert!(target
        .import_json(Cursor::new(broken.clone()))
        .await
        .is_err());
    nothing_imported().await;

    // The intact file still imports afterwards.
    let report = target
        .import_json(Cursor::new(bytes.clone()))
        .await
        .unwrap();
    assert_eq!(report.imported, 5);
}

#[tokio::test]
async fn export_counts_and_respects_the_filter() {
    let (_dir, store) = temp_store().await;
    populate(&store).await;
    let filter = RunFilter {
        status: Some(RunStatus::Finished),
        ..RunFilter::default()
    };
    for format in [ExportFormat::Json, ExportFormat::Jsonl, ExportFormat::Csv] {
        let mut out = Vec::new();
        let count = store.export(&filter, format, &mut out).await.unwrap();
        assert_eq!(count, 2, "{format}");
    }
    let document = store.export_document(&filter).await.unwrap();
    assert!(document
        .runs
        .iter()
        .all(|r| r.run.status == RunStatus::Finished));
}

/// A document of `count` finished runs (copies of `template` under new uids) holding `tokens`
/// token ids each.
fn heavy_document(template: &RunWithSteps, count: usize, tokens: usize) -> ExportDocument {
    let runs = (0..count)
        .map(|i| {
            let mut entry = template.clone();
            entry.run.id = i as i64 + 1;
            entry.run.uid = Uuid::new_v4();
            entry.run.comparison_id = None;
            entry.run.token_ids = Some(vec![7; tokens]);
            entry.run.logprobs = None;
            entry
        })
        .collect();
    ExportDocument {
        version: store::EXPORT_VERSION,
        exported_at: at(0),
        runs,
        comparisons: Vec::new(),
        training_jobs: Vec::new(),
    }
}

/// A finished run of `populate`'s, with its steps, to copy.
async fn finished_template(store: &Store) -> RunWithSteps {
    let listed = store.list_runs(&RunFilter::default()).await.unwrap();
    let normal = listed
        .iter()
        .find(|r| r.mode == "normal" && r.status == RunStatus::Finished)
        .unwrap();
    store.get_run(normal.id).await.unwrap()
}

/// Keeps what is written to it and the largest single write.
#[derive(Default)]
struct WriteLog {
    bytes: Vec<u8>,
    largest_write: usize,
}

impl AsyncWrite for WriteLog {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.largest_write = self.largest_write.max(buf.len());
        self.bytes.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn runs_imported_at_the_token_limit_stay_out_of_listings_and_export_one_at_a_time() {
    let (_src_dir, source) = temp_store().await;
    populate(&source).await;
    let template = finished_template(&source).await;
    let per_run = (MAX_IMPORT_TOKENS / 2) as usize;
    let document = heavy_document(&template, 2, per_run);

    let (_dir, store) = temp_store().await;
    let report = store.import_document(&document).await.unwrap();
    assert_eq!((report.imported, report.rejected), (2, 0), "{report:?}");

    // The listing leaves the per-token arrays out: a few kilobytes for runs of millions of tokens.
    let listed = store.list_runs(&RunFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 2);
    let listing = serde_json::to_string(&listed).unwrap();
    assert!(listing.len() < 16 << 10, "{} bytes", listing.len());
    assert!(
        !listing.contains("token_ids") && !listing.contains("logprobs"),
        "{listing}"
    );
    // A run's own record has them.
    for run in &listed {
        let whole = store.get_run(run.id).await.unwrap();
        assert_eq!(whole.run.token_ids.map(|t| t.len()), Some(per_run));
    }

    // The export carries them, written run by run: no write holds more than one run (and the
    // document's opening, or a comma).
    let mut out = WriteLog::default();
    let count = store
        .export(&RunFilter::default(), ExportFormat::Json, &mut out)
        .await
        .unwrap();
    assert_eq!(count, 2);
    let one_run = serde_json::to_vec(&document.runs[0]).unwrap().len();
    assert!(out.bytes.len() > 2 * one_run);
    assert!(
        out.largest_write < one_run + 1024,
        "a write of {} bytes, a run is {one_run}",
        out.largest_write
    );
    let exported: ExportDocument = serde_json::from_slice(&out.bytes).unwrap();
    let token_counts: Vec<Option<usize>> = exported
        .runs
        .iter()
        .map(|e| e.run.token_ids.as_ref().map(Vec::len))
        .collect();
    assert_eq!(token_counts, [Some(per_run), Some(per_run)]);
    assert_eq!(exported.runs[0].steps, template.steps);

    let mut lines = WriteLog::default();
    store
        .export(&RunFilter::default(), ExportFormat::Jsonl, &mut lines)
        .await
        .unwrap();
    assert_eq!(String::from_utf8(lines.bytes).unwrap().lines().count(), 2);
    assert!(lines.largest_write < one_run + 1024);
}

#[tokio::test]
async fn an_import_over_the_total_is_refused_whole_and_the_history_stays_as_it_was() {
    let (_dir, store) = temp_store().await;
    populate(&store).await;
    let template = finished_template(&store).await;
    let before = all_with_steps(&store).await;
    let comparisons = store.list_comparisons(None).await.unwrap();

    // Each run within the per-run limit, the three of them over the total.
    let per_run = (MAX_IMPORT_TOKENS / 2) as usize;
    let over = heavy_document(&template, 3, per_run);
    let err = store.import_document(&over).await.unwrap_err();
    assert_eq!(err.code(), "import_too_large");
    match &err {
        StoreError::ImportTooLarge {
            measure,
            total,
            limit,
        } => {
            assert_eq!(*measure, "tokens");
            assert_eq!(*total, 3 * per_run as u64);
            assert_eq!(*limit, MAX_IMPORT_TOKENS);
        }
        other => panic!("{other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains(&MAX_IMPORT_TOKENS.to_string()) && message.contains("tokens"),
        "{message}"
    );
    assert_eq!(all_with_steps(&store).await, before);
    assert_eq!(store.list_comparisons(None).await.unwrap(), comparisons);

    // The same runs in two imports within the total go in.
    let (first, second) = over.runs.split_at(2);
    for part in [first, second] {
        let document = ExportDocument {
            runs: part.to_vec(),
            ..over.clone()
        };
        let report = store.import_document(&document).await.unwrap();
        assert_eq!(report.imported, part.len());
    }
    assert_eq!(all_with_steps(&store).await.len(), before.len() + 3);
}
