//! The sampling a chat starts with for a model: what its publisher recommends in the GGUF
//! (`general.sampling.*`, the keys llama.cpp reads), else the playground's chat default, which
//! keeps small models from looping (greedy decoding and llama.cpp's penalty-free defaults make
//! the default model repeat one phrase until its token limit).

use serde::Serialize;
use ts_rs::TS;

use crate::request::SamplingParams;

/// Sampling for chats on this model, and where each value came from.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct SamplingDefaults {
    pub params: SamplingParams,
    /// The GGUF keys the values came from; empty when the model recommends nothing.
    pub from_model: Vec<String>,
}

impl SamplingParams {
    /// The playground's chat default where the model recommends nothing: temperature 0.7,
    /// top-p 0.9 and a repeat penalty of 1.1 over the last 64 tokens (top-k 40, min-p 0.05).
    pub fn chat_default() -> Self {
        Self {
            temperature: 0.7,
            top_p: 0.9,
            repeat_penalty: 1.1,
            ..Self::default()
        }
    }
}

impl SamplingDefaults {
    /// From the model's metadata, looked up by key (values as text, as llama.cpp formats them).
    /// A value that does not parse or is out of range is ignored.
    pub fn from_metadata(value_of: impl Fn(&str) -> Option<String>) -> Self {
        let mut params = SamplingParams::chat_default();
        let mut from_model = Vec::new();
        let mut read = |key: &str, apply: &mut dyn FnMut(&str) -> bool| {
            let full = format!("general.sampling.{key}");
            if let Some(text) = value_of(&full) {
                if apply(text.trim()) {
                    from_model.push(full);
                }
            }
        };
        let float = |text: &str| text.parse::<f32>().ok().filter(|v| v.is_finite());
        read("temp", &mut |t| set(&mut params.temperature, float(t)));
        read("top_k", &mut |t| set(&mut params.top_k, t.parse().ok()));
        read("top_p", &mut |t| set(&mut params.top_p, float(t)));
        read("min_p", &mut |t| set(&mut params.min_p, float(t)));
        read("penalty_repeat", &mut |t| {
            set(&mut params.repeat_penalty, float(t))
        });
        read("penalty_last_n", &mut |t| {
            set(&mut params.repeat_last_n, t.parse().ok())
        });
        // A recommendation the engine would refuse is no default.
        if params.validate().is_err() {
            return Self {
                params: SamplingParams::chat_default(),
                from_model: Vec::new(),
            };
        }
        Self { params, from_model }
    }
}

fn set<T>(slot: &mut T, value: Option<T>) -> bool {
    value.map(|v| *slot = v).is_some()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn metadata(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |key| map.get(key).cloned()
    }

    #[test]
    fn without_recommendations_chats_get_the_playground_default() {
        let defaults = SamplingDefaults::from_metadata(metadata(&[]));
        assert_eq!(defaults.params, SamplingParams::chat_default());
        assert_eq!(defaults.params.temperature, 0.7);
        assert_eq!(defaults.params.top_p, 0.9);
        assert_eq!(defaults.params.repeat_penalty, 1.1);
        assert!(defaults.from_model.is_empty());
    }

    #[test]
    fn the_models_recommendations_win_value_by_value() {
        let defaults = SamplingDefaults::from_metadata(metadata(&[
            ("general.sampling.temp", "0.600000"),
            ("general.sampling.top_k", "20"),
            ("general.sampling.top_p", "banana"),
        ]));
        assert_eq!(defaults.params.temperature, 0.6);
        assert_eq!(defaults.params.top_k, 20);
        assert_eq!(defaults.params.top_p, 0.9, "unparseable values are ignored");
        assert_eq!(
            defaults.from_model,
            ["general.sampling.temp", "general.sampling.top_k"]
        );
    }

    #[test]
    fn recommendations_out_of_range_are_no_default() {
        let defaults =
            SamplingDefaults::from_metadata(metadata(&[("general.sampling.temp", "-3")]));
        assert_eq!(defaults.params, SamplingParams::chat_default());
        assert!(defaults.from_model.is_empty());
    }
}
