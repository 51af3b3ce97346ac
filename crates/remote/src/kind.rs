//! What a remote engine takes beyond OpenAI's own request fields, told by its model list
//! (`GET /v1/models`): another `medusa serve` lists the modes it runs on its model cards;
//! llama-server, vLLM and SGLang name themselves in `owned_by`; any other server is taken for a
//! plain OpenAI server, sent OpenAI's fields only and asked for normal decoding only.

use engine::{GenerateRequest, GenerationMode};
use openai_wire::ModelList;

use crate::error::RemoteError;

/// The `owned_by` of engines known to take llama.cpp's and vLLM's sampling fields (`top_k`,
/// `min_p`, `repeat_penalty`, `grammar`, `cache_prompt`, `continue_final_message`).
const EXTENDED_ENGINES: [&str; 3] = ["llamacpp", "vllm", "sglang"];

/// What a remote engine takes, hence which fields it is sent and which modes it is offered in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteKind {
    /// Another `medusa serve`: every field, the playground's own (`mode`, `tree`, `draft_length`)
    /// among them, in the modes it lists (those its loaded heads and draft model allow).
    MedusaServe { modes: Vec<GenerationMode> },
    /// llama-server, vLLM or SGLang: OpenAI's fields and the sampling fields they share; they
    /// decode as they were started, so normal decoding is all that is asked.
    Extended,
    /// Any other OpenAI-compatible server: OpenAI's fields only, normal decoding.
    OpenAi,
}

impl RemoteKind {
    /// The kind of the engine that answered `list`.
    pub fn of(list: &ModelList) -> Self {
        let advertised: Vec<&Vec<String>> =
            list.data.iter().filter_map(|m| m.modes.as_ref()).collect();
        if !advertised.is_empty() {
            // Modes a newer server names and this one does not know are left out.
            let mut modes: Vec<GenerationMode> = GenerationMode::ALL
                .into_iter()
                .filter(|m| {
                    advertised
                        .iter()
                        .any(|list| list.iter().any(|n| n == m.as_str()))
                })
                .collect();
            if !modes.contains(&GenerationMode::Normal) {
                modes.insert(0, GenerationMode::Normal);
            }
            return Self::MedusaServe { modes };
        }
        if list
            .data
            .iter()
            .any(|m| EXTENDED_ENGINES.contains(&m.owned_by.to_ascii_lowercase().as_str()))
        {
            return Self::Extended;
        }
        Self::OpenAi
    }

    /// The modes a run on this engine may ask for: normal, and what another `medusa serve` lists.
    pub fn modes(&self) -> Vec<GenerationMode> {
        match self {
            Self::MedusaServe { modes } => modes.clone(),
            Self::Extended | Self::OpenAi => vec![GenerationMode::Normal],
        }
    }

    /// Whether the playground's own fields (`mode`, `tree`, `draft_length`) are sent.
    pub fn takes_playground_fields(&self) -> bool {
        matches!(self, Self::MedusaServe { .. })
    }

    /// Whether llama.cpp's and vLLM's sampling fields are sent.
    pub fn takes_sampling_extensions(&self) -> bool {
        !matches!(self, Self::OpenAi)
    }

    /// The mode the engine `name` of this kind runs when asked for `mode`: the same when it runs
    /// it; normal for auto on an engine that cannot draft for us (auto drafts only where it pays,
    /// and there it cannot); else refused.
    pub fn resolve_mode(
        &self,
        name: &str,
        mode: GenerationMode,
    ) -> Result<GenerationMode, RemoteError> {
        let modes = self.modes();
        if modes.contains(&mode) {
            return Ok(mode);
        }
        if mode == GenerationMode::Auto && !self.takes_playground_fields() {
            return Ok(GenerationMode::Normal);
        }
        let offered: Vec<&str> = modes.iter().map(|m| m.as_str()).collect();
        Err(RemoteError::Unsupported {
            name: name.to_owned(),
            message: format!(
                "runs the modes {} only, not {}: {}",
                offered.join(", "),
                mode.as_str(),
                self.describe()
            ),
        })
    }

    /// `request` as the engine `name` of this kind can run it: auto mode, which drafts only where
    /// it pays, is normal decoding on an engine that cannot draft for us; another mode it does not
    /// run, a grammar or a continued answer it cannot take are refused rather than dropped, since
    /// the answer would not be what was asked.
    pub fn prepare(
        &self,
        name: &str,
        mut request: GenerateRequest,
    ) -> Result<GenerateRequest, RemoteError> {
        request.mode = self.resolve_mode(name, request.mode)?;
        if !self.takes_sampling_extensions() {
            let refused = if request.grammar.is_some() {
                Some("takes no grammar, so answers cannot be held to JSON or a schema")
            } else if request.continue_final_message {
                Some("cannot write on from an answer (no continue_final_message)")
            } else {
                None
            };
            if let Some(what) = refused {
                return Err(RemoteError::Unsupported {
                    name: name.to_owned(),
                    message: format!("{what}: {}", self.describe()),
                });
            }
        }
        Ok(request)
    }

