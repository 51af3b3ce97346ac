//! Export of runs as one JSON document, JSON lines, or CSV, written one run at a time.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;
use std::io::Write;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::codec::{encode_time, to_json};
use crate::db::Store;
use crate::error::{Result, StoreError};
use crate::filter::RunFilter;
use crate::records::{Comparison, ListedRun, RunWithSteps};
use crate::training_jobs::{list_job_ids, TrainingJob};

/// Version of [`ExportDocument`]. Version 1 counted reading the prompt as a run's first step;
/// import takes it and counts as version 2 does. Import refuses any other.
pub const EXPORT_VERSION: u32 = 2;

/// The first version whose runs count their steps after the prompt.
pub(crate) const STEPS_AFTER_THE_PROMPT: u32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum ExportFormat {
    /// One [`ExportDocument`]: runs with their steps, and the comparisons they belong to. The
    /// only format that can be imported again.
    Json,
    /// One [`RunWithSteps`] object per line.
    Jsonl,
    /// One row per run, flat columns, no steps.
    Csv,
}

impl ExportFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Jsonl => "jsonl",
            Self::Csv => "csv",
        }
    }

    pub fn mime_type(self) -> &'static str {
        match self {
            Self::Json => "application/json",
            Self::Jsonl => "application/jsonl",
            Self::Csv => "text/csv",
        }
    }
}

impl fmt::Display for ExportFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ExportFormat {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "json" => Ok(Self::Json),
            "jsonl" => Ok(Self::Jsonl),
            "csv" => Ok(Self::Csv),
            _ => Err(StoreError::invalid(format!(
                "unknown export format {s:?}; expected json, jsonl or csv"
            ))),
        }
    }
}

/// The JSON export: everything needed to rebuild the runs elsewhere.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportDocument {
    pub version: u32,
    pub exported_at: DateTime<Utc>,
    pub runs: Vec<RunWithSteps>,
    /// Every comparison that an exported run belongs to.
    pub comparisons: Vec<Comparison>,
    /// Every heads training job (exports made before jobs were kept have none).
    #[serde(default)]
    pub training_jobs: Vec<TrainingJob>,
}

/// CSV columns, in order. `prompt` is the text, or the last user message of a chat.
#[derive(Serialize)]
struct CsvRow<'a> {
    id: i64,
    uid: String,
    created_at: String,
    status: &'static str,
    mode: Cow<'a, str>,
    /// The remote engine's name; empty for the playground's own model.
    engine: Cow<'a, str>,
    model: Cow<'a, str>,
    heads: Cow<'a, str>,
    prompt: Cow<'a, str>,
    output: Cow<'a, str>,
    stop_reason: Cow<'a, str>,
    prompt_tokens: Option<i64>,
    tokens_generated: Option<i64>,
    queue_ms: Option<f64>,
    ttft_ms: Option<f64>,
    total_ms: Option<f64>,
    tokens_per_second: Option<f64>,
    mean_accepted: Option<f64>,
    draft_tokens: Option<i64>,
    accepted_draft_tokens: Option<i64>,
    /// JSON array text.
    acceptance_by_depth: String,
    steps: Option<i64>,
    seed: Option<u64>,
    comparison_id: Option<i64>,
}

impl<'a> CsvRow<'a> {
    fn new(run: &'a ListedRun) -> Result<Self> {
        Ok(Self {
            id: run.id,
            uid: run.uid.to_string(),
            created_at: encode_time(&run.created_at),
            status: run.status.as_str(),
            mode: spreadsheet_safe(&run.mode),
            engine: spreadsheet_safe(run.engine.as_deref().unwrap_or("")),
            model: spreadsheet_safe(&run.model.name),
            heads: spreadsheet_safe(run.heads.as_ref().map_or("", |h| h.path.as_str())),
            prompt: spreadsheet_safe(run.prompt.display_text()),
            output: spreadsheet_safe(run.output.as_deref().unwrap_or("")),
            stop_reason: spreadsheet_safe(run.stop_reason.as_deref().unwrap_or("")),
            prompt_tokens: run.prompt_tokens,
            tokens_generated: run.tokens_generated,
            queue_ms: run.queue_ms,
            ttft_ms: run.ttft_ms,
            total_ms: run.total_ms,
            tokens_per_second: run.tokens_per_second,
            mean_accepted: run.mean_accepted,
            draft_tokens: run.draft_tokens,
            accepted_draft_tokens: run.accepted_draft_tokens,
            acceptance_by_depth: run
                .acceptance_by_depth
                .as_ref()
                .map(to_json)
                .transpose()?
                .unwrap_or_default(),
            steps: run.steps,
            seed: run.seed,
            comparison_id: run.comparison_id,
        })
    }
}

