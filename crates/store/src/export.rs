//! Export of runs as one JSON document, JSON lines, or CSV.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;
use std::io::Write;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::codec::{encode_time, to_json};
use crate::comparisons::load_comparison;
use crate::db::Store;
use crate::error::{Result, StoreError};
use crate::filter::RunFilter;
use crate::records::{Comparison, Run, RunWithSteps};
use crate::runs::{list_runs, load_steps};
use crate::training_jobs::{list_jobs, TrainingJob};

/// Version of [`ExportDocument`]; import refuses any other.
pub const EXPORT_VERSION: u32 = 1;

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
    fn new(run: &'a Run) -> Result<Self> {
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

/// A text cell that a spreadsheet will show as text: one starting with `=`, `+`, `-`, `@`, a tab
/// or a carriage return would be read as a formula (CSV injection), so it gets a leading `'`.
fn spreadsheet_safe(text: &str) -> Cow<'_, str> {
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        Cow::Owned(format!("'{text}"))
    } else {
        Cow::Borrowed(text)
    }
}

impl Store {
    /// Writes the runs matching `filter` to `out` in `format`; returns how many runs were written.
    /// Everything comes from one snapshot of the database.
    #[tracing::instrument(level = "debug", skip_all, fields(format = %format), err(level = "debug"))]
    pub async fn export<W: Write>(
        &self,
        filter: &RunFilter,
        format: ExportFormat,
        out: &mut W,
    ) -> Result<usize> {
        let count = match format {
            ExportFormat::Json => {
                let document = self.export_document(filter).await?;
                serde_json::to_writer(&mut *out, &document)?;
                out.write_all(b"\n")?;
                document.runs.len()
            }
            ExportFormat::Jsonl => {
                let mut tx = self.pool.begin().await?;
                let runs = list_runs(&mut tx, filter).await?;
                for run in &runs {
                    let steps = load_steps(&mut tx, run.id).await?;
                    let line = RunWithSteps {
                        run: run.clone(),
                        steps,
                    };
                    serde_json::to_writer(&mut *out, &line)?;
                    out.write_all(b"\n")?;
                }
                tx.commit().await?;
                runs.len()
            }
            ExportFormat::Csv => {
                let runs = self.list_runs(filter).await?;
                let mut writer = csv::Writer::from_writer(&mut *out);
                for run in &runs {
                    writer.serialize(CsvRow::new(run)?)?;
                }
                writer.flush()?;
                runs.len()
            }
        };
        out.flush()?;
        Ok(count)
    }

    /// The JSON export as a value: runs matching `filter` with their steps, and their comparisons.
    pub async fn export_document(&self, filter: &RunFilter) -> Result<ExportDocument> {
        let mut tx = self.pool.begin().await?;
        let runs = list_runs(&mut tx, filter).await?;
        let comparison_ids: BTreeSet<i64> = runs.iter().filter_map(|r| r.comparison_id).collect();
        let mut with_steps = Vec::with_capacity(runs.len());
        for run in runs {
            let steps = load_steps(&mut tx, run.id).await?;
            with_steps.push(RunWithSteps { run, steps });
        }
        let mut comparisons = Vec::with_capacity(comparison_ids.len());
        for id in comparison_ids {
            comparisons.push(load_comparison(&mut tx, id).await?);
        }
        let training_jobs = list_jobs(&mut tx).await?;
        tx.commit().await?;
        Ok(ExportDocument {
            version: EXPORT_VERSION,
            exported_at: Utc::now(),
            runs: with_steps,
            comparisons,
            training_jobs,
        })
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
        ] {
            assert_eq!(spreadsheet_safe(formula), format!("'{formula}"));
        }
        for text in ["", "plain", "a=b", " =x", "'quoted", "1-2"] {
            assert_eq!(spreadsheet_safe(text), text);
        }
    }
}
