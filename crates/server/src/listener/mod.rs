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

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::time::Instant;

use crate::guard::AccessPolicy;

mod bodies;
mod conn_service;
mod connection_watch;
mod held;
mod places;

use bodies::BodyRules;
use conn_service::{busy_body, ConnService};
use connection_watch::Watch;
use held::Held;
pub(crate) use places::ConnectionControl;
use places::{Admitted, ClientId, Registry};

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
