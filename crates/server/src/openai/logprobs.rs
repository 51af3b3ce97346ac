//! The engine's per-token log-probabilities in OpenAI's two shapes: chat's list of entries, and
//! text completions' parallel lists.

use std::collections::BTreeMap;

use engine::{PromptLogprobs, TokenChoice, TokenLogprobs};
use openai_wire::{ChatLogprobs, ChatTokenLogprob, TextLogprobs, TopLogprob};

pub fn chat(tokens: &[TokenLogprobs]) -> ChatLogprobs {
    ChatLogprobs {
        content: tokens
            .iter()
            .map(|t| ChatTokenLogprob {
                token: t.chosen.text.clone(),
                logprob: t.chosen.logprob,
                bytes: t.chosen.bytes.clone(),
                top_logprobs: t.top.iter().map(top).collect(),
            })
            .collect(),
    }
}

fn top(choice: &TokenChoice) -> TopLogprob {
    TopLogprob {
        token: choice.text.clone(),
        logprob: choice.logprob,
        bytes: choice.bytes.clone(),
    }
}

/// `offset` is where the first token starts in the choice's text (in characters), for chunks
/// after the first.
pub fn text(tokens: &[TokenLogprobs], offset: usize) -> TextLogprobs {
    let mut out = TextLogprobs::default();
    let mut at = offset;
    for t in tokens {
        out.tokens.push(t.chosen.text.clone());
        out.token_logprobs.push(Some(t.chosen.logprob));
        // Two tokens with one text (a character split over tokens) keep the likelier.
        let mut best = BTreeMap::new();
        for choice in &t.top {
            best.entry(choice.text.clone()).or_insert(choice.logprob);
        }
        out.top_logprobs.push(Some(best));
        out.text_offset.push(at);
        at += t.chosen.text.chars().count();
    }
    out
}

/// An echoed prompt's lists: its first token has no figures, as nothing predicts it.
pub fn echoed(prompt: &PromptLogprobs) -> TextLogprobs {
    let first = prompt.first_token.chars().count();
    let mut out = TextLogprobs {
        tokens: vec![prompt.first_token.clone()],
        token_logprobs: vec![None],
        top_logprobs: vec![None],
        text_offset: vec![0],
    };
    append(&mut out, text(&prompt.rest, first));
    out
}

/// `more`'s entries after `lists`' own.
pub fn append(lists: &mut TextLogprobs, more: TextLogprobs) {
    lists.tokens.extend(more.tokens);
    lists.token_logprobs.extend(more.token_logprobs);
    lists.top_logprobs.extend(more.top_logprobs);
    lists.text_offset.extend(more.text_offset);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(token_id: i32, text: &str, logprob: f32, rank: usize) -> TokenChoice {
        TokenChoice {
            token_id,
            text: text.into(),
            bytes: text.as_bytes().to_vec(),
            logprob,
            rank,
        }
    }

    fn tokens() -> Vec<TokenLogprobs> {
        vec![
            TokenLogprobs {
                chosen: choice(5, "Hi", -0.5, 1),
                top: vec![choice(5, "Hi", -0.5, 1), choice(6, "Yo", -1.5, 2)],
            },
            TokenLogprobs {
                chosen: choice(7, " there", -2.0, 2),
                top: vec![choice(8, "!", -0.25, 1)],
            },
        ]
    }

    #[test]
    fn chat_entries_carry_text_bytes_and_alternatives() {
        let got = serde_json::to_value(chat(&tokens())).unwrap();
        assert_eq!(
            got,
            serde_json::json!({"content": [
                {"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": [
                    {"token": "Hi", "logprob": -0.5, "bytes": [72, 105]},
                    {"token": "Yo", "logprob": -1.5, "bytes": [89, 111]}]},
                {"token": " there", "logprob": -2.0, "bytes": [32, 116, 104, 101, 114, 101],
                 "top_logprobs": [{"token": "!", "logprob": -0.25, "bytes": [33]}]}
            ]})
        );
    }

    #[test]
    fn an_echoed_prompt_starts_with_a_token_nothing_predicts() {
        let prompt = PromptLogprobs {
            first_token: "Só".into(),
            rest: tokens(),
        };
        let got = echoed(&prompt);
        assert_eq!(got.tokens, vec!["Só", "Hi", " there"]);
        assert_eq!(got.token_logprobs, vec![None, Some(-0.5), Some(-2.0)]);
        assert_eq!(got.top_logprobs[0], None);
        assert_eq!(got.text_offset, vec![0, 2, 4]);
    }

    #[test]
    fn text_lists_run_in_parallel_with_offsets_in_characters() {
        let got = text(&tokens(), 3);
        assert_eq!(got.tokens, vec!["Hi", " there"]);
        assert_eq!(got.token_logprobs, vec![Some(-0.5), Some(-2.0)]);
        assert_eq!(got.text_offset, vec![3, 5]);
        assert_eq!(
            got.top_logprobs[1],
            Some(BTreeMap::from([("!".to_owned(), -0.25)]))
        );
    }
}
