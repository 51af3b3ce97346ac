//! The one error type of the store.

/// Everything a store operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite refused a statement, or a stored value could not be decoded.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The schema could not be brought up to date.
    #[error("database migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
    /// No row with this id.
    #[error("{entity} {id} not found")]
    NotFound { entity: &'static str, id: i64 },
    /// The caller passed something the store cannot accept: an unknown export format, a malformed
    /// import file, a run that is no longer running, a non-finite number.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// An import document is not JSON, or not an export's shape; nothing of it was written.
    #[error("not a valid history export: {0}")]
    NotAnExport(serde_json::Error),
    /// An import document holds more, summed over all its runs, than one import takes; nothing
    /// of it was written.
    #[error(
        "the import holds {total} {measure}, more than the {limit} one import takes: export the \
         history in parts (with since and until) and import each"
    )]
    ImportTooLarge {
        measure: &'static str,
        total: u64,
        limit: u64,
    },
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("JSON error: {0}")]
    Json(#[from] serde_json::Error),
    #[error("CSV error: {0}")]
    Csv(#[from] csv::Error),
}

impl StoreError {
    /// A stable machine-readable name for the kind of error, for API and UI responses.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Database(_) => "database",
            Self::Migration(_) => "migration",
            Self::NotFound { .. } => "not_found",
            Self::InvalidInput(_) => "invalid_input",
            // As a request body of the wrong shape, or malformed, is named.
            Self::NotAnExport(err) => match err.classify() {
                serde_json::error::Category::Data => "invalid_parameter",
                serde_json::error::Category::Io => "io",
                _ => "invalid_json",
            },
            Self::ImportTooLarge { .. } => "import_too_large",
            Self::Io(_) => "io",
            Self::Json(_) => "json",
            Self::Csv(_) => "csv",
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidInput(message.into())
    }

    pub(crate) fn run_not_found(id: i64) -> Self {
        Self::NotFound { entity: "run", id }
    }

    pub(crate) fn conversation_not_found(id: i64) -> Self {
        Self::NotFound {
            entity: "conversation",
            id,
        }
    }

    pub(crate) fn training_job_not_found(id: i64) -> Self {
        Self::NotFound {
            entity: "training job",
            id,
        }
    }

    pub(crate) fn comparison_not_found(id: i64) -> Self {
        Self::NotFound {
            entity: "comparison",
            id,
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
