//! Runs and their steps: writing a run through its life, reading runs back.

use chrono::Utc;
use sqlx::sqlite::SqliteRow;
use sqlx::{QueryBuilder, Row, Sqlite, SqliteConnection};

use crate::codec::{
    check_finite, decode_error, decode_time, decode_uuid, encode_time, from_json, to_json,
};
use crate::comparisons::refresh_comparison;
use crate::db::Store;
use crate::error::{Result, StoreError};
use crate::filter::{RunFilter, LOCAL_ENGINE};
use crate::records::{
    HeadsRef, ListedRun, ModelRef, NewRun, PromptRecord, Run, RunOutcome, RunStatus, RunWithSteps,
    StepRecord,
};
use crate::search::match_expression;
use crate::turns::{record_turn, settle_answers};

/// The columns of `runs` a listing reads: all but the per-token arrays.
const LISTED_COLUMNS: &str = "id, uid, created_at, status, mode, model_name, model_path, \
     model_file_type, model_identity, heads_path, heads_identity, tree, prompt, prompt_text, \
     sampling, max_tokens, stop, comparison_id, queue_ms, output, stop_reason, prompt_tokens, \
     tokens_generated, ttft_ms, total_ms, tokens_per_second, decode_tokens_per_second, steps, \
     mean_accepted, acceptance_by_depth, seed, error, finished_at, engine, draft_tokens, \
     accepted_draft_tokens, draft_model";

/// Every column of `runs`.
const RUN_COLUMNS: &str = "id, uid, created_at, status, mode, model_name, model_path, \
     model_file_type, model_identity, heads_path, heads_identity, tree, prompt, prompt_text, \
     sampling, max_tokens, stop, comparison_id, queue_ms, output, stop_reason, prompt_tokens, \
     tokens_generated, ttft_ms, total_ms, tokens_per_second, decode_tokens_per_second, steps, \
     mean_accepted, acceptance_by_depth, seed, error, finished_at, engine, draft_tokens, \
     accepted_draft_tokens, draft_model, token_ids, logprobs";

const STEP_COLUMNS: &str = "step_index, tree_size, tree_depth, accepted_len, tokens, sources, \
     depth_hits, draft_ms, verify_ms, tree, skip, decision";

impl Store {
    /// Records a run that is starting; returns its local id. With `comparison_id`, the run joins
    /// that comparison, whose figures are recomputed when the run ends; with `conversation`, the
    /// conversation takes the run's messages and the answer it writes.
    #[tracing::instrument(level = "debug", skip_all, fields(uid = %new.uid, mode = %new.mode), err(level = "debug"))]
    pub async fn begin_run(&self, new: &NewRun) -> Result<i64> {
        if let Some(queue_ms) = new.queue_ms {
            check_finite("queue_ms", queue_ms)?;
        }
        let write = async {
            let mut tx = self.begin_write().await?;
            if let Some(comparison_id) = new.comparison_id {
                let exists: Option<i64> =
                    sqlx::query_scalar("SELECT id FROM comparisons WHERE id = ?")
                        .bind(comparison_id)
                        .fetch_optional(&mut *tx)
                        .await?;
                if exists.is_none() {
                    return Err(StoreError::comparison_not_found(comparison_id));
                }
            }
            let id = insert_run(&mut tx, &Run::running(0, new)).await?;
            if let Some(turn) = new.conversation {
                record_turn(&mut tx, turn, &new.prompt, id).await?;
            }
            tx.commit().await?;
            Ok(id)
        };
        self.health.observe(write.await)
    }

    /// Adds a batch of steps to a running run, all or none.
    #[tracing::instrument(level = "debug", skip_all, fields(run_id = run_id, count = steps.len()), err(level = "debug"))]
    pub async fn append_steps(&self, run_id: i64, steps: &[StepRecord]) -> Result<()> {
        for step in steps {
            check_step(step)?;
        }
        let write = async {
            let mut tx = self.begin_write().await?;
            let status = run_status(&mut tx, run_id).await?;
            if status != RunStatus::Running {
                return Err(not_running(run_id, status));
            }
            for step in steps {
                insert_step(&mut tx, run_id, step).await?;
            }
            tx.commit().await
        };
        self.health.observe(write.await)
    }

