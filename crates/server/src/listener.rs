//! Accepting connections so that hostile clients cannot hold the server:
//! - a connection must deliver its first request's head within
//!   [`ConnectionLimits::header_timeout`] of being accepted, its first byte included (hyper's own
//!   HTTP/1 timer only starts once the first bytes have told HTTP/1 from HTTP/2, and HTTP/2 has
//!   none); later heads on a kept-alive HTTP/1 connection get as long again (hyper's timer);
//! - a request body must arrive whole within [`ConnectionLimits::body_timeout`] of its head (a
//!   total: tower-http's body timeout restarts at every chunk, so a byte now and then held it),
//!   and, once [`ConnectionLimits::body_rate_grace`] has passed, at no less than
//!   [`ConnectionLimits::min_body_rate`] on average, so that a body dripped in is refused early
//!   rather than held to the total deadline;
//! - HTTP/2 connections are pinged, and closed after [`ConnectionLimits::idle_timeout`] without a
//!   request in flight;
//! - an answer whose peer takes none of it for [`ConnectionLimits::write_timeout`] closes its
//!   connection (reset, so that the kernel drops what is left unsent): hyper asks an answer's
//!   body for more only once what it has written so far is gone, so the time since a body's last
//!   part was taken, with no request for the next, is the time the peer has not read (the
//!   socket's buffer full, or HTTP/2's window closed);
//! - at most [`ConnectionLimits::max_connections`] connections are held, at most
//!   [`ConnectionLimits::max_connections_per_client`] of them by one client, every loopback
//!   address counting as one client (any local user can pick any of 127.0.0.0/8). A connection
//!   beyond a cap takes the place of one that serves nothing (no request in flight; first, oldest
//!   first, those that never sent a request head), else of one whose answer has waited at least
//!   [`STALLED_EVICTABLE`] for its peer to read (the longest waiting first), so that neither an
//!   attacker's idle connections nor answers it never reads can lock anyone out;
//! - when every place in the way is busy, the new connection takes one of
//!   [`ConnectionLimits::reserved_connections`] places kept for health checks and for requests
//!   that carry the API key (the operator's own clients): any other request on it is answered
//!   503 `server_busy` and the connection closed, and a reserved place that serves nothing is
//!   taken by the next newcomer (another client's only once [`RESERVED_HEAD_GRACE`] has passed
//!   since it was accepted, so that one client's flood of bare connections cannot push another's
//!   health check out before its head arrives). Only when even those are busy is a new connection answered
//!   an HTTP/1.1 503 `server_busy` at once and closed (rather than left in the listen backlog,
//!   or reset, which clients report as a network failure rather than a busy server).
//!
//! A connection's place is held by its socket, so a WebSocket keeps it after the upgrade; the
//! event sockets bound their own number and close peers that stop answering pings (see
//! `event_socket`).

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulConnection;
use hyper_util::service::TowerToHyperService;
use playground::{AppError, ErrorKind};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch, Notify, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::body_timeout::BodyTimeout;
use crate::error::ApiError;
use crate::guard::{loggable_uri, AccessPolicy};

/// How long and how many clients may hold the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From accepting a connection to the end of its first request's head (HTTP/1 or HTTP/2);
    /// on a kept-alive HTTP/1 connection, from one answer to the end of the next head.
    pub header_timeout: Duration,
    /// A request's whole body, counted from the end of its head.
    pub body_timeout: Duration,
    /// How long a connection that served a request stays open without one in flight (HTTP/2's
    /// limit; an HTTP/1 connection waiting for its next head is held to `header_timeout` too).
    pub idle_timeout: Duration,
    /// How often HTTP/2 connections and event sockets are pinged; one whose peer does not
    /// answer within as long again is closed.
    pub keep_alive_interval: Duration,
    /// The least a request body must average, in bytes a second, from when its reading starts.
    /// 0 leaves bodies to `body_timeout` alone.
    pub min_body_rate: u64,
    /// How long a body may arrive slower than `min_body_rate` before it is held to it (a
    /// connection's start is slow).
    pub body_rate_grace: Duration,
    /// Connections held at once.
    pub max_connections: usize,
    /// Connections one client (an IPv4 address, an IPv6 /64 network, or this machine through
    /// any loopback address) holds at once.
    pub max_connections_per_client: usize,
    /// Places beyond `max_connections` kept for health checks and requests with the API key,
    /// taken only when every other place in the way is busy.
    pub reserved_connections: usize,
    /// Event sockets (`/api/events`) open at once; more are answered 503.
    pub max_event_sockets: usize,
    /// How long an answer may wait for its peer to take any of it before the connection is
    /// closed (nginx's `send_timeout`).
    pub write_timeout: Duration,
}

