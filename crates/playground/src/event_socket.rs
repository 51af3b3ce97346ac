//! The messages of a page's one event stream (`/api/events`, a WebSocket): a browser allows a
//! handful of connections per host, so a page runs all its generations and status updates
//! over one. Each generation carries the page's own `id` for it, which every message about it
//! repeats.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::error::ErrorBody;
use crate::events::RunEvent;
use crate::info::Info;
use crate::requests::PlaygroundRequest;

/// Generations one event stream may have going at once.
pub const MAX_STREAM_RUNS: usize = 64;
/// Bounds of the status updates' interval.
pub const STATUS_EVERY_MS: std::ops::RangeInclusive<u32> = 100..=60_000;

/// What the page sends.
#[derive(Debug, Clone, Deserialize, TS)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamRequest {
    /// Starts a generation.
    Generate {
        id: u32,
        request: Box<PlaygroundRequest>,
    },
    /// Stops a generation; it still ends with its `finished` (cancelled) event.
    Cancel { id: u32 },
    /// Sends `status` now and then every `every_ms`; 0 stops the updates.
    Status { every_ms: u32 },
}

/// What the backend sends.
#[derive(Debug, Clone, Serialize, TS)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamMessage {
    /// An event of generation `id`; the last one is `finished` or `failed`.
    Run {
        id: u32,
        // Boxed: a step event is far larger than the other messages.
        event: Box<RunEvent>,
    },
    /// Generation `id` was refused before it started (empty prompt, queue full, ...).
    Refused {
        id: u32,
        error: ErrorBody,
    },
    Status {
        info: Box<Info>,
    },
    /// A message the backend could not take (malformed, an id in use, too many generations).
    Error {
        error: ErrorBody,
    },
}
