//! The run history and comparisons as the playground answers them.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use store::{
    Comparison, DeleteReport, ExportDocument, ExportFormat, ImportReport, ListedRun, RunFilter,
    RunStatus, RunWithSteps, SortKey, SortOrder, SpooledImport, StoreError, MAX_DELETED_RUNS,
};
use tokio::io::{AsyncWrite, DuplexStream};
use tokio::sync::oneshot;
use ts_rs::TS;

use crate::error::{AppError, ErrorKind};
use crate::playground::Playground;

/// Filters, order and paging of the run history (listing and export).
#[derive(Debug, Default, Clone, Deserialize, TS)]
#[ts(rename = "RunQuery", optional_fields)]
pub struct RunsQuery {
    #[ts(as = "Option<engine::GenerationMode>")]
    pub mode: Option<String>,
    /// Text the model name contains, in any case.
    pub model: Option<String>,
    /// Words the prompt or the answer contains.
    pub search: Option<String>,
    #[ts(as = "Option<RunStatus>")]
    pub status: Option<String>,
    /// A remote engine's name, or `local` for runs of the model served here.
    pub engine: Option<String>,
    /// RFC 3339.
    pub since: Option<String>,
    pub until: Option<String>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
    #[ts(as = "Option<SortKey>")]
    pub sort: Option<String>,
    #[ts(as = "Option<SortOrder>")]
    pub order: Option<String>,
    /// Export only: json, jsonl or csv.
    #[ts(as = "Option<ExportFormat>")]
    pub format: Option<String>,
}

/// Runs one comparison may link.
pub const MAX_COMPARED_RUNS: usize = 64;
/// Runs in a page of the history when the query names no limit.
pub const DEFAULT_PAGE: i64 = 100;
/// Most runs in one page of the history.
pub const MAX_PAGE: i64 = 1_000;

/// Bytes of an export on their way to its reader: enough to keep the pipe busy, small beside a
/// run.
const EXPORT_PIPE_BYTES: usize = 256 << 10;

/// A page of runs, newest first unless asked otherwise. The runs come without their per-token
/// arrays: a run's own record ([`Playground::get_run`]) and the export have them.
#[derive(Debug, Clone, Serialize, TS)]
pub struct RunList {
    pub runs: Vec<ListedRun>,
    /// The `offset` of the next page; absent on the last page.
    #[ts(optional)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<i64>,
}

#[derive(Debug, Clone, Serialize, TS)]
pub struct ComparisonList {
    pub comparisons: Vec<Comparison>,
}

/// An export on its way: its bytes come out of `body` as the store writes them, one run at a
/// time, so that its memory does not grow with the history. Once `body` ends, `ended` says
/// whether the export was whole (the runs written) or why it stopped.
pub struct ExportStream {
    pub format: ExportFormat,
    pub filename: String,
    pub body: DuplexStream,
    pub ended: oneshot::Receiver<Result<usize, AppError>>,
}

impl RunsQuery {
    pub fn filter(&self) -> Result<RunFilter, AppError> {
        if self.limit.is_some_and(|l| l < 0) || self.offset.is_some_and(|o| o < 0) {
            return Err(AppError::invalid_parameter(
                "limit and offset must not be negative",
            ));
        }
        Ok(RunFilter {
            since: parse_time("since", self.since.as_deref())?,
            until: parse_time("until", self.until.as_deref())?,
            mode: self.mode.clone(),
            model: self.model.clone(),
            search: self.search.clone(),
            status: parse_opt(self.status.as_deref())?,
            engine: self.engine.clone().filter(|e| !e.is_empty()),
            limit: self.limit,
            offset: self.offset,
            sort: parse_opt(self.sort.as_deref())?.unwrap_or_default(),
            order: parse_opt(self.order.as_deref())?.unwrap_or_default(),
        })
    }

    pub fn export_format(&self) -> Result<ExportFormat, AppError> {
        self.format
            .as_deref()
            .unwrap_or("json")
            .parse()
            .map_err(|e: store::StoreError| AppError::invalid_parameter(e.to_string()))
    }
}

