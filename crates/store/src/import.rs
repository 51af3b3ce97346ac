//! Import of a JSON export into this database.

use std::collections::{HashMap, HashSet};
use std::io::Read;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::comparisons::insert_comparison;
use crate::db::Store;
use crate::error::{Result, StoreError};
use crate::export::{ExportDocument, EXPORT_VERSION};
use crate::records::{PromptRecord, Run, RunStatus, RunWithSteps, StepRecord};
use crate::runs::{insert_run, insert_step};
use crate::training_jobs::import_job;

/// Runs written per transaction: each batch holds the write lock briefly, so that generations
/// running meanwhile are recorded between batches.
const IMPORT_BATCH: usize = 1_000;
/// Rejections listed one by one in a report; the count covers all of them.
const LISTED_REJECTIONS: usize = 100;
/// Largest prompt, output or error text an imported run may hold.
const MAX_TEXT_BYTES: usize = 4 << 20;
/// Most generated token ids an imported run may hold: a token writes a byte of output at least
/// (or part of one character with its neighbours), so no more than the largest output's bytes.
const MAX_TOKEN_IDS: usize = MAX_TEXT_BYTES;
/// Most nodes an imported step's tree may hold (the engine drafts at most 128).
const MAX_TREE_NODES: usize = 1024;

/// Most steps an imported run may hold.
const MAX_STEPS: usize = 100_000;

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
    fn reject(&mut self, uid: String, reason: String) {
        self.rejected += 1;
        if self.rejections.len() < LISTED_REJECTIONS {
            self.rejections.push(ImportRejection { uid, reason });
        }
    }
}

impl Store {
    /// Reads a [`ExportFormat::Json`](crate::ExportFormat::Json) export and adds its runs.
    /// A malformed file is refused whole, before anything is written.
    pub async fn import_json<R: Read>(&self, reader: R) -> Result<ImportReport> {
        let document: ExportDocument = serde_json::from_reader(reader)
            .map_err(|e| StoreError::invalid(format!("not a valid history export: {e}")))?;
        self.import_document(&document).await
    }

