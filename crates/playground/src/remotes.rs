//! The remote engines the playground can run on beside its own model: those given on the command
//! line (for this process only) and those added in Settings, kept with their API keys in a file
//! named after the history's database, beside it (`history.sqlite.remotes.json`), readable only
//! by the user: two databases in one folder keep two lists. The history names a run's engine,
//! never its key.
//!
//! Each engine's model list is kept for a while ([`MODELS_FRESH_FOR`]) rather than asked for on
//! every listing: a listing asks only the engines whose list is older, and an explicit refresh
//! asks them all.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use engine::GenerationMode;
use futures_util::future::join_all;
use remote::{RemoteAccess, RemoteEngine, RemoteError, RemoteKind, RemoteListing, RemoteSpec};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::error::{AppError, ErrorBody, ErrorKind};

/// What the saved remote engines' file adds to its database's file name.
pub const REMOTES_FILE_SUFFIX: &str = ".remotes.json";
/// Where earlier versions kept them, shared by every database of the folder.
const SHARED_REMOTES_FILE: &str = "remotes.json";
/// What every SQLite database file starts with.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// How long an engine's model list stands before a listing asks again.
pub const MODELS_FRESH_FOR: Duration = Duration::from_secs(60);
/// How long an engine's failure stands: shorter, so an engine just started shows up soon.
pub const FAILURE_FRESH_FOR: Duration = Duration::from_secs(5);

/// A remote engine as the UI sees it (never its key).
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[ts(rename = "RemoteEngineInfo")]
pub struct RemoteInfo {
    pub name: String,
    pub url: String,
    /// Whether requests carry an API key.
    pub has_key: bool,
    /// Kept in the saved list (added in Settings); otherwise given on the command line for this
    /// process only.
    pub saved: bool,
    /// The models it listed when last asked; the first is the default.
    pub models: Vec<String>,
    /// What its model list told it is; null until it answered once.
    pub kind: Option<RemoteEngineKind>,
    /// The modes a run on it may ask for: those another `medusa serve` lists; normal alone on
    /// any other engine, and until it answered.
    pub modes: Vec<GenerationMode>,
    /// Why it could not be asked last time; null when it answered.
    pub error: Option<ErrorBody>,
}

/// What kind of engine a remote is, as its model list tells (see [`RemoteKind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum RemoteEngineKind {
    /// Another `medusa serve`: its modes, and the playground's own request fields.
    MedusaServe,
    /// llama-server, vLLM or SGLang: their shared sampling fields, normal decoding.
    Extended,
    /// Any other OpenAI-compatible server: OpenAI's fields only, normal decoding.
    #[serde(rename = "openai")]
    #[ts(rename = "openai")]
    OpenAi,
}

impl From<&RemoteKind> for RemoteEngineKind {
    fn from(kind: &RemoteKind) -> Self {
        match kind {
            RemoteKind::MedusaServe { .. } => Self::MedusaServe,
            RemoteKind::Extended => Self::Extended,
            RemoteKind::OpenAi => Self::OpenAi,
        }
    }
}

/// Body of adding a remote engine (Settings, `POST /api/remotes`).
#[derive(Debug, Clone, Deserialize, TS)]
#[ts(rename = "AddRemoteRequest", optional_fields)]
pub struct AddRemoteRequest {
    pub name: String,
    /// Its base address, such as `http://gpu-box:8000`.
    pub url: String,
    #[serde(default)]
    pub api_key: Option<String>,
}

struct Entry {
    engine: RemoteEngine,
    saved: bool,
    models: Vec<String>,
    /// What its model list told, once it answered.
    kind: Option<RemoteKind>,
    error: Option<ErrorBody>,
    /// When it last answered (or failed to).
    asked_at: Option<Instant>,
    /// A question is on its way, so no other is sent meanwhile.
    asking: bool,
}

impl Entry {
    fn new(engine: RemoteEngine, saved: bool) -> Self {
        Self {
            engine,
            saved,
            models: Vec::new(),
            kind: None,
            error: None,
            asked_at: None,
            asking: false,
        }
    }

    /// Whether a listing should ask it again now.
    fn stale(&self, now: Instant) -> bool {
        let fresh_for = match self.error {
            None => MODELS_FRESH_FOR,
            Some(_) => FAILURE_FRESH_FOR,
        };
        self.asked_at
            .is_none_or(|at| now.saturating_duration_since(at) >= fresh_for)
    }

    fn info(&self) -> RemoteInfo {
        let spec = self.engine.spec();
        RemoteInfo {
            name: spec.name.clone(),
            url: spec.url.clone(),
            has_key: spec.api_key.is_some(),
            saved: self.saved,
            models: self.models.clone(),
            kind: self.kind.as_ref().map(RemoteEngineKind::from),
            modes: self
                .kind
                .as_ref()
                .map_or_else(|| vec![GenerationMode::Normal], RemoteKind::modes),
            error: self.error.clone(),
        }
    }

