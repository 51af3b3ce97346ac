//! What the UI shows about the backend.

use engine::medusa::heads::HeadsInfo;
use engine::{EngineMetrics, GenerationMode, ModelInfo, TreeSpec};
use serde::Serialize;
use ts_rs::TS;

use crate::draft::TreeChoice;
use crate::error::ErrorBody;
use crate::model_host::LoadingStatus;
use crate::remotes::RemoteInfo;

/// The model (or the load in progress), heads, tree, modes, engine metrics and the database.
/// `model` is null until a first model has loaded; while another loads, the current one keeps
/// serving and `loading` says what is coming. `error` is the last load failure (the previous
/// model, if any, stays in use).
#[derive(Debug, Clone, Serialize, TS)]
pub struct Info {
    pub model: Option<ModelInfo>,
    pub heads: Option<HeadsInfo>,
    pub heads_path: Option<String>,
    /// The Medusa tree in use (paths of ranks), null without heads.
    pub tree: Option<TreeSpec>,
    /// The tree Medusa requests drafting `auto` draft in full instead, as set in Settings; null
    /// keeps `auto`.
    pub default_tree: Option<TreeChoice>,
    /// The trees a request may name for the model served now (its tree picker's choices).
    pub tree_names: Vec<String>,
    pub modes: Vec<GenerationMode>,
    pub metrics: Option<EngineMetrics>,
    pub database: String,
    pub loading: Option<LoadingStatus>,
    pub error: Option<ErrorBody>,
    /// The remote engines runs may name (`engine`), as last seen.
    pub remotes: Vec<RemoteInfo>,
}

/// Whether the server can serve: `ok` with the model's name; `loading` until a model is ready;
/// `degraded` with the reason while the history cannot be written (generations are refused
/// then, since they could not be recorded).
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Health {
    Ok { model: String },
    Loading { message: String },
    Degraded { reason: String },
}
