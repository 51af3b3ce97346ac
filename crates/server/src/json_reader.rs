//! A JSON body read as it arrives, by a blocking reader, for documents too large to hold whole
//! (history imports): refused as [`JsonBody`](crate::extract::JsonBody) refuses a body before it
//! is read, and, where the body fails while it is read (too slow, over the limit, cut off), that
//! failure is what the client is told rather than the reader's own error.

use std::io::Read;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{FromRequest, Request};
use futures_util::StreamExt;
use tokio_util::io::{StreamReader, SyncIoBridge};

use crate::error::ApiError;
use crate::extract::{body_error, json_body_of, too_large, JsonRejection};

/// A JSON body to be read on a blocking thread.
pub struct JsonReader {
    reader: Box<dyn Read + Send>,
    failure: BodyFailure,
}

impl JsonReader {
    /// The body's reader, and where a failure of the body while it is read is kept.
    pub fn into_parts(self) -> (Box<dyn Read + Send>, BodyFailure) {
        (self.reader, self.failure)
    }
}

/// Why the body could not be read whole, once its reader has failed.
#[derive(Clone, Default)]
pub struct BodyFailure(Arc<Mutex<Option<ApiError>>>);

impl BodyFailure {
    fn keep(&self, err: ApiError) {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        kept.get_or_insert(err);
    }

    /// The body's failure, if it failed.
    pub fn take(&self) -> Option<ApiError> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

impl<S: Send + Sync> FromRequest<S> for JsonReader {
    type Rejection = JsonRejection;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let (body, limit) = json_body_of(req).map_err(|rejection| *rejection)?;
        let failure = BodyFailure::default();
        let kept = failure.clone();
        let mut seen = 0usize;
        let chunks = body.into_data_stream().map(move |chunk| {
            let refused = match chunk {
                Ok(chunk) if seen.saturating_add(chunk.len()) <= limit => {
                    seen += chunk.len();
                    return Ok(chunk);
                }
                Ok(_) => too_large(limit),
                Err(err) => body_error(err),
            };
            let message = refused.0.message.clone();
            kept.keep(refused);
            Err(std::io::Error::other(message))
        });
        Ok(Self {
            reader: Box::new(SyncIoBridge::new(StreamReader::new(chunks))),
            failure,
        })
    }
}
