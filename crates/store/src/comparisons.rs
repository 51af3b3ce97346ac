//! Comparisons: runs of one prompt in different modes, linked and measured against each other.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sqlx::{Row, SqliteConnection};

use crate::codec::{decode_error, decode_time, encode_time, from_json, to_json};
use crate::comparison_figures::{compute, Member};
use crate::db::Store;
use crate::error::{Result, StoreError};
use crate::records::{Comparison, PromptRecord};

impl Store {
    /// Links `run_ids` (existing runs that belong to no comparison yet) as a comparison of
    /// `prompt`, and computes its figures from the stored runs (see [`Comparison`]).
    #[tracing::instrument(level = "debug", skip_all, fields(runs = ?run_ids), err(level = "debug"))]
    pub async fn create_comparison(
        &self,
        prompt: &PromptRecord,
        run_ids: &[i64],
    ) -> Result<Comparison> {
        let write = async {
            let mut tx = self.begin_write().await?;
            let comparison = insert_comparison(&mut tx, &Utc::now(), prompt, run_ids).await?;
            tx.commit().await?;
            Ok(comparison)
        };
        self.health.observe(write.await)
    }

    pub async fn get_comparison(&self, id: i64) -> Result<Comparison> {
        let mut tx = self.pool.begin().await?;
        let comparison = load_comparison(&mut tx, id).await?;
        tx.commit().await?;
        Ok(comparison)
    }

    /// Comparisons, newest first; all of them without `limit`.
    pub async fn list_comparisons(&self, limit: Option<i64>) -> Result<Vec<Comparison>> {
        if limit.is_some_and(|l| l < 0) {
            return Err(StoreError::invalid("limit must not be negative"));
        }
        let mut tx = self.pool.begin().await?;
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM comparisons ORDER BY created_at DESC, id DESC LIMIT ?",
        )
        .bind(limit.unwrap_or(-1))
        .fetch_all(&mut *tx)
        .await?;
        let mut comparisons = Vec::with_capacity(ids.len());
        for id in ids {
            comparisons.push(load_comparison(&mut tx, id).await?);
        }
        tx.commit().await?;
        Ok(comparisons)
    }
}

/// Creates a comparison of existing runs and stores its figures. Runs already in a comparison are
/// refused: a run belongs to at most one.
pub(crate) async fn insert_comparison(
    conn: &mut SqliteConnection,
    created_at: &DateTime<Utc>,
    prompt: &PromptRecord,
    run_ids: &[i64],
) -> Result<Comparison> {
    if run_ids.is_empty() {
        return Err(StoreError::invalid("a comparison needs at least one run"));
    }
    let mut seen = HashSet::new();
    if let Some(dup) = run_ids.iter().find(|id| !seen.insert(**id)) {
        return Err(StoreError::invalid(format!("run {dup} is listed twice")));
    }
    for &run_id in run_ids {
        let row: Option<Option<i64>> =
            sqlx::query_scalar("SELECT comparison_id FROM runs WHERE id = ?")
                .bind(run_id)
                .fetch_optional(&mut *conn)
                .await?;
        match row {
            None => return Err(StoreError::run_not_found(run_id)),
            Some(Some(other)) => {
                return Err(StoreError::invalid(format!(
                    "run {run_id} already belongs to comparison {other}"
                )))
            }
            Some(None) => {}
        }
    }
    let id = sqlx::query("INSERT INTO comparisons (created_at, prompt) VALUES (?, ?)")
        .bind(encode_time(created_at))
        .bind(to_json(prompt)?)
        .execute(&mut *conn)
        .await?
        .last_insert_rowid();
    for &run_id in run_ids {
        sqlx::query("UPDATE runs SET comparison_id = ? WHERE id = ?")
            .bind(id)
            .bind(run_id)
            .execute(&mut *conn)
            .await?;
    }
    refresh_comparison(conn, id).await
}

/// Recomputes a comparison's figures from its runs as they are now and stores them.
pub(crate) async fn refresh_comparison(conn: &mut SqliteConnection, id: i64) -> Result<Comparison> {
    let comparison = load_comparison(conn, id).await?;
    sqlx::query(
        "UPDATE comparisons SET speedup = ?, outputs_identical = ?, first_difference = ? \
         WHERE id = ?",
    )
    .bind(comparison.speedup)
    .bind(comparison.outputs_identical)
    .bind(comparison.first_difference)
    .bind(id)
    .execute(&mut *conn)
    .await?;
    Ok(comparison)
}

/// A comparison with figures computed from its runs (equal to the stored ones, which are kept
/// current by every write that can change them).
pub(crate) async fn load_comparison(conn: &mut SqliteConnection, id: i64) -> Result<Comparison> {
    let row = sqlx::query("SELECT created_at, prompt FROM comparisons WHERE id = ?")
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
        .ok_or_else(|| StoreError::comparison_not_found(id))?;
    let created_at: String = row.try_get("created_at")?;
    let prompt: String = row.try_get("prompt")?;

    let rows = sqlx::query(
        "SELECT id, mode, status, tokens_per_second, decode_tokens_per_second, ttft_ms, \
         mean_accepted, draft_tokens, output, COALESCE(recorded_steps, 0) AS recorded_steps, \
         tree_tokens, draft_ms, verify_ms \
         FROM runs LEFT JOIN ( \
           SELECT run_id, COUNT(*) AS recorded_steps, SUM(tree_size) AS tree_tokens, \
           SUM(draft_ms) AS draft_ms, SUM(verify_ms) AS verify_ms \
           FROM steps WHERE run_id IN (SELECT id FROM runs WHERE comparison_id = ?1) \
           GROUP BY run_id \
         ) AS recorded ON recorded.run_id = runs.id \
         WHERE comparison_id = ?1 ORDER BY created_at, id",
    )
    .bind(id)
    .fetch_all(&mut *conn)
    .await?;
    let mut members = Vec::with_capacity(rows.len());
    for row in &rows {
        let status: String = row.try_get("status")?;
        members.push(Member {
            run_id: row.try_get("id")?,
            mode: row.try_get("mode")?,
            status: status.parse().map_err(|e| decode_error("status", e))?,
            tokens_per_second: row.try_get("tokens_per_second")?,
            decode_tokens_per_second: row.try_get("decode_tokens_per_second")?,
            ttft_ms: row.try_get("ttft_ms")?,
            mean_accepted: row.try_get("mean_accepted")?,
            draft_tokens: row.try_get("draft_tokens")?,
            output: row.try_get("output")?,
            recorded_steps: row.try_get("recorded_steps")?,
            tree_tokens: row.try_get("tree_tokens")?,
            draft_ms: row.try_get("draft_ms")?,
            verify_ms: row.try_get("verify_ms")?,
        });
    }
    let figures = compute(&members);
    Ok(Comparison {
        id,
        created_at: decode_time("created_at", &created_at)?,
        prompt: from_json("prompt", &prompt)?,
        runs: figures.runs,
        repeats: figures.repeats,
        modes: figures.modes,
        speedup: figures.speedup,
        outputs_identical: figures.outputs_identical,
        first_difference: figures.first_difference,
    })
}