    fn observe(&mut self, result: Result<RemoteListing, RemoteError>) {
        self.asked_at = Some(Instant::now());
        self.asking = false;
        match result {
            Ok(listing) => {
                self.models = listing.models;
                self.kind = Some(listing.kind);
                self.error = None;
            }
            Err(err) => self.error = Some(AppError::from(err).body()),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct SavedFile {
    remotes: Vec<RemoteSpec>,
}

/// The remote engines, in the order they were added.
pub struct Remotes {
    /// Where saved engines are kept; `None` keeps them in memory (a history in memory).
    file: Option<PathBuf>,
    entries: Mutex<Vec<Entry>>,
    /// The addresses engines may have beyond the usual ones (see [`Remotes::set_access`]).
    access: Mutex<RemoteAccess>,
}

impl Remotes {
    /// The engines saved in `file`, not asked anything yet. An unreadable file is set aside
    /// (renamed, never overwritten) and the list starts empty.
    pub fn load(file: Option<PathBuf>) -> Self {
        let saved = file.as_deref().map(read_saved).unwrap_or_default();
        let entries = saved
            .into_iter()
            .filter_map(|spec| match RemoteEngine::new(spec) {
                Ok(engine) => Some(Entry::new(engine, true)),
                Err(err) => {
                    tracing::warn!(error = %err, "skipping a saved remote engine");
                    None
                }
            })
            .collect();
        Self {
            file,
            entries: Mutex::new(entries),
            access: Mutex::new(RemoteAccess::default()),
        }
    }

    /// The engines saved with the database at `database` (see [`remotes_file_for`]). A list
    /// an earlier version saved as `remotes.json` in the same folder becomes this database's
    /// the first time, when no other database there could own it; otherwise it is left where it
    /// is, and said so.
    pub fn for_database(database: &Path) -> Self {
        let file = remotes_file_for(database);
        if let Some(file) = &file {
            take_shared_file(database, file);
        }
        Self::load(file)
    }

    /// Lets engines have the addresses `access` allows (link-local ones only when the user
    /// started the server so); engines already listed are reached the new way from now on.
    pub fn set_access(&self, access: RemoteAccess) {
        *self.access.lock().unwrap_or_else(PoisonError::into_inner) = access;
        for entry in self.entries().iter_mut() {
            match RemoteEngine::with_access(entry.engine.spec().clone(), access) {
                Ok(engine) => entry.engine = engine,
                Err(err) => {
                    tracing::warn!(remote = %entry.engine.name(), error = %err, "keeping a remote engine's former client");
                }
            }
        }
    }

    fn access(&self) -> RemoteAccess {
        *self.access.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every engine as last seen.
    pub fn list(&self) -> Vec<RemoteInfo> {
        self.entries().iter().map(Entry::info).collect()
    }

    /// Asks the engines whose model list is older than [`MODELS_FRESH_FOR`] (a failure, older
    /// than [`FAILURE_FRESH_FOR`]) for their models, all at once; then the list.
    pub async fn refresh(&self) -> Vec<RemoteInfo> {
        self.ask(false).await
    }

    /// Asks every engine for its models now (but one already being asked); then the list.
    pub async fn refresh_all(&self) -> Vec<RemoteInfo> {
        self.ask(true).await
    }

    async fn ask(&self, all: bool) -> Vec<RemoteInfo> {
        let now = Instant::now();
        let engines: Vec<RemoteEngine> = self
            .entries()
            .iter_mut()
            .filter(|e| !e.asking && (all || e.stale(now)))
            .map(|e| {
                e.asking = true;
                e.engine.clone()
            })
            .collect();
        // Dropped unanswered (the caller went away), the entries may be asked again.
        let mut pending = Asking {
            remotes: self,
            engines: engines.clone(),
        };
        let results = join_all(engines.iter().map(RemoteEngine::listing)).await;
        pending.engines.clear();
        for (engine, result) in engines.iter().zip(results) {
            self.observe(engine, result);
        }
        self.list()
    }

    /// Keeps what `engine` answered on its entry; the entry's view, unless it was removed (or
    /// re-added under its name, to be asked afresh) meanwhile.
    fn observe(
        &self,
        engine: &RemoteEngine,
        result: Result<RemoteListing, RemoteError>,
    ) -> Option<RemoteInfo> {
        let mut entries = self.entries();
        let entry = entries
            .iter_mut()
            .find(|e| e.engine.spec() == engine.spec())?;
        entry.observe(result);
        Some(entry.info())
    }

    /// Adds an engine and asks it for its models. `save` keeps it (with its key) for later
    /// starts. An engine that does not answer is still added, with the reason: it may be
    /// started later.
    pub async fn add(&self, spec: RemoteSpec, save: bool) -> Result<RemoteInfo, AppError> {
        let name = spec.name.clone();
        let access = self.access();
        spec.check_access(access)?;
        let engine = RemoteEngine::with_access(spec, access).map_err(AppError::from)?;
        {
            let mut entries = self.entries();
            if entries.iter().any(|e| e.engine.name() == name) {
                return Err(AppError::new(
                    ErrorKind::Conflict,
                    "remote_exists",
                    format!("there is a remote engine named '{name}' already; remove it first"),
                ));
            }
            let mut entry = Entry::new(engine.clone(), save);
            entry.asking = true;
            entries.push(entry);
            if save {
                if let Err(err) = self.save(&entries) {
                    entries.pop();
                    return Err(err);
                }
            }
        }
        let mut pending = Asking {
            remotes: self,
            engines: vec![engine.clone()],
        };
        let result = engine.listing().await;
        pending.engines.clear();
        self.observe(&engine, result)
            .ok_or_else(|| not_found(&name))
    }

    /// Removes an engine (from the saved list too). Runs already recorded keep its name.
    pub fn remove(&self, name: &str) -> Result<(), AppError> {
        let mut entries = self.entries();
        let index = entries
            .iter()
            .position(|e| e.engine.name() == name)
            .ok_or_else(|| not_found(name))?;
        let removed = entries.remove(index);
        if removed.saved {
            if let Err(err) = self.save(&entries) {
                entries.insert(index, removed);
                return Err(err);
            }
        }
        Ok(())
    }

    /// The engine named `name`, the model to run (`model` when given, else the first it lists)
    /// and what kind of engine it is. An engine that never answered is asked now: what it is
    /// decides what it is sent. One that does not answer, with a model named, is taken for a
    /// plain OpenAI server.
    pub async fn target(
        &self,
        name: &str,
        model: Option<String>,
    ) -> Result<(RemoteEngine, String, RemoteKind), AppError> {
        let (engine, known) = {
            let entries = self.entries();
            let entry = entries
                .iter()
                .find(|e| e.engine.name() == name)
                .ok_or_else(|| not_found(name))?;
            let known = entry
                .kind
                .clone()
                .map(|kind| (entry.models.first().cloned(), kind));
            (entry.engine.clone(), known)
        };
        let model = model.filter(|m| !m.trim().is_empty());
        let (first, kind) = match known {
            Some(known) => known,
            None => match engine.listing().await {
                Ok(listing) => {
                    self.observe(&engine, Ok(listing.clone()));
                    (listing.models.first().cloned(), listing.kind)
                }
                // A model named needs no list: the run goes on, sent OpenAI's fields only, and
                // fails (recorded) if the engine is down.
                Err(err) if model.is_some() => {
                    tracing::warn!(remote = %name, error = %err, "the remote's model list did not tell its kind; sending OpenAI's fields only");
                    (None, RemoteKind::OpenAi)
                }
                Err(err) => return Err(err.into()),
            },
        };
        let model = model.or(first).ok_or_else(|| {
            AppError::new(
                ErrorKind::Upstream,
                "remote_no_models",
                format!("remote engine '{name}' lists no models; name one"),
            )
        })?;
        Ok((engine, model, kind))
    }

    /// Writes the saved engines, keys included, to a file only the user can read.
    fn save(&self, entries: &[Entry]) -> Result<(), AppError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let saved = SavedFile {
            remotes: entries
                .iter()
                .filter(|e| e.saved)
                .map(|e| e.engine.spec().clone())
                .collect(),
        };
        write_private(file, &saved).map_err(|err| {
            AppError::internal(
                "remotes_not_saved",
                format!(
                    "the remote engines could not be saved to {}: {err}",
                    file.display()
                ),
            )
        })
    }

    fn entries(&self) -> MutexGuard<'_, Vec<Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Engines being asked for their models; dropped before they answered, they are marked as not
/// being asked, so that a later listing asks them.
struct Asking<'a> {
    remotes: &'a Remotes,
    engines: Vec<RemoteEngine>,
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        if self.engines.is_empty() {
            return;
        }
        for entry in self.remotes.entries().iter_mut() {
            if self.engines.iter().any(|e| e.spec() == entry.engine.spec()) {
                entry.asking = false;
            }
        }
    }
}

fn not_found(name: &str) -> AppError {
    AppError::new(
        ErrorKind::NotFound,
        "remote_not_found",
        format!("there is no remote engine named '{name}'; add it in Settings or with --remote"),
    )
}

impl From<RemoteError> for AppError {
    fn from(err: RemoteError) -> Self {
        let kind = match err {
            RemoteError::InvalidSpec(_) | RemoteError::Unsupported { .. } => ErrorKind::Invalid,
            _ => ErrorKind::Upstream,
        };
        AppError::new(kind, err.code(), err.to_string())
    }
}

/// The file that keeps the engines saved with the database at `database`: its own name with
/// [`REMOTES_FILE_SUFFIX`], beside it. None for a path that names no file.
pub fn remotes_file_for(database: &Path) -> Option<PathBuf> {
    let mut name = database.file_name()?.to_os_string();
    name.push(REMOTES_FILE_SUFFIX);
    Some(database.with_file_name(name))
}

/// Makes the shared `remotes.json` beside `database` its own `file`, if `file` is not there yet
/// and no other database of the folder could own the shared one. Never overwrites or deletes a
/// list that is not kept under another name.
#[tracing::instrument(level = "debug", skip_all, fields(database = %database.display()))]
fn take_shared_file(database: &Path, file: &Path) {
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = dir.unwrap_or(Path::new("."));
    let shared = dir.join(SHARED_REMOTES_FILE);
    if file.symlink_metadata().is_ok() || !shared.is_file() {
        return;
    }
    let others = match other_databases(dir, database) {
        Ok(others) => others,
        Err(err) => {
            tracing::warn!(
                shared = %shared.display(), error = %err,
                "cannot tell which database the saved remote engines belong to; left where they are"
            );
            return;
        }
    };
    if !others.is_empty() {
        tracing::warn!(
            shared = %shared.display(), others = ?others, own = %file.display(),
            "the saved remote engines may belong to another database of the folder: left where \
             they are; rename the file to keep them with this database"
        );
        return;
    }
    // A link fails rather than replace a file that appeared meanwhile; only then does the
    // shared name go.
    match std::fs::hard_link(&shared, file) {
        Ok(()) => {
            if let Err(err) = std::fs::remove_file(&shared) {
                tracing::warn!(shared = %shared.display(), error = %err, "could not remove the former file of the saved remote engines");
            }
            tracing::info!(from = %shared.display(), to = %file.display(), "saved remote engines moved beside their database");
        }
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        // File systems without hard links (exFAT, SMB): a rename, as `file` was just absent.
        Err(_) => match std::fs::rename(&shared, file) {
            Ok(()) => {
                tracing::info!(from = %shared.display(), to = %file.display(), "saved remote engines moved beside their database");
            }
            Err(err) => {
                tracing::warn!(shared = %shared.display(), error = %err, "could not move the saved remote engines beside their database; left where they are");
            }
        },
    }
}

/// The files of `dir` other than `database` (and its companions) that are SQLite databases.
fn other_databases(dir: &Path, database: &Path) -> std::io::Result<Vec<PathBuf>> {
    let own = database.file_name();
    let mut others = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if Some(entry.file_name().as_os_str()) == own {
            continue;
        }
        let path = entry.path();
        if path.is_file() && starts_like_sqlite(&path) {
            others.push(path);
        }
    }
    Ok(others)
}

fn starts_like_sqlite(path: &Path) -> bool {
    use std::io::Read;
    let mut header = [0u8; 16];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut header))
        .is_ok_and(|()| &header == SQLITE_HEADER)
}

