//! `/api/events`: a page's one WebSocket for all its generations and status updates (see
//! [`playground::event_socket`]). One task owns the socket's state: the generations it started
//! and the status timer. Each generation forwards its events from a task of its own; closing the
//! socket stops them, and their runs are recorded as cancelled.
//!
//! What waits to be written is bounded: a page that leaves more than [`MAX_UNREAD_BYTES`] unread
//! (a tab that stopped reading, a client that never reads) has fallen behind and is cut off: it
//! is sent close code 1008 with the reason `lagged` for a moment, then the connection is reset,
//! so that the kernel does not keep what it left unread; its generations stop like those of a
//! page that closed. Status updates are snapshots, so one waiting is enough: a later one is
//! dropped meanwhile rather than queued behind it.
//!
//! A socket holds a connection place for as long as it is open, so the sockets are few and
//! must stay alive: at most [`EventSockets`]' bound are open at once (a newcomer takes the place
//! of the one without a generation the longest, see `event_socket_places`), each is pinged every
//! so often, and one whose peer answers no ping by the next, or takes no write for two rounds,
//! is cut off the same way (1008, `unresponsive`). Browsers answer pings themselves, whatever
//! the page does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ws::{close_code, CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use playground::event_socket::{StreamMessage, StreamRequest, MAX_STREAM_RUNS, STATUS_EVERY_MS};
use playground::{AppError, ErrorBody, Playground, PlaygroundRequest};
use tokio::sync::mpsc::{self, UnboundedSender};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tracing::Instrument;

use crate::event_socket_places::{EventSockets, Place};
use crate::listener::ConnectionControl;

/// Largest message a page may send (a long conversation fits).
const MAX_MESSAGE_BYTES: usize = 8 << 20;
/// Bytes of messages a page may leave unread before it is cut off: many times what a page that
/// reads ever has waiting, little beside the server's memory.
const MAX_UNREAD_BYTES: usize = 4 << 20;
/// Messages a page may leave unread, however small.
const MAX_UNREAD_MESSAGES: usize = 4096;
/// How long a page that fell behind gets to take the close frame.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// The page fell behind: it is being cut off.
#[derive(Debug)]
struct Lagged;

/// A message serialized and waiting for the writer.
struct Queued {
    text: String,
    status: bool,
}

/// The messages on their way to the page, bounded in bytes and in number.
#[derive(Clone)]
struct Outgoing {
    queue: mpsc::Sender<Queued>,
    shared: Arc<Backlog>,
}

/// What the senders, the reader and the writer all follow.
struct Backlog {
    unread: AtomicUsize,
    /// A status update is waiting: the next ones are dropped until it is written.
    status_waiting: AtomicBool,
    /// A ping went out that no pong has answered yet.
    awaiting_pong: AtomicBool,
    lagged: watch::Sender<bool>,
    /// A newcomer took the socket's place: it closes.
    replaced: watch::Sender<bool>,
}

impl Backlog {
    fn fall_behind(&self, unread: usize) {
        if !self.lagged.send_replace(true) {
            tracing::warn!(
                unread,
                "event socket closed: the page does not read its events"
            );
        }
    }

    fn has_lagged(&self) -> bool {
        *self.lagged.borrow()
    }

    /// Resolves once the page has fallen behind.
    async fn lagged(&self) {
        let mut lagged = self.lagged.subscribe();
        let _ = lagged.wait_for(|lagged| *lagged).await;
    }

    /// Resolves once a newcomer took the socket's place.
    async fn replaced(&self) {
        let mut replaced = self.replaced.subscribe();
        let _ = replaced.wait_for(|replaced| *replaced).await;
    }

    /// `queued` left the queue.
    fn taken(&self, queued: &Queued) {
        self.unread.fetch_sub(queued.text.len(), Ordering::SeqCst);
        if queued.status {
            self.status_waiting.store(false, Ordering::SeqCst);
        }
    }
}

impl Outgoing {
    fn new() -> (Self, mpsc::Receiver<Queued>, Arc<Backlog>) {
        let (queue, to_send) = mpsc::channel(MAX_UNREAD_MESSAGES);
        let shared = Arc::new(Backlog {
            unread: AtomicUsize::new(0),
            status_waiting: AtomicBool::new(false),
            awaiting_pong: AtomicBool::new(false),
            lagged: watch::channel(false).0,
            replaced: watch::channel(false).0,
        });
        let outgoing = Self {
            queue,
            shared: shared.clone(),
        };
        (outgoing, to_send, shared)
    }

