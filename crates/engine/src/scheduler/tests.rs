//! The scheduler's loop on the toy model: shutdown, a panicking step, embedding calls read
//! between steps and diagnostics that wait for an idle engine, each in milliseconds.

use std::cell::RefCell;
use std::sync::atomic::AtomicBool;
use std::thread;
use std::time::Instant;

use llama_cpp_2::token::LlamaToken;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;

use super::*;
use crate::config::DEFAULT_DRAFT_CONFIDENCE;
use crate::events::{GenerationEvent, RunSummary};
use crate::llama::embeddings::Embedding;
use crate::medusa::heads::MedusaHeads;
use crate::request::draft::RequestDraft;
use crate::request::valid::ValidRequest;
use crate::request::{GenerateRequest, Prompt, SamplingParams};
use crate::step::decoder::Decoder;
use crate::step::drafter_pool::DrafterPool;
use crate::step::kv_ledger::SequenceIds;
use crate::step::toy_model::{ToyModel, ToyVocabulary};

thread_local! {
    /// The metrics of the scheduler running on this thread, for the toy embedding to read.
    static RUNNING: RefCell<Option<Arc<Shared>>> = const { RefCell::new(None) };
}

/// Steps decoded so far by the scheduler on this thread.
fn steps_so_far() -> u64 {
    RUNNING.with(|shared| shared.borrow().as_ref().map_or(0, |s| s.metrics().steps))
}

/// Reads one token a chunk, and answers with the step count at each chunk as its vector.
struct ToyEmbedding {
    job: EmbeddingJob,
    read: usize,
    steps_seen: Vec<f32>,
}

impl EmbeddingRead for ToyEmbedding {
    fn is_abandoned(&self) -> bool {
        self.job.reply.is_closed()
    }

    fn queued_at(&self) -> Instant {
        self.job.queued_at
    }

    fn read_chunk(&mut self) -> Result<(bool, usize), EngineError> {
        self.steps_seen.push(steps_so_far() as f32);
        self.read += 1;
        Ok((self.read == self.job.texts[0].len(), 1))
    }

    fn finish(self: Box<Self>, failure: Option<EngineError>) {
        let answer = match failure {
            Some(err) => Err(err),
            None => Ok(vec![Embedding {
                vector: self.steps_seen,
                tokens: self.read,
            }]),
        };
        let _ = self.job.reply.send(answer);
    }
}

impl SchedulerRuntime<'static> for ToyModel {
    /// The toy has no template: a prompt is its text.
    fn render_prompt(&self, prompt: &Prompt) -> Result<RenderedPrompt, EngineError> {
        let text = match prompt {
            Prompt::Text(text) => text.clone(),
            Prompt::Chat(messages) => messages.iter().map(|m| m.content.as_str()).collect(),
        };
        Ok(RenderedPrompt {
            token_count: self.prompt_tokens(prompt, false)?.len(),
            text,
        })
    }

    fn start_embedding(
        &self,
        job: EmbeddingJob,
    ) -> Result<Box<dyn EmbeddingRead + 'static>, EngineError> {
        Ok(Box::new(ToyEmbedding {
            job,
            read: 0,
            steps_seen: Vec::new(),
        }))
    }

    /// The toy runs no diagnostic: it answers that it has none.
    fn run_diagnostic(&mut self, diagnostic: Diagnostic, _heads: Option<&MedusaHeads>) {
        let none = || EngineError::Decode("the toy model runs no diagnostics".into());
        match diagnostic {
            Diagnostic::Baseline { reply, .. } => drop(reply.send(Err(none()))),
            Diagnostic::NextTokenChoices { reply, .. } => drop(reply.send(Err(none()))),
            Diagnostic::PromptLogprobs { reply, .. } => drop(reply.send(Err(none()))),
            Diagnostic::DecodeCosts { reply, .. } => drop(reply.send(Err(none()))),
            Diagnostic::MeasureHeads { reply, .. } => drop(reply.send(Err(none()))),
        }
    }
}

