//! A request the engine accepted, with its draft decided: the only kind it queues.

use crate::request::draft::RequestDraft;
use crate::request::GenerateRequest;

/// A request [`crate::Engine::validate`] accepted: the only kind the engine queues, so nothing
/// downstream checks it again.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidRequest {
    request: GenerateRequest,
    draft: RequestDraft,
}

impl ValidRequest {
    pub(crate) fn accepted(request: GenerateRequest, draft: RequestDraft) -> Self {
        Self { request, draft }
    }

    pub fn get(&self) -> &GenerateRequest {
        &self.request
    }

    /// What it drafts, as decided when it was accepted.
    pub fn draft(&self) -> &RequestDraft {
        &self.draft
    }

    pub(crate) fn into_parts(self) -> (GenerateRequest, RequestDraft) {
        (self.request, self.draft)
    }
}
