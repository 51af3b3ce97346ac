//! The engine thread's loop: commands from the engine's handle, generation requests handed to
//! the [`Batcher`] that steps them, embedding calls read a chunk at a time between steps, and
//! diagnostics run when nothing else is. It sees the model through [`SchedulerRuntime`], so that
//! its tests run on the toy model.

use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{mpsc as std_mpsc, Arc};

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::clock::ms_since;
use crate::diagnostics::Diagnostic;
use crate::engine_metrics::Shared;
use crate::error::EngineError;
use crate::llama::embeddings::EmbeddingJob;
use crate::llama::prompt::RenderedPrompt;
use crate::request::Prompt;
use crate::step::admission::QueuedRequest;
use crate::step::batcher::{panic_message, Batcher};
use crate::token::TokenId;

mod runtime;
#[cfg(test)]
mod tests;

pub(crate) use runtime::{EmbeddingRead, SchedulerRuntime};

pub(crate) enum Command {
    Generate(QueuedRequest),
    RenderPrompt {
        prompt: Prompt,
        reply: std_mpsc::Sender<Result<RenderedPrompt, EngineError>>,
    },
    /// Read a chunk at a time between steps, in a context of its own.
    Embed(EmbeddingJob),
    /// An earlier request's prompt and answer for lookup's memory (its token ids checked).
    Remember {
        prompt: Prompt,
        answer: Vec<TokenId>,
    },
    /// Waits until nothing is decoding.
    Diagnostic(Diagnostic),
    /// A fault for tests: the next step panics after its decode.
    PanicInNextStep,
    Shutdown,
}

pub(crate) struct Scheduler<'m, R: SchedulerRuntime<'m>> {
    batcher: Batcher<'m, R>,
    /// Diagnostics need the whole context (they clear the KV cache): run when idle.
    diagnostics: VecDeque<Diagnostic>,
    /// Embedding calls waiting, and the one being read (a chunk between two steps).
    embeddings: VecDeque<EmbeddingJob>,
    embedding: Option<Box<dyn EmbeddingRead + 'm>>,
    shared: Arc<Shared>,
}