    /// Adds the runs of `document`, in transactions of 1,000 runs, so that a large import
    /// does not hold up the generations recorded meanwhile. The document is checked whole before
    /// anything is written; a run with a field out of range is rejected (and reported) alone.
    ///
    /// Runs are matched on `uid`: one already stored is skipped, so an import that stopped
    /// half-way can simply be repeated. New runs get new local ids, and a run that was still
    /// running when exported is stored as interrupted, since nothing here will finish it.
    /// Comparisons are re-created over the local ids of their runs.
    #[tracing::instrument(level = "debug", skip_all, fields(runs = document.runs.len()), err(level = "debug"))]
    pub async fn import_document(&self, document: &ExportDocument) -> Result<ImportReport> {
        if document.version != EXPORT_VERSION {
            return Err(StoreError::invalid(format!(
                "export version {} is not supported (expected {EXPORT_VERSION})",
                document.version
            )));
        }
        let mut report = ImportReport::default();
        // Oldest first, so that local ids grow with creation time as they did where the runs
        // were made (exports list newest first).
        let mut entries: Vec<&RunWithSteps> = document.runs.iter().collect();
        entries.sort_by_key(|e| (e.run.created_at, e.run.id));
        let mut seen = HashSet::with_capacity(entries.len());
        for entry in &entries {
            if !seen.insert(entry.run.id) {
                return Err(StoreError::invalid(format!(
                    "run id {} appears twice in the export",
                    entry.run.id
                )));
            }
        }
        let now = Utc::now();
        let accepted: Vec<&RunWithSteps> = entries
            .into_iter()
            .filter(|entry| match check_imported(entry, now) {
                Ok(()) => true,
                Err(reason) => {
                    report.reject(entry.run.uid.to_string(), reason);
                    false
                }
            })
            .collect();

        let mut local_ids: HashMap<i64, i64> = HashMap::with_capacity(accepted.len());
        for batch in accepted.chunks(IMPORT_BATCH) {
            let write = self.import_batch(batch, &mut local_ids, &mut report);
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
        batch: &[&RunWithSteps],
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

/// Why an exported run cannot be stored, if it cannot: values no run of this program has
/// (negative counts or times, dates more than a day ahead) or sizes beyond any real run's.
fn check_imported(entry: &RunWithSteps, now: DateTime<Utc>) -> Result<(), String> {
    let run = &entry.run;
    check_run(run, now + Duration::days(1))?;
    if entry.steps.len() > MAX_STEPS {
        return Err(format!("{} steps (at most {MAX_STEPS})", entry.steps.len()));
    }
    entry.steps.iter().try_for_each(check_step)
}

fn check_run(run: &Run, latest: DateTime<Utc>) -> Result<(), String> {
    if run.created_at > latest {
        return Err(format!("created_at {} is in the future", run.created_at));
    }
    if let Some(finished_at) = run.finished_at {
        if finished_at > latest || finished_at < run.created_at {
            return Err(format!(
                "finished_at {finished_at} is not between created_at and now"
            ));
        }
    }
    let counts = [
        ("prompt_tokens", run.prompt_tokens),
        ("tokens_generated", run.tokens_generated),
        ("steps", run.steps),
        ("draft_tokens", run.draft_tokens),
        ("accepted_draft_tokens", run.accepted_draft_tokens),
    ];
    for (name, value) in counts {
        if value.is_some_and(|v| v < 0) {
            return Err(format!("{name} is negative"));
        }
    }
    let figures = [
        ("queue_ms", run.queue_ms),
        ("ttft_ms", run.ttft_ms),
        ("total_ms", run.total_ms),
        ("tokens_per_second", run.tokens_per_second),
        ("decode_tokens_per_second", run.decode_tokens_per_second),
        ("mean_accepted", run.mean_accepted),
    ];
    for (name, value) in figures {
        check_figure(name, value)?;
    }
    for &rate in run.acceptance_by_depth.iter().flatten() {
        check_figure("acceptance_by_depth", Some(rate))?;
    }
    let token_count = run.token_ids.as_ref().map_or(0, Vec::len);
    if token_count > MAX_TOKEN_IDS {
        return Err(format!(
            "token_ids holds {token_count} tokens (at most {MAX_TOKEN_IDS})"
        ));
    }
    let logprob_count = run.logprobs.as_ref().map_or(0, Vec::len);
    if logprob_count > MAX_TOKEN_IDS {
        return Err(format!(
            "logprobs holds {logprob_count} tokens (at most {MAX_TOKEN_IDS})"
        ));
    }
    let prompt_bytes = match &run.prompt {
        PromptRecord::Text(text) => text.len(),
        PromptRecord::Chat(messages) => messages.iter().map(|m| m.content.len()).sum(),
    };
    let texts = [
        ("prompt", prompt_bytes),
        ("output", run.output.as_ref().map_or(0, String::len)),
        ("error", run.error.as_ref().map_or(0, String::len)),
    ];
    for (name, bytes) in texts {
        if bytes > MAX_TEXT_BYTES {
            return Err(format!(
                "{name} holds {bytes} bytes (at most {MAX_TEXT_BYTES})"
            ));
        }
    }
    Ok(())
}

fn check_step(step: &StepRecord) -> Result<(), String> {
    if step.step_index < 0 || step.tree_size < 0 || step.tree_depth < 0 || step.accepted_len < 0 {
        return Err(format!("step {} has a negative count", step.step_index));
    }
    check_figure("draft_ms", Some(step.draft_ms))?;
    check_figure("verify_ms", Some(step.verify_ms))?;
    let Some(tree) = &step.tree else {
        return Ok(());
    };
    if tree.nodes.len() > MAX_TREE_NODES {
        return Err(format!(
            "step {} drafted {} nodes (at most {MAX_TREE_NODES})",
            step.step_index,
            tree.nodes.len()
        ));
    }
    // A parent comes before its children: what the inspector relies on to draw the tree.
    let misplaced = tree
        .nodes
        .iter()
        .enumerate()
        .find(|(i, node)| node.parent.is_some_and(|p| p as usize >= *i));
    match misplaced {
        Some((i, _)) => Err(format!(
            "step {} node {i} comes before its parent",
            step.step_index
        )),
        None => Ok(()),
    }
}

/// A time, rate or ratio: finite and not negative.
fn check_figure(name: &str, value: Option<f64>) -> Result<(), String> {
    match value {
        Some(v) if !v.is_finite() || v < 0.0 => Err(format!("{name} is {v:?}")),
        _ => Ok(()),
    }
}
