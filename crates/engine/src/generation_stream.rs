//! A run's events as its caller receives them, and how the caller cancels it: the stream a
//! generation returns, its producing end for generations run outside the engine (remote engines),
//! and a cheap handle that cancels from anywhere.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use crate::error::EngineError;
use crate::events::{GenerationEvent, RunSummary};

/// Cancels one run; cheap to clone.
#[derive(Debug, Clone)]
pub struct Canceller(Arc<AtomicBool>);

impl Canceller {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The producing end of a [`GenerationStream`] fed from outside the engine (a remote engine's
/// client): the same events, and the cancel the stream's reader asks for.
pub struct GenerationSender {
    events: UnboundedSender<GenerationEvent>,
    cancel: Arc<AtomicBool>,
}

impl GenerationSender {
    /// Passes an event on; false when the reader has gone.
    pub fn send(&self, event: GenerationEvent) -> bool {
        self.events.send(event).is_ok()
    }

    /// Whether the reader cancelled the run or went away.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.events.is_closed()
    }
}

/// Events of one run. Dropping the stream cancels the run.
pub struct GenerationStream {
    receiver: UnboundedReceiver<GenerationEvent>,
    cancel: Arc<AtomicBool>,
}

impl GenerationStream {
    /// A stream whose events come from the returned sender instead of this engine.
    pub fn channel() -> (GenerationSender, Self) {
        let (events, receiver) = mpsc::unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let sender = GenerationSender {
            events,
            cancel: cancel.clone(),
        };
        (sender, Self { receiver, cancel })
    }

    /// The stream of a run the engine's thread feeds through `receiver`, cancelled by `cancel`.
    pub(crate) fn from_parts(
        receiver: UnboundedReceiver<GenerationEvent>,
        cancel: Arc<AtomicBool>,
    ) -> Self {
        Self { receiver, cancel }
    }

    pub async fn next(&mut self) -> Option<GenerationEvent> {
        self.receiver.recv().await
    }

    /// For callers outside an async runtime.
    pub fn blocking_next(&mut self) -> Option<GenerationEvent> {
        self.receiver.blocking_recv()
    }

    /// An event already delivered, without waiting.
    pub fn try_next(&mut self) -> Option<GenerationEvent> {
        self.receiver.try_recv().ok()
    }

    /// Asks the engine to stop this run after the current token.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// A handle that cancels this run from elsewhere, while another task reads the events.
    pub fn canceller(&self) -> Canceller {
        Canceller(self.cancel.clone())
    }

    /// Waits for the end of the run (blocking) and returns its summary.
    pub fn wait(mut self) -> Result<RunSummary, EngineError> {
        while let Some(event) = self.blocking_next() {
            match event {
                GenerationEvent::Finished(summary) => return Ok(summary),
                GenerationEvent::Failed(err) => return Err(err),
                GenerationEvent::Started { .. }
                | GenerationEvent::Text { .. }
                | GenerationEvent::Step(_) => {}
            }
        }
        Err(EngineError::EngineStopped)
    }
}

impl Drop for GenerationStream {
    fn drop(&mut self) {
        self.cancel();
    }
}
