//! The write path: one writer at a time in this process, transactions that never leave a broken
//! connection in the pool, and whether the database can be written at all.
//!
//! sqlx's own transactions keep a per-connection depth that stays raised when `COMMIT` fails
//! (as it does on a full disk), after which that pooled connection refuses every `BEGIN`. A
//! [`WriteTx`] issues `BEGIN IMMEDIATE`/`COMMIT` itself and closes its connection instead of
//! returning it whenever the transaction did not end cleanly; closing rolls back.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use sqlx::pool::PoolConnection;
use sqlx::{Sqlite, SqliteConnection};
use tokio::sync::OwnedMutexGuard;

use crate::error::{Result, StoreError};

/// An open write transaction. Dropping it without [`WriteTx::commit`] rolls back.
pub(crate) struct WriteTx {
    conn: PoolConnection<Sqlite>,
    open: bool,
    /// Writers of this process queue here in arrival order rather than in SQLite's busy
    /// handler, so a long import that commits in batches lets waiting generations in between.
    _turn: OwnedMutexGuard<()>,
}

impl WriteTx {
    pub(crate) async fn begin(
        turn: OwnedMutexGuard<()>,
        conn: PoolConnection<Sqlite>,
    ) -> Result<Self> {
        // Open before `BEGIN` runs: a caller that gives up while it waits for the lock (a
        // cancelled task, a client gone) drops this, and the connection is closed rather than
        // pooled, where the `BEGIN` it still runs would hold the lock for good.
        let mut tx = Self {
            conn,
            open: true,
            _turn: turn,
        };
        // Takes the write lock up front, so that the transaction waits out another process's
        // writer (up to the busy timeout) instead of failing when it first writes after a read.
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *tx.conn)
            .await?;
        Ok(tx)
    }

    pub(crate) async fn commit(mut self) -> Result<()> {
        sqlx::query("COMMIT").execute(&mut *self.conn).await?;
        self.open = false;
        Ok(())
    }

    pub(crate) async fn rollback(mut self) -> Result<()> {
        sqlx::query("ROLLBACK").execute(&mut *self.conn).await?;
        self.open = false;
        Ok(())
    }
}

impl Drop for WriteTx {
    fn drop(&mut self) {
        if self.open {
            // Whatever state the transaction is in, a closed connection holds none of it.
            self.conn.close_on_drop();
        }
    }
}

impl Deref for WriteTx {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        &self.conn
    }
}

impl DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.conn
    }
}

/// Whether the history can be written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum StoreHealth {
    Ok,
    /// The last write failed for a reason of the storage's (disk full, I/O error, read-only).
    Degraded {
        reason: String,
    },
}

/// The last storage failure, cleared by the next write that succeeds.
#[derive(Debug, Default, Clone)]
pub(crate) struct WriteHealth {
    failure: Arc<Mutex<Option<String>>>,
}

impl WriteHealth {
    /// Notes what a write's result says about the storage, and passes it on.
    pub(crate) fn observe<T>(&self, result: Result<T>) -> Result<T> {
        match &result {
            Ok(_) => self.set(None),
            Err(err) if err.is_storage_failure() => {
                tracing::warn!(error = %err, "the history cannot be written");
                self.set(Some(err.to_string()));
            }
            Err(_) => {}
        }
        result
    }

    pub(crate) fn failure(&self) -> Option<String> {
        self.lock().clone()
    }

    fn set(&self, failure: Option<String>) {
        let mut current = self.lock();
        if current.is_some() && failure.is_none() {
            tracing::info!("the history can be written again");
        }
        *current = failure;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.failure.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// SQLite's primary result codes that mean the storage, not the statement, failed.
const STORAGE_FAILURES: [i32; 6] = [
    8,  // SQLITE_READONLY
    10, // SQLITE_IOERR
    11, // SQLITE_CORRUPT
    13, // SQLITE_FULL
    14, // SQLITE_CANTOPEN
    26, // SQLITE_NOTADB
];

impl StoreError {
    /// Whether this error says the database cannot be written (full, read-only, failing I/O),
    /// as opposed to a refused input or a missing record.
    pub fn is_storage_failure(&self) -> bool {
        match self {
            StoreError::Io(_) => true,
            StoreError::Database(sqlx::Error::Io(_)) => true,
            StoreError::Database(sqlx::Error::Database(db)) => db
                .code()
                .and_then(|code| code.parse::<i32>().ok())
                .is_some_and(|code| STORAGE_FAILURES.contains(&(code & 0xff))),
            _ => false,
        }
    }
}

/// Bytes the health probe writes (and rolls back): a few pages, so a database with no room
/// left fails it.
pub(crate) const PROBE_BYTES: i64 = 16 * 1024;

pub(crate) fn write_turn() -> Arc<tokio::sync::Mutex<()>> {
    Arc::new(tokio::sync::Mutex::new(()))
}