    /// Keeps what a running run has produced so far, so that a process killed mid-run leaves
    /// its output behind (the run then reads as interrupted, with this output).
    #[tracing::instrument(level = "debug", skip_all, fields(run_id = run_id), err(level = "debug"))]
    pub async fn save_partial_output(
        &self,
        run_id: i64,
        output: &str,
        tokens_generated: i64,
    ) -> Result<()> {
        let write = async {
            let mut tx = self.begin_write().await?;
            sqlx::query(
                "UPDATE runs SET output = ?, tokens_generated = ? \
                 WHERE id = ? AND status = 'running'",
            )
            .bind(output)
            .bind(tokens_generated)
            .bind(run_id)
            .execute(&mut *tx)
            .await?;
            tx.commit().await
        };
        self.health.observe(write.await)
    }

    /// Marks a running run finished with its outcome.
    #[tracing::instrument(level = "debug", skip_all, fields(run_id = run_id), err(level = "debug"))]
    pub async fn finish_run(&self, run_id: i64, outcome: &RunOutcome) -> Result<()> {
        check_outcome(outcome)?;
        let end = Ending {
            status: RunStatus::Finished,
            outcome: Some(outcome),
            error: None,
        };
        self.end_run(run_id, end).await
    }

    /// Marks a running run failed.
    #[tracing::instrument(level = "debug", skip_all, fields(run_id = run_id), err(level = "debug"))]
    pub async fn fail_run(&self, run_id: i64, error: &str) -> Result<()> {
        let end = Ending {
            status: RunStatus::Failed,
            outcome: None,
            error: Some(error),
        };
        self.end_run(run_id, end).await
    }

    /// Marks a running run cancelled, keeping what it had produced when there is something.
    #[tracing::instrument(level = "debug", skip_all, fields(run_id = run_id), err(level = "debug"))]
    pub async fn cancel_run(&self, run_id: i64, partial: Option<&RunOutcome>) -> Result<()> {
        if let Some(outcome) = partial {
            check_outcome(outcome)?;
        }
        let end = Ending {
            status: RunStatus::Cancelled,
            outcome: partial,
            error: None,
        };
        self.end_run(run_id, end).await
    }

    async fn end_run(&self, run_id: i64, end: Ending<'_>) -> Result<()> {
        let finished_at = end.outcome.map_or_else(Utc::now, |o| o.finished_at);
        let o = end.outcome;
        let acceptance = o.map(|o| to_json(&o.acceptance_by_depth)).transpose()?;
        let token_ids = o
            .and_then(|o| o.token_ids.as_ref())
            .map(to_json)
            .transpose()?;
        let logprobs = o
            .and_then(|o| o.logprobs.as_ref())
            .map(to_json)
            .transpose()?;
        let write = async {
            let mut tx = self.begin_write().await?;
            // Only a running run can end: a finished run is never overwritten, and a run marked
            // interrupted stays so even if its process turns out to be alive.
            let updated = sqlx::query(
                "UPDATE runs SET status = ?, output = ?, stop_reason = ?, prompt_tokens = ?, \
                 tokens_generated = ?, queue_ms = COALESCE(?, queue_ms), ttft_ms = ?, total_ms = ?, \
                 tokens_per_second = ?, decode_tokens_per_second = ?, steps = ?, mean_accepted = ?, \
                 acceptance_by_depth = ?, \
                 draft_tokens = ?, accepted_draft_tokens = ?, token_ids = ?, logprobs = ?, seed = ?, \
                 error = ?, finished_at = ? \
                 WHERE id = ? AND status = 'running'",
            )
            .bind(end.status.as_str())
            .bind(o.map(|o| o.output.as_str()))
            .bind(o.map(|o| o.stop_reason.as_str()))
            .bind(o.map(|o| o.prompt_tokens))
            .bind(o.map(|o| o.tokens_generated))
            .bind(o.and_then(|o| o.queue_ms))
            .bind(o.map(|o| o.ttft_ms))
            .bind(o.map(|o| o.total_ms))
            .bind(o.map(|o| o.tokens_per_second))
            .bind(o.map(|o| o.decode_tokens_per_second))
            .bind(o.map(|o| o.steps))
            .bind(o.map(|o| o.mean_accepted))
            .bind(acceptance)
            .bind(o.and_then(|o| o.draft_tokens))
            .bind(o.and_then(|o| o.accepted_draft_tokens))
            .bind(token_ids)
            .bind(logprobs)
            .bind(o.map(|o| o.seed.to_string()))
            .bind(end.error)
            .bind(encode_time(&finished_at))
            .bind(run_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if updated == 0 {
                let status = run_status(&mut tx, run_id).await?;
                return Err(not_running(run_id, status));
            }
            let comparison_id: Option<i64> =
                sqlx::query_scalar("SELECT comparison_id FROM runs WHERE id = ?")
                    .bind(run_id)
                    .fetch_one(&mut *tx)
                    .await?;
            if let Some(comparison_id) = comparison_id {
                refresh_comparison(&mut tx, comparison_id).await?;
            }
            settle_answers(&mut tx, Some(run_id)).await?;
            tx.commit().await
        };
        self.health.observe(write.await)
    }

    /// One run with its steps in step order.
    pub async fn get_run(&self, id: i64) -> Result<RunWithSteps> {
        // One read transaction: the run and its steps come from the same snapshot.
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?"))
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| StoreError::run_not_found(id))?;
        let run = run_from_row(&row)?;
        let steps = load_steps(&mut tx, id).await?;
        tx.commit().await?;
        Ok(RunWithSteps { run, steps })
    }