/// How long an answer must have waited for its peer to read before its connection may be
/// closed to make room for a newcomer: far longer than a reading peer ever leaves one waiting.
const STALLED_EVICTABLE: Duration = Duration::from_secs(2);

/// How long a connection on a reserved place is left to send its first request's head before
/// another client's newcomer may take its place: far longer than a head takes to arrive, so that
/// a flood of bare connections cannot cycle another client's health check or keyed request out
/// before it is read (the flood takes its own places, or is answered busy).
const RESERVED_HEAD_GRACE: Duration = Duration::from_secs(1);

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            keep_alive_interval: Duration::from_secs(20),
            // As Kestrel's request body rate: far below any real link, far above a drip.
            min_body_rate: 240,
            body_rate_grace: Duration::from_secs(5),
            max_connections: 512,
            // Above the engine's default queue and slots, so one client's own load never meets
            // it; a quarter of the whole, so one address never holds everything busy.
            max_connections_per_client: 128,
            reserved_connections: 16,
            // One a browser tab: many tabs, and an eighth of the places.
            max_event_sockets: 64,
            // nginx's default send_timeout is 60 s; an answer nobody reads holds a place.
            write_timeout: Duration::from_secs(30),
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then lets open requests finish.
/// `access` tells which requests may use the reserved places.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    access: Arc<AccessPolicy>,
    shutdown: impl Future<Output = ()>,
) {
    let registry = Arc::new(Registry::new(limits));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(limits.keep_alive_interval))
        .keep_alive_timeout(limits.keep_alive_interval);
    // Every connection task holds a sender; once all are dropped, every connection has ended.
    let (running, mut all_ended) = mpsc::channel::<()>(1);
    let (stopping, stop) = watch::channel(false);
    let turning_away = Arc::new(Semaphore::new(MAX_TURNING_AWAY));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    tracing::warn!(%err, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let accepted_at = Instant::now();
        let client = ClientId::of(peer.ip());
        let Some(admitted) = registry.admit(client) else {
            // Every place, the reserved ones too, is busy with requests: answering now tells
            // the client at once, where the backlog would keep it waiting for a place.
            tracing::debug!(%peer, "connection refused: every place is busy");
            turn_away(stream, &turning_away);
            continue;
        };
        let Admitted {
            slot,
            state,
            evicted,
        } = admitted;
        if state.reserved {
            tracing::debug!(%peer, "connection on a reserved place");
        }
        let service = TowerToHyperService::new(ConnService {
            router: router.clone(),
            client,
            state: state.clone(),
            body_rules: BodyRules::of(&limits),
            access: access.clone(),
        });
        let io = TokioIo::new(Held {
            stream,
            state: state.clone(),
            _slot: slot,
        });
        let connection = builder
            .serve_connection_with_upgrades(io, service)
            .into_owned();
        let watch = Watch {
            state,
            evicted,
            stop: stop.clone(),
            limits,
            accepted_at,
        };
        let running = running.clone();
        let registry = registry.clone();
        tokio::spawn(async move {
            let id = watch.state.id;
            watch.drive(connection).await;
            // An upgraded connection still holds its place, but no longer through hyper.
            registry.unwatched(id);
            tracing::trace!(%peer, "connection ended");
            drop(running);
        });
    }
    drop(listener);
    stopping.send_replace(true);
    drop(running);
    let _ = all_ended.recv().await;
}