    /// Queues `message`; fails once the page has fallen behind (or is gone).
    fn send(&self, message: &StreamMessage) -> Result<(), Lagged> {
        let shared = &self.shared;
        if shared.has_lagged() {
            return Err(Lagged);
        }
        let status = matches!(message, StreamMessage::Status { .. });
        if status && shared.status_waiting.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let text = serde_json::to_string(message).unwrap_or_default();
        let unread = shared.unread.fetch_add(text.len(), Ordering::SeqCst) + text.len();
        if unread > MAX_UNREAD_BYTES {
            shared.fall_behind(unread);
            return Err(Lagged);
        }
        match self.queue.try_send(Queued { text, status }) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                shared.fall_behind(unread);
                Err(Lagged)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(Lagged),
        }
    }
}

/// Why the writer stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriterEnd {
    /// Nothing more to send: the page closed, or its reader ended.
    Done,
    /// The page left too much unread (see [`Outgoing::send`]).
    Lagged,
    /// The peer answered no ping in time, or took no write for two rounds.
    Unresponsive,
    /// A newcomer took the socket's place.
    Replaced,
    /// The socket failed.
    Broken,
}

/// Writes the queued messages and the pings until the queue closes, the page falls behind, the
/// peer stops answering or the socket fails; then closes the socket (1008 with the reason, for
/// a page cut off, if it still takes it).
async fn write(
    mut sink: SplitSink<WebSocket, Message>,
    mut to_send: mpsc::Receiver<Queued>,
    backlog: Arc<Backlog>,
    ping_every: Duration,
) -> WriterEnd {
    // A peer that takes no write for as long as a ping may go unanswered is not reading.
    let write_stall = ping_every * 2;
    let mut ping = tokio::time::interval_at(Instant::now() + ping_every, ping_every);
    ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let end = loop {
        let message = tokio::select! {
            biased;
            () = backlog.lagged() => break WriterEnd::Lagged,
            () = backlog.replaced() => break WriterEnd::Replaced,
            _ = ping.tick() => {
                if backlog.awaiting_pong.swap(true, Ordering::SeqCst) {
                    break WriterEnd::Unresponsive;
                }
                Message::Ping(Bytes::new())
            }
            queued = to_send.recv() => match queued {
                Some(queued) => {
                    backlog.taken(&queued);
                    Message::Text(queued.text.into())
                }
                None => break WriterEnd::Done,
            },
        };
        // A page that stopped reading leaves this send waiting for ever: falling behind (the
        // queue filled meanwhile) or the stall ends it.
        tokio::select! {
            sent = tokio::time::timeout(write_stall, sink.send(message)) => match sent {
                Ok(Ok(())) => {}
                Ok(Err(_)) => break WriterEnd::Broken,
                Err(_) => break WriterEnd::Unresponsive,
            },
            () = backlog.lagged() => break WriterEnd::Lagged,
        }
    };
    let (code, reason) = match end {
        WriterEnd::Lagged => (close_code::POLICY, "lagged"),
        WriterEnd::Unresponsive => {
            tracing::debug!("event socket closed: the peer stopped answering");
            (close_code::POLICY, "unresponsive")
        }
        // Try again later: the page reopens its socket when it next needs one.
        WriterEnd::Replaced => (close_code::AGAIN, "replaced"),
        WriterEnd::Done | WriterEnd::Broken => (close_code::NORMAL, ""),
    };
    if end != WriterEnd::Broken {
        let close = sink.send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })));
        let _ = tokio::time::timeout(CLOSE_WAIT, close).await;
    }
    end
}

