//! What the scheduler needs of the model beyond a step: prompts rendered, embedding calls read a
//! chunk at a time in contexts of their own, and diagnostics run on the whole context.

use std::time::Instant;

use crate::diagnostics::Diagnostic;
use crate::error::EngineError;
use crate::llama::embeddings::{EmbeddingJob, RunningEmbedding};
use crate::llama::prompt::RenderedPrompt;
use crate::llama::runtime::LlamaRuntime;
use crate::medusa::heads::MedusaHeads;
use crate::request::Prompt;
use crate::step::decoder::Decoder;

pub(crate) trait SchedulerRuntime<'m>: Decoder {
    /// The prompt as the model reads it, and its length in tokens.
    fn render_prompt(&self, prompt: &Prompt) -> Result<RenderedPrompt, EngineError>;

    /// Starts reading an embedding call.
    fn start_embedding(
        &self,
        job: EmbeddingJob,
    ) -> Result<Box<dyn EmbeddingRead + 'm>, EngineError>;

    /// Runs a diagnostic, which answers its own caller; it may clear every cell.
    fn run_diagnostic(&mut self, diagnostic: Diagnostic, heads: Option<&MedusaHeads>);
}

/// An embedding call being read, a chunk at a time between steps.
pub(crate) trait EmbeddingRead {
    /// Whether the caller has gone away.
    fn is_abandoned(&self) -> bool;

    fn queued_at(&self) -> Instant;

    /// Reads the next chunk; whether every text is now read, and the tokens the chunk read.
    fn read_chunk(&mut self) -> Result<(bool, usize), EngineError>;

    /// Answers the caller with every vector, or with `failure`.
    fn finish(self: Box<Self>, failure: Option<EngineError>);
}

impl<'m> SchedulerRuntime<'m> for LlamaRuntime<'m> {
    fn render_prompt(&self, prompt: &Prompt) -> Result<RenderedPrompt, EngineError> {
        LlamaRuntime::render_prompt(self, prompt)
    }

    fn start_embedding(
        &self,
        job: EmbeddingJob,
    ) -> Result<Box<dyn EmbeddingRead + 'm>, EngineError> {
        let running = RunningEmbedding::start(self.model(), self.threads(), self.is_exact(), job)?;
        Ok(Box::new(running))
    }

    fn run_diagnostic(&mut self, diagnostic: Diagnostic, heads: Option<&MedusaHeads>) {
        diagnostic.run(self, heads);
    }
}

impl EmbeddingRead for RunningEmbedding<'_> {
    fn is_abandoned(&self) -> bool {
        RunningEmbedding::is_abandoned(self)
    }

    fn queued_at(&self) -> Instant {
        RunningEmbedding::queued_at(self)
    }

    fn read_chunk(&mut self) -> Result<(bool, usize), EngineError> {
        RunningEmbedding::read_chunk(self)
    }

    fn finish(self: Box<Self>, failure: Option<EngineError>) {
        RunningEmbedding::finish(*self, failure);
    }
}
