//! Where generated tokens go: end-of-generation and length checks, UTF-8-safe text, stop
//! strings, and the `Text` events. Every decoding mode emits through this one path.

pub(crate) mod stop;
pub(crate) mod utf8;

use tokio::sync::mpsc::UnboundedSender;

use crate::events::{GenerationEvent, StopReason};
use crate::output::stop::{StopMatcher, StopScan};
use crate::output::utf8::Utf8Stream;
use crate::sampling::token_choice::TokenLogprobs;
use crate::speculative::tree::TokenSource;
use crate::token::TokenId;
use crate::token::Vocabulary;

pub(crate) struct OutputSink<'a> {
    vocabulary: &'a dyn Vocabulary,
    events: UnboundedSender<GenerationEvent>,
    max_tokens: usize,
    utf8: Utf8Stream,
    stops: StopMatcher,
    piece: Vec<u8>,
    pub(crate) text: String,
    pub(crate) generated: Vec<TokenId>,
    /// Per generated token, when the request asked for log-probabilities.
    pub(crate) logprobs: Vec<TokenLogprobs>,
    /// Prompt and generated tokens: what the repetition penalty and drafters look at.
    pub(crate) history: Vec<TokenId>,
}

impl<'a> OutputSink<'a> {
    pub(crate) fn new(
        vocabulary: &'a dyn Vocabulary,
        events: UnboundedSender<GenerationEvent>,
        prompt: &[TokenId],
        max_tokens: usize,
        stop: &[String],
    ) -> Self {
        Self {
            vocabulary,
            events,
            max_tokens,
            utf8: Utf8Stream::new(),
            stops: StopMatcher::new(stop),
            piece: Vec::with_capacity(32),
            text: String::new(),
            generated: Vec::new(),
            logprobs: Vec::new(),
            history: prompt.to_vec(),
        }
    }

    pub(crate) fn send(&self, event: GenerationEvent) {
        // A closed channel means the caller went away; the scheduler notices and cancels.
        let _ = self.events.send(event);
    }

    /// True when nobody listens any more.
    pub(crate) fn is_closed(&self) -> bool {
        self.events.is_closed()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.max_tokens.saturating_sub(self.generated.len())
    }

    /// A token's own text, for showing it alone (see [`token_text`]).
    pub(crate) fn token_text(&self, token: TokenId) -> String {
        token_text(self.vocabulary, token)
    }

    /// A token's bytes, special tokens by name (see [`token_bytes`]).
    pub(crate) fn token_bytes(&self, token: TokenId) -> Vec<u8> {
        token_bytes(self.vocabulary, token)
    }

    /// Emits one token, with its log-probabilities when the request asked for them. Returns why
    /// the run ends, if this token ends it.
    pub(crate) fn push(
        &mut self,
        token: TokenId,
        source: TokenSource,
        logprobs: Option<TokenLogprobs>,
    ) -> Option<StopReason> {
        if self.vocabulary.ends_generation(token) {
            return Some(StopReason::EndOfGeneration);
        }
        self.generated.push(token);
        self.history.push(token);
        self.piece.clear();
        self.vocabulary.piece_into(token, false, &mut self.piece);
        let chunk = self.utf8.push(&self.piece);
        let logprobs: Vec<TokenLogprobs> = logprobs.into_iter().collect();
        self.logprobs.extend(logprobs.iter().cloned());
        match self.stops.push(&chunk) {
            StopScan::Continue(chunk) => self.emit(chunk, vec![token], vec![source], logprobs),
            StopScan::Stopped { text, .. } => {
                self.emit(text, vec![token], vec![source], logprobs);
                return Some(StopReason::StopString);
            }
        }
        (self.generated.len() >= self.max_tokens).then_some(StopReason::MaxTokens)
    }

    /// Releases text still held back (an unfinished character, a possible stop string).
    pub(crate) fn finish(&mut self, reason: StopReason) -> StopReason {
        if reason == StopReason::StopString {
            return reason;
        }
        match self.stops.push(&self.utf8.finish()) {
            StopScan::Stopped { text, .. } => {
                self.emit(text, vec![], vec![], vec![]);
                StopReason::StopString
            }
            StopScan::Continue(chunk) => {
                let rest = chunk + &self.stops.flush();
                if !rest.is_empty() {
                    self.emit(rest, vec![], vec![], vec![]);
                }
                reason
            }
        }
    }

    fn emit(
        &mut self,
        text: String,
        token_ids: Vec<TokenId>,
        sources: Vec<TokenSource>,
        logprobs: Vec<TokenLogprobs>,
    ) {
        self.text.push_str(&text);
        self.send(GenerationEvent::Text {
            text,
            token_ids,
            sources,
            logprobs,
        });
    }
}

/// A token's own text, for showing it alone: special tokens by name, a piece of a character
/// spanning several tokens as replacement characters.
pub(crate) fn token_text(vocabulary: &dyn Vocabulary, token: TokenId) -> String {
    String::from_utf8_lossy(&token_bytes(vocabulary, token)).into_owned()
}

/// A token's bytes, special tokens by name.
pub(crate) fn token_bytes(vocabulary: &dyn Vocabulary, token: TokenId) -> Vec<u8> {
    let mut piece = Vec::with_capacity(16);
    vocabulary.piece_into(token, true, &mut piece);
    piece
}
