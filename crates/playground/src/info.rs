//! What the UI shows about the backend.

use engine::medusa::heads::HeadsInfo;
use engine::{EngineMetrics, GenerationMode, ModelInfo, TreeSpec};
use serde::Serialize;
use ts_rs::TS;

use crate::draft::TreeChoice;
use crate::error::ErrorBody;
use crate::model_host::LoadingStatus;
use crate::playground::Playground;
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
    pub modes: Vec<GenerationMode>,
    pub metrics: Option<EngineMetrics>,
    pub database: String,
    pub loading: Option<LoadingStatus>,
    pub error: Option<ErrorBody>,
    /// The remote engines runs may name (`engine`), as last seen.
    pub remotes: Vec<RemoteInfo>,
}

impl Playground {
    pub fn info(&self) -> Info {
        let host = self.model_host();
        let model = host.current_if_loaded();
        let info = model.as_ref().map(|m| m.engine.info().clone());
        let has_heads = model.as_ref().is_some_and(|m| m.has_heads());
        let modes = match &model {
            Some(_) => GenerationMode::ALL
                .into_iter()
                .filter(|m| *m != GenerationMode::Medusa || has_heads)
                .collect(),
            None => Vec::new(),
        };
        Info {
            heads: info.as_ref().and_then(|i| i.heads.clone()),
            heads_path: model
                .as_ref()
                .and_then(|m| m.heads_path.as_ref())
                .map(|p| p.display().to_string()),
            tree: info.as_ref().and_then(|i| i.medusa_tree.clone()),
            default_tree: model.as_ref().and_then(|m| m.default_tree()),
            modes,
            metrics: model.as_ref().map(|m| m.engine.metrics()),
            database: self.store().path().display().to_string(),
            loading: host.loading_status(),
            error: host.last_error(),
            remotes: self.remotes().list(),
            model: info,
        }
    }
}
