//! The router as one connection serves it, and the answers of a busy server.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use axum::Router;
use playground::{AppError, ErrorKind};

use super::bodies::{BodyRules, BoxError, DeadlineBody, Tracked};
use super::places::{ClientId, ConnState, ConnectionControl, InFlight};
use crate::error::ApiError;
use crate::guard::{loggable_uri, AccessPolicy};

/// The router as one connection serves it: each request is counted in flight until its answer
/// is done, its body is held to [`BodyRules`], a connection on a reserved place serves only
/// requests with priority, and the work a request starts is done on behalf of its client (see
/// [`engine::on_behalf_of`]).
#[derive(Clone)]
pub(super) struct ConnService {
    pub(super) router: Router,
    pub(super) client: ClientId,
    pub(super) state: Arc<ConnState>,
    pub(super) body_rules: BodyRules,
    pub(super) access: Arc<AccessPolicy>,
}

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
pub(super) fn busy_body() -> String {
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
