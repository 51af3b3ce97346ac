//! Heads training jobs: one row per job, rewritten as it advances. The store keeps a job's
//! settings, figures and report as JSON without reading them (the application layer owns their
//! shape).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqliteConnection};
use uuid::Uuid;

use crate::codec::{decode_time, decode_uuid, encode_time, from_json, to_json};
use crate::db::Store;
use crate::error::{Result, StoreError};

/// Most jobs one list answers, the latest first.
pub const MAX_TRAINING_JOBS_LISTED: i64 = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum TrainingStatus {
    Running,
    /// Stopped on request; what was collected is kept for a resume.
    Cancelled,
    Failed,
    /// Its process ended while it ran; it resumes like a cancelled job.
    Interrupted,
    Finished,
}

impl TrainingStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
            Self::Interrupted => "interrupted",
            Self::Finished => "finished",
        }
    }

    fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "running" => Self::Running,
            "cancelled" => Self::Cancelled,
            "failed" => Self::Failed,
            "interrupted" => Self::Interrupted,
            "finished" => Self::Finished,
            other => {
                return Err(crate::codec::decode_error(
                    "status",
                    format!("unknown training status {other:?}"),
                ))
            }
        })
    }
}

/// A heads training job as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct TrainingJob {
    pub id: i64,
    pub uid: Uuid,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub status: TrainingStatus,
    /// What it is doing, or where it stopped.
    pub phase: String,
    /// What the job is called: its heads file's name (`m-2.medusa.gguf`), which no other job
    /// shares. Derived from `heads_path`, not stored.
    #[serde(default)]
    pub name: String,
    pub model_name: String,
    pub model_path: String,
    #[ts(type = "TrainingSettings")]
    pub settings: serde_json::Value,
    /// Where its collected answers are kept.
    pub data_path: Option<String>,
    /// Where its heads go: chosen when it starts, never a file that is already there nor
    /// another job's; once it finished, the heads it wrote.
    pub heads_path: Option<String>,
    #[ts(type = "TrainingFigures")]
    pub figures: serde_json::Value,
    #[ts(type = "TrainingReport | null")]
    pub report: Option<serde_json::Value>,
    pub error: Option<String>,
}

/// A job about to start.
#[derive(Debug, Clone)]
pub struct NewTrainingJob {
    pub model_name: String,
    pub model_path: String,
    /// Where its heads will go.
    pub heads_path: Option<String>,
    pub settings: serde_json::Value,
    pub figures: serde_json::Value,
}

/// How far a job got: everything about it that changes.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingProgress {
    pub status: TrainingStatus,
    pub phase: String,
    pub figures: serde_json::Value,
    pub data_path: Option<String>,
    pub heads_path: Option<String>,
    pub report: Option<serde_json::Value>,
    pub error: Option<String>,
}

/// A job's name: its heads file's name (`m-2.medusa.gguf`), else (a job recorded before its
/// heads file was chosen) its model's name and its number.
pub fn training_job_name(heads_path: Option<&str>, model_name: &str, id: i64) -> String {
    heads_path
        .map(std::path::Path::new)
        .and_then(std::path::Path::file_name)
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| format!("{model_name} (job {id})"))
}

impl TrainingJob {
    /// Sets where its heads go, and the name that follows from it.
    pub fn set_heads_path(&mut self, path: Option<String>) {
        self.name = training_job_name(path.as_deref(), &self.model_name, self.id);
        self.heads_path = path;
    }
}

const COLUMNS: &str = "id, uid, created_at, updated_at, status, phase, model_name, model_path, \
                       settings, data_path, heads_path, figures, report, error";

