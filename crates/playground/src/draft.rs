//! How much a request drafts, as clients ask for it: `tree` for Medusa and auto modes (`"auto"`,
//! a tree's name, or its rank paths) and `draft_length` for lookup, draft and eagle modes. Every API
//! takes these two fields.

use engine::{DraftPolicy, GenerationMode, TreeSpec};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::error::AppError;

/// The draft fields of a generation request.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, TS)]
#[ts(optional_fields)]
pub struct DraftFields {
    /// Medusa mode: `"auto"` (the default: as much of the tree sized for this machine as pays,
    /// or the model's default tree set in Settings), or a tree drafted in full at every step
    /// whatever it costs: `"tuned"` (the fastest tree the tuner found here), `"mc_sim_7b_63"`,
    /// `"chain-N"`, or its rank paths such as `[[0], [0, 0], [1]]`. Auto mode: a named tree is
    /// drafted in full beside lookup's whole continuation at every step.
    #[serde(default)]
    pub tree: Option<TreeChoice>,
    /// Lookup, draft and eagle modes: draft this many tokens at every step that has a guess
    /// (default: as many as pay).
    #[serde(default)]
    pub draft_length: Option<usize>,
}

/// A tree by name or by its paths. Files are not read here: a path is somebody else's input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(untagged)]
pub enum TreeChoice {
    Name(String),
    Paths(Vec<Vec<usize>>),
}

impl DraftFields {
    /// What a request in `mode` drafts: the tree applies to Medusa mode and the length to lookup
    /// mode, so that one body can serve a comparison of every mode.
    pub fn policy(&self, mode: GenerationMode) -> Result<DraftPolicy, AppError> {
        let invalid = |e: engine::speculative::tree::TreeError| {
            AppError::invalid_parameter(format!("tree: {e}"))
        };
        match mode {
            GenerationMode::Medusa | GenerationMode::Auto => match &self.tree {
                None => Ok(DraftPolicy::Auto),
                Some(TreeChoice::Name(name)) if name.trim() == "auto" => Ok(DraftPolicy::Auto),
                Some(TreeChoice::Name(name)) if name.trim() == "tuned" => Ok(DraftPolicy::Tuned),
                Some(TreeChoice::Name(name)) if TreeSpec::is_builtin_name(name.trim()) => {
                    TreeSpec::from_name_or_file(name.trim())
                        .map(DraftPolicy::Tree)
                        .map_err(invalid)
                }
                Some(TreeChoice::Name(name)) => Err(AppError::invalid_parameter(format!(
                    "tree {:?} is not auto, tuned, mc_sim_7b_63, chain-N (N from 1 to 8) or a \
                     list of rank paths such as [[0], [0, 0], [1]]",
                    name.chars().take(64).collect::<String>()
                ))),
                Some(TreeChoice::Paths(paths)) => TreeSpec::new(paths.clone())
                    .map(DraftPolicy::Tree)
                    .map_err(invalid),
            },
            GenerationMode::Lookup | GenerationMode::Draft | GenerationMode::Eagle => Ok(self
                .draft_length
                .map_or(DraftPolicy::Auto, DraftPolicy::Length)),
            GenerationMode::Normal => Ok(DraftPolicy::Auto),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(json: &str) -> DraftFields {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn trees_come_by_name_or_by_paths() {
        let medusa = GenerationMode::Medusa;
        assert_eq!(fields("{}").policy(medusa), Ok(DraftPolicy::Auto));
        assert_eq!(
            fields(r#"{"tree": "auto"}"#).policy(medusa),
            Ok(DraftPolicy::Auto)
        );
        assert_eq!(
            fields(r#"{"tree": "tuned"}"#).policy(medusa),
            Ok(DraftPolicy::Tuned)
        );
        assert_eq!(
            fields(r#"{"tree": "chain-3"}"#).policy(medusa),
            Ok(DraftPolicy::Tree(TreeSpec::chain(3)))
        );
        assert_eq!(
            fields(r#"{"tree": "mc_sim_7b_63"}"#).policy(medusa),
            Ok(DraftPolicy::Tree(TreeSpec::mc_sim_7b_63()))
        );
        assert_eq!(
            fields(r#"{"tree": [[0], [1], [0, 0]]}"#).policy(medusa),
            Ok(DraftPolicy::Tree(
                TreeSpec::new(vec![vec![0], vec![1], vec![0, 0]]).unwrap()
            ))
        );
        for bad in [
            r#"{"tree": "/etc/passwd"}"#,
            r#"{"tree": "chain-0"}"#,
            r#"{"tree": [[0, 0]]}"#,
            r#"{"tree": []}"#,
        ] {
            let err = fields(bad).policy(medusa).unwrap_err();
            assert_eq!(err.code, "invalid_parameter", "{bad}");
            assert!(err.message.starts_with("tree"), "{}", err.message);
        }
    }

    #[test]
    fn each_mode_takes_its_own_field() {
        let both = fields(r#"{"tree": "chain-2", "draft_length": 5}"#);
        assert_eq!(
            both.policy(GenerationMode::Medusa),
            Ok(DraftPolicy::Tree(TreeSpec::chain(2)))
        );
        assert_eq!(
            both.policy(GenerationMode::Lookup),
            Ok(DraftPolicy::Length(5))
        );
        assert_eq!(both.policy(GenerationMode::Normal), Ok(DraftPolicy::Auto));
    }
}