/// Opens the socket if it gets a place (see [`EventSockets::open`]), else answers 503
/// `too_many_event_sockets`. `connection` is there when the server's own listener serves the
/// request.
pub async fn upgrade(
    State(playground): State<Playground>,
    State(sockets): State<Arc<EventSockets>>,
    connection: Option<Extension<ConnectionControl>>,
    socket: WebSocketUpgrade,
) -> Response {
    let place = match sockets.open() {
        Ok(place) => place,
        Err(err) => {
            // Not an error of the server's, and anyone can cause many: debug.
            tracing::debug!(
                max_open = sockets.max_open(),
                "event socket refused: too many open, each with a generation going"
            );
            return err.unlogged_response();
        }
    };
    let ping_every = sockets.ping_every;
    let connection = connection.map(|Extension(connection)| connection);
    // The socket outlives the request: its generations are started on behalf of its client.
    let client = engine::requester();
    socket
        .max_message_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| {
            engine::on_behalf_of(
                client,
                serve(playground, socket, ping_every, connection, place),
            )
        })
}

/// A generation the socket started: its task, and how to ask that task to cancel it.
struct Generation {
    task: JoinHandle<()>,
    cancel: Option<oneshot::Sender<()>>,
}

/// A generation's task has sent its last message.
struct Ended {
    id: u32,
}

/// Serves one socket; `place` is its place among the open sockets, given back when it ends.
#[tracing::instrument(name = "event_socket", skip_all)]
async fn serve(
    playground: Playground,
    socket: WebSocket,
    ping_every: Duration,
    connection: Option<ConnectionControl>,
    mut place: Place,
) {
    let (sink, mut incoming) = socket.split();
    let (outgoing, to_send, backlog) = Outgoing::new();
    let mut writer = tokio::spawn(write(sink, to_send, backlog.clone(), ping_every));
    let mut writer_end = None;
    let (ended_tx, mut ended) = mpsc::unbounded_channel::<Ended>();
    let mut generations: HashMap<u32, Generation> = HashMap::new();
    // When the generation asked for last has started (or given up): the next one starts after
    // it, so that a page's runs queue in the order it sent them.
    let mut last_start: Option<oneshot::Receiver<()>> = None;
    let mut status: Option<Interval> = None;
    loop {
        tokio::select! {
            () = backlog.lagged() => break,
            Ok(()) = &mut place.replaced => {
                backlog.replaced.send_replace(true);
                break;
            }
            // The writer gave up on the peer (unresponsive, or the socket failed): so does the
            // reader.
            end = &mut writer => {
                writer_end = Some(end.unwrap_or(WriterEnd::Broken));
                break;
            }
            message = incoming.next() => {
                let text = match message {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Binary(_))) => {
                        refuse(&outgoing, "messages are JSON text");
                        continue;
                    }
                    Some(Ok(Message::Pong(_))) => {
                        backlog.awaiting_pong.store(false, Ordering::SeqCst);
                        continue;
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(_)) | None => break,
                };
                match serde_json::from_str::<StreamRequest>(text.as_str()) {
                    Ok(StreamRequest::Generate { id, request }) => {
                        let refusal = if generations.contains_key(&id) {
                            Some(format!("generation {id} is already going"))
                        } else if generations.len() >= MAX_STREAM_RUNS {
                            Some(format!(
                                "at most {MAX_STREAM_RUNS} generations go at once on one stream"
                            ))
                        } else {
                            None
                        };
                        match refusal {
                            Some(message) => {
                                let error = AppError::invalid_parameter(message).body();
                                let _ = outgoing.send(&StreamMessage::Refused { id, error });
                            }
                            None => {
                                let (cancel, cancelled) = oneshot::channel();
                                let (started, start) = oneshot::channel();
                                let turn = StartTurn {
                                    after: last_start.replace(start),
                                    started,
                                };
                                let run = generate(
                                    playground.clone(), id, request, turn, cancelled,
                                    outgoing.clone(), ended_tx.clone(),
                                );
                                let run = engine::on_behalf_of(engine::requester(), run);
                                let task = tokio::spawn(
                                    run.instrument(tracing::info_span!("stream_run", id)),
                                );
                                generations.insert(id, Generation { task, cancel: Some(cancel) });
                                place.set_generations(generations.len());
                            }
                        }
                    }
                    Ok(StreamRequest::Cancel { id }) => {
                        // The generation's task knows whether its run started: it cancels it.
                        if let Some(cancel) = generations.get_mut(&id).and_then(|g| g.cancel.take()) {
                            let _ = cancel.send(());
                        }
                    }
                    Ok(StreamRequest::Status { every_ms: 0 }) => status = None,
                    Ok(StreamRequest::Status { every_ms }) if STATUS_EVERY_MS.contains(&every_ms) => {
                        let every = Duration::from_millis(every_ms.into());
                        let mut timer = tokio::time::interval_at(Instant::now(), every);
                        timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
                        status = Some(timer);
                    }
                    Ok(StreamRequest::Status { every_ms }) => refuse(&outgoing, format!(
                        "status updates come every {} to {} ms, or 0 for none, not {every_ms}",
                        STATUS_EVERY_MS.start(), STATUS_EVERY_MS.end()
                    )),
                    Err(err) => refuse(&outgoing, format!("not a stream request: {err}")),
                }
            }
            Some(Ended { id }) = ended.recv() => {
                generations.remove(&id);
                place.set_generations(generations.len());
            }
            _ = tick(&mut status) => {
                // One waiting is enough (see `Outgoing::send`): spare building another.
                if !backlog.status_waiting.load(Ordering::SeqCst) {
                    let info = Box::new(playground.info());
                    let _ = outgoing.send(&StreamMessage::Status { info });
                }
            }
        }
    }
    // The page is gone: its generations stop (dropping their streams cancels the runs, which
    // are still recorded).
    for generation in generations.into_values() {
        generation.task.abort();
    }
    drop(outgoing);
    let end = match writer_end {
        Some(end) => end,
        None => writer.await.unwrap_or(WriterEnd::Broken),
    };
    // A peer cut off reads nothing: what waits unsent for it (the close frame too) is dropped
    // with a reset rather than kept by the kernel.
    if matches!(end, WriterEnd::Lagged | WriterEnd::Unresponsive) {
        if let Some(connection) = &connection {
            connection.reset_on_close();
        }
    }
}