    /// Runs matching `filter`, in its order, without their per-token arrays (see
    /// [`ListedRun`]); [`Store::get_run`] has them.
    pub async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<ListedRun>> {
        let mut query = filtered_runs(LISTED_COLUMNS, filter)?;
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter().map(listed_run_from_row).collect()
    }

    /// One run as a listing shows it, without reading its per-token arrays.
    pub(crate) async fn get_listed_run(&self, id: i64) -> Result<ListedRun> {
        let row = sqlx::query(&format!("SELECT {LISTED_COLUMNS} FROM runs WHERE id = ?"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::run_not_found(id))?;
        listed_run_from_row(&row)
    }

    /// The prompts and answer token ids of the newest `limit` finished runs of the model file at
    /// `model_path` on this machine (not remote engines, nor comparisons' runs, which lookup
    /// only read from), newest first: what lookup remembers across a restart.
    pub async fn recent_answers(
        &self,
        model_path: &str,
        limit: i64,
    ) -> Result<Vec<(PromptRecord, Vec<i32>)>> {
        let rows = sqlx::query(
            "SELECT prompt, token_ids FROM runs WHERE status = 'finished' AND model_path = ? \
             AND engine IS NULL AND comparison_id IS NULL AND token_ids IS NOT NULL ORDER BY created_at DESC, id DESC LIMIT ?",
        )
        .bind(model_path)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let prompt: String = row.try_get("prompt")?;
                let tokens: String = row.try_get("token_ids")?;
                Ok((
                    from_json("prompt", &prompt)?,
                    from_json("token_ids", &tokens)?,
                ))
            })
            .collect()
    }

    /// The ids of the runs matching `filter`, in its order: what an export walks through, one
    /// run at a time.
    pub(crate) async fn list_run_ids(&self, filter: &RunFilter) -> Result<Vec<i64>> {
        let mut query = filtered_runs("id", filter)?;
        Ok(query.build_query_scalar().fetch_all(&self.pool).await?)
    }
}

/// How a run ends.
struct Ending<'a> {
    status: RunStatus,
    outcome: Option<&'a RunOutcome>,
    error: Option<&'a str>,
}

fn not_running(run_id: i64, status: RunStatus) -> StoreError {
    StoreError::invalid(format!("run {run_id} is {status}, not running"))
}

fn check_outcome(outcome: &RunOutcome) -> Result<()> {
    if let Some(queue_ms) = outcome.queue_ms {
        check_finite("queue_ms", queue_ms)?;
    }
    check_finite("ttft_ms", outcome.ttft_ms)?;
    check_finite("total_ms", outcome.total_ms)?;
    check_finite("tokens_per_second", outcome.tokens_per_second)?;
    check_finite("decode_tokens_per_second", outcome.decode_tokens_per_second)?;
    check_finite("mean_accepted", outcome.mean_accepted)?;
    for &rate in &outcome.acceptance_by_depth {
        check_finite("acceptance_by_depth", rate)?;
    }
    Ok(())
}