    /// What it is, in a clause.
    fn describe(&self) -> &'static str {
        match self {
            Self::MedusaServe { .. } => {
                "another medusa serve, with the heads and draft model it has"
            }
            Self::Extended => "llama-server, vLLM or SGLang, which decode as they were started",
            Self::OpenAi => {
                "a plain OpenAI-compatible server (its model list names no medusa serve modes \
                 and no known engine), sent OpenAI's own fields only"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use engine::Prompt;
    use openai_wire::ModelCard;

    use super::*;

    fn list(cards: Vec<ModelCard>) -> ModelList {
        ModelList::new(cards)
    }

    #[test]
    fn the_model_list_tells_the_kind() {
        let medusa = list(vec![ModelCard::new("m", 0, "medusa-playground")
            .with_modes(vec![
                "normal".into(),
                "lookup".into(),
                "auto".into(),
                "beam".into(),
            ])]);
        assert_eq!(
            RemoteKind::of(&medusa),
            RemoteKind::MedusaServe {
                modes: vec![
                    GenerationMode::Normal,
                    GenerationMode::Lookup,
                    GenerationMode::Auto
                ]
            }
        );
        for owner in ["llamacpp", "vllm", "sglang", "VLLM"] {
            assert_eq!(
                RemoteKind::of(&list(vec![ModelCard::new("m", 0, owner)])),
                RemoteKind::Extended,
                "{owner}"
            );
        }
        for owner in ["openai", "system", "", "medusa-playground"] {
            assert_eq!(
                RemoteKind::of(&list(vec![ModelCard::new("m", 0, owner)])),
                RemoteKind::OpenAi,
                "{owner}"
            );
        }
        assert_eq!(RemoteKind::of(&list(vec![])), RemoteKind::OpenAi);
        assert_eq!(RemoteKind::OpenAi.modes(), vec![GenerationMode::Normal]);
    }

    #[test]
    fn auto_is_normal_where_the_engine_cannot_draft_and_other_modes_are_refused() {
        let request = |mode| GenerateRequest::new(Prompt::Text("Once".into()), 4).with_mode(mode);
        for kind in [RemoteKind::OpenAi, RemoteKind::Extended] {
            let prepared = kind.prepare("lab", request(GenerationMode::Auto)).unwrap();
            assert_eq!(prepared.mode, GenerationMode::Normal);
            let err = kind
                .prepare("lab", request(GenerationMode::Medusa))
                .unwrap_err();
            assert_eq!(err.code(), "unsupported_parameter");
            assert!(
                err.to_string()
                    .starts_with("remote engine 'lab' runs the modes normal only, not medusa"),
                "{err}"
            );
        }
        let medusa = RemoteKind::MedusaServe {
            modes: vec![GenerationMode::Normal, GenerationMode::Auto],
        };
        let prepared = medusa
            .prepare("lab", request(GenerationMode::Auto))
            .unwrap();
        assert_eq!(prepared.mode, GenerationMode::Auto);
        let err = medusa
            .prepare("lab", request(GenerationMode::Draft))
            .unwrap_err();
        assert!(
            err.to_string().contains("normal, auto only, not draft"),
            "{err}"
        );
        // Without auto listed (no model loaded there), auto is refused too: it would not draft.
        let bare = RemoteKind::MedusaServe {
            modes: vec![GenerationMode::Normal],
        };
        assert!(bare.prepare("lab", request(GenerationMode::Auto)).is_err());
    }

    #[test]
    fn a_plain_server_is_not_asked_for_what_it_cannot_do() {
        let mut grammar = GenerateRequest::new(Prompt::Text("Once".into()), 4);
        grammar.grammar = Some("root ::= \"a\"".into());
        let err = RemoteKind::OpenAi
            .prepare("lab", grammar.clone())
            .unwrap_err();
        assert!(err.to_string().contains("takes no grammar"), "{err}");
        RemoteKind::Extended.prepare("lab", grammar).unwrap();

        let mut continued = GenerateRequest::new(Prompt::Text("Once".into()), 4);
        continued.continue_final_message = true;
        let err = RemoteKind::OpenAi
            .prepare("lab", continued.clone())
            .unwrap_err();
        assert!(
            err.to_string().contains("cannot write on from an answer"),
            "{err}"
        );
        RemoteKind::Extended.prepare("lab", continued).unwrap();
    }
}