/// What starts a formula in a spreadsheet, full-width forms included (some spreadsheets read
/// `＝` as `=`).
const FORMULA_STARTS: [char; 8] = ['=', '+', '-', '@', '＝', '＋', '－', '＠'];

/// A text cell that a spreadsheet will show as text: one that starts with a tab or a carriage
/// return, or whose first character after any leading white space starts a formula, would be
/// read as a formula (CSV injection), so it gets a leading `'`. Spreadsheets skip leading
/// spaces and line breaks before they look for a formula.
fn spreadsheet_safe(text: &str) -> Cow<'_, str> {
    if text.starts_with(['\t', '\r']) || text.trim_start().starts_with(FORMULA_STARTS) {
        Cow::Owned(format!("'{text}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// What an export keeps of its write buffer after a run: a run of millions of tokens leaves no
/// buffer of its size behind for the rest of the export.
const KEPT_BUFFER_BYTES: usize = 1 << 20;

impl Store {
    /// Writes the runs matching `filter` to `out` in `format`; returns how many runs were written.
    ///
    /// The runs are read and written one at a time, each with its steps from a short read of its
    /// own: the export's memory is that of its largest run whatever the history holds, and a
    /// reader that takes its time (a slow download) holds no snapshot or connection meanwhile.
    /// The runs are those matching `filter` when the export began; one deleted since is left
    /// out, one that ended since is written as it ended.
    #[tracing::instrument(level = "debug", skip_all, fields(format = %format), err(level = "debug"))]
    pub async fn export<W: AsyncWrite + Unpin>(
        &self,
        filter: &RunFilter,
        format: ExportFormat,
        out: &mut W,
    ) -> Result<usize> {
        let ids = self.list_run_ids(filter).await?;
        let mut buffer = Vec::new();
        let written = match format {
            ExportFormat::Json => self.write_document(&ids, &mut buffer, out).await?,
            ExportFormat::Jsonl => {
                let mut written = 0;
                for &id in &ids {
                    let Some(entry) = unless_deleted(self.get_run(id).await)? else {
                        continue;
                    };
                    serde_json::to_writer(&mut buffer, &entry)?;
                    buffer.push(b'\n');
                    send(out, &mut buffer).await?;
                    written += 1;
                }
                written
            }
            ExportFormat::Csv => {
                let mut written = 0;
                for &id in &ids {
                    let Some(run) = unless_deleted(self.get_listed_run(id).await)? else {
                        continue;
                    };
                    // A writer per row, so that each row leaves as it is made; the first one
                    // writes the header.
                    let mut writer = csv::WriterBuilder::new()
                        .has_headers(written == 0)
                        .from_writer(&mut buffer);
                    writer.serialize(CsvRow::new(&run)?)?;
                    writer.flush()?;
                    drop(writer);
                    send(out, &mut buffer).await?;
                    written += 1;
                }
                written
            }
        };
        out.flush().await?;
        Ok(written)
    }

    /// The JSON export as a value. It holds the whole export in memory, where [`Store::export`]
    /// holds one run at a time.
    pub async fn export_document(&self, filter: &RunFilter) -> Result<ExportDocument> {
        let mut bytes = Vec::new();
        self.export(filter, ExportFormat::Json, &mut bytes).await?;
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// Writes an [`ExportDocument`] of the runs `ids` piece by piece, in its fields' order:
    /// the runs, then the comparisons they belong to, then the training jobs.
    async fn write_document<W: AsyncWrite + Unpin>(
        &self,
        ids: &[i64],
        buffer: &mut Vec<u8>,
        out: &mut W,
    ) -> Result<usize> {
        write!(buffer, "{{\"version\":{EXPORT_VERSION},\"exported_at\":")?;
        serde_json::to_writer(&mut *buffer, &Utc::now())?;
        buffer.extend_from_slice(b",\"runs\":[");
        let mut comparison_ids = BTreeSet::new();
        let mut written = 0;
        for &id in ids {
            let Some(entry) = unless_deleted(self.get_run(id).await)? else {
                continue;
            };
            comparison_ids.extend(entry.run.comparison_id);
            push_element(buffer, written == 0, &entry)?;
            send(out, buffer).await?;
            written += 1;
        }
        buffer.extend_from_slice(b"],\"comparisons\":[");
        let mut first = true;
        for id in comparison_ids {
            let Some(comparison) = unless_deleted(self.get_comparison(id).await)? else {
                continue;
            };
            push_element(buffer, first, &comparison)?;
            send(out, buffer).await?;
            first = false;
        }
        buffer.extend_from_slice(b"],\"training_jobs\":[");
        let job_ids = {
            let mut conn = self.pool.acquire().await?;
            list_job_ids(&mut conn).await?
        };
        let mut first = true;
        for id in job_ids {
            let Some(job) = unless_deleted(self.get_training_job(id).await)? else {
                continue;
            };
            push_element(buffer, first, &job)?;
            send(out, buffer).await?;
            first = false;
        }
        buffer.extend_from_slice(b"]}\n");
        send(out, buffer).await?;
        Ok(written)
    }
}

/// `value` as the next element of a JSON array.
fn push_element<T: Serialize>(buffer: &mut Vec<u8>, first: bool, value: &T) -> Result<()> {
    if !first {
        buffer.push(b',');
    }
    Ok(serde_json::to_writer(buffer, value)?)
}

/// Writes out what `buffer` holds and empties it.
async fn send<W: AsyncWrite + Unpin>(out: &mut W, buffer: &mut Vec<u8>) -> Result<()> {
    out.write_all(buffer).await?;
    buffer.clear();
    buffer.shrink_to(KEPT_BUFFER_BYTES);
    Ok(())
}

/// `None` for a record deleted since the export listed it.
fn unless_deleted<T>(read: Result<T>) -> Result<Option<T>> {
    match read {
        Ok(value) => Ok(Some(value)),
        Err(StoreError::NotFound { .. }) => Ok(None),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_case_insensitively_and_refuse_others() {
        assert_eq!("json".parse::<ExportFormat>().unwrap(), ExportFormat::Json);
        assert_eq!(
            "JSONL".parse::<ExportFormat>().unwrap(),
            ExportFormat::Jsonl
        );
        assert_eq!("csv".parse::<ExportFormat>().unwrap(), ExportFormat::Csv);
        for format in [ExportFormat::Json, ExportFormat::Jsonl, ExportFormat::Csv] {
            assert_eq!(format.to_string().parse::<ExportFormat>().unwrap(), format);
        }
        let err = "xml".parse::<ExportFormat>().unwrap_err();
        assert!(matches!(err, StoreError::InvalidInput(_)));
        assert!(err.to_string().contains("json, jsonl or csv"), "{err}");
    }

    #[test]
    fn cells_a_spreadsheet_would_evaluate_are_quoted() {
        for formula in [
            "=1+1",
            "+1",
            "-2",
            "@SUM(A1)",
            "\tx",
            "\rx",
            "=HYPERLINK(\"http://x\")",
            " =1+1",
            "\n=1+1",
            "\u{3000}=1+1",
            "＝1+1",
            "＋1",
            "  ＠SUM(A1)",
        ] {
            assert_eq!(spreadsheet_safe(formula), format!("'{formula}"));
        }
        for text in [
            "", "plain", "a=b", "x =1", "'quoted", "1-2", " 1-2", "\nplain",
        ] {
            assert_eq!(spreadsheet_safe(text), text);
        }
    }
}
