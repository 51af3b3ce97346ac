//! Remote engines: OpenAI-compatible servers (vLLM, SGLang, llama-server, another
//! `medusa serve`) whose models the playground runs beside its own. A remote generation is a
//! [`engine::GenerationStream`] like a local one, so the history, the counters and every adapter
//! treat both alike.

mod chunks;
mod client;
mod error;
mod kind;
mod spec;

pub use client::{RemoteEngine, RemoteListing, RemoteRequest};
pub use error::RemoteError;
pub use kind::RemoteKind;
pub use spec::{is_link_local_or_metadata, RemoteAccess, RemoteSpec};
