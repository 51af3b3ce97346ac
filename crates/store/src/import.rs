//! Import of a JSON export into this database.

use std::collections::HashMap;
use std::io::Read;

use serde::{Deserialize, Serialize};

use crate::comparisons::insert_comparison;
use crate::db::Store;
use crate::error::{Result, StoreError};
use crate::export::{ExportDocument, EXPORT_VERSION, STEPS_AFTER_THE_PROMPT};
use crate::import_checks::MAX_TEXT_BYTES;
use crate::import_spool::{envelope_of, read_document, ImportLimits, RunSpool};
use crate::records::{RunStatus, RunWithSteps};
use crate::runs::{insert_run, insert_step};
use crate::training_jobs::import_job;

/// Rejections listed one by one in a report; the count covers all of them.
const LISTED_REJECTIONS: usize = 100;

/// Most bytes one import document may hold, as JSON: the server's limit on an import's body, so
/// that the desktop app's imports, which no body limit bounds, take what the server takes. A run
/// of the default 256 tokens weighs about 45 kB with its steps, so this takes about 6,000 such
/// runs; a bigger history imports in parts (exported with `since` and `until`).
pub const MAX_IMPORT_BYTES: u64 = 256 << 20;
/// Most tokens the runs of one import document may hold together (a run's tokens: its
/// `token_ids`, or its `logprobs` entries where it has more of those). Real runs keep a step of
/// at least 150 bytes per few tokens, so an export within [`MAX_IMPORT_BYTES`] holds at most about
/// 7 million tokens; this is above that, and twice the most one run may hold. It bounds
/// documents of bare token arrays, which weigh as little as 2 bytes a token.
pub const MAX_IMPORT_TOKENS: u64 = 8_000_000;
/// Most steps the runs of one import document may hold together: about what the smallest
/// steps (a plain step, some 140 bytes) of a document within [`MAX_IMPORT_BYTES`] add up to.
pub const MAX_IMPORT_STEPS: u64 = 2_000_000;

const IMPORT_LIMITS: ImportLimits = ImportLimits {
    bytes: MAX_IMPORT_BYTES,
    tokens: MAX_IMPORT_TOKENS,
    steps: MAX_IMPORT_STEPS,
};

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct ImportReport {
    /// Runs added, with their steps.
    pub imported: usize,
    /// Runs whose uid was already stored; left as they were.
    pub skipped_duplicates: usize,
    /// Runs not added because a field is out of range (see `rejections`).
    pub rejected: usize,
    /// Why runs were rejected: the first 100.
    pub rejections: Vec<ImportRejection>,
    pub comparisons_imported: usize,
    /// Heads training jobs added (those whose uid was stored already are left as they were).
    #[serde(default)]
    pub training_jobs_imported: usize,
    /// Comparisons not re-created: a run of theirs is missing from the file or was rejected, or
    /// already belongs to a comparison here (typically the same one, imported before).
    pub comparisons_skipped: usize,
}

/// One run an import refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct ImportRejection {
    pub uid: String,
    pub reason: String,
}

impl ImportReport {
    /// Counts a record left out, with why (the first ones listed).
    pub fn reject(&mut self, uid: String, reason: String) {
        self.rejected += 1;
        if self.rejections.len() < LISTED_REJECTIONS {
            self.rejections.push(ImportRejection { uid, reason });
        }
    }
}

/// An import document read, its runs set aside and not yet written; its training jobs may
/// still be looked at, and left out, before [`Store::import_spooled`] adds it.
pub struct SpooledImport {
    /// The document without its runs.
    pub document: ExportDocument,
    spool: RunSpool,
}

impl Store {
    /// Reads a [`ExportFormat::Json`](crate::ExportFormat::Json) export from `reader` and adds
    /// its runs: [`Store::spool_import`], then [`Store::import_spooled`].
    pub async fn import_json(&self, reader: impl Read + Send + 'static) -> Result<ImportReport> {
        let spooled = self.spool_import(reader).await?;
        self.import_spooled(spooled).await
    }

