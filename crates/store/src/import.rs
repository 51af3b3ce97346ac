//! Import of a JSON export into this database.

use std::collections::HashMap;
use std::io::Read;

use serde::{Deserialize, Serialize};

use crate::comparisons::insert_comparison;
use crate::db::Store;
use crate::error::{Result, StoreError};
use crate::export::{ExportDocument, EXPORT_VERSION};
use crate::records::{RunStatus, RunWithSteps};
use crate::runs::{insert_run, insert_step};

/// What an import did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct ImportReport {
    /// Runs added, with their steps.
    pub imported: usize,
    /// Runs whose uid was already stored; left as they were.
    pub skipped_duplicates: usize,
    pub comparisons_imported: usize,
    /// Comparisons not re-created: a run of theirs is missing from the file, or already belongs
    /// to a comparison here (typically the same one, imported before).
    pub comparisons_skipped: usize,
}

impl Store {
    /// Reads a [`ExportFormat::Json`](crate::ExportFormat::Json) export and adds its runs.
    /// A malformed file is refused whole, before anything is written.
    pub async fn import_json<R: Read>(&self, reader: R) -> Result<ImportReport> {
        let document: ExportDocument = serde_json::from_reader(reader)
            .map_err(|e| StoreError::invalid(format!("not a valid history export: {e}")))?;
        self.import_document(&document).await
    }

    /// Adds the runs of `document` in one transaction: all of it or nothing.
    ///
    /// Runs are matched on `uid`: one already stored is skipped. New runs get new local ids, and
    /// a run that was still running when exported is stored as interrupted, since nothing here
    /// will finish it. Comparisons are re-created over the local ids of their runs.
    #[tracing::instrument(level = "debug", skip_all, fields(runs = document.runs.len()), err)]
    pub async fn import_document(&self, document: &ExportDocument) -> Result<ImportReport> {
        if document.version != EXPORT_VERSION {
            return Err(StoreError::invalid(format!(
                "export version {} is not supported (expected {EXPORT_VERSION})",
                document.version
            )));
        }
        let mut report = ImportReport::default();
        let mut local_ids: HashMap<i64, i64> = HashMap::with_capacity(document.runs.len());
        let mut tx = self.begin_write().await?;

        // Oldest first, so that local ids grow with creation time as they did where the runs
        // were made (exports list newest first).
        let mut entries: Vec<&RunWithSteps> = document.runs.iter().collect();
        entries.sort_by_key(|e| (e.run.created_at, e.run.id));
        for entry in entries {
            let exported_id = entry.run.id;
            let existing: Option<i64> = sqlx::query_scalar("SELECT id FROM runs WHERE uid = ?")
                .bind(entry.run.uid.to_string())
                .fetch_optional(&mut *tx)
                .await?;
            let local_id = match existing {
                Some(id) => {
                    report.skipped_duplicates += 1;
                    id
                }
                None => {
                    let mut run = entry.run.clone();
                    run.comparison_id = None;
                    if run.status == RunStatus::Running {
                        run.status = RunStatus::Interrupted;
                    }
                    let id = insert_run(&mut tx, &run).await?;
                    for step in &entry.steps {
                        insert_step(&mut tx, id, step).await?;
                    }
                    report.imported += 1;
                    id
                }
            };
            if local_ids.insert(exported_id, local_id).is_some() {
                return Err(StoreError::invalid(format!(
                    "run id {exported_id} appears twice in the export"
                )));
            }
        }

        for comparison in &document.comparisons {
            let mapped: Option<Vec<i64>> = comparison
                .runs
                .iter()
                .map(|r| local_ids.get(&r.run_id).copied())
                .collect();
            let Some(run_ids) = mapped.filter(|ids| !ids.is_empty()) else {
                report.comparisons_skipped += 1;
                continue;
            };
            let mut linked = false;
            for &id in &run_ids {
                let comparison_id: Option<i64> =
                    sqlx::query_scalar("SELECT comparison_id FROM runs WHERE id = ?")
                        .bind(id)
                        .fetch_one(&mut *tx)
                        .await?;
                linked |= comparison_id.is_some();
            }
            if linked {
                report.comparisons_skipped += 1;
                continue;
            }
            insert_comparison(
                &mut tx,
                &comparison.created_at,
                &comparison.prompt,
                &run_ids,
            )
            .await?;
            report.comparisons_imported += 1;
        }

        tx.commit().await?;
        tracing::info!(
            imported = report.imported,
            skipped = report.skipped_duplicates,
            comparisons = report.comparisons_imported,
            "history import done"
        );
        Ok(report)
    }
}