fn parse_time(name: &str, value: Option<&str>) -> Result<Option<DateTime<Utc>>, AppError> {
    value
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| {
                    AppError::invalid_parameter(format!(
                        "{name} must be an RFC 3339 time such as 2025-01-31T12:00:00Z: {e}"
                    ))
                })
        })
        .transpose()
}

/// One of the store's closed sets of names (status, sort key, order, format).
fn parse_opt<T>(value: Option<&str>) -> Result<Option<T>, AppError>
where
    T: std::str::FromStr<Err = store::StoreError>,
{
    value
        .map(str::parse)
        .transpose()
        .map_err(|e: store::StoreError| AppError::invalid_parameter(e.to_string()))
}

impl Playground {
    pub async fn list_runs(&self, query: &RunsQuery) -> Result<RunList, AppError> {
        let mut filter = query.filter()?;
        let limit = filter.limit.unwrap_or(DEFAULT_PAGE);
        if limit > MAX_PAGE {
            return Err(AppError::invalid_parameter(format!(
                "limit is at most {MAX_PAGE}; page with offset"
            )));
        }
        // One more than asked tells whether another page follows.
        filter.limit = Some(limit + 1);
        let mut runs = self.store().list_runs(&filter).await?;
        let next_offset = (runs.len() as i64 > limit).then(|| {
            runs.truncate(limit as usize);
            filter.offset.unwrap_or(0) + limit
        });
        Ok(RunList { runs, next_offset })
    }

    pub async fn get_run(&self, id: i64) -> Result<RunWithSteps, AppError> {
        Ok(self.store().get_run(id).await?)
    }

    /// Writes the runs matching `query` in its format to `out`, one run at a time; answers the
    /// format.
    pub async fn write_export<W: AsyncWrite + Unpin>(
        &self,
        query: &RunsQuery,
        out: &mut W,
    ) -> Result<ExportFormat, AppError> {
        let format = query.export_format()?;
        let filter = query.filter()?;
        self.store().export(&filter, format, out).await?;
        Ok(format)
    }

    /// Starts exporting the runs matching `query` in its format; its bytes come through the
    /// answer's `body`, which holds back the export while its reader is slow. A bad query is
    /// refused here, before anything is written.
    pub fn export_stream(&self, query: &RunsQuery) -> Result<ExportStream, AppError> {
        let format = query.export_format()?;
        let filter = query.filter()?;
        let (mut writer, body) = tokio::io::duplex(EXPORT_PIPE_BYTES);
        let (report, ended) = oneshot::channel();
        let store = self.store().clone();
        tokio::spawn(async move {
            let written = store.export(&filter, format, &mut writer).await;
            // Said before the pipe closes, so that its reader learns at its end how it ended. A
            // reader gone away (a download cancelled) stopped the export and listens no more.
            let _ = report.send(written.map_err(AppError::from));
            drop(writer);
        });
        Ok(ExportStream {
            format,
            filename: export_filename(format),
            body,
            ended,
        })
    }

    pub async fn import_runs(&self, document: &ExportDocument) -> Result<ImportReport, AppError> {
        self.store()
            .import_document(document)
            .await
            .map_err(import_error)
    }

    /// Reads an export from `reader` as it arrives, its runs set aside until
    /// [`Playground::import_spooled`] adds them (see [`store::Store::spool_import`]).
    pub async fn spool_import(
        &self,
        reader: impl std::io::Read + Send + 'static,
    ) -> Result<SpooledImport, AppError> {
        self.store()
            .spool_import(reader)
            .await
            .map_err(import_error)
    }

    pub async fn import_spooled(&self, spooled: SpooledImport) -> Result<ImportReport, AppError> {
        self.store()
            .import_spooled(spooled)
            .await
            .map_err(import_error)
    }

    /// Deletes finished runs with their steps; comparisons that lose runs are measured again.
    pub async fn delete_runs(&self, run_ids: &[i64]) -> Result<DeleteReport, AppError> {
        if run_ids.is_empty() || run_ids.len() > MAX_DELETED_RUNS {
            return Err(AppError::invalid_parameter(format!(
                "name 1 to {MAX_DELETED_RUNS} runs to delete, not {}",
                run_ids.len()
            )));
        }
        Ok(self.store().delete_runs(run_ids).await?)
    }