    /// Reads a [`ExportFormat::Json`](crate::ExportFormat::Json) export from `reader` as it
    /// arrives, on a blocking thread. Only one run is held in memory at a time: the others wait
    /// in a file beside the database (unlinked from the start) until the document has been read
    /// and checked whole. A document that is not an export is refused
    /// ([`StoreError::NotAnExport`]) before anything is written.
    pub async fn spool_import(&self, reader: impl Read + Send + 'static) -> Result<SpooledImport> {
        let mut spool = RunSpool::new(&self.spool_dir(), IMPORT_LIMITS)?;
        let read = tokio::task::spawn_blocking(move || {
            read_document(reader, &mut spool).map(|document| SpooledImport { document, spool })
        });
        read.await
            .map_err(|err| StoreError::invalid(format!("the import stopped: {err}")))?
    }

    /// Adds the runs of an import read by [`Store::spool_import`], with its comparisons and the
    /// training jobs left in it, as [`Store::import_document`] does.
    pub async fn import_spooled(&self, spooled: SpooledImport) -> Result<ImportReport> {
        self.import_runs_of(&spooled.document, spooled.spool).await
    }

    /// Adds the runs of `document`, in transactions of at most 1,000 runs, so that a large
    /// import does not hold up the generations recorded meanwhile. The document is checked whole
    /// before anything is written: one holding more than [`MAX_IMPORT_BYTES`],
    /// [`MAX_IMPORT_TOKENS`] or [`MAX_IMPORT_STEPS`] is refused whole
    /// ([`StoreError::ImportTooLarge`]); a run with a field out of range is rejected (and
    /// reported) alone.
    ///
    /// Runs are matched on `uid`: one already stored is skipped, so an import that stopped
    /// half-way can simply be repeated. New runs get new local ids, and a run that was still
    /// running when exported is stored as interrupted, since nothing here will finish it.
    /// Comparisons are re-created over the local ids of their runs.
    pub async fn import_document(&self, document: &ExportDocument) -> Result<ImportReport> {
        let mut spool = RunSpool::new(&self.spool_dir(), IMPORT_LIMITS)?;
        for entry in &document.runs {
            spool.push(entry)?;
        }
        self.import_runs_of(document, spool).await
    }

    /// Imports `document`'s comparisons and training jobs and the runs set aside in `spool`
    /// (the document's own runs are not read).
    #[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
    async fn import_runs_of(
        &self,
        document: &ExportDocument,
        spool: RunSpool,
    ) -> Result<ImportReport> {
        if !(1..=EXPORT_VERSION).contains(&document.version) {
            return Err(StoreError::invalid(format!(
                "export version {} is not supported (expected 1 to {EXPORT_VERSION})",
                document.version
            )));
        }
        let mut runs = spool.finish(&envelope_of(document))?;
        let mut report = ImportReport::default();
        for (uid, reason) in runs.take_rejections() {
            report.reject(uid, reason);
        }
        let mut local_ids: HashMap<i64, i64> = HashMap::new();
        while let Some(batch) = runs.next_batch() {
            let batch = batch?;
            let write = self.import_batch(&batch, document.version, &mut local_ids, &mut report);
            self.health.observe(write.await)?;
        }
        let write = self.import_comparisons(document, &local_ids, &mut report);
        self.health.observe(write.await)?;
        let write = self.import_training_jobs(document, &mut report);
        self.health.observe(write.await)?;
        tracing::info!(
            imported = report.imported,
            skipped = report.skipped_duplicates,
            rejected = report.rejected,
            comparisons = report.comparisons_imported,
            "history import done"
        );
        Ok(report)
    }

