//! Request bodies held to their deadlines and rate, and answers tracked until they are taken.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use tokio::time::{Instant, Sleep};

use super::places::{ConnState, InFlight};
use super::ConnectionLimits;
use crate::body_timeout::BodyTimeout;

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a request body is held to (see [`ConnectionLimits`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct BodyRules {
    timeout: Duration,
    min_rate: u64,
    grace: Duration,
}

impl BodyRules {
    pub(super) fn of(limits: &ConnectionLimits) -> Self {
        Self {
            timeout: limits.body_timeout,
            min_rate: limits.min_body_rate,
            grace: limits.body_rate_grace,
        }
    }
}

/// A request body that fails once it breaks its [`BodyRules`], however it trickles in: whole
/// by its deadline, and no slower than the least rate once the grace is over.
pub(super) struct DeadlineBody<B> {
    inner: B,
    rules: BodyRules,
    /// When the whole body is due.
    due: Instant,
    /// When reading began. The rate counts from there, so a handler that starts reading late
    /// does not count against the client.
    reading_since: Option<Instant>,
    received: u64,
    /// Wakes the body when a rule would be broken unless more arrived meanwhile.
    check: Pin<Box<Sleep>>,
    /// The connection to close once the answer is out, when a rule is broken.
    state: Option<Arc<ConnState>>,
    expired: bool,
}

impl<B> DeadlineBody<B> {
    pub(super) fn new(inner: B, rules: BodyRules, state: Option<Arc<ConnState>>) -> Self {
        let due = Instant::now() + rules.timeout;
        Self {
            inner,
            rules,
            due,
            reading_since: None,
            received: 0,
            check: Box::pin(tokio::time::sleep_until(due)),
            state,
            expired: false,
        }
    }

    /// When a rule is broken unless more arrives: the deadline, or when the bytes received so
    /// far no longer make the least rate on average (never within the grace).
    fn next_check(&self) -> Instant {
        let Some(since) = self.reading_since.filter(|_| self.rules.min_rate > 0) else {
            return self.due;
        };
        let lasts_ms = self.received.saturating_mul(1000) / self.rules.min_rate;
        let lasts = Duration::from_millis(lasts_ms).max(self.rules.grace);
        since
            .checked_add(lasts)
            .map_or(self.due, |slow_at| slow_at.min(self.due))
    }

    fn expire(&mut self, timeout: BodyTimeout) -> BoxError {
        self.expired = true;
        tracing::debug!(%timeout, received = self.received, "request body cut off");
        if let Some(state) = &self.state {
            state.close.store(true, Ordering::SeqCst);
            state.wake.notify_one();
        }
        Box::new(timeout)
    }
}

impl<B> HttpBody for DeadlineBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.expired {
            return Poll::Ready(None);
        }
        if this.reading_since.is_none() {
            this.reading_since = Some(Instant::now());
            let next = this.next_check();
            this.check.as_mut().reset(next);
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            if let Some(data) = frame
                .as_ref()
                .and_then(|f| f.as_ref().ok())
                .and_then(http_body::Frame::data_ref)
            {
                this.received = this.received.saturating_add(data.len() as u64);
                let next = this.next_check();
                this.check.as_mut().reset(next);
            }
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        while this.check.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            if now >= this.due {
                let timeout = BodyTimeout::Deadline(this.rules.timeout);
                return Poll::Ready(Some(Err(this.expire(timeout))));
            }
            let next = this.next_check();
            if now >= next {
                let timeout = BodyTimeout::TooSlow(this.rules.min_rate);
                return Poll::Ready(Some(Err(this.expire(timeout))));
            }
            this.check.as_mut().reset(next);
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.expired || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// An answer body that keeps its request counted in flight until it is done or dropped, and
/// tells when the peer leaves what was written unread.
pub(super) struct Tracked {
    pub(super) inner: Body,
    pub(super) in_flight: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.in_flight.peer_caught_up();
        let frame = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = frame {
            self.in_flight.waits_for_peer();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
