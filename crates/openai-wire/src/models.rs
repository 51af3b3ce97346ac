//! `/v1/models`: the models a server offers.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelList {
    #[serde(default = "list")]
    pub object: String,
    pub data: Vec<ModelCard>,
}

fn list() -> String {
    "list".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    pub id: String,
    #[serde(default = "model")]
    pub object: String,
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub owned_by: String,
    /// `medusa serve`'s: the decoding modes its `mode` field takes for this model now. Other
    /// servers send none, which tells a client they take OpenAI's fields only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modes: Option<Vec<String>>,
}

fn model() -> String {
    "model".into()
}

impl ModelList {
    pub fn new(data: Vec<ModelCard>) -> Self {
        Self {
            object: list(),
            data,
        }
    }
}

impl ModelCard {
    pub fn new(id: impl Into<String>, created: u64, owned_by: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            object: model(),
            created,
            owned_by: owned_by.into(),
            modes: None,
        }
    }

    /// The card with the modes the server runs the model in.
    pub fn with_modes(mut self, modes: Vec<String>) -> Self {
        self.modes = Some(modes);
        self
    }
}