impl<'m, R: SchedulerRuntime<'m>> Scheduler<'m, R> {
    pub(crate) fn new(batcher: Batcher<'m, R>, shared: Arc<Shared>) -> Self {
        Self {
            batcher,
            diagnostics: VecDeque::new(),
            embeddings: VecDeque::new(),
            embedding: None,
            shared,
        }
    }

    fn idle(&self) -> bool {
        self.batcher.idle()
    }

    fn embedding_work(&self) -> bool {
        self.embedding.is_some() || !self.embeddings.is_empty()
    }

    pub(crate) fn run(mut self, commands: &mut UnboundedReceiver<Command>) {
        loop {
            self.batcher.publish_costs();
            if self.idle() && !self.embedding_work() {
                while let Some(diagnostic) = self.diagnostics.pop_front() {
                    self.run_diagnostic(diagnostic);
                }
                // A diagnostic may have measured them; the loop now waits for a command.
                self.batcher.publish_costs();
                self.batcher.settle_idle();
                match commands.blocking_recv() {
                    None | Some(Command::Shutdown) => break,
                    Some(command) => self.accept(command),
                }
            }
            loop {
                match commands.try_recv() {
                    Ok(Command::Shutdown) | Err(TryRecvError::Disconnected) => {
                        self.shut_down();
                        return;
                    }
                    Ok(command) => self.accept(command),
                    Err(TryRecvError::Empty) => break,
                }
            }
            self.batcher.admit();
            if self.batcher.active() > 0 {
                self.batcher.guarded_step();
            }
            if self.embedding_work() {
                self.guarded_embedding_chunk();
            }
        }
        self.shut_down();
    }

    /// The next chunk of the embedding call being read (starting the next call if none is);
    /// a call whose caller went away ends here.
    fn guarded_embedding_chunk(&mut self) {
        if self.embedding.is_none() {
            let Some(job) = self.embeddings.pop_front() else {
                return;
            };
            self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            let started = panic::catch_unwind(AssertUnwindSafe(|| {
                self.batcher.model().start_embedding(job)
            }));
            match started {
                Ok(Ok(running)) => self.embedding = Some(running),
                Ok(Err(err)) => tracing::warn!(error = %err, "embedding call failed"),
                Err(payload) => {
                    tracing::error!(panic = %panic_message(payload.as_ref()), "embedding call panicked")
                }
            }
            self.update_embedding_metrics();
            return;
        }
        let Some(mut running) = self.embedding.take() else {
            return;
        };
        if running.is_abandoned() {
            tracing::info!("embedding call abandoned by its caller");
            self.update_embedding_metrics();
            return;
        }
        let _span =
            tracing::debug_span!("embedding_chunk", waited_ms = ms_since(running.queued_at()))
                .entered();
        match panic::catch_unwind(AssertUnwindSafe(|| running.read_chunk())) {
            Ok(Ok((done, tokens))) => {
                self.shared.count_embedding_tokens(tokens);
                if done {
                    running.finish(None);
                } else {
                    self.embedding = Some(running);
                }
            }
            Ok(Err(err)) => running.finish(Some(err)),
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                tracing::error!(panic = %message, "an embedding chunk panicked");
                running.finish(Some(EngineError::StepFailed(message)));
            }
        }
        self.update_embedding_metrics();
    }

    fn accept(&mut self, command: Command) {
        match command {
            Command::Generate(request) => self.batcher.queue(request),
            Command::RenderPrompt { prompt, reply } => {
                let _ = reply.send(self.batcher.model().render_prompt(&prompt));
            }
            Command::Embed(job) => self.embeddings.push_back(job),
            Command::Remember { prompt, answer } => {
                match self.batcher.model().prompt_tokens(&prompt, false) {
                    Ok(mut history) => {
                        history.extend(answer);
                        self.batcher.remember(&history);
                    }
                    Err(err) => tracing::debug!(error = %err, "an earlier prompt not remembered"),
                }
            }
            Command::PanicInNextStep => self.batcher.panic_in_next_step(),
            Command::Diagnostic(diagnostic) if self.idle() => self.run_diagnostic(diagnostic),
            Command::Diagnostic(diagnostic) => self.diagnostics.push_back(diagnostic),
            Command::Shutdown => {}
        }
    }

    /// Diagnostics clear the KV cache, and with it what the prompt cache kept. One that panics
    /// answers nothing (its caller, still seeing the engine run, reports the failure) and the
    /// engine starts afresh.
    fn run_diagnostic(&mut self, diagnostic: Diagnostic) {
        self.shared.queued.fetch_sub(1, Ordering::Relaxed);
        self.batcher.drop_prompt_cache();
        let ran = panic::catch_unwind(AssertUnwindSafe(|| {
            if self.batcher.take_injected_panic() {
                panic!("a fault injected into this diagnostic");
            }
            let heads = self.batcher.drafters().heads().cloned();
            self.batcher
                .model_mut()
                .run_diagnostic(diagnostic, heads.as_deref());
        }));
        // Their evaluations are not a request's.
        self.batcher.drafters().forget_work();
        if let Err(payload) = ran {
            tracing::error!(panic = %panic_message(payload.as_ref()), "a diagnostic panicked");
            self.batcher.reset_cells();
        }
    }

    fn shut_down(&mut self) {
        self.batcher.shut_down();
        if let Some(running) = self.embedding.take() {
            running.finish(Some(EngineError::EngineStopped));
        }
        for job in self.embeddings.drain(..) {
            let _ = job.reply.send(Err(EngineError::EngineStopped));
        }
    }

    fn update_embedding_metrics(&self) {
        self.shared
            .set_embedding_calls(self.embeddings.len() + usize::from(self.embedding.is_some()));
    }
}