/// Connections being answered 503 at once because every place is busy; beyond them, new ones
/// are closed unanswered.
const MAX_TURNING_AWAY: usize = 64;
/// How long a connection turned away gets to take its 503, and then to finish sending what it
/// had started (read and dropped, so that closing does not reset the connection and lose the
/// answer).
const TURN_AWAY_WAIT: Duration = Duration::from_secs(1);
/// The most a connection turned away may send before it is closed regardless.
const TURN_AWAY_DRAIN_BYTES: usize = 64 << 10;

/// Answers a connection no place was found for with an HTTP/1.1 503 `server_busy` and closes
/// it, rather than resetting it unanswered; within [`MAX_TURNING_AWAY`] at once.
fn turn_away(stream: TcpStream, turning_away: &Arc<Semaphore>) {
    let Ok(permit) = turning_away.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let _permit = permit;
        let mut stream = stream;
        let body = busy_body();
        let answer = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
             retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let answered = async {
            stream.write_all(answer.as_bytes()).await?;
            stream.shutdown().await?;
            let mut buf = [0u8; 4096];
            let mut drained = 0;
            while drained < TURN_AWAY_DRAIN_BYTES {
                match stream.read(&mut buf).await? {
                    0 => break,
                    n => drained += n,
                }
            }
            Ok::<_, io::Error>(())
        };
        let _ = tokio::time::timeout(TURN_AWAY_WAIT, answered).await;
    });
}

/// Who a connection counts against: its IPv4 address, or the /64 network of its IPv6 address
/// (one host commonly has a whole /64 to pick addresses from), or this machine for every
/// loopback address (127.0.0.0/8 and ::1: any local user can connect from any of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ClientId(IpAddr);