async fn tick(status: &mut Option<Interval>) {
    match status {
        Some(timer) => {
            timer.tick().await;
        }
        None => std::future::pending().await,
    }
}

fn refuse(outgoing: &Outgoing, message: impl Into<String>) {
    let error = AppError::invalid_parameter(message).body();
    let _ = outgoing.send(&StreamMessage::Error { error });
}

/// A generation's place in its page's order: it starts once the one asked for before it has.
struct StartTurn {
    /// Sent (or dropped) when the previous generation has started or given up.
    after: Option<oneshot::Receiver<()>>,
    /// Sent when this one has.
    started: oneshot::Sender<()>,
}

/// Starts the generation in its turn and forwards its events. A cancel before the run started
/// drops it and answers `refused` (`cancelled`); one after cancels the run by id, so that its
/// last events (the cancelled summary) still come. Every generation ends with one last message.
async fn generate(
    playground: Playground,
    id: u32,
    request: Box<PlaygroundRequest>,
    turn: StartTurn,
    mut cancelled: oneshot::Receiver<()>,
    outgoing: Outgoing,
    ended: UnboundedSender<Ended>,
) {
    let start = async {
        if let Some(previous) = turn.after {
            // Whether it started or gave up, this one's turn has come.
            let _ = previous.await;
        }
        playground.start_run(*request).await
    };
    let started = tokio::select! {
        started = start => Some(started),
        Ok(()) = &mut cancelled => None,
    };
    let _ = turn.started.send(());
    match started {
        None => {
            let error = ErrorBody::plain("cancelled", "cancelled before it started");
            let _ = outgoing.send(&StreamMessage::Refused { id, error });
        }
        Some(Err(err)) => {
            let _ = outgoing.send(&StreamMessage::Refused {
                id,
                error: err.body(),
            });
        }
        Some(Ok((run_id, events))) => {
            let mut events = std::pin::pin!(events);
            let mut cancel_pending = true;
            loop {
                tokio::select! {
                    event = events.next() => match event {
                        Some(event) => {
                            let message = StreamMessage::Run { id, event: Box::new(event) };
                            if outgoing.send(&message).is_err() {
                                break;
                            }
                        }
                        None => break,
                    },
                    Ok(()) = &mut cancelled, if cancel_pending => {
                        cancel_pending = false;
                        // Ended meanwhile: its last events are on their way.
                        let _ = playground.cancel_run(run_id);
                    }
                }
            }
        }
    }
    let _ = ended.send(Ended { id });
}
