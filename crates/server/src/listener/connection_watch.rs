//! One connection's watch while hyper serves it: its deadlines, eviction and shutdown.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::server::graceful::GracefulConnection;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::places::ConnState;
use super::ConnectionLimits;

/// Watches one connection while hyper serves it: its deadlines, eviction and shutdown.
pub(super) struct Watch {
    pub(super) state: Arc<ConnState>,
    pub(super) evicted: oneshot::Receiver<()>,
    pub(super) stop: watch::Receiver<bool>,
    pub(super) limits: ConnectionLimits,
    pub(super) accepted_at: Instant,
}

impl Watch {
    pub(super) async fn drive<C>(mut self, connection: C)
    where
        C: GracefulConnection,
        C::Error: std::fmt::Display,
    {
        let mut connection = std::pin::pin!(connection);
        // Set once the connection was asked to close: by then it must be gone.
        let mut close_by: Option<Instant> = None;
        // Server shutdown lets requests finish, however long they take.
        let mut stopping = false;
        let mut watching_eviction = true;
        let state = self.state.clone();
        loop {
            // A connection that never sent a head is dropped at its deadline even while the
            // server stops, so that it cannot hold the shutdown up.
            let deadline = if close_by.is_some() {
                close_by
            } else if !state.served.load(Ordering::SeqCst) {
                Some(self.accepted_at + self.limits.header_timeout)
            } else if state.in_flight.load(Ordering::SeqCst) > 0 {
                Some(self.stall_check())
            } else if stopping {
                None
            } else {
                Some(state.idle_since() + self.limits.idle_timeout)
            };
            let close_requested =
                !stopping && close_by.is_none() && state.close.load(Ordering::SeqCst);
            if close_requested {
                // A body ran past its deadline: its 408 goes out, then the connection closes.
                connection.as_mut().graceful_shutdown();
                close_by = Some(Instant::now() + self.limits.header_timeout);
                continue;
            }
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(err) = result {
                        tracing::debug!(%err, "connection ended with an error");
                    }
                    return;
                }
                evicted = &mut self.evicted, if watching_eviction => {
                    if evicted.is_ok() {
                        tracing::debug!("connection closed to make room for another");
                        if state.stalled_since().is_some() {
                            // What its peer left unread is dropped, not kept by the kernel.
                            state.reset_on_close.store(true, Ordering::SeqCst);
                        }
                        return;
                    }
                    // The registry let go of it: nothing will ask any more.
                    watching_eviction = false;
                }
                () = state.wake.notified() => {}
                // A dropped sender means the server is going away too.
                _ = self.stop.changed(), if !stopping => {
                    stopping = true;
                    connection.as_mut().graceful_shutdown();
                }
                () = sleep_until(deadline) => {
                    if close_by.is_some() {
                        return;
                    }
                    if !state.served.load(Ordering::SeqCst) {
                        // Nothing to answer: a silent client, or one that never finished a head.
                        tracing::debug!("no request head in time: connection closed");
                        return;
                    }
                    if self.stalled_past_timeout() {
                        tracing::debug!(
                            write_timeout = ?self.limits.write_timeout,
                            "connection closed: its peer took none of an answer in time"
                        );
                        state.reset_on_close.store(true, Ordering::SeqCst);
                        return;
                    }
                    let idle = !stopping
                        && state.in_flight.load(Ordering::SeqCst) == 0
                        && state.idle_since() + self.limits.idle_timeout <= Instant::now();
                    if idle {
                        connection.as_mut().graceful_shutdown();
                        close_by = Some(Instant::now() + self.limits.header_timeout);
                        state.closing_idle.store(true, Ordering::SeqCst);
                    }
                }
            }
        }
    }
}

impl Watch {
    /// The write timeout, never so short that the connection is looked at without end.
    fn write_timeout(&self) -> Duration {
        self.limits.write_timeout.max(Duration::from_millis(100))
    }

    /// When to look again at a connection with requests in flight: when its longest-waiting
    /// answer runs out of time, or, with none waiting, after a quarter of the write timeout (a
    /// wait that begins meanwhile still has most of its time left then).
    fn stall_check(&self) -> Instant {
        match self.state.stalled_since() {
            Some(since) => since + self.write_timeout(),
            None => Instant::now() + self.write_timeout() / 4,
        }
    }

    fn stalled_past_timeout(&self) -> bool {
        self.state
            .stalled_since()
            .is_some_and(|since| since + self.write_timeout() <= Instant::now())
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
