//! An import document read as it arrives: each run is counted against the document's totals,
//! checked (see [`check_imported`]) and, unless rejected, set aside as compact JSON in a file
//! beside the database (unlinked from the start, so that nothing is left behind), so that memory
//! holds one run at a time rather than the document. The runs are then read back oldest first,
//! a batch at a time.

use std::collections::HashSet;
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserializer;

use crate::error::{Result, StoreError};
use crate::export::ExportDocument;
use crate::import_checks::check_imported;
use crate::records::{Comparison, RunWithSteps};
use crate::training_jobs::TrainingJob;

/// What one import document may hold, summed over all its runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ImportLimits {
    pub bytes: u64,
    pub tokens: u64,
    pub steps: u64,
}

/// Most runs read back at once, and most of their JSON: a batch is written in one transaction,
/// which holds the write lock briefly, so that generations running meanwhile are recorded
/// between batches.
const BATCH_RUNS: usize = 1_000;
const BATCH_BYTES: u64 = 8 << 20;

/// Where a run was set aside, and what orders it.
#[derive(Debug, Clone, Copy)]
struct SpooledRun {
    created_at: DateTime<Utc>,
    id: i64,
    offset: u64,
    len: u64,
}

/// The runs of a document, set aside.
pub(crate) struct RunSpool {
    file: File,
    end: u64,
    runs: Vec<SpooledRun>,
    /// Runs pushed, those only counted included.
    pushed: u64,
    limits: ImportLimits,
    tokens: u64,
    steps: u64,
    /// Compact JSON of the runs, with the commas between them.
    run_bytes: u64,
    ids: HashSet<i64>,
    repeated_id: Option<i64>,
    /// When the runs are checked: no run may be made more than a day after.
    now: DateTime<Utc>,
    /// Runs that cannot be stored, by uid, with the reason.
    rejected: Vec<(String, String)>,
}

impl RunSpool {
    /// A spool in `dir`, for a document held to `limits`.
    pub(crate) fn new(dir: &Path, limits: ImportLimits) -> Result<Self> {
        Ok(Self {
            file: tempfile::tempfile_in(dir)?,
            end: 0,
            runs: Vec::new(),
            pushed: 0,
            limits,
            tokens: 0,
            steps: 0,
            run_bytes: 0,
            ids: HashSet::new(),
            repeated_id: None,
            now: Utc::now(),
            rejected: Vec::new(),
        })
    }

    fn over_limits(&self) -> bool {
        self.tokens > self.limits.tokens
            || self.steps > self.limits.steps
            || self.run_bytes > self.limits.bytes
    }

    /// Counts `entry` and sets it aside, or keeps why it cannot be stored; once the document is
    /// over a limit, only counts, so that the refusal can say by how much. A run is checked
    /// before it is written out (JSON would carry a NaN as null).
    pub(crate) fn push(&mut self, entry: &RunWithSteps) -> Result<()> {
        let token_ids = entry.run.token_ids.as_ref().map_or(0, Vec::len);
        let logprobs = entry.run.logprobs.as_ref().map_or(0, Vec::len);
        self.tokens += token_ids.max(logprobs) as u64;
        self.steps += entry.steps.len() as u64;
        let json = serde_json::to_vec(entry)?;
        self.run_bytes += json.len() as u64 + u64::from(self.pushed > 0);
        self.pushed += 1;
        if !self.ids.insert(entry.run.id) && self.repeated_id.is_none() {
            self.repeated_id = Some(entry.run.id);
        }
        if self.over_limits() {
            // Nothing will be read back: the spool only counts from now on.
            self.runs = Vec::new();
            self.rejected = Vec::new();
            return Ok(());
        }
        if let Err(reason) = check_imported(entry, self.now) {
            self.rejected.push((entry.run.uid.to_string(), reason));
            return Ok(());
        }
        self.file.write_all_at(&json, self.end)?;
        self.runs.push(SpooledRun {
            created_at: entry.run.created_at,
            id: entry.run.id,
            offset: self.end,
            len: json.len() as u64,
        });
        self.end += json.len() as u64;
        Ok(())
    }

