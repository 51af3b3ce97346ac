//! Who asked for the work a task does: the server runs each request on behalf of its client's
//! address, so that the grammar checks the request starts count against that client's share
//! (see [`check_places`](super::check_places)).

use std::future::Future;
use std::net::IpAddr;

tokio::task_local! {
    static REQUESTER: IpAddr;
}

/// Runs `work` on behalf of `client` (an address, or a network, as the server counts clients);
/// with none, as it is.
pub async fn on_behalf_of<F: Future>(client: Option<IpAddr>, work: F) -> F::Output {
    match client {
        Some(client) => REQUESTER.scope(client, work).await,
        None => work.await,
    }
}

/// The client the current task works for, if the server said so.
pub fn requester() -> Option<IpAddr> {
    REQUESTER.try_with(|client| *client).ok()
}