/// A scheduler on the toy model with `slots` slots, on a thread of its own, reading `commands`;
/// it ends when it is told to shut down.
fn start(slots: usize, commands: UnboundedReceiver<Command>) -> thread::JoinHandle<()> {
    start_with(slots, commands, Arc::new(Shared::default()))
}

/// [`start`], with the metrics it keeps.
fn start_with(
    slots: usize,
    mut commands: UnboundedReceiver<Command>,
    shared: Arc<Shared>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        RUNNING.with(|running| *running.borrow_mut() = Some(shared.clone()));
        let batcher = Batcher::new(
            ToyModel::new(4096, 256, 128),
            &ToyVocabulary,
            DrafterPool::new(None, None, DEFAULT_DRAFT_CONFIDENCE),
            SequenceIds {
                slots,
                cache: 0,
                n_seq_max: slots + 16,
            },
            shared.clone(),
        );
        Scheduler::new(batcher, shared).run(&mut commands);
    })
}

/// A greedy generation of `tokens` tokens after `prompt`, as the engine's handle queues it; its
/// events.
fn generate(
    commands: &UnboundedSender<Command>,
    prompt: &str,
    tokens: u32,
) -> UnboundedReceiver<GenerationEvent> {
    let request = GenerateRequest::new(Prompt::Text(prompt.into()), tokens)
        .with_sampling(SamplingParams::greedy());
    let draft = RequestDraft::resolve(&request, None, None, true, false).expect("a valid request");
    let (events, receiver) = unbounded_channel();
    let queued = QueuedRequest {
        request: Box::new(ValidRequest::accepted(request, draft)),
        grammar: None,
        events,
        cancel: Arc::new(AtomicBool::new(false)),
        queued_at: Instant::now(),
    };
    commands
        .send(Command::Generate(queued))
        .expect("the scheduler reads");
    receiver
}

/// How a request ended, waiting for it.
fn outcome(events: &mut UnboundedReceiver<GenerationEvent>) -> Result<RunSummary, EngineError> {
    loop {
        match events
            .blocking_recv()
            .expect("an end before the channel closes")
        {
            GenerationEvent::Finished(summary) => return Ok(summary),
            GenerationEvent::Failed(err) => return Err(err),
            _ => {}
        }
    }
}

#[test]
fn shutting_down_fails_every_queued_request_and_embedding_call() {
    let (commands, receiver) = unbounded_channel();
    // Everything is queued before the loop starts: it takes the generations and the embedding
    // call, then reads the shutdown before any step.
    let mut running = generate(&commands, "abcab", 24);
    let mut waiting = generate(&commands, "hello", 24);
    let embedding = embed(&commands, 4);
    commands.send(Command::Shutdown).unwrap();
    start(1, receiver).join().expect("the loop ends");
    assert!(matches!(
        outcome(&mut running),
        Err(EngineError::EngineStopped)
    ));
    assert!(matches!(
        outcome(&mut waiting),
        Err(EngineError::EngineStopped)
    ));
    assert!(matches!(
        embedding.blocking_recv(),
        Ok(Err(EngineError::EngineStopped))
    ));
}

#[test]
fn a_panicking_step_fails_its_requests_and_the_next_ones_run() {
    let (commands, receiver) = unbounded_channel();
    commands.send(Command::PanicInNextStep).unwrap();
    let mut panicked = generate(&commands, "abcab", 8);
    let scheduler = start(2, receiver);
    let failure = outcome(&mut panicked).expect_err("the step panicked");
    assert!(
        matches!(&failure, EngineError::StepFailed(message) if message.contains("injected")),
        "{failure}"
    );
    let mut next = generate(&commands, "abcab", 8);
    let summary = outcome(&mut next).expect("the engine runs on");
    assert_eq!(summary.text, ToyModel::continuation("abcab", 8));
    commands.send(Command::Shutdown).unwrap();
    scheduler.join().unwrap();
}