    /// Refuses a document heavier than one import takes (`envelope` is the document without its
    /// runs), or one that lists a run id twice; else the runs' batches, oldest first, so that
    /// local ids grow with creation time as they did where the runs were made (exports list
    /// newest first).
    pub(crate) fn finish(mut self, envelope: &ExportDocument) -> Result<SpooledRuns> {
        let too_large = |measure, total, limit| StoreError::ImportTooLarge {
            measure,
            total,
            limit,
        };
        if self.tokens > self.limits.tokens {
            return Err(too_large("tokens", self.tokens, self.limits.tokens));
        }
        if self.steps > self.limits.steps {
            return Err(too_large("steps", self.steps, self.limits.steps));
        }
        // The whole document as compact JSON: its envelope (with `"runs":[]`) and the runs.
        let bytes = serde_json::to_vec(envelope)?.len() as u64 + self.run_bytes;
        if bytes > self.limits.bytes {
            return Err(too_large("bytes", bytes, self.limits.bytes));
        }
        if let Some(id) = self.repeated_id {
            return Err(StoreError::invalid(format!(
                "run id {id} appears twice in the export"
            )));
        }
        self.runs.sort_by_key(|run| (run.created_at, run.id));
        let mut batches = Vec::new();
        let mut batch: Vec<SpooledRun> = Vec::new();
        let mut batch_bytes = 0;
        for run in self.runs {
            if !batch.is_empty()
                && (batch.len() == BATCH_RUNS || batch_bytes + run.len > BATCH_BYTES)
            {
                batches.push(std::mem::take(&mut batch));
                batch_bytes = 0;
            }
            batch_bytes += run.len;
            batch.push(run);
        }
        if !batch.is_empty() {
            batches.push(batch);
        }
        batches.reverse();
        Ok(SpooledRuns {
            file: self.file,
            batches,
            rejected: self.rejected,
        })
    }
}

/// `document` without its runs: what a spooled document's runs are read back into.
pub(crate) fn envelope_of(document: &ExportDocument) -> ExportDocument {
    ExportDocument {
        version: document.version,
        exported_at: document.exported_at,
        runs: Vec::new(),
        comparisons: document.comparisons.clone(),
        training_jobs: document.training_jobs.clone(),
    }
}

/// A document's runs, checked whole and set aside, to be read back a batch at a time.
pub(crate) struct SpooledRuns {
    file: File,
    /// Last first, so that the next is popped.
    batches: Vec<Vec<SpooledRun>>,
    rejected: Vec<(String, String)>,
}

impl SpooledRuns {
    /// The runs that cannot be stored, by uid, with the reason, in the document's order.
    pub(crate) fn take_rejections(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.rejected)
    }

    /// The next batch of runs, oldest first; `None` after the last.
    pub(crate) fn next_batch(&mut self) -> Option<Result<Vec<RunWithSteps>>> {
        let batch = self.batches.pop()?;
        Some(batch.iter().map(|run| self.read(run)).collect())
    }

    fn read(&self, run: &SpooledRun) -> Result<RunWithSteps> {
        let mut json = vec![0; run.len as usize];
        self.file.read_exact_at(&mut json, run.offset)?;
        Ok(serde_json::from_slice(&json)?)
    }
}

/// Reads an export document from `reader`, setting its runs aside in `spool`: the document's
/// other parts, with no runs.
pub(crate) fn read_document<R: Read>(reader: R, spool: &mut RunSpool) -> Result<ExportDocument> {
    let mut failure = None;
    let mut deserializer = serde_json::Deserializer::from_reader(std::io::BufReader::new(reader));
    let read = DocumentSeed {
        spool,
        failure: &mut failure,
    }
    .deserialize(&mut deserializer)
    .and_then(|document| deserializer.end().map(|()| document));
    match (read, failure) {
        (Ok(document), _) => Ok(document),
        // The spool's own failure, not the document's.
        (Err(_), Some(failure)) => Err(failure),
        (Err(err), None) => Err(StoreError::NotAnExport(err)),
    }
}

/// The document, its runs passed to the spool one by one as they are read.
struct DocumentSeed<'a> {
    spool: &'a mut RunSpool,
    failure: &'a mut Option<StoreError>,
}

impl<'de> DeserializeSeed<'de> for DocumentSeed<'_> {
    type Value = ExportDocument;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for DocumentSeed<'_> {
    type Value = ExportDocument;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a history export")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut version: Option<u32> = None;
        let mut exported_at: Option<DateTime<Utc>> = None;
        let mut runs_read = false;
        let mut comparisons: Option<Vec<Comparison>> = None;
        let mut training_jobs: Option<Vec<TrainingJob>> = None;
        while let Some(key) = map.next_key::<String>()? {
            let repeated = match key.as_str() {
                "version" => version.replace(map.next_value()?).is_some(),
                "exported_at" => exported_at.replace(map.next_value()?).is_some(),
                "comparisons" => comparisons.replace(map.next_value()?).is_some(),
                "training_jobs" => training_jobs.replace(map.next_value()?).is_some(),
                "runs" => {
                    let repeated = runs_read;
                    if !repeated {
                        map.next_value_seed(RunsSeed {
                            spool: &mut *self.spool,
                            failure: &mut *self.failure,
                        })?;
                    }
                    runs_read = true;
                    repeated
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    false
                }
            };
            if repeated {
                return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
            }
        }
        if !runs_read {
            return Err(de::Error::missing_field("runs"));
        }
        Ok(ExportDocument {
            version: version.ok_or_else(|| de::Error::missing_field("version"))?,
            exported_at: exported_at.ok_or_else(|| de::Error::missing_field("exported_at"))?,
            runs: Vec::new(),
            comparisons: comparisons.ok_or_else(|| de::Error::missing_field("comparisons"))?,
            training_jobs: training_jobs.unwrap_or_default(),
        })
    }
}