impl Store {
    /// Records a job that starts now (`running`).
    #[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
    pub async fn begin_training_job(&self, job: &NewTrainingJob) -> Result<TrainingJob> {
        let now = Utc::now();
        let write = async {
            let mut conn = self.begin_write().await?;
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO training_jobs (uid, created_at, updated_at, status, phase, \
                 model_name, model_path, heads_path, settings, figures) \
                 VALUES (?, ?, ?, 'running', 'starting', ?, ?, ?, ?, ?) RETURNING id",
            )
            .bind(Uuid::new_v4().to_string())
            .bind(encode_time(&now))
            .bind(encode_time(&now))
            .bind(&job.model_name)
            .bind(&job.model_path)
            .bind(&job.heads_path)
            .bind(to_json(&job.settings)?)
            .bind(to_json(&job.figures)?)
            .fetch_one(&mut *conn)
            .await?;
            let stored = load_job(&mut conn, id).await?;
            conn.commit().await?;
            Ok(stored)
        };
        self.health.observe(write.await)
    }

    /// Writes how far job `id` got.
    #[tracing::instrument(level = "debug", skip_all, fields(id), err(level = "debug"))]
    pub async fn update_training_job(&self, id: i64, progress: &TrainingProgress) -> Result<()> {
        let write = async {
            let mut conn = self.begin_write().await?;
            let updated = sqlx::query(
                "UPDATE training_jobs SET updated_at = ?, status = ?, phase = ?, figures = ?, \
                 data_path = ?, heads_path = ?, report = ?, error = ? WHERE id = ?",
            )
            .bind(encode_time(&Utc::now()))
            .bind(progress.status.as_str())
            .bind(&progress.phase)
            .bind(to_json(&progress.figures)?)
            .bind(&progress.data_path)
            .bind(&progress.heads_path)
            .bind(progress.report.as_ref().map(to_json).transpose()?)
            .bind(&progress.error)
            .bind(id)
            .execute(&mut *conn)
            .await?
            .rows_affected();
            if updated == 0 {
                return Err(StoreError::training_job_not_found(id));
            }
            conn.commit().await?;
            Ok(())
        };
        self.health.observe(write.await)
    }

    /// Removes job `id` from the history and answers it as it was. A running job is refused.
    #[tracing::instrument(level = "debug", skip(self), err(level = "debug"))]
    pub async fn delete_training_job(&self, id: i64) -> Result<TrainingJob> {
        let write = async {
            let mut tx = self.begin_write().await?;
            let job = load_job(&mut tx, id).await?;
            if job.status == TrainingStatus::Running {
                return Err(StoreError::invalid(format!(
                    "training job {id} is running: cancel it first"
                )));
            }
            sqlx::query("DELETE FROM training_jobs WHERE id = ?")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(job)
        };
        self.health.observe(write.await)
    }

    /// Jobs, the latest first.
    pub async fn list_training_jobs(&self) -> Result<Vec<TrainingJob>> {
        let mut conn = self.pool.acquire().await?;
        list_jobs(&mut conn).await
    }

    pub async fn get_training_job(&self, id: i64) -> Result<TrainingJob> {
        let mut conn = self.pool.acquire().await?;
        load_job(&mut conn, id).await
    }

    /// The heads files of every job in the history (listed or not), but job `except`'s: the
    /// names a new job's heads may not take.
    pub async fn training_heads_paths(&self, except: Option<i64>) -> Result<Vec<String>> {
        let mut conn = self.pool.acquire().await?;
        Ok(sqlx::query_scalar(
            "SELECT heads_path FROM training_jobs WHERE heads_path IS NOT NULL AND id IS NOT ?",
        )
        .bind(except)
        .fetch_all(&mut *conn)
        .await?)
    }
}

pub(crate) async fn list_jobs(conn: &mut SqliteConnection) -> Result<Vec<TrainingJob>> {
    sqlx::query(&format!(
        "SELECT {COLUMNS} FROM training_jobs ORDER BY created_at DESC, id DESC LIMIT ?"
    ))
    .bind(MAX_TRAINING_JOBS_LISTED)
    .fetch_all(conn)
    .await?
    .iter()
    .map(job_from_row)
    .collect()
}

/// The ids of the jobs [`list_jobs`] lists, in its order.
pub(crate) async fn list_job_ids(conn: &mut SqliteConnection) -> Result<Vec<i64>> {
    Ok(
        sqlx::query_scalar(
            "SELECT id FROM training_jobs ORDER BY created_at DESC, id DESC LIMIT ?",
        )
        .bind(MAX_TRAINING_JOBS_LISTED)
        .fetch_all(conn)
        .await?,
    )
}

async fn load_job(conn: &mut SqliteConnection, id: i64) -> Result<TrainingJob> {
    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM training_jobs WHERE id = ?"))
        .bind(id)
        .fetch_optional(conn)
        .await?
        .ok_or_else(|| StoreError::training_job_not_found(id))?;
    job_from_row(&row)
}

/// Adds an exported job unless its uid is stored already; whether it was added.
pub(crate) async fn import_job(conn: &mut SqliteConnection, job: &TrainingJob) -> Result<bool> {
    // A job that was running when exported is not running here.
    let status = match job.status {
        TrainingStatus::Running => TrainingStatus::Interrupted,
        other => other,
    };
    let added = sqlx::query(
        "INSERT INTO training_jobs (uid, created_at, updated_at, status, phase, model_name, \
         model_path, settings, data_path, heads_path, figures, report, error) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (uid) DO NOTHING",
    )
    .bind(job.uid.to_string())
    .bind(encode_time(&job.created_at))
    .bind(encode_time(&job.updated_at))
    .bind(status.as_str())
    .bind(&job.phase)
    .bind(&job.model_name)
    .bind(&job.model_path)
    .bind(to_json(&job.settings)?)
    .bind(&job.data_path)
    .bind(&job.heads_path)
    .bind(to_json(&job.figures)?)
    .bind(job.report.as_ref().map(to_json).transpose()?)
    .bind(&job.error)
    .execute(conn)
    .await?
    .rows_affected();
    Ok(added > 0)
}

fn job_from_row(row: &SqliteRow) -> Result<TrainingJob> {
    let id: i64 = row.try_get("id")?;
    let model_name: String = row.try_get("model_name")?;
    let heads_path: Option<String> = row.try_get("heads_path")?;
    Ok(TrainingJob {
        name: training_job_name(heads_path.as_deref(), &model_name, id),
        id,
        uid: decode_uuid("uid", row.try_get("uid")?)?,
        created_at: decode_time("created_at", row.try_get("created_at")?)?,
        updated_at: decode_time("updated_at", row.try_get("updated_at")?)?,
        status: TrainingStatus::parse(row.try_get("status")?)?,
        phase: row.try_get("phase")?,
        model_name,
        model_path: row.try_get("model_path")?,
        settings: from_json("settings", row.try_get("settings")?)?,
        data_path: row.try_get("data_path")?,
        heads_path,
        figures: from_json("figures", row.try_get("figures")?)?,
        report: row
            .try_get::<Option<String>, _>("report")?
            .map(|text| from_json("report", &text))
            .transpose()?,
        error: row.try_get("error")?,
    })
}
