//! Requests waiting for a slot, in the order they came. A request cancelled or abandoned while
//! it waited never takes a slot.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use crate::engine_metrics::Shared;
use crate::error::EngineError;
use crate::events::GenerationEvent;
use crate::grammar::Grammar;
use crate::request::valid::ValidRequest;

/// A request waiting for a slot.
pub(crate) struct QueuedRequest {
    /// Boxed: a request with its draft is much larger than the engine's other commands.
    pub(crate) request: Box<ValidRequest>,
    /// The request's grammar, compiled and tried before it queued.
    pub(crate) grammar: Option<Grammar>,
    pub(crate) events: UnboundedSender<GenerationEvent>,
    pub(crate) cancel: Arc<AtomicBool>,
    pub(crate) queued_at: Instant,
}

#[derive(Default)]
pub(crate) struct WaitingQueue {
    waiting: VecDeque<QueuedRequest>,
}

impl WaitingQueue {
    pub(crate) fn push(&mut self, request: QueuedRequest) {
        self.waiting.push_back(request);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The next request still wanted, each one taken off counted out of the queue's metric.
    pub(crate) fn next_wanted(&mut self, shared: &Shared) -> Option<QueuedRequest> {
        while let Some(queued) = self.waiting.pop_front() {
            shared.queued.fetch_sub(1, Ordering::Relaxed);
            if !queued.cancel.load(Ordering::Relaxed) && !queued.events.is_closed() {
                return Some(queued);
            }
        }
        None
    }

    /// Fails every waiting request with `err`.
    pub(crate) fn fail_all(&mut self, err: &EngineError) {
        for queued in self.waiting.drain(..) {
            let _ = queued.events.send(GenerationEvent::Failed(err.clone()));
        }
    }
}