/// The document's runs, each passed to the spool once read.
struct RunsSeed<'a> {
    spool: &'a mut RunSpool,
    failure: &'a mut Option<StoreError>,
}

impl<'de> DeserializeSeed<'de> for RunsSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for RunsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of runs")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(entry) = seq.next_element::<RunWithSteps>()? {
            if let Err(err) = self.spool.push(&entry) {
                let message = err.to_string();
                *self.failure = Some(err);
                return Err(de::Error::custom(message));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOMY: ImportLimits = ImportLimits {
        bytes: 1 << 30,
        tokens: 1 << 30,
        steps: 1 << 30,
    };

    fn document(json: &str) -> Result<(ExportDocument, RunSpool)> {
        let mut spool = RunSpool::new(&std::env::temp_dir(), ROOMY)?;
        read_document(json.as_bytes(), &mut spool).map(|document| (document, spool))
    }

    fn run(id: i64, created_at: &str) -> String {
        format!(
            r#"{{"run": {{"id": {id}, "uid": "00000000-0000-4000-8000-{id:012}", "status": "finished",
            "created_at": "{created_at}", "mode": "normal",
            "model": {{"name": "m", "path": "/m.gguf", "file_type": "Q4_1"}},
            "prompt": {{"kind": "text", "content": "run {id}"}}, "sampling": {{}},
            "max_tokens": 8, "stop": []}}, "steps": []}}"#
        )
    }

    #[test]
    fn runs_come_back_oldest_first_whatever_order_the_document_lists_them_in() {
        let runs = [
            run(3, "2025-03-03T00:00:00Z"),
            run(1, "2025-03-01T00:00:00Z"),
            run(2, "2025-03-01T00:00:00Z"),
        ];
        // Fields in any order, unknown ones passed over.
        let json = format!(
            r#"{{"runs": [{}], "comparisons": [], "later": {{"a": [1]}}, "version": 2,
            "exported_at": "2025-03-04T00:00:00Z"}}"#,
            runs.join(",")
        );
        let (envelope, spool) = document(&json).unwrap();
        assert_eq!((envelope.version, envelope.runs.len()), (2, 0));
        let mut spooled = spool.finish(&envelope).unwrap();
        let batch = spooled.next_batch().unwrap().unwrap();
        let ids: Vec<i64> = batch.iter().map(|entry| entry.run.id).collect();
        assert_eq!(ids, [1, 2, 3]);
        assert!(spooled.next_batch().is_none());
    }

    #[test]
    fn a_document_missing_a_part_or_naming_one_twice_is_not_an_export() {
        let refused = |json: &str| match document(json) {
            Err(StoreError::NotAnExport(err)) => err.to_string(),
            other => panic!("not refused as no export: {:?}", other.map(|(d, _)| d)),
        };
        let no_runs =
            refused(r#"{"version": 2, "exported_at": "2025-03-04T00:00:00Z", "comparisons": []}"#);
        assert!(no_runs.starts_with("missing field `runs`"), "{no_runs}");
        let twice = refused(r#"{"version": 2, "version": 2}"#);
        assert!(twice.starts_with("duplicate field `version`"), "{twice}");
        let cut = refused(r#"{"version": 2, "runs": ["#);
        assert!(cut.starts_with("EOF while parsing"), "{cut}");
        let trailing = refused(
            r#"{"version": 2, "exported_at": "2025-03-04T00:00:00Z", "runs": [], "comparisons": []} x"#,
        );
        assert!(trailing.starts_with("trailing characters"), "{trailing}");
    }

    #[test]
    fn batches_end_at_their_count_of_runs() {
        let runs: Vec<String> = (1..=BATCH_RUNS as i64 + 1)
            .map(|id| run(id, "2025-03-01T00:00:00Z"))
            .collect();
        let json = format!(
            r#"{{"version": 2, "exported_at": "2025-03-04T00:00:00Z", "runs": [{}], "comparisons": []}}"#,
            runs.join(",")
        );
        let (envelope, spool) = document(&json).unwrap();
        let mut spooled = spool.finish(&envelope).unwrap();
        let sizes: Vec<usize> = std::iter::from_fn(|| spooled.next_batch())
            .map(|batch| batch.unwrap().len())
            .collect();
        assert_eq!(sizes, [BATCH_RUNS, 1]);
    }
}
