//! Text embeddings from the model served here.

use engine::{Embedding, EmbeddingInput};

use crate::{AppError, Playground, RunTarget};

impl Playground {
    /// Each input's embedding (a text, or token ids) by the model `model` names (none: the one
    /// served here). Remote engines' embeddings are not read.
    pub async fn embed(
        &self,
        model: Option<&str>,
        inputs: Vec<EmbeddingInput>,
    ) -> Result<Vec<Embedding>, AppError> {
        if let RunTarget::Remote { engine, .. } = self.target_named(model).await? {
            return Err(AppError::invalid_parameter(format!(
                "embeddings come from the model served here, not from the remote engine '{engine}'"
            ))
            .with_param("model"));
        }
        // The call queues on the engine; if this future is dropped (the client went away),
        // the call is dropped with it and the engine stops reading its texts.
        let call = self
            .on_engine("embedding_failed", move |engine| {
                engine.submit_embedding_inputs(inputs)
            })
            .await?;
        Ok(call.await?)
    }
}