#[test]
fn an_embedding_call_is_read_a_chunk_between_steps() {
    let (commands, receiver) = unbounded_channel();
    let mut generation = generate(&commands, "abcab", 24);
    let embedding = embed(&commands, 3);
    let scheduler = start(1, receiver);
    let vectors = embedding.blocking_recv().unwrap().expect("read");
    // One chunk after each of the generation's first steps: neither waits for the other.
    // (The first step reads the prompt; the call starts after it and reads after the next.)
    assert_eq!(vectors[0].vector, vec![2.0, 3.0, 4.0]);
    assert_eq!(vectors[0].tokens, 3);
    let summary = outcome(&mut generation).expect("finished");
    assert_eq!(summary.text, ToyModel::continuation("abcab", 24));
    commands.send(Command::Shutdown).unwrap();
    scheduler.join().unwrap();
}

#[test]
fn a_diagnostic_waits_until_nothing_decodes() {
    let (commands, receiver) = unbounded_channel();
    let mut generation = generate(&commands, "abcab", 24);
    let (reply, answer) = std_mpsc::channel();
    commands
        .send(Command::Diagnostic(Diagnostic::Baseline {
            prompt: Prompt::Text("abc".into()),
            max_tokens: 4,
            reply,
        }))
        .unwrap();
    let scheduler = start(1, receiver);
    assert!(answer.recv().unwrap().is_err(), "the toy's answer");
    // The generation had ended before the diagnostic ran.
    let mut ended = false;
    while let Ok(event) = generation.try_recv() {
        ended |= matches!(event, GenerationEvent::Finished(_));
    }
    assert!(ended, "the diagnostic ran while the generation decoded");
    commands.send(Command::Shutdown).unwrap();
    scheduler.join().unwrap();
}

#[test]
fn a_rendered_prompt_is_answered_between_steps() {
    let (commands, receiver) = unbounded_channel();
    let (reply, rendered) = std_mpsc::channel();
    commands
        .send(Command::RenderPrompt {
            prompt: Prompt::Text("hello".into()),
            reply,
        })
        .unwrap();
    let scheduler = start(1, receiver);
    let rendered = rendered.recv().unwrap().expect("rendered");
    assert_eq!((rendered.text.as_str(), rendered.token_count), ("hello", 5));
    commands.send(Command::Shutdown).unwrap();
    scheduler.join().unwrap();
}

/// An embedding call of `tokens` tokens, one text; its answer.
fn embed(
    commands: &UnboundedSender<Command>,
    tokens: usize,
) -> oneshot::Receiver<Result<Vec<Embedding>, EngineError>> {
    let (reply, answer) = oneshot::channel();
    commands
        .send(Command::Embed(EmbeddingJob {
            texts: vec![vec![LlamaToken(1); tokens]],
            reply,
            queued_at: Instant::now(),
        }))
        .expect("the scheduler reads");
    answer
}

#[test]
fn a_dropped_embedding_call_stops_being_read() {
    let (commands, receiver) = unbounded_channel();
    drop(embed(&commands, 100));
    let answer = embed(&commands, 1);
    let shared = Arc::new(Shared::default());
    let scheduler = start_with(1, receiver, shared.clone());
    // The call behind it answers once the dropped one has been let go.
    assert_eq!(answer.blocking_recv().unwrap().expect("read")[0].tokens, 1);
    commands.send(Command::Shutdown).unwrap();
    scheduler.join().unwrap();
    let metrics = shared.metrics();
    assert_eq!(metrics.embedding_tokens, 1, "the dropped call was read");
    assert_eq!(metrics.embedding_calls, 0);
}

#[test]
fn a_diagnostic_that_panics_answers_nothing_and_the_engine_goes_on() {
    let (commands, receiver) = unbounded_channel();
    commands.send(Command::PanicInNextStep).unwrap();
    let (reply, answer) = std_mpsc::channel();
    commands
        .send(Command::Diagnostic(Diagnostic::Baseline {
            prompt: Prompt::Text("abc".into()),
            max_tokens: 4,
            reply,
        }))
        .unwrap();
    let scheduler = start(1, receiver);
    assert!(answer.recv().is_err(), "the diagnostic answered");
    let mut next = generate(&commands, "abcab", 8);
    let summary = outcome(&mut next).expect("the engine runs on");
    assert_eq!(summary.text, ToyModel::continuation("abcab", 8));
    commands.send(Command::Shutdown).unwrap();
    scheduler.join().unwrap();
}
