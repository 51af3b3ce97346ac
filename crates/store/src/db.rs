//! Opening the database: location, connection settings, schema, and recovery after a crash.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;

use crate::error::{Result, StoreError};
use crate::turns::settle_answers;
use crate::write::{write_turn, StoreHealth, WriteHealth, WriteTx, PROBE_BYTES};

/// Environment variable that overrides where the history database lives.
pub const DB_ENV: &str = "MEDUSA_DB";

/// How long a statement waits for another connection's write lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Readers run alongside the one writer WAL allows; a few connections are plenty.
const MAX_CONNECTIONS: u32 = 4;

/// The run history, backed by one SQLite file. Cloning is cheap and shares the connection pool.
#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) pool: SqlitePool,
    path: PathBuf,
    write_turn: Arc<tokio::sync::Mutex<()>>,
    pub(crate) health: WriteHealth,
    /// `PRAGMA max_page_count` for every connection; 0 leaves SQLite's own.
    page_limit: Arc<AtomicU64>,
}

/// The application's directory under the user's data directory.
const APP_DIR: &str = "medusa-playground";

/// SQLite's largest `max_page_count`: no limit.
const UNLIMITED_PAGES: u64 = 4_294_967_294;

impl Store {
    /// `$MEDUSA_DB` when set and non-empty, else `<data dir>/medusa-playground/history.sqlite`.
    pub fn default_path() -> Result<PathBuf> {
        resolve_default_path(std::env::var_os(DB_ENV), dirs::data_dir())
    }

    /// Opens (creating when missing) the database at `path` and brings its schema up to date.
    ///
    /// Runs still marked `running` were left by a process that ended mid-run: they become
    /// `interrupted`. This assumes one process writes the history at a time.
    ///
    /// The history is the user's alone: a directory created for it is 0700 (and so is the
    /// application's own data directory, whatever it was), the database and its WAL and
    /// shared-memory files 0600, made so again at every open.
    #[tracing::instrument(level = "debug", skip_all, fields(path = %path.as_ref().display()), err(level = "debug"))]
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let app_dir = dirs::data_dir().map(|dir| dir.join(APP_DIR));
        prepare_private(&path, app_dir.as_deref())?;
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let page_limit = Arc::new(AtomicU64::new(0));
        let (on_connect, on_acquire) = (page_limit.clone(), page_limit.clone());
        let pool = SqlitePoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            // A per-connection setting: applied to new connections and whenever an idle one is
            // handed out, so a changed limit reaches every connection.
            .after_connect(move |conn, _| {
                let pages = on_connect.load(Ordering::Relaxed);
                Box::pin(async move { apply_page_limit(conn, pages).await })
            })
            .before_acquire(move |conn, _| {
                let pages = on_acquire.load(Ordering::Relaxed);
                Box::pin(async move { apply_page_limit(conn, pages).await.map(|()| true) })
            })
            .connect_with(options)
            .await?;
        sqlx::migrate!("../../migrations").run(&pool).await?;
        // SQLite gives its WAL and shared-memory files the database's mode; this makes sure of it.
        restrict_files(&path);

        let interrupted =
            sqlx::query("UPDATE runs SET status = 'interrupted' WHERE status = 'running'")
                .execute(&pool)
                .await?
                .rows_affected();
        if interrupted > 0 {
            tracing::warn!(
                interrupted,
                "runs left running by an earlier process are marked interrupted"
            );
        }
        let interrupted_jobs =
            sqlx::query("UPDATE training_jobs SET status = 'interrupted' WHERE status = 'running'")
                .execute(&pool)
                .await?
                .rows_affected();
        if interrupted_jobs > 0 {
            tracing::warn!(
                interrupted_jobs,
                "training jobs left running by an earlier process are marked interrupted"
            );
        }
        settle_answers(&mut *pool.acquire().await?, None).await?;
        Ok(Self {
            pool,
            path,
            write_turn: write_turn(),
            health: WriteHealth::default(),
            page_limit,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where an import's runs wait while it is read: beside the database, as private as it is,
    /// and on a disk that has room for it (a temporary directory may be held in memory).
    pub(crate) fn spool_dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// Waits for pending work and closes every connection.
    pub async fn close(self) {
        self.pool.close().await;
    }

    /// A write transaction, once this process's earlier writers are done.
    pub(crate) async fn begin_write(&self) -> Result<WriteTx> {
        let turn = self.write_turn.clone().lock_owned().await;
        let conn = self.pool.acquire().await?;
        WriteTx::begin(turn, conn).await
    }

    /// Whether the history can be written. While the last write failed for want of storage,
    /// this tries a small write (rolled back) and reports `ok` again once one succeeds.
    pub async fn health(&self) -> StoreHealth {
        if self.health.failure().is_none() {
            return StoreHealth::Ok;
        }
        let probe = async {
            let mut tx = self.begin_write().await?;
            sqlx::query("INSERT INTO write_probe (data) VALUES (zeroblob(?))")
                .bind(PROBE_BYTES)
                .execute(&mut *tx)
                .await?;
            tx.rollback().await
        };
        match self.health.observe(probe.await) {
            Ok(()) => StoreHealth::Ok,
            Err(err) => StoreHealth::Degraded {
                reason: self.health.failure().unwrap_or_else(|| err.to_string()),
            },
        }
    }

    /// Caps the database file at about `bytes` (`None`: no cap). Writes that would grow it
    /// further fail as on a full disk, and succeed again once the cap is raised.
    pub async fn limit_size(&self, bytes: Option<u64>) -> Result<()> {
        let page_size = self.pragma("page_size").await?.max(512);
        let pages = bytes.map_or(UNLIMITED_PAGES, |b| {
            (b / page_size).clamp(1, UNLIMITED_PAGES)
        });
        self.page_limit.store(pages, Ordering::Relaxed);
        Ok(())
    }

    /// Pages the database holds now, times the page size.
    pub async fn size_bytes(&self) -> Result<u64> {
        Ok(self.pragma("page_count").await? * self.pragma("page_size").await?)
    }

    /// A numeric `PRAGMA` of the database.
    async fn pragma(&self, name: &'static str) -> Result<u64> {
        let value: i64 = sqlx::query_scalar(&format!("PRAGMA {name}"))
            .fetch_one(&self.pool)
            .await?;
        Ok(value.max(0) as u64)
    }
}

async fn apply_page_limit(conn: &mut sqlx::SqliteConnection, pages: u64) -> sqlx::Result<()> {
    if pages > 0 {
        sqlx::query(&format!("PRAGMA max_page_count = {pages}"))
            .execute(conn)
            .await?;
    }
    Ok(())
}

/// Makes the place of the database at `path` private before SQLite opens it: a missing
/// directory is created 0700 (and `app_dir`, the application's own, is made 0700 if it is the
/// one), and a missing database is created empty (a valid SQLite file) with mode 0600, since
/// SQLite would create it 0644 and give its WAL and shared-memory files the same mode.
fn prepare_private(path: &Path, app_dir: Option<&Path>) -> Result<()> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if let Some(parent) = parent {
            if parent.exists() {
                if app_dir == Some(parent) {
                    restrict(parent);
                }
            } else {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)?;
            }
        }
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
        match created {
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => restrict_files(path),
            Err(err) => return Err(err.into()),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = app_dir;
        if let Some(parent) = parent {
            std::fs::create_dir_all(parent)?;
        }
    }
    Ok(())
}

