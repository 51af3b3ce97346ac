//! `/api/events`: a page's one WebSocket for all its generations and status updates (see
//! [`playground::event_socket`]). One task owns the socket's state: the generations it started
//! and the status timer. Each generation forwards its events from a task of its own; closing the
//! socket stops them, and their runs are recorded as cancelled.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use playground::event_socket::{StreamMessage, StreamRequest, MAX_STREAM_RUNS, STATUS_EVERY_MS};
use playground::{AppError, ErrorBody, Playground, PlaygroundRequest};
use tokio::sync::mpsc::{self, UnboundedSender};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tracing::Instrument;

/// Largest message a page may send (a long conversation fits).
const MAX_MESSAGE_BYTES: usize = 8 << 20;

pub async fn upgrade(State(playground): State<Playground>, socket: WebSocketUpgrade) -> Response {
    socket
        .max_message_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| serve(playground, socket))
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

#[tracing::instrument(name = "event_socket", skip_all)]
async fn serve(playground: Playground, socket: WebSocket) {
    let (mut sink, mut incoming) = socket.split();
    let (outgoing, mut to_send) = mpsc::unbounded_channel::<StreamMessage>();
    let writer = tokio::spawn(async move {
        while let Some(message) = to_send.recv().await {
            let text = serde_json::to_string(&message).unwrap_or_default();
            if sink.send(Message::Text(text.into())).await.is_err() {
                break;
            }
        }
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: axum::extract::ws::close_code::NORMAL,
                reason: "".into(),
            })))
            .await;
    });
    let (ended_tx, mut ended) = mpsc::unbounded_channel::<Ended>();
    let mut generations: HashMap<u32, Generation> = HashMap::new();
    let mut status: Option<Interval> = None;
    loop {
        tokio::select! {
            message = incoming.next() => {
                let text = match message {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Binary(_))) => {
                        refuse(&outgoing, "messages are JSON text");
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
                                let _ = outgoing.send(StreamMessage::Refused { id, error });
                            }
                            None => {
                                let (cancel, cancelled) = oneshot::channel();
                                let run = generate(
                                    playground.clone(), id, request, cancelled,
                                    outgoing.clone(), ended_tx.clone(),
                                );
                                let task = tokio::spawn(
                                    run.instrument(tracing::info_span!("stream_run", id)),
                                );
                                generations.insert(id, Generation { task, cancel: Some(cancel) });
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
            }
            _ = tick(&mut status) => {
                let info = Box::new(playground.info());
                let _ = outgoing.send(StreamMessage::Status { info });
            }
        }
    }
    // The page is gone: its generations stop (dropping their streams cancels the runs, which
    // are still recorded).
    for generation in generations.into_values() {
        generation.task.abort();
    }
    drop(outgoing);
    let _ = writer.await;
}

async fn tick(status: &mut Option<Interval>) {
    match status {
        Some(timer) => {
            timer.tick().await;
        }
        None => std::future::pending().await,
    }
}

fn refuse(outgoing: &UnboundedSender<StreamMessage>, message: impl Into<String>) {
    let error = AppError::invalid_parameter(message).body();
    let _ = outgoing.send(StreamMessage::Error { error });
}

/// Starts the generation and forwards its events. A cancel before the run started drops it and
/// answers `refused` (`cancelled`); one after cancels the run by id, so that its last events
/// (the cancelled summary) still come. Every generation ends with one last message.
async fn generate(
    playground: Playground,
    id: u32,
    request: Box<PlaygroundRequest>,
    mut cancelled: oneshot::Receiver<()>,
    outgoing: UnboundedSender<StreamMessage>,
    ended: UnboundedSender<Ended>,
) {
    let started = tokio::select! {
        started = playground.start_run(*request) => Some(started),
        Ok(()) = &mut cancelled => None,
    };
    match started {
        None => {
            let error = ErrorBody {
                code: "cancelled".into(),
                message: "cancelled before it started".into(),
            };
            let _ = outgoing.send(StreamMessage::Refused { id, error });
        }
        Some(Err(err)) => {
            let _ = outgoing.send(StreamMessage::Refused {
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
                            if outgoing.send(StreamMessage::Run { id, event }).is_err() {
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
