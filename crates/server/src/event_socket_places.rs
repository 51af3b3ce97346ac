//! The places of the event sockets (`/api/events`): at most a bound of them are open at once.
//! When every place is taken, a new socket takes the place of the one that has gone longest
//! without a generation (it is closed with 1013 `replaced`, and a page reopens its socket when
//! it next needs one); only when every socket has a generation going is the newcomer refused
//! (503 `too_many_event_sockets`). So sockets that are held open and do nothing, however many,
//! never keep a page of the playground from its own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use playground::{AppError, ErrorKind};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::ApiError;

/// How long a page refused a socket is told to wait before it asks again (`Retry-After`).
const RETRY_AFTER_S: u64 = 5;

/// The event sockets open at once, and how they are kept alive.
pub(crate) struct EventSockets {
    places: Mutex<Places>,
    max_open: usize,
    /// How often the peer is pinged; it must have answered by the next ping.
    pub(crate) ping_every: Duration,
}

#[derive(Default)]
struct Places {
    next_id: u64,
    open: HashMap<u64, Held>,
}

/// An open socket as the places see it.
struct Held {
    activity: Arc<Activity>,
    /// Asks the socket to close and give its place up.
    replace: oneshot::Sender<()>,
}

/// How busy a socket is: its generations going, and since when it has had none.
struct Activity {
    generations: AtomicUsize,
    idle_since: Mutex<Instant>,
}

impl Activity {
    fn idle_since(&self) -> Instant {
        *self
            .idle_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// One socket's place, given back when dropped.
pub(crate) struct Place {
    sockets: Arc<EventSockets>,
    id: u64,
    activity: Arc<Activity>,
    /// Resolves when a newcomer took this place.
    pub(crate) replaced: oneshot::Receiver<()>,
}

impl Place {
    /// The socket now has `generations` going.
    pub(crate) fn set_generations(&self, generations: usize) {
        let before = self
            .activity
            .generations
            .swap(generations, Ordering::SeqCst);
        if before > 0 && generations == 0 {
            *self
                .activity
                .idle_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.sockets.places().open.remove(&self.id);
    }
}

impl EventSockets {
    pub(crate) fn new(max_open: usize, ping_every: Duration) -> Self {
        Self {
            places: Mutex::default(),
            max_open,
            // A zero interval would ping without end.
            ping_every: ping_every.max(Duration::from_millis(10)),
        }
    }

    pub(crate) fn max_open(&self) -> usize {
        self.max_open
    }

    fn places(&self) -> MutexGuard<'_, Places> {
        self.places.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for one more socket: a free one, else that of the socket without a generation
    /// the longest (asked to close); refused when every socket has a generation going.
    pub(crate) fn open(self: &Arc<Self>) -> Result<Place, ApiError> {
        let mut places = self.places();
        if places.open.len() >= self.max_open.max(1) {
            let idle_longest = places
                .open
                .iter()
                .filter(|(_, held)| held.activity.generations.load(Ordering::SeqCst) == 0)
                .min_by_key(|(&id, held)| (held.activity.idle_since(), id))
                .map(|(&id, _)| id);
            let Some(victim) = idle_longest else {
                return Err(self.refusal());
            };
            if let Some(held) = places.open.remove(&victim) {
                tracing::debug!("event socket replaced by a newcomer: it had no generation going");
                let _ = held.replace.send(());
            }
        }
        let id = places.next_id;
        places.next_id += 1;
        let activity = Arc::new(Activity {
            generations: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
        });
        let (replace, replaced) = oneshot::channel();
        places.open.insert(
            id,
            Held {
                activity: activity.clone(),
                replace,
            },
        );
        Ok(Place {
            sockets: self.clone(),
            id,
            activity,
            replaced,
        })
    }

    fn refusal(&self) -> ApiError {
        ApiError(
            AppError::new(
                ErrorKind::Unavailable,
                "too_many_event_sockets",
                format!(
                    "{} event sockets are open already, each with a generation going, the most \
                     this server keeps; close another page of the playground, or try again later",
                    self.max_open
                ),
            )
            .with_retry_after(RETRY_AFTER_S),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newcomer_takes_the_place_of_the_socket_idle_the_longest_and_busy_ones_stay() {
        let sockets = Arc::new(EventSockets::new(3, Duration::from_secs(1)));
        let mut first = sockets.open().unwrap();
        let mut second = sockets.open().unwrap();
        let mut third = sockets.open().unwrap();
        // The first runs a generation; the second had one that ended after the third opened.
        first.set_generations(1);
        second.set_generations(1);
        std::thread::sleep(Duration::from_millis(2));
        second.set_generations(0);
        let mut fourth = sockets.open().unwrap();
        assert!(third.replaced.try_recv().is_ok());
        assert!(first.replaced.try_recv().is_err());
        assert!(second.replaced.try_recv().is_err());
        // Of the two idle ones left, the second has been idle longer than the newcomer.
        let fifth = sockets.open().unwrap();
        assert!(second.replaced.try_recv().is_ok());
        assert!(fourth.replaced.try_recv().is_err());
        // With every socket busy, the next is refused.
        fourth.set_generations(2);
        fifth.set_generations(1);
        let refused = sockets.open().err().expect("refused");
        assert_eq!(refused.0.code, "too_many_event_sockets");
        // A place given back is free again, without replacing anyone.
        drop(fourth);
        let _sixth = sockets.open().unwrap();
        assert!(first.replaced.try_recv().is_err());
        assert_eq!(sockets.places().open.len(), 3);
    }
}
