//! Self-distillation data: the model answers the prompts greedily, many at once (batched by the
//! engine's scheduler), and returns with each token the final hidden state that produced it.

use std::collections::VecDeque;

use half::f16;

use engine::{
    ChatMessage, Engine, GenerateRequest, GenerationEvent, GenerationStream, Prompt, RunSummary,
    SamplingParams,
};

use crate::data_file::DataWriter;
use crate::dataset::{Answer, Dataset};
use crate::stop::StopFlag;
use crate::TrainError;

/// How far collection has got.
#[derive(Debug, Clone, Copy)]
pub struct CollectEvent {
    pub done: usize,
    pub total: usize,
    pub tokens: usize,
}

/// What to collect: the prompts, and how many of them were answered before (their answers are
/// in the dataset already).
pub struct Collection<'a> {
    pub prompts: &'a [String],
    pub answered: usize,
    pub max_tokens: u32,
    /// Requests submitted at once.
    pub in_flight: usize,
}

/// Answers the prompts not answered yet, adding each answer to `data` (and to `save`, if
/// given) in prompt order. Stops with [`TrainError::Cancelled`] when `stop` is raised, keeping
/// the answers written so far.
pub fn collect(
    engine: &Engine,
    collection: &Collection<'_>,
    data: &mut Dataset,
    mut save: Option<&mut DataWriter>,
    stop: &StopFlag,
    report: &mut dyn FnMut(CollectEvent),
) -> Result<(), TrainError> {
    let submit = |prompt: &str| -> Result<GenerationStream, TrainError> {
        let chat = Prompt::Chat(vec![ChatMessage::new("user", prompt)]);
        Ok(engine.generate(
            GenerateRequest::new(chat, collection.max_tokens)
                .with_sampling(SamplingParams::greedy())
                .with_hidden_states(),
        )?)
    };
    let total = collection.prompts.len();
    let mut pending = VecDeque::new();
    let mut next = collection.prompts.iter().skip(collection.answered);
    let (mut done, mut tokens) = (collection.answered, data.answer_tokens());
    loop {
        while pending.len() < collection.in_flight.max(1) {
            match next.next() {
                Some(prompt) => pending.push_back(submit(prompt)?),
                None => break,
            }
        }
        let Some(stream) = pending.pop_front() else {
            break;
        };
        // Dropping the streams still pending cancels them.
        let summary = wait_unless_stopped(stream, stop)?.ok_or(TrainError::Cancelled)?;
        // Kept at the precision of the data file, so that training from a collection and
        // training from its file (a resumed or repeated run) see the same numbers.
        let answer = Answer {
            tokens: summary.token_ids,
            states: summary
                .hidden_states
                .into_iter()
                .map(|v| f16::from_f32(v).to_f32())
                .collect(),
        };
        if let Some(writer) = save.as_deref_mut() {
            writer.push(&answer)?;
        }
        data.push_answer(&answer);
        done += 1;
        tokens += answer.tokens.len();
        report(CollectEvent {
            done,
            total,
            tokens,
        });
    }
    Ok(())
}

/// The run's summary, or `None` once `stop` is raised (checked at every token).
fn wait_unless_stopped(
    mut stream: GenerationStream,
    stop: &StopFlag,
) -> Result<Option<RunSummary>, TrainError> {
    while !stop.is_raised() {
        match stream.blocking_next() {
            Some(GenerationEvent::Finished(summary)) => return Ok(Some(summary)),
            Some(GenerationEvent::Failed(err)) => return Err(err.into()),
            Some(_) => {}
            None => return Err(engine::EngineError::EngineStopped.into()),
        }
    }
    Ok(None)
}
