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
        }
    }
}
