//! Deleting runs, and keeping the comparisons they belonged to right.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::comparisons::refresh_comparison;
use crate::db::Store;
use crate::error::{Result, StoreError};
use crate::records::RunStatus;
use crate::runs::run_status;

/// What a deletion did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct DeleteReport {
    pub deleted: i64,
    /// Comparisons that lost runs and were measured again from the ones left.
    pub comparisons_changed: Vec<i64>,
    /// Comparisons left with no run, removed.
    pub comparisons_removed: Vec<i64>,
}

/// Most runs one deletion may name.
pub const MAX_DELETED_RUNS: usize = 10_000;

impl Store {
    /// Deletes `run_ids` with their steps, all or none. A running run is refused (cancel it
    /// first); comparisons that lose runs are measured again, or removed when none is left.
    #[tracing::instrument(level = "debug", skip_all, fields(runs = run_ids.len()), err(level = "debug"))]
    pub async fn delete_runs(&self, run_ids: &[i64]) -> Result<DeleteReport> {
        if run_ids.is_empty() || run_ids.len() > MAX_DELETED_RUNS {
            return Err(StoreError::invalid(format!(
                "name between 1 and {MAX_DELETED_RUNS} runs to delete"
            )));
        }
        let ids: BTreeSet<i64> = run_ids.iter().copied().collect();
        let write = async {
            let mut tx = self.begin_write().await?;
            let mut comparisons = BTreeSet::new();
            for &id in &ids {
                if run_status(&mut tx, id).await? == RunStatus::Running {
                    return Err(StoreError::invalid(format!(
                        "run {id} is still running: cancel it first"
                    )));
                }
                let comparison: Option<i64> =
                    sqlx::query_scalar("SELECT comparison_id FROM runs WHERE id = ?")
                        .bind(id)
                        .fetch_one(&mut *tx)
                        .await?;
                comparisons.extend(comparison);
            }
            let mut report = DeleteReport::default();
            for &id in &ids {
                sqlx::query("DELETE FROM runs WHERE id = ?")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                report.deleted += 1;
            }
            for comparison in comparisons {
                let left: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM runs WHERE comparison_id = ?")
                        .bind(comparison)
                        .fetch_one(&mut *tx)
                        .await?;
                if left == 0 {
                    sqlx::query("DELETE FROM comparisons WHERE id = ?")
                        .bind(comparison)
                        .execute(&mut *tx)
                        .await?;
                    report.comparisons_removed.push(comparison);
                } else {
                    refresh_comparison(&mut tx, comparison).await?;
                    report.comparisons_changed.push(comparison);
                }
            }
            tx.commit().await?;
            Ok(report)
        };
        self.health.observe(write.await)
    }
}