impl ClientId {
    fn of(ip: IpAddr) -> Self {
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
struct ConnState {
    id: u64,
    /// It holds a reserved place: only requests with priority are served on it.
    reserved: bool,
    /// Requests whose answers are not done yet.
    in_flight: AtomicUsize,
    /// Whether a request head has arrived.
    served: AtomicBool,
    /// Since when no request has been in flight.
    idle_since: Mutex<Instant>,
    /// A body ran past its deadline: close once its answer is out.
    close: AtomicBool,
    /// Reset the connection when its socket closes (see [`ConnectionControl`]).
    reset_on_close: AtomicBool,
    /// Closed for idling: whatever the kernel still holds unsent for it then, the peer has left
    /// unread all that while, and is dropped with a reset.
    closing_idle: AtomicBool,
    /// Answers waiting for the peer to take what was written of them: since when, by request.
    stalls: Mutex<HashMap<u64, Instant>>,
    /// The number the next request gets.
    next_request: AtomicU64,
    /// Wakes the connection's task to look at the above again.
    wake: Notify,
}

impl ConnState {
    fn new(id: u64, reserved: bool) -> Self {
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

    fn stalls(&self) -> MutexGuard<'_, HashMap<u64, Instant>> {
        self.stalls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Since when the answer that has waited longest for the peer to read has waited.
    fn stalled_since(&self) -> Option<Instant> {
        self.stalls().values().min().copied()
    }

    fn idle_since(&self) -> Instant {
        *self
            .idle_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn begin_request(self: &Arc<Self>) -> InFlight {
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
pub(crate) struct ConnectionControl(Arc<ConnState>);

impl ConnectionControl {
    /// Resets the connection (`SO_LINGER` 0) when its socket closes, rather than closing it
    /// gracefully: for a peer cut off for not reading, whose unsent data the kernel would
    /// otherwise keep for minutes, the connection's end queued behind it.
    pub(crate) fn reset_on_close(&self) {
        self.0.reset_on_close.store(true, Ordering::SeqCst);
    }
}

/// A request in flight; dropped when its answer is done (or abandoned).
struct InFlight {
    state: Arc<ConnState>,
    request: u64,
}

impl InFlight {
    /// Part of the answer was handed to hyper: until hyper asks for more, the peer has yet to
    /// take what hyper has written.
    fn waits_for_peer(&self) {
        self.state
            .stalls()
            .entry(self.request)
            .or_insert_with(Instant::now);
    }

    /// Hyper asks for more of the answer: the peer took what was written.
    fn peer_caught_up(&self) {
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
struct Registry {
    limits: ConnectionLimits,
    inner: Mutex<Table>,
}

/// The registry's table, in order of acceptance.
#[derive(Default)]
struct Table {
    next_id: u64,
    open: BTreeMap<u64, Entry>,
    /// Connections on ordinary places, by client (reserved places count against nobody).
    per_client: HashMap<ClientId, usize>,
    /// How many of `open` hold reserved places.
    reserved: usize,
}

struct Entry {
    client: ClientId,
    state: Arc<ConnState>,
    /// Closes the connection while hyper serves it; gone once it ended or was upgraded.
    evict: Option<oneshot::Sender<()>>,
}

/// A connection let in: its place, its shared state, and the signal that it must make room.
struct Admitted {
    slot: Slot,
    state: Arc<ConnState>,
    evicted: oneshot::Receiver<()>,
}

impl Registry {
    fn new(limits: ConnectionLimits) -> Self {
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
    fn admit(self: &Arc<Self>, client: ClientId) -> Option<Admitted> {
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
    fn unwatched(&self, id: u64) {
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
struct Slot {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.registry.table().remove(self.id);
    }
}

/// The socket with its place: whoever holds the socket (hyper, or an upgraded WebSocket) holds
/// the place.
struct Held {
    stream: TcpStream,
    state: Arc<ConnState>,
    _slot: Slot,
}

impl Drop for Held {
    fn drop(&mut self) {
        let left_unread = self.state.closing_idle.load(Ordering::SeqCst) && self.unsent() > 0;
        if left_unread || self.state.reset_on_close.load(Ordering::SeqCst) {
            if let Err(err) = self.stream.set_zero_linger() {
                tracing::debug!(%err, "cannot reset a connection");
            }
        }
    }
}

impl Held {
    /// Bytes the kernel holds for the peer that it has not taken yet (sent or not); 0 where
    /// the system does not say.
    #[cfg(target_os = "linux")]
    fn unsent(&self) -> usize {
        use std::os::fd::AsRawFd;
        let mut unsent: libc::c_int = 0;
        // SAFETY: TIOCOUTQ writes one int, into `unsent`, for a socket this value owns.
        let read = unsafe { libc::ioctl(self.stream.as_raw_fd(), libc::TIOCOUTQ, &mut unsent) };
        if read == 0 {
            usize::try_from(unsent).unwrap_or(0)
        } else {
            0
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn unsent(&self) -> usize {
        0
    }
}

impl AsyncRead for Held {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Held {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Watches one connection while hyper serves it: its deadlines, eviction and shutdown.
struct Watch {
    state: Arc<ConnState>,
    evicted: oneshot::Receiver<()>,
    stop: watch::Receiver<bool>,
    limits: ConnectionLimits,
    accepted_at: Instant,
}

impl Watch {
    async fn drive<C>(mut self, connection: C)
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

/// The router as one connection serves it: each request is counted in flight until its answer
/// is done, its body is held to [`BodyRules`], a connection on a reserved place serves only
/// requests with priority, and the work a request starts is done on behalf of its client (see
/// [`engine::on_behalf_of`]).
#[derive(Clone)]
struct ConnService {
    router: Router,
    client: ClientId,
    state: Arc<ConnState>,
    body_rules: BodyRules,
    access: Arc<AccessPolicy>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<B> tower_service::Service<axum::http::Request<B>> for ConnService
where
    B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        let in_flight = self.state.begin_request();
        let (mut parts, body) = request.into_parts();
        parts
            .extensions
            .insert(ConnectionControl(self.state.clone()));
        // An HTTP/1 connection cannot go on past a body it did not read whole; an HTTP/2 one
        // drops that stream only, and its other streams are not the slow client's.
        let http1 = parts.version < axum::http::Version::HTTP_2;
        if self.state.reserved && !self.access.has_priority(&parts) {
            tracing::debug!(
                method = %parts.method,
                uri = %loggable_uri(&parts.uri),
                "request refused: only health checks and key holders are served on a reserved place"
            );
            // Neither counted in flight nor kept: the connection closes once the answer is out
            // (shut down within the head deadline, whatever the version), so that a client that
            // never reads its 503, or keeps HTTP/2 streams open, cannot keep the place.
            drop(in_flight);
            self.state.close.store(true, Ordering::SeqCst);
            self.state.wake.notify_one();
            return Box::pin(std::future::ready(Ok(busy(http1))));
        }
        let body = DeadlineBody::new(body, self.body_rules, http1.then(|| self.state.clone()));
        let request = Request::from_parts(parts, Body::new(body));
        let answer = tower_service::Service::call(&mut self.router, request);
        let client = self.client.0;
        Box::pin(engine::on_behalf_of(Some(client), async move {
            let response = answer.await?;
            Ok(tracked(response, in_flight))
        }))
    }
}

/// The error of a request turned away because every connection place is busy.
fn busy_error() -> AppError {
    AppError::new(
        ErrorKind::Unavailable,
        "server_busy",
        "every connection place is busy; only /health and requests with the API key are \
         served now: try again shortly",
    )
    .with_retry_after(1)
}

/// [`busy_error`] as a JSON body.
fn busy_body() -> String {
    serde_json::to_string(&ApiError(busy_error()).body()).unwrap_or_default()
}

/// The answer to a request on a reserved place that has no priority. Its body is left unread,
/// so an HTTP/1 connection closes after it (said so), giving the place to the next newcomer.
fn busy(http1: bool) -> Response {
    let err = busy_error();
    // Logged where it is decided, at debug: an attack makes many.
    let mut response = ApiError(err).unlogged_response();
    if http1 {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// `response`, its request counted in flight until its body is done.
fn tracked(response: Response, in_flight: InFlight) -> Response {
    response.map(|body| {
        Body::new(Tracked {
            inner: body,
            in_flight,
        })
    })
}

/// What a request body is held to (see [`ConnectionLimits`]).
#[derive(Debug, Clone, Copy)]
struct BodyRules {
    timeout: Duration,
    min_rate: u64,
    grace: Duration,
}

impl BodyRules {
    fn of(limits: &ConnectionLimits) -> Self {
        Self {
            timeout: limits.body_timeout,
            min_rate: limits.min_body_rate,
            grace: limits.body_rate_grace,
        }
    }
}

/// A request body that fails once it breaks its [`BodyRules`], however it trickles in: whole
/// by its deadline, and no slower than the least rate once the grace is over.
struct DeadlineBody<B> {
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
    fn new(inner: B, rules: BodyRules, state: Option<Arc<ConnState>>) -> Self {
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
struct Tracked {
    inner: Body,
    in_flight: InFlight,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(total: usize, per_client: usize) -> Arc<Registry> {
        registry_with_reserve(total, per_client, 0)
    }

    fn registry_with_reserve(total: usize, per_client: usize, reserved: usize) -> Arc<Registry> {
        Arc::new(Registry::new(ConnectionLimits {
            max_connections: total,
            max_connections_per_client: per_client,
            reserved_connections: reserved,
            ..ConnectionLimits::default()
        }))
    }

    fn client(last: u8) -> ClientId {
        ClientId::of(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn ipv6_clients_count_by_network() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(ClientId::of(a), ClientId::of(b));
        assert_ne!(ClientId::of(a), ClientId::of(c));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(ClientId::of(mapped), client(1));
    }

    #[test]
    fn every_loopback_address_is_one_client() {
        let this_machine = ClientId::of(IpAddr::from([127, 0, 0, 1]));
        for other in [
            "127.0.0.2",
            "127.6.7.8",
            "127.255.255.254",
            "::1",
            "::ffff:127.0.0.9",
        ] {
            let ip: IpAddr = other.parse().unwrap();
            assert_eq!(ClientId::of(ip), this_machine, "{other}");
        }
        assert_ne!(client(1), this_machine);
        assert_ne!(ClientId::of("::2".parse().unwrap()), this_machine);
    }

    #[test]
    fn reserved_places_take_newcomers_only_when_every_place_is_busy() {
        let registry = registry_with_reserve(2, 2, 1);
        let first = registry.admit(client(1)).unwrap();
        let second = registry.admit(client(1)).unwrap();
        let _busy = (first.state.begin_request(), second.state.begin_request());
        // Every ordinary place is busy: the newcomer gets the reserved one.
        let reserved = registry.admit(client(2)).unwrap();
        assert!(reserved.state.reserved);
        assert!(!first.state.reserved && !second.state.reserved);
        // A reserved place that serves nothing goes to the next newcomer of another client once
        // its connection has had its time to send a head: until then the newcomer is refused.
        assert!(registry.admit(client(3)).is_none());
        *reserved.state.idle_since.lock().unwrap() =
            Instant::now().checked_sub(RESERVED_HEAD_GRACE).unwrap();
        let next = registry.admit(client(3)).unwrap();
        assert!(next.state.reserved);
        let mut reserved_evicted = reserved.evicted;
        assert!(reserved_evicted.try_recv().is_ok());
        // Busy, it is kept, and with no place left the newcomer is refused.
        let _next_busy = next.state.begin_request();
        assert!(registry.admit(client(4)).is_none());
        let table = registry.table();
        assert_eq!((table.open.len(), table.reserved), (3, 1));
        assert!(!table.per_client.contains_key(&client(3)));
        drop(table);
        // An ordinary place given back is an ordinary place again.
        drop(first.slot);
        let ordinary = registry.admit(client(4)).unwrap();
        assert!(!ordinary.state.reserved);
    }

    #[test]
    fn a_flood_of_bare_connections_takes_its_own_reserved_places_not_anothers() {
        let registry = registry_with_reserve(1, 1, 4);
        let ordinary = registry.admit(client(1)).unwrap();
        let _busy = ordinary.state.begin_request();
        // An operator's health check takes a reserved place; its head has yet to arrive.
        let mut health = registry.admit(client(2)).unwrap();
        assert!(health.state.reserved);
        // Another client's bare connections pour in: each takes the place of that client's own
        // oldest, and the health check keeps its place.
        let flood: Vec<Admitted> = (0..20)
            .map(|_| registry.admit(client(3)).unwrap())
            .collect();
        assert!(health.evicted.try_recv().is_err());
        let kept: Vec<Admitted> = flood
            .into_iter()
            .filter_map(|mut c| c.evicted.try_recv().is_err().then_some(c))
            .collect();
        assert_eq!(kept.len(), 3);
        // Once its time to send a head has passed, a silent one is anyone's to take.
        *health.state.idle_since.lock().unwrap() =
            Instant::now().checked_sub(RESERVED_HEAD_GRACE).unwrap();
        let _newest = registry.admit(client(3)).unwrap();
        assert!(health.evicted.try_recv().is_ok());
    }

    #[test]
    fn a_client_at_its_cap_makes_room_with_its_own_idle_connections() {
        let registry = registry(10, 2);
        let first = registry.admit(client(1)).unwrap();
        let second = registry.admit(client(1)).unwrap();
        let other = registry.admit(client(2)).unwrap();
        // Both of client 1's connections are silent: the oldest makes room.
        let mut third = registry.admit(client(1)).unwrap();
        let mut first_evicted = first.evicted;
        assert!(first_evicted.try_recv().is_ok());
        let mut second_evicted = second.evicted;
        assert!(second_evicted.try_recv().is_err());
        let mut other_evicted = other.evicted;
        assert!(other_evicted.try_recv().is_err());
        // Busy connections are never closed: with both busy, the next one is refused.
        let _busy = (second.state.begin_request(), third.state.begin_request());
        assert!(registry.admit(client(1)).is_none());
        assert!(third.evicted.try_recv().is_err());
        // Another client is not affected.
        assert!(registry.admit(client(3)).is_some());
    }

    #[test]
    fn a_full_server_closes_silent_connections_before_idle_ones() {
        let registry = registry(3, 3);
        let idle = registry.admit(client(1)).unwrap();
        drop(idle.state.begin_request());
        let silent = registry.admit(client(2)).unwrap();
        let busy = registry.admit(client(3)).unwrap();
        let _request = busy.state.begin_request();
        let new = registry.admit(client(4)).unwrap();
        let (mut idle_evicted, mut silent_evicted) = (idle.evicted, silent.evicted);
        assert!(silent_evicted.try_recv().is_ok());
        assert!(idle_evicted.try_recv().is_err());
        // Of two idle connections, the one idle the longest makes room.
        std::thread::sleep(Duration::from_millis(5));
        drop(new.state.begin_request());
        let _newer = registry.admit(client(5)).unwrap();
        assert!(idle_evicted.try_recv().is_ok());
        let mut new_evicted = new.evicted;
        assert!(new_evicted.try_recv().is_err());
        assert_eq!(registry.table().open.len(), 3);
    }

    #[test]
    fn answers_left_unread_make_room_after_idle_connections_and_longest_waiting_first() {
        let registry = registry(10, 3);
        let reading = registry.admit(client(1)).unwrap();
        let unread = registry.admit(client(1)).unwrap();
        let unread_longer = registry.admit(client(1)).unwrap();
        let requests = [&reading, &unread, &unread_longer].map(|c| c.state.begin_request());
        let waited = |seconds| {
            Instant::now()
                .checked_sub(Duration::from_secs(seconds))
                .unwrap()
        };
        // One answer is being read (its wait just began); two have waited for seconds.
        requests[0].waits_for_peer();
        for (request, seconds) in [(&requests[1], 3), (&requests[2], 5)] {
            request
                .state
                .stalls()
                .insert(request.request, waited(seconds));
        }
        let fourth = registry.admit(client(1)).unwrap();
        let [mut reading_evicted, mut unread_evicted, mut longer_evicted] =
            [reading.evicted, unread.evicted, unread_longer.evicted];
        assert!(longer_evicted.try_recv().is_ok());
        assert!(unread_evicted.try_recv().is_err());
        // An idle connection goes before an answer left unread.
        drop(fourth.state.begin_request());
        let fifth = registry.admit(client(1)).unwrap();
        let mut fourth_evicted = fourth.evicted;
        assert!(fourth_evicted.try_recv().is_ok());
        assert!(unread_evicted.try_recv().is_err());
        // The peer took the rest and asked for more: its answer no longer waits.
        requests[1].peer_caught_up();
        let _busy = fifth.state.begin_request();
        assert!(registry.admit(client(1)).is_none());
        assert!(reading_evicted.try_recv().is_err());
        assert!(unread_evicted.try_recv().is_err());
    }

    #[test]
    fn of_silent_connections_the_oldest_makes_room_first() {
        let registry = registry(40, 40);
        let silent: Vec<Admitted> = (0..40)
            .map(|_| registry.admit(client(1)).unwrap())
            .collect();
        // Each newcomer closes the oldest silent one left, whatever order the table keeps.
        let newcomers: Vec<Admitted> = (0..3).map(|_| registry.admit(client(2)).unwrap()).collect();
        let mut evicted: Vec<bool> = silent
            .into_iter()
            .map(|mut c| c.evicted.try_recv().is_ok())
            .collect();
        assert_eq!(evicted.drain(..3).collect::<Vec<_>>(), [true; 3]);
        assert!(evicted.iter().all(|e| !e));
        drop(newcomers);
    }

    #[test]
    fn places_are_given_back_when_sockets_close() {
        let registry = registry(1, 1);
        let held = registry.admit(client(1)).unwrap();
        // Upgraded: still held, but no longer closable.
        registry.unwatched(held.state.id);
        assert!(registry.admit(client(2)).is_none());
        drop(held.slot);
        assert!(registry.admit(client(2)).is_some());
        assert!(!registry.table().per_client.contains_key(&client(1)));
    }
}
