//! Import of a JSON export into this database.

use std::collections::{HashMap, HashSet};
use std::io::Read;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::comparisons::insert_comparison;
use crate::db::Store;
use crate::error::{Result, StoreError};
use crate::export::{ExportDocument, EXPORT_VERSION, STEPS_AFTER_THE_PROMPT};
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

/// What one import document may hold, summed over all its runs.
#[derive(Debug, Clone, Copy)]
struct ImportLimits {
    bytes: u64,
    tokens: u64,
    steps: u64,
}

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
    /// anything is written: one holding more than [`MAX_IMPORT_BYTES`], [`MAX_IMPORT_TOKENS`] or
    /// [`MAX_IMPORT_STEPS`] is refused whole ([`StoreError::ImportTooLarge`]); a run with a field
    /// out of range is rejected (and reported) alone.
    ///
    /// Runs are matched on `uid`: one already stored is skipped, so an import that stopped
    /// half-way can simply be repeated. New runs get new local ids, and a run that was still
    /// running when exported is stored as interrupted, since nothing here will finish it.
    /// Comparisons are re-created over the local ids of their runs.
    #[tracing::instrument(level = "debug", skip_all, fields(runs = document.runs.len()), err(level = "debug"))]
    pub async fn import_document(&self, document: &ExportDocument) -> Result<ImportReport> {
        if !(1..=EXPORT_VERSION).contains(&document.version) {
            return Err(StoreError::invalid(format!(
                "export version {} is not supported (expected 1 to {EXPORT_VERSION})",
                document.version
            )));
        }
        check_totals(document, IMPORT_LIMITS)?;
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
            let write = self.import_batch(batch, document.version, &mut local_ids, &mut report);
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

/// Refuses a document heavier than one import takes, summed over all its runs (whether they would
/// be imported, skipped or rejected): what a history can be made to hold through one import.
fn check_totals(document: &ExportDocument, limits: ImportLimits) -> Result<()> {
    let too_large = |measure, total, limit| StoreError::ImportTooLarge {
        measure,
        total,
        limit,
    };
    let (mut tokens, mut steps) = (0u64, 0u64);
    for entry in &document.runs {
        let token_ids = entry.run.token_ids.as_ref().map_or(0, Vec::len);
        let logprobs = entry.run.logprobs.as_ref().map_or(0, Vec::len);
        tokens += token_ids.max(logprobs) as u64;
        steps += entry.steps.len() as u64;
    }
    if tokens > limits.tokens {
        return Err(too_large("tokens", tokens, limits.tokens));
    }
    if steps > limits.steps {
        return Err(too_large("steps", steps, limits.steps));
    }
    // The document as compact JSON, counted rather than written out.
    let mut bytes = ByteCount(0);
    serde_json::to_writer(&mut bytes, document)?;
    if bytes.0 > limits.bytes {
        return Err(too_large("bytes", bytes.0, limits.bytes));
    }
    Ok(())
}

/// Counts the bytes written to it, keeping none.
struct ByteCount(u64);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{ModelRef, NewRun};

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

    fn document(runs: Vec<RunWithSteps>) -> ExportDocument {
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
    fn a_run_counts_its_tokens_once_whether_kept_as_ids_or_log_probabilities() {
        // 50 tokens with their log-probabilities are 50 tokens, not 100.
        let both = document(vec![entry(50, 0, 50), entry(50, 0, 0)]);
        check_totals(&both, ROOMY).unwrap();
        let more_logprobs = document(vec![entry(10, 0, 60), entry(41, 0, 0)]);
        assert_eq!(refusal(&more_logprobs, ROOMY), ("tokens", 101, 100));
    }
}