    async fn import_batch(
        &self,
        batch: &[RunWithSteps],
        version: u32,
        local_ids: &mut HashMap<i64, i64>,
        report: &mut ImportReport,
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let (mut imported, mut skipped) = (0, 0);
        let mut ids = Vec::with_capacity(batch.len());
        for entry in batch {
            let existing: Option<i64> = sqlx::query_scalar("SELECT id FROM runs WHERE uid = ?")
                .bind(entry.run.uid.to_string())
                .fetch_optional(&mut *tx)
                .await?;
            let local_id = match existing {
                Some(id) => {
                    skipped += 1;
                    id
                }
                None => {
                    let mut run = entry.run.clone();
                    run.comparison_id = None;
                    if run.decode_tokens_per_second.is_none() {
                        run.decode_tokens_per_second = run.derived_decode_rate();
                    }
                    if version < STEPS_AFTER_THE_PROMPT {
                        run.count_steps_after_the_prompt();
                    }
                    if run.status == RunStatus::Running {
                        run.status = RunStatus::Interrupted;
                    }
                    let id = insert_run(&mut tx, &run).await?;
                    for step in &entry.steps {
                        insert_step(&mut tx, id, step).await?;
                    }
                    imported += 1;
                    id
                }
            };
            ids.push((entry.run.id, local_id));
        }
        tx.commit().await?;
        // Counted once committed, so a failed batch leaves the report as it was.
        report.imported += imported;
        report.skipped_duplicates += skipped;
        local_ids.extend(ids);
        Ok(())
    }

    async fn import_comparisons(
        &self,
        document: &ExportDocument,
        local_ids: &HashMap<i64, i64>,
        report: &mut ImportReport,
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let (mut imported, mut skipped) = (0, 0);
        for comparison in &document.comparisons {
            let mapped: Option<Vec<i64>> = comparison
                .runs
                .iter()
                .map(|r| local_ids.get(&r.run_id).copied())
                .collect();
            let Some(run_ids) = mapped.filter(|ids| !ids.is_empty()) else {
                skipped += 1;
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
                skipped += 1;
                continue;
            }
            insert_comparison(
                &mut tx,
                &comparison.created_at,
                &comparison.prompt,
                &run_ids,
            )
            .await?;
            imported += 1;
        }
        tx.commit().await?;
        report.comparisons_imported += imported;
        report.comparisons_skipped += skipped;
        Ok(())
    }
}