    pub async fn list_comparisons(&self, limit: Option<i64>) -> Result<ComparisonList, AppError> {
        let comparisons = self.store().list_comparisons(limit).await?;
        Ok(ComparisonList { comparisons })
    }

    pub async fn get_comparison(&self, id: i64) -> Result<Comparison, AppError> {
        Ok(self.store().get_comparison(id).await?)
    }

    /// Links finished runs of one prompt as a comparison; a `normal` run among them is the
    /// baseline.
    pub async fn create_comparison(&self, run_ids: &[i64]) -> Result<Comparison, AppError> {
        if run_ids.len() < 2 || run_ids.len() > MAX_COMPARED_RUNS {
            return Err(AppError::invalid_parameter(format!(
                "a comparison links 2 to {MAX_COMPARED_RUNS} runs, not {}",
                run_ids.len()
            )));
        }
        let mut distinct = HashSet::with_capacity(run_ids.len());
        if let Some(id) = run_ids.iter().find(|&&id| !distinct.insert(id)) {
            return Err(AppError::invalid_parameter(format!(
                "run {id} is listed twice"
            )));
        }
        let mut prompt = None;
        for &id in run_ids {
            let run = self.store().get_run(id).await?.run;
            match &prompt {
                None => prompt = Some(run.listed.prompt),
                Some(first) if *first != run.prompt => {
                    return Err(AppError::invalid_parameter(format!(
                        "run {id} has another prompt than run {}; only runs of one prompt compare",
                        run_ids[0]
                    )))
                }
                Some(_) => {}
            }
        }
        let prompt = prompt.expect("at least two runs were read");
        Ok(self.store().create_comparison(&prompt, run_ids).await?)
    }
}

/// A file name for an export made now.
pub fn export_filename(format: ExportFormat) -> String {
    format!(
        "medusa-runs-{}.{}",
        Utc::now().format("%Y%m%d-%H%M%S"),
        format.as_str()
    )
}

fn import_error(err: StoreError) -> AppError {
    match err {
        // The document is well formed, only more than one import takes.
        StoreError::ImportTooLarge { .. } => {
            AppError::new(ErrorKind::TooLarge, err.code(), err.to_string())
        }
        err => err.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_becomes_a_filter() {
        let query = RunsQuery {
            mode: Some("lookup".into()),
            status: Some("finished".into()),
            since: Some("2025-01-31T12:00:00Z".into()),
            sort: Some("tokens_per_second".into()),
            order: Some("asc".into()),
            limit: Some(10),
            ..RunsQuery::default()
        };
        let filter = query.filter().unwrap();
        assert_eq!(filter.mode.as_deref(), Some("lookup"));
        assert_eq!(filter.status, Some(RunStatus::Finished));
        assert_eq!(filter.sort, SortKey::TokensPerSecond);
        assert_eq!(filter.order, SortOrder::Asc);
        assert_eq!(
            filter.since.unwrap().to_rfc3339(),
            "2025-01-31T12:00:00+00:00"
        );
        assert_eq!(query.export_format().unwrap(), ExportFormat::Json);
    }

    #[test]
    fn bad_queries_are_invalid_parameters() {
        for query in [
            RunsQuery {
                since: Some("yesterday".into()),
                ..RunsQuery::default()
            },
            RunsQuery {
                limit: Some(-1),
                ..RunsQuery::default()
            },
            RunsQuery {
                sort: Some("prompt".into()),
                ..RunsQuery::default()
            },
            RunsQuery {
                status: Some("done".into()),
                ..RunsQuery::default()
            },
        ] {
            assert_eq!(
                query.filter().unwrap_err().code,
                "invalid_parameter",
                "{query:?}"
            );
        }
        let csv = RunsQuery {
            format: Some("xml".into()),
            ..RunsQuery::default()
        };
        assert_eq!(csv.export_format().unwrap_err().code, "invalid_parameter");
    }
}