/// The database's files (the database, its WAL and its shared memory): those that exist made
/// readable by the owner only.
fn restrict_files(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let file = PathBuf::from(name);
        if file.exists() {
            restrict(&file);
        }
    }
}

/// Takes every permission of group and others off `path` (0644 becomes 0600, 0755 0700). A
/// failure is logged: a history that cannot be made private is still the user's to open.
#[cfg_attr(not(unix), allow(unused_variables))]
fn restrict(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let current = match std::fs::metadata(path) {
            Ok(meta) => meta.permissions().mode() & 0o7777,
            Err(err) => {
                tracing::warn!(path = %path.display(), %err, "cannot read the permissions");
                return;
            }
        };
        let mode = current & !0o077;
        if current == mode {
            return;
        }
        match std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
            Ok(()) => tracing::info!(
                path = %path.display(),
                from = format!("{current:o}"),
                to = format!("{mode:o}"),
                "the history's files are the user's alone now"
            ),
            Err(err) => {
                tracing::warn!(path = %path.display(), %err, "cannot make the history private")
            }
        }
    }
}

fn resolve_default_path(env: Option<OsString>, data_dir: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(path) = env.filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    data_dir
        .map(|dir| dir.join(APP_DIR).join("history.sqlite"))
        .ok_or_else(|| {
            StoreError::Io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("this platform has no data directory; set {DB_ENV} to the database path"),
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Row;

    #[test]
    fn default_path_prefers_a_non_empty_env_var() {
        let data = Some(PathBuf::from("/data"));
        assert_eq!(
            resolve_default_path(Some("/tmp/h.sqlite".into()), data.clone()).unwrap(),
            PathBuf::from("/tmp/h.sqlite")
        );
        let expected = PathBuf::from("/data/medusa-playground/history.sqlite");
        assert_eq!(
            resolve_default_path(Some("".into()), data.clone()).unwrap(),
            expected
        );
        assert_eq!(resolve_default_path(None, data).unwrap(), expected);
        assert!(matches!(
            resolve_default_path(None, None),
            Err(StoreError::Io(_))
        ));
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn the_application_directory_is_made_private_and_others_are_left_alone() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tempfile::tempdir().unwrap();
        let app = dir.path().join(APP_DIR);
        let chosen = dir.path().join("chosen");
        for d in [&app, &chosen] {
            std::fs::create_dir(d).unwrap();
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        prepare_private(&app.join("history.sqlite"), Some(&app)).unwrap();
        assert_eq!(mode(&app), 0o700);
        assert_eq!(mode(&app.join("history.sqlite")), 0o600);
        // A directory the user chose (it may hold more than the history) keeps its mode; the
        // files are private all the same.
        prepare_private(&chosen.join("h.sqlite"), Some(&app)).unwrap();
        assert_eq!(mode(&chosen), 0o755);
        assert_eq!(mode(&chosen.join("h.sqlite")), 0o600);
    }

    #[tokio::test]
    async fn connections_use_the_configured_pragmas() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("nested/dirs/h.sqlite"))
            .await
            .unwrap();
        let mut conn = store.pool.acquire().await.unwrap();
        let pragma = |name: &'static str| format!("PRAGMA {name}");
        let journal: String = sqlx::query(&pragma("journal_mode"))
            .fetch_one(&mut *conn)
            .await
            .unwrap()
            .get(0);
        assert_eq!(journal, "wal");
        for (name, expected) in [
            ("synchronous", 1_i64),
            ("foreign_keys", 1),
            ("busy_timeout", 5000),
        ] {
            let value: i64 = sqlx::query(&pragma(name))
                .fetch_one(&mut *conn)
                .await
                .unwrap()
                .get(0);
            assert_eq!(value, expected, "PRAGMA {name}");
        }
    }
}