fn read_saved(file: &Path) -> Vec<RemoteSpec> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(err) => {
            tracing::warn!(file = %file.display(), error = %err, "cannot read the saved remote engines");
            return Vec::new();
        }
    };
    match serde_json::from_str::<SavedFile>(&text) {
        Ok(saved) => {
            restrict_to_owner(file);
            saved.remotes
        }
        Err(err) => {
            let aside = file.with_extension("json.unreadable");
            tracing::warn!(
                file = %file.display(), error = %err, kept_as = %aside.display(),
                "the saved remote engines cannot be read; starting without them"
            );
            if let Err(err) = std::fs::rename(file, &aside) {
                tracing::warn!(error = %err, "could not set the unreadable file aside");
            }
            Vec::new()
        }
    }
}

/// Writes `value` as JSON through a temporary file (created readable by the owner only) renamed
/// over `file`, so a failed write leaves the previous file whole.
fn write_private(file: &Path, value: &SavedFile) -> std::io::Result<()> {
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = dir.unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut temp = tempfile::NamedTempFile::new_in(dir)?;
    serde_json::to_writer_pretty(&mut temp, value)?;
    temp.as_file().sync_all()?;
    temp.persist(file).map_err(|err| err.error)?;
    Ok(())
}

/// Keys are secrets: a saved file others can read is made the owner's alone.
fn restrict_to_owner(file: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(file) {
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(file = %file.display(), "the saved remote engines were readable by others; now only by their owner");
                let _ = std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600));
            }
        }
    }
    #[cfg(not(unix))]
    let _ = file;
}

#[cfg(test)]
mod tests;