impl Store {
    async fn import_training_jobs(
        &self,
        document: &ExportDocument,
        report: &mut ImportReport,
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        for job in &document.training_jobs {
            let size = serde_json::to_vec(&job.figures)?.len()
                + serde_json::to_vec(&job.settings)?.len()
                + job
                    .report
                    .as_ref()
                    .map_or(Ok(0), |r| serde_json::to_vec(r).map(|v| v.len()))?;
            if size > MAX_TEXT_BYTES {
                report.reject(
                    job.uid.to_string(),
                    format!(
                        "training job {} holds more than {MAX_TEXT_BYTES} bytes",
                        job.id
                    ),
                );
                continue;
            }
            if import_job(&mut tx, job).await? {
                report.training_jobs_imported += 1;
            }
        }
        tx.commit().await
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::records::{ModelRef, NewRun, PromptRecord, Run, StepRecord};

    fn entry(token_count: usize, step_count: usize, logprob_count: usize) -> RunWithSteps {
        let model = ModelRef {
            name: "m".into(),
            path: "/m.gguf".into(),
            file_type: "Q4_1".into(),
            identity: String::new(),
        };
        let new = NewRun::new(
            "normal",
            model,
            PromptRecord::Text("hi".into()),
            serde_json::json!({}),
            8,
        );
        let mut run = Run::running(1, &new);
        run.token_ids = Some(vec![7; token_count]);
        run.logprobs = (logprob_count > 0).then(|| {
            let entry = crate::records::TokenLogprobRecord {
                token_id: 7,
                text: "a".into(),
                logprob: -0.5,
                top: Vec::new(),
            };
            vec![entry; logprob_count]
        });
        let step = StepRecord {
            step_index: 0,
            tree_size: 0,
            tree_depth: 0,
            accepted_len: 1,
            tokens: vec![7],
            sources: vec!["model".into()],
            depth_hits: Vec::new(),
            draft_ms: 0.0,
            verify_ms: 1.0,
            tree: None,
            skip: None,
            decision: None,
        };
        RunWithSteps {
            run,
            steps: vec![step; step_count],
        }
    }

    /// A document of `runs`, numbered 1, 2, ... as an export numbers them.
    fn document(mut runs: Vec<RunWithSteps>) -> ExportDocument {
        for (id, entry) in (1..).zip(&mut runs) {
            entry.run.id = id;
        }
        ExportDocument {
            version: EXPORT_VERSION,
            exported_at: Utc::now(),
            runs,
            comparisons: Vec::new(),
            training_jobs: Vec::new(),
        }
    }

    const ROOMY: ImportLimits = ImportLimits {
        bytes: 1 << 20,
        tokens: 100,
        steps: 10,
    };

    /// The document's runs set aside under `limits` and checked whole.
    fn check_totals(document: &ExportDocument, limits: ImportLimits) -> Result<()> {
        let mut spool = RunSpool::new(&std::env::temp_dir(), limits)?;
        for entry in &document.runs {
            spool.push(entry)?;
        }
        spool.finish(&envelope_of(document)).map(drop)
    }

    fn refusal(document: &ExportDocument, limits: ImportLimits) -> (&'static str, u64, u64) {
        match check_totals(document, limits) {
            Err(StoreError::ImportTooLarge {
                measure,
                total,
                limit,
            }) => (measure, total, limit),
            other => panic!("not refused as too large: {other:?}"),
        }
    }

    #[test]
    fn totals_at_the_limits_pass_and_one_more_is_refused_naming_the_limit() {
        let at_limits = document(vec![entry(60, 6, 0), entry(40, 4, 0)]);
        check_totals(&at_limits, ROOMY).unwrap();

        let tokens = document(vec![entry(60, 1, 0), entry(41, 1, 0)]);
        assert_eq!(refusal(&tokens, ROOMY), ("tokens", 101, 100));
        let steps = document(vec![entry(1, 6, 0), entry(1, 5, 0)]);
        assert_eq!(refusal(&steps, ROOMY), ("steps", 11, 10));

        let bytes = serde_json::to_vec(&at_limits).unwrap().len() as u64;
        let tight = ImportLimits {
            bytes: bytes - 1,
            ..ROOMY
        };
        assert_eq!(refusal(&at_limits, tight), ("bytes", bytes, bytes - 1));
        let exact = ImportLimits { bytes, ..ROOMY };
        check_totals(&at_limits, exact).unwrap();

        let err = check_totals(&tokens, ROOMY).unwrap_err();
        assert_eq!(err.code(), "import_too_large");
        let message = err.to_string();
        assert!(
            message.contains("101 tokens") && message.contains("100"),
            "{message}"
        );
    }

    #[test]
    fn a_run_id_listed_twice_is_refused_once_the_totals_are_within_the_limits() {
        let mut twice = document(vec![entry(1, 1, 0), entry(1, 1, 0)]);
        twice.runs[1].run.id = 1;
        let err = check_totals(&twice, ROOMY).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid input: run id 1 appears twice in the export"
        );
        // Over a limit, that is what is said.
        twice.runs[1].run.token_ids = Some(vec![7; 100]);
        assert_eq!(refusal(&twice, ROOMY), ("tokens", 101, 100));
    }

    #[test]
    fn a_run_counts_its_tokens_once_whether_kept_as_ids_or_log_probabilities() {
        // 50 tokens with their log-probabilities are 50 tokens, not 100.
        let both = document(vec![entry(50, 0, 50), entry(50, 0, 0)]);
        check_totals(&both, ROOMY).unwrap();
        let more_logprobs = document(vec![entry(10, 0, 60), entry(41, 0, 0)]);
        assert_eq!(refusal(&more_logprobs, ROOMY), ("tokens", 101, 100));
    }
}
