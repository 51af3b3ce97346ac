//! What the server's handlers share, and the parts of it each handler takes.

use std::sync::Arc;

use axum::extract::FromRef;
use playground::catalog::Catalog;
use playground::Playground;

use crate::event_socket_places::EventSockets;
use crate::guard::AccessPolicy;
use crate::import_turn::ImportPlace;
use crate::metrics::RequestCounts;
use crate::openai::EmbeddingTokenIds;

/// What the handlers share: the playground, and the counts of answered requests.
#[derive(Clone)]
pub struct ServerState {
    pub(crate) playground: Playground,
    pub(crate) requests: Arc<RequestCounts>,
    pub(crate) access: Arc<AccessPolicy>,
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) event_sockets: Arc<EventSockets>,
    pub(crate) imports: ImportPlace,
    pub(crate) embedding_token_ids: EmbeddingTokenIds,
}

impl FromRef<ServerState> for EmbeddingTokenIds {
    fn from_ref(state: &ServerState) -> Self {
        state.embedding_token_ids
    }
}

impl FromRef<ServerState> for ImportPlace {
    fn from_ref(state: &ServerState) -> Self {
        state.imports.clone()
    }
}

impl FromRef<ServerState> for Arc<EventSockets> {
    fn from_ref(state: &ServerState) -> Self {
        state.event_sockets.clone()
    }
}

impl FromRef<ServerState> for Arc<Catalog> {
    fn from_ref(state: &ServerState) -> Self {
        state.catalog.clone()
    }
}

impl FromRef<ServerState> for Arc<RequestCounts> {
    fn from_ref(state: &ServerState) -> Self {
        state.requests.clone()
    }
}

impl FromRef<ServerState> for Arc<AccessPolicy> {
    fn from_ref(state: &ServerState) -> Self {
        state.access.clone()
    }
}

impl FromRef<ServerState> for Playground {
    fn from_ref(state: &ServerState) -> Self {
        state.playground.clone()
    }
}