fn check_step(step: &StepRecord) -> Result<()> {
    check_finite("draft_ms", step.draft_ms)?;
    check_finite("verify_ms", step.verify_ms)
}

pub(crate) async fn run_status(conn: &mut SqliteConnection, run_id: i64) -> Result<RunStatus> {
    let status: Option<String> = sqlx::query_scalar("SELECT status FROM runs WHERE id = ?")
        .bind(run_id)
        .fetch_optional(&mut *conn)
        .await?;
    let status = status.ok_or_else(|| StoreError::run_not_found(run_id))?;
    status.parse().map_err(|e| decode_error("status", e))
}

/// Inserts every column of `run` except `id`, which SQLite assigns; returns the new id.
pub(crate) async fn insert_run(conn: &mut SqliteConnection, run: &Run) -> Result<i64> {
    let result = sqlx::query(
        "INSERT INTO runs (uid, created_at, status, mode, model_name, model_path, \
         model_file_type, model_identity, heads_path, heads_identity, tree, prompt, prompt_text, \
         sampling, max_tokens, stop, comparison_id, queue_ms, output, stop_reason, prompt_tokens, \
         tokens_generated, ttft_ms, total_ms, tokens_per_second, decode_tokens_per_second, steps, \
         mean_accepted, acceptance_by_depth, seed, error, finished_at, engine, draft_tokens, \
         accepted_draft_tokens, token_ids, logprobs, draft_model) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, \
         ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(run.uid.to_string())
    .bind(encode_time(&run.created_at))
    .bind(run.status.as_str())
    .bind(&run.mode)
    .bind(&run.model.name)
    .bind(&run.model.path)
    .bind(&run.model.file_type)
    .bind(&run.model.identity)
    .bind(run.heads.as_ref().map(|h| h.path.as_str()))
    .bind(run.heads.as_ref().map(|h| h.identity.as_str()))
    .bind(run.tree.as_ref().map(to_json).transpose()?)
    .bind(to_json(&run.prompt)?)
    .bind(run.prompt.display_text())
    .bind(to_json(&run.sampling)?)
    .bind(i64::from(run.max_tokens))
    .bind(to_json(&run.stop)?)
    .bind(run.comparison_id)
    .bind(run.queue_ms)
    .bind(run.output.as_deref())
    .bind(run.stop_reason.as_deref())
    .bind(run.prompt_tokens)
    .bind(run.tokens_generated)
    .bind(run.ttft_ms)
    .bind(run.total_ms)
    .bind(run.tokens_per_second)
    .bind(run.decode_tokens_per_second)
    .bind(run.steps)
    .bind(run.mean_accepted)
    .bind(run.acceptance_by_depth.as_ref().map(to_json).transpose()?)
    .bind(run.seed.map(|s| s.to_string()))
    .bind(run.error.as_deref())
    .bind(run.finished_at.as_ref().map(encode_time))
    .bind(run.engine.as_deref())
    .bind(run.draft_tokens)
    .bind(run.accepted_draft_tokens)
    .bind(run.token_ids.as_ref().map(to_json).transpose()?)
    .bind(run.logprobs.as_ref().map(to_json).transpose()?)
    .bind(run.draft_model.as_ref().map(to_json).transpose()?)
    .execute(&mut *conn)
    .await;
    match result {
        Ok(done) => Ok(done.last_insert_rowid()),
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Err(StoreError::invalid(
            format!("a run with uid {} is already stored", run.uid),
        )),
        Err(e) => Err(e.into()),
    }
}

pub(crate) async fn insert_step(
    conn: &mut SqliteConnection,
    run_id: i64,
    step: &StepRecord,
) -> Result<()> {
    let result = sqlx::query(&format!(
        "INSERT INTO steps (run_id, {STEP_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    ))
    .bind(run_id)
    .bind(step.step_index)
    .bind(step.tree_size)
    .bind(step.tree_depth)
    .bind(step.accepted_len)
    .bind(to_json(&step.tokens)?)
    .bind(to_json(&step.sources)?)
    .bind(to_json(&step.depth_hits)?)
    .bind(step.draft_ms)
    .bind(step.verify_ms)
    .bind(step.tree.as_ref().map(to_json).transpose()?)
    .bind(step.skip.as_ref().map(to_json).transpose()?)
    .bind(step.decision.as_ref().map(to_json).transpose()?)
    .execute(&mut *conn)
    .await;
    match result {
        Ok(_) => Ok(()),
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Err(StoreError::invalid(
            format!("run {run_id} already has a step {}", step.step_index),
        )),
        Err(e) => Err(e.into()),
    }
}

pub(crate) async fn load_steps(
    conn: &mut SqliteConnection,
    run_id: i64,
) -> Result<Vec<StepRecord>> {
    let rows = sqlx::query(&format!(
        "SELECT {STEP_COLUMNS} FROM steps WHERE run_id = ? ORDER BY step_index"
    ))
    .bind(run_id)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter().map(step_from_row).collect()
}

/// `SELECT columns FROM runs` for the runs matching `filter`, in its order, paged as it says.
fn filtered_runs<'a>(columns: &str, filter: &'a RunFilter) -> Result<QueryBuilder<'a, Sqlite>> {
    filter.check_text()?;
    let limit = filter.limit.unwrap_or(-1);
    if filter.limit.is_some_and(|l| l < 0) || filter.offset.is_some_and(|o| o < 0) {
        return Err(StoreError::invalid("limit and offset must not be negative"));
    }
    let mut query = QueryBuilder::<Sqlite>::new(format!("SELECT {columns} FROM runs WHERE 1 = 1"));
    if let Some(since) = &filter.since {
        query
            .push(" AND created_at >= ")
            .push_bind(encode_time(since));
    }
    if let Some(until) = &filter.until {
        query
            .push(" AND created_at < ")
            .push_bind(encode_time(until));
    }
    if let Some(mode) = &filter.mode {
        query.push(" AND mode = ").push_bind(mode.clone());
    }
    match filter.engine.as_deref() {
        None => {}
        Some(LOCAL_ENGINE) => {
            query.push(" AND engine IS NULL");
        }
        Some(engine) => {
            query.push(" AND engine = ").push_bind(engine.to_owned());
        }
    }
    if let Some(model) = filter.model.as_deref().filter(|m| !m.trim().is_empty()) {
        query
            .push(" AND instr(lower(model_name), lower(")
            .push_bind(model.trim().to_owned())
            .push(")) > 0");
    }
    if let Some(words) = filter.search.as_deref().and_then(match_expression) {
        query
            .push(" AND id IN (SELECT rowid FROM runs_search WHERE runs_search MATCH ")
            .push_bind(words)
            .push(")");
    }
    if let Some(status) = filter.status {
        query.push(" AND status = ").push_bind(status.as_str());
    }
    // The column and direction come from closed enums, never from caller text.
    let direction = filter.order.sql();
    query.push(format!(
        " ORDER BY {} {direction} NULLS LAST, id {direction}",
        filter.sort.column()
    ));
    // SQLite needs a LIMIT before OFFSET; -1 means none.
    query.push(" LIMIT ").push_bind(limit);
    query.push(" OFFSET ").push_bind(filter.offset.unwrap_or(0));
    Ok(query)
}

/// A row of [`RUN_COLUMNS`].
fn run_from_row(row: &SqliteRow) -> Result<Run> {
    let token_ids: Option<String> = row.try_get("token_ids")?;
    let logprobs: Option<String> = row.try_get("logprobs")?;
    let token_ids = token_ids.map(|t| from_json("token_ids", &t)).transpose()?;
    let logprobs = logprobs.map(|l| from_json("logprobs", &l)).transpose()?;
    Ok(listed_run_from_row(row)?.with_tokens(token_ids, logprobs))
}

/// A row of [`LISTED_COLUMNS`] (or more).
fn listed_run_from_row(row: &SqliteRow) -> Result<ListedRun> {
    let uid: String = row.try_get("uid")?;
    let created_at: String = row.try_get("created_at")?;
    let status: String = row.try_get("status")?;
    let heads_path: Option<String> = row.try_get("heads_path")?;
    let heads_identity: Option<String> = row.try_get("heads_identity")?;
    let tree: Option<String> = row.try_get("tree")?;
    let prompt: String = row.try_get("prompt")?;
    let sampling: String = row.try_get("sampling")?;
    let max_tokens: i64 = row.try_get("max_tokens")?;
    let stop: String = row.try_get("stop")?;
    let acceptance: Option<String> = row.try_get("acceptance_by_depth")?;
    let seed: Option<String> = row.try_get("seed")?;
    let finished_at: Option<String> = row.try_get("finished_at")?;
    let draft_model: Option<String> = row.try_get("draft_model")?;
    Ok(ListedRun {
        id: row.try_get("id")?,
        uid: decode_uuid("uid", &uid)?,
        status: status.parse().map_err(|e| decode_error("status", e))?,
        created_at: decode_time("created_at", &created_at)?,
        mode: row.try_get("mode")?,
        model: ModelRef {
            name: row.try_get("model_name")?,
            path: row.try_get("model_path")?,
            file_type: row.try_get("model_file_type")?,
            identity: row.try_get("model_identity")?,
        },
        heads: heads_path.map(|path| HeadsRef {
            path,
            identity: heads_identity.unwrap_or_default(),
        }),
        draft_model: draft_model
            .map(|d| from_json("draft_model", &d))
            .transpose()?,
        tree: tree.map(|t| from_json("tree", &t)).transpose()?,
        prompt: from_json("prompt", &prompt)?,
        sampling: from_json("sampling", &sampling)?,
        max_tokens: u32::try_from(max_tokens).map_err(|e| decode_error("max_tokens", e))?,
        stop: from_json("stop", &stop)?,
        comparison_id: row.try_get("comparison_id")?,
        queue_ms: row.try_get("queue_ms")?,
        engine: row.try_get("engine")?,
        output: row.try_get("output")?,
        stop_reason: row.try_get("stop_reason")?,
        prompt_tokens: row.try_get("prompt_tokens")?,
        tokens_generated: row.try_get("tokens_generated")?,
        ttft_ms: row.try_get("ttft_ms")?,
        total_ms: row.try_get("total_ms")?,
        tokens_per_second: row.try_get("tokens_per_second")?,
        decode_tokens_per_second: row.try_get("decode_tokens_per_second")?,
        steps: row.try_get("steps")?,
        mean_accepted: row.try_get("mean_accepted")?,
        acceptance_by_depth: acceptance
            .map(|a| from_json("acceptance_by_depth", &a))
            .transpose()?,
        draft_tokens: row.try_get("draft_tokens")?,
        accepted_draft_tokens: row.try_get("accepted_draft_tokens")?,
        seed: seed
            .map(|s| s.parse::<u64>().map_err(|e| decode_error("seed", e)))
            .transpose()?,
        error: row.try_get("error")?,
        finished_at: finished_at
            .map(|t| decode_time("finished_at", &t))
            .transpose()?,
    })
}

fn step_from_row(row: &SqliteRow) -> Result<StepRecord> {
    let tokens: String = row.try_get("tokens")?;
    let sources: String = row.try_get("sources")?;
    let depth_hits: String = row.try_get("depth_hits")?;
    let tree: Option<String> = row.try_get("tree")?;
    let skip: Option<String> = row.try_get("skip")?;
    let decision: Option<String> = row.try_get("decision")?;
    Ok(StepRecord {
        step_index: row.try_get("step_index")?,
        tree_size: row.try_get("tree_size")?,
        tree_depth: row.try_get("tree_depth")?,
        accepted_len: row.try_get("accepted_len")?,
        tokens: from_json("tokens", &tokens)?,
        sources: from_json("sources", &sources)?,
        depth_hits: from_json("depth_hits", &depth_hits)?,
        draft_ms: row.try_get("draft_ms")?,
        verify_ms: row.try_get("verify_ms")?,
        tree: tree.map(|t| from_json("tree", &t)).transpose()?,
        skip: skip.map(|s| from_json("skip", &s)).transpose()?,
        decision: decision.map(|d| from_json("decision", &d)).transpose()?,
    })
}
