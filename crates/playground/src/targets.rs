//! Where a run runs: the model served here or a remote engine's model, and the OpenAI way of
//! naming one (`model`: the served model's name, or a remote engine's).

use crate::error::{AppError, ErrorKind};
use crate::playground::Playground;

/// Where a run runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunTarget {
    /// The model served here.
    Local,
    /// A remote engine by name, and its model (else the first it lists).
    Remote {
        engine: String,
        model: Option<String>,
    },
}

impl Playground {
    /// Where `model` says to run: the model served here when it names it (or nothing), a remote
    /// engine's first model when it names the engine; any other name is `model_not_found`,
    /// rather than an answer from another model than asked.
    pub async fn target_named(&self, model: Option<&str>) -> Result<RunTarget, AppError> {
        let Some(name) = model.map(str::trim).filter(|m| !m.is_empty()) else {
            return Ok(RunTarget::Local);
        };
        let local = self.model_info();
        if local.as_ref().is_ok_and(|info| info.name == name) {
            return Ok(RunTarget::Local);
        }
        let remotes = self.remotes().list();
        if remotes.iter().any(|remote| remote.name == name) {
            let (_, model, _) = self.remotes().target(name, None).await?;
            return Ok(RunTarget::Remote {
                engine: name.to_owned(),
                model: Some(model),
            });
        }
        // While no model is loaded, say so rather than that the name is unknown.
        Err(self.model_not_found(name, &local?.name))
    }

    /// 404 `model_not_found` for `name`, naming what is served instead: `served`, the model
    /// served here, and the remote engines.
    pub fn model_not_found(&self, name: &str, served: &str) -> AppError {
        let mut message = format!(
            "the model {name:?} does not exist here: this server serves {served:?} (see /v1/models)"
        );
        let remotes = self.remotes().list();
        if !remotes.is_empty() {
            let names: Vec<_> = remotes.iter().map(|r| format!("{:?}", r.name)).collect();
            message.push_str(&format!(", and the remote engines {}", names.join(", ")));
        }
        AppError::new(ErrorKind::NotFound, "model_not_found", message).with_param("model")
    }
}
