//! The connections held, by client: who takes which place, and who gives one up to a newcomer.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::{ConnectionLimits, RESERVED_HEAD_GRACE, STALLED_EVICTABLE};

/// Who a connection counts against: its IPv4 address, or the /64 network of its IPv6 address
/// (one host commonly has a whole /64 to pick addresses from), or this machine for every
/// loopback address (127.0.0.0/8 and ::1: any local user can connect from any of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct ClientId(pub(super) IpAddr);

impl ClientId {
    pub(super) fn of(ip: IpAddr) -> Self {
        let ip = ip.to_canonical();
        if ip.is_loopback() {
            return Self(IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        match ip {
            IpAddr::V4(v4) => Self(IpAddr::V4(v4)),
            IpAddr::V6(v6) => {
                let network = u128::from(v6) & !((1u128 << 64) - 1);
                Self(IpAddr::V6(Ipv6Addr::from(network)))
            }
        }
    }
}

/// What a connection's task and its requests share.
pub(super) struct ConnState {
    pub(super) id: u64,
    /// It holds a reserved place: only requests with priority are served on it.
    pub(super) reserved: bool,
    /// Requests whose answers are not done yet.
    pub(super) in_flight: AtomicUsize,
    /// Whether a request head has arrived.
    pub(super) served: AtomicBool,
    /// Since when no request has been in flight.
    pub(super) idle_since: Mutex<Instant>,
    /// A body ran past its deadline: close once its answer is out.
    pub(super) close: AtomicBool,
    /// Reset the connection when its socket closes (see [`ConnectionControl`]).
    pub(super) reset_on_close: AtomicBool,
    /// Closed for idling: whatever the kernel still holds unsent for it then, the peer has left
    /// unread all that while, and is dropped with a reset.
    pub(super) closing_idle: AtomicBool,
    /// Answers waiting for the peer to take what was written of them: since when, by request.
    stalls: Mutex<HashMap<u64, Instant>>,
    /// The number the next request gets.
    next_request: AtomicU64,
    /// Wakes the connection's task to look at the above again.
    pub(super) wake: Notify,
}

impl ConnState {
    pub(super) fn new(id: u64, reserved: bool) -> Self {
        Self {
            id,
            reserved,
            in_flight: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            idle_since: Mutex::new(Instant::now()),
            close: AtomicBool::new(false),
            reset_on_close: AtomicBool::new(false),
            closing_idle: AtomicBool::new(false),
            stalls: Mutex::default(),
            next_request: AtomicU64::new(0),
            wake: Notify::new(),
        }
    }

    pub(super) fn stalls(&self) -> MutexGuard<'_, HashMap<u64, Instant>> {
        self.stalls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Since when the answer that has waited longest for the peer to read has waited.
    pub(super) fn stalled_since(&self) -> Option<Instant> {
        self.stalls().values().min().copied()
    }

    pub(super) fn idle_since(&self) -> Instant {
        *self
            .idle_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn begin_request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.served.store(true, Ordering::SeqCst);
        InFlight {
            state: self.clone(),
            request: self.next_request.fetch_add(1, Ordering::SeqCst),
        }
    }
}

/// What a handler may ask of the connection its request came on; in every request's
/// extensions.
#[derive(Clone)]
pub(crate) struct ConnectionControl(pub(super) Arc<ConnState>);

impl ConnectionControl {
    /// Resets the connection (`SO_LINGER` 0) when its socket closes, rather than closing it
    /// gracefully: for a peer cut off for not reading, whose unsent data the kernel would
    /// otherwise keep for minutes, the connection's end queued behind it.
    pub(crate) fn reset_on_close(&self) {
        self.0.reset_on_close.store(true, Ordering::SeqCst);
    }
}

/// A request in flight; dropped when its answer is done (or abandoned).
pub(super) struct InFlight {
    pub(super) state: Arc<ConnState>,
    pub(super) request: u64,
}

impl InFlight {
    /// Part of the answer was handed to hyper: until hyper asks for more, the peer has yet to
    /// take what hyper has written.
    pub(super) fn waits_for_peer(&self) {
        self.state
            .stalls()
            .entry(self.request)
            .or_insert_with(Instant::now);
    }

    /// Hyper asks for more of the answer: the peer took what was written.
    pub(super) fn peer_caught_up(&self) {
        self.state.stalls().remove(&self.request);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.peer_caught_up();
        let state = &self.state;
        if state.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            *state
                .idle_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Instant::now();
            state.wake.notify_one();
        }
    }
}

/// The connections held, by client.
pub(super) struct Registry {
    limits: ConnectionLimits,
    inner: Mutex<Table>,
}

/// The registry's table, in order of acceptance.
#[derive(Default)]
struct Table {
    next_id: u64,
    pub(super) open: BTreeMap<u64, Entry>,
    /// Connections on ordinary places, by client (reserved places count against nobody).
    pub(super) per_client: HashMap<ClientId, usize>,
    /// How many of `open` hold reserved places.
    pub(super) reserved: usize,
}

struct Entry {
    client: ClientId,
    state: Arc<ConnState>,
    /// Closes the connection while hyper serves it; gone once it ended or was upgraded.
    evict: Option<oneshot::Sender<()>>,
}

/// A connection let in: its place, its shared state, and the signal that it must make room.
pub(super) struct Admitted {
    pub(super) slot: Slot,
    pub(super) state: Arc<ConnState>,
    pub(super) evicted: oneshot::Receiver<()>,
}

impl Registry {
    pub(super) fn new(limits: ConnectionLimits) -> Self {
        Self {
            limits,
            inner: Mutex::default(),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a new connection of `client`, made by closing one that serves nothing when
    /// a cap is reached; a reserved place when every connection in the way is busy; none when
    /// the reserved places are busy too.
    pub(super) fn admit(self: &Arc<Self>, client: ClientId) -> Option<Admitted> {
        let mut table = self.table();
        let client_full = table.per_client.get(&client).copied().unwrap_or(0)
            >= self.limits.max_connections_per_client.max(1);
        let all_full = table.open.len() - table.reserved >= self.limits.max_connections.max(1);
        let mut reserved = false;
        if client_full || all_full {
            // The client's own when it holds its share (so that it makes room for itself, not
            // at others' cost), else anyone's.
            match table.victim(client_full.then_some(client), false, client) {
                Some(victim) => table.evict(victim),
                None => {
                    if table.reserved >= self.limits.reserved_connections {
                        let victim = table.victim(None, true, client)?;
                        table.evict(victim);
                    }
                    reserved = true;
                }
            }
        }
        let id = table.next_id;
        table.next_id += 1;
        let state = Arc::new(ConnState::new(id, reserved));
        let (evict, evicted) = oneshot::channel();
        table.open.insert(
            id,
            Entry {
                client,
                state: state.clone(),
                evict: Some(evict),
            },
        );
        if reserved {
            table.reserved += 1;
        } else {
            *table.per_client.entry(client).or_default() += 1;
        }
        Some(Admitted {
            slot: Slot {
                registry: self.clone(),
                id,
            },
            state,
            evicted,
        })
    }

    /// Hyper no longer serves connection `id` (it ended, or was upgraded and still holds its
    /// place): it can no longer be closed to make room.
    pub(super) fn unwatched(&self, id: u64) {
        if let Some(entry) = self.table().open.get_mut(&id) {
            entry.evict = None;
        }
    }
}

impl Table {
    /// The connection to close to make room for a newcomer of `newcomer`, among those on
    /// reserved places or on ordinary ones (of `client` only, when given): the oldest that never
    /// sent a request head (on a reserved place, another client's only once
    /// [`RESERVED_HEAD_GRACE`] has passed), else the one idle the longest, else the one whose
    /// answer has waited longest, at least [`STALLED_EVICTABLE`], for its peer to read; never one
    /// whose answers are being taken.
    fn victim(&self, client: Option<ClientId>, reserved: bool, newcomer: ClientId) -> Option<u64> {
        let candidates = self.open.iter().filter(|(_, entry)| {
            entry.evict.is_some()
                && entry.state.reserved == reserved
                && client.is_none_or(|c| c == entry.client)
        });
        let now = Instant::now();
        // Ids are given in order of arrival: the smallest is the oldest.
        let mut silent_oldest: Option<u64> = None;
        let mut idle_longest: Option<(Instant, u64)> = None;
        let mut stalled_longest: Option<(Instant, u64)> = None;
        for (&id, entry) in candidates {
            if entry.state.in_flight.load(Ordering::SeqCst) > 0 {
                let stalled = entry
                    .state
                    .stalled_since()
                    .filter(|&since| since + STALLED_EVICTABLE <= now);
                if let Some(since) = stalled {
                    if stalled_longest.is_none_or(|(oldest, _)| since < oldest) {
                        stalled_longest = Some((since, id));
                    }
                }
                continue;
            }
            if !entry.state.served.load(Ordering::SeqCst) {
                // Still silent, it has been since it was accepted. A flood makes room with its
                // own connections, not with another client's that has yet to send its head.
                let in_grace = reserved
                    && entry.client != newcomer
                    && entry.state.idle_since() + RESERVED_HEAD_GRACE > now;
                if !in_grace {
                    silent_oldest = Some(silent_oldest.map_or(id, |oldest| oldest.min(id)));
                }
                continue;
            }
            let since = entry.state.idle_since();
            if idle_longest.is_none_or(|(oldest, _)| since < oldest) {
                idle_longest = Some((since, id));
            }
        }
        silent_oldest
            .or(idle_longest.map(|(_, id)| id))
            .or(stalled_longest.map(|(_, id)| id))
    }

    /// Closes connection `id` and gives its place to the newcomer at once.
    fn evict(&mut self, id: u64) {
        if let Some(entry) = self.remove(id) {
            if let Some(evict) = entry.evict {
                let _ = evict.send(());
            }
        }
    }

    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.open.remove(&id)?;
        if entry.state.reserved {
            self.reserved -= 1;
        } else if let Some(count) = self.per_client.get_mut(&entry.client) {
            *count -= 1;
            if *count == 0 {
                self.per_client.remove(&entry.client);
            }
        }
        Some(entry)
    }
}

/// A connection's place, given back when its socket closes.
pub(super) struct Slot {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.registry.table().remove(self.id);
    }
}

#[cfg(test)]
mod tests;
