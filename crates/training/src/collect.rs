//! Self-distillation data: the model answers the prompts greedily, many at once (batched by the
//! engine's scheduler), and returns with each token the final hidden state that produced it.

use std::collections::VecDeque;

use engine::{ChatMessage, Engine, GenerateRequest, GenerationStream, Prompt, SamplingParams};

use crate::data_file::DataWriter;
use crate::dataset::{Answer, Dataset};
use crate::TrainError;

/// How far collection has got.
#[derive(Debug, Clone, Copy)]
pub struct CollectEvent {
    pub done: usize,
    pub total: usize,
    pub tokens: usize,
}

/// Answers `prompts` with `in_flight` requests submitted at once, adding each answer to a
/// dataset for `heads` heads (and to `save`, if given).
pub fn collect(
    engine: &Engine,
    prompts: &[String],
    max_tokens: u32,
    heads: usize,
    in_flight: usize,
    mut save: Option<&mut DataWriter>,
    report: &mut dyn FnMut(CollectEvent),
) -> Result<Dataset, TrainError> {
    let submit = |prompt: &str| -> Result<GenerationStream, TrainError> {
        let chat = Prompt::Chat(vec![ChatMessage::new("user", prompt)]);
        Ok(engine.generate(
            GenerateRequest::new(chat, max_tokens)
                .with_sampling(SamplingParams::greedy())
                .with_hidden_states(),
        )?)
    };
    let mut data = Dataset::new(engine.info().n_embd as usize, heads);
    let mut pending = VecDeque::new();
    let mut next = prompts.iter();
    let (mut done, mut tokens) = (0, 0);
    loop {
        while pending.len() < in_flight.max(1) {
            match next.next() {
                Some(prompt) => pending.push_back(submit(prompt)?),
                None => break,
            }
        }
        let Some(stream) = pending.pop_front() else {
            break;
        };
        let summary = stream.wait()?;
        let answer = Answer {
            tokens: summary.token_ids,
            states: summary.hidden_states,
        };
        if let Some(writer) = save.as_deref_mut() {
            writer.push(&answer)?;
        }
        data.push_answer(&answer);
        done += 1;
        tokens += answer.tokens.len();
        report(CollectEvent {
            done,
            total: prompts.len(),
            tokens,
        });
    }
    Ok(data)
}
