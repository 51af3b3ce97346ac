//! One import at a time. An import is read as it arrives and its runs set aside on disk (see
//! `store::Store::spool_import`), but each still writes the history for as long as it takes, and
//! two at once would only take turns at the database. A second import while one is read is
//! answered 503 `import_busy` before its body is read, and once an import ends the allocator is
//! asked to give back what it freed (glibc keeps freed memory otherwise).

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use playground::{AppError, ErrorKind};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// How long a refused import is told to wait before it tries again (`Retry-After`).
const RETRY_AFTER_S: u64 = 5;

/// The server's one place for an import being read.
#[derive(Clone)]
pub(crate) struct ImportPlace(Arc<Semaphore>);

impl Default for ImportPlace {
    fn default() -> Self {
        Self(Arc::new(Semaphore::new(1)))
    }
}

/// The import holding the place: an extractor that must come before the body's, so that a
/// refused import is refused before it is read.
pub(crate) struct ImportTurn {
    _permit: OwnedSemaphorePermit,
}

impl<S> FromRequestParts<S> for ImportTurn
where
    ImportPlace: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(_parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let ImportPlace(place) = ImportPlace::from_ref(state);
        place
            .try_acquire_owned()
            .map(|permit| ImportTurn { _permit: permit })
            .map_err(|_| {
                ApiError(
                    AppError::new(
                        ErrorKind::Unavailable,
                        "import_busy",
                        "another import is being read; imports are taken one at a time, try \
                         again when it has ended",
                    )
                    .with_retry_after(RETRY_AFTER_S),
                )
            })
    }
}

impl Drop for ImportTurn {
    fn drop(&mut self) {
        give_memory_back();
    }
}

/// Returns the memory the allocator holds free to the system, off the async threads.
fn give_memory_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let trim = || {
            // SAFETY: malloc_trim only releases free memory of glibc's own heaps.
            unsafe { libc::malloc_trim(0) };
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(trim)),
            Err(_) => trim(),
        }
    }
}
