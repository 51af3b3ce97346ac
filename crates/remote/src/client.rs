//! Talking to one remote engine: its models (`GET /v1/models`) and streamed generations
//! (`POST /v1/chat/completions` or `/v1/completions`), read into the local engine's events.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::{
    DraftPolicy, GenerateRequest, GenerationEvent, GenerationMode, GenerationSender,
    GenerationStream, LookupMemoryUse, Prompt,
};
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use openai_wire::{CompletionRequest, ModelList, RequestMessage, StreamOptions, TreeField};
use tracing::Instrument;

use crate::chunks::{json_fault, Answer, ChunkError};
use crate::error::RemoteError;
use crate::kind::RemoteKind;
use crate::spec::{is_link_local_or_metadata, RemoteAccess, RemoteSpec};

/// A connection that does not open within this is an unreachable engine.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest silence between two pieces of an answer (a long prompt's prefill included).
const READ_TIMEOUT: Duration = Duration::from_secs(120);
/// The models list answers at once or not at all.
const MODELS_TIMEOUT: Duration = Duration::from_secs(15);
/// How often a generation waiting for the engine checks whether it was cancelled.
const CANCEL_POLL: Duration = Duration::from_millis(100);
/// Largest model list read: thousands of models fit, and a remote cannot fill the memory.
const MAX_MODELS_BYTES: usize = 4 << 20;
/// Models kept from one list, and the longest name kept.
const MAX_MODELS: usize = 1024;
const MAX_MODEL_ID: usize = 256;
/// Largest event of a generation's stream (one chunk of text is far smaller), and largest
/// stream: far beyond the longest answer a context holds.
const MAX_EVENT_BYTES: usize = 1 << 20;
const MAX_STREAM_BYTES: usize = 64 << 20;
/// Redirects followed within one origin (a proxy's `/v1` → `/v1/`); none to another.
const MAX_REDIRECTS: usize = 5;
/// Content types an error may name; any other is "another content type" (the header is the
/// remote's text).
const NAMED_CONTENT_TYPES: [&str; 8] = [
    "application/json",
    "application/problem+json",
    "application/octet-stream",
    "application/xml",
    "text/event-stream",
    "text/html",
    "text/plain",
    "text/xml",
];

/// One remote engine; cheap to clone (the HTTP client is shared).
#[derive(Clone, Debug)]
pub struct RemoteEngine {
    spec: RemoteSpec,
    access: RemoteAccess,
    client: reqwest::Client,
}

/// A generation on a remote engine: the request as the local engine would take it (see
/// [`RemoteKind::prepare`]), the remote's model that runs it, and what the engine takes.
pub struct RemoteRequest {
    pub model: String,
    pub request: GenerateRequest,
    pub kind: RemoteKind,
}

/// What an engine's model list says: its models, and what kind of engine it is.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteListing {
    pub models: Vec<String>,
    pub kind: RemoteKind,
}

impl RemoteEngine {
    /// The engine `spec`, with link-local addresses refused.
    pub fn new(spec: RemoteSpec) -> Result<Self, RemoteError> {
        Self::with_access(spec, RemoteAccess::default())
    }

    /// The engine `spec`, reached where `access` allows. The address is checked on every
    /// request, so an engine saved earlier is kept (and says why it is refused) rather than lost.
    pub fn with_access(spec: RemoteSpec, access: RemoteAccess) -> Result<Self, RemoteError> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .redirect(same_origin_redirects());
        if !access.allow_link_local {
            // Host names are checked as they resolve: a name may point anywhere.
            builder = builder.dns_resolver(Arc::new(GuardedResolver));
        }
        let client = builder
            .build()
            .map_err(|err| RemoteError::InvalidSpec(err.to_string()))?;
        Ok(Self {
            spec,
            access,
            client,
        })
    }

    pub fn spec(&self) -> &RemoteSpec {
        &self.spec
    }

    pub fn access(&self) -> RemoteAccess {
        self.access
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The models the engine serves, as it lists them (see [`RemoteEngine::listing`]).
    pub async fn models(&self) -> Result<Vec<String>, RemoteError> {
        Ok(self.listing().await?.models)
    }

    /// The engine's model list (at most [`MAX_MODELS`] models, names of at most
    /// [`MAX_MODEL_ID`] characters) and the kind of engine it tells. The list is read within
    /// [`MODELS_TIMEOUT`] and [`MAX_MODELS_BYTES`].
    #[tracing::instrument(skip(self), fields(remote = %self.spec.name), err(level = tracing::Level::WARN))]
    pub async fn listing(&self) -> Result<RemoteListing, RemoteError> {
        self.spec.check_access(self.access)?;
        let response = self
            .authorized(self.client.get(self.endpoint("/v1/models")))
            // The whole answer, body included, within this.
            .timeout(MODELS_TIMEOUT)
            .send()
            .await
            .map_err(|err| self.transport_error(&err, MODELS_TIMEOUT))?;
        let response = self.checked(response)?;
        let body = self
            .read_capped(response, MAX_MODELS_BYTES, "a model list")
            .await?;
        let list: ModelList =
            serde_json::from_slice(&body).map_err(|err| RemoteError::Malformed {
                name: self.spec.name.clone(),
                message: format!("the model list {}", json_fault(&err)),
            })?;
        let listed = list.data.len();
        let kind = RemoteKind::of(&list);
        let models: Vec<String> = list
            .data
            .into_iter()
            .map(|m| m.id)
            .filter(|id| {
                !id.is_empty()
                    && id.chars().count() <= MAX_MODEL_ID
                    && !id.chars().any(char::is_control)
            })
            .take(MAX_MODELS)
            .collect();
        if models.len() < listed {
            tracing::warn!(
                listed,
                kept = models.len(),
                "some of the remote's model names were too many, too long or not one line"
            );
        }
        Ok(RemoteListing { models, kind })
    }

    /// Starts a generation in the background; its events arrive as a local run's would. It must
    /// be called within a tokio runtime.
    pub fn generate(&self, request: RemoteRequest) -> GenerationStream {
        let (sender, stream) = GenerationStream::channel();
        let engine = self.clone();
        let span = tracing::info_span!("remote_generation", remote = %self.spec.name, model = %request.model);
        tokio::spawn(async move { engine.run(request, sender).await }.instrument(span));
        stream
    }

    async fn run(self, request: RemoteRequest, sender: GenerationSender) {
        let started_at = Instant::now();
        let mut answer = Answer::new(started_at);
        let outcome = self.stream(&request, &sender, &mut answer).await;
        let event = match outcome {
            Ok(cancelled) => GenerationEvent::Finished(answer.summary(&request.request, cancelled)),
            Err(err) => {
                tracing::warn!(error = %err, "remote generation failed");
                GenerationEvent::Failed(err.into())
            }
        };
        sender.send(event);
    }

    /// Sends the request and passes the answer's text on; whether it was cancelled.
    async fn stream(
        &self,
        request: &RemoteRequest,
        sender: &GenerationSender,
        answer: &mut Answer,
    ) -> Result<bool, RemoteError> {
        self.spec.check_access(self.access)?;
        let (path, body) = request_body(request);
        let response = self
            .authorized(self.client.post(self.endpoint(path)))
            .json(&body)
            .send()
            .await
            .map_err(|err| self.transport_error(&err, READ_TIMEOUT))?;
        let response = self.checked(response)?;
        // The prompt's size is known only at the end (`usage`).
        if !sender.send(GenerationEvent::Started { prompt_tokens: 0 }) {
            return Ok(true);
        }
        // The event parser buffers an event until it ends: the guard bounds each event and the
        // whole stream, so a remote cannot fill the memory.
        let mut guard = StreamGuard::default();
        let mut events = response
            .bytes_stream()
            .map(move |chunk| {
                let chunk = chunk.map_err(StreamFault::Transport)?;
                guard.admit(&chunk)?;
                Ok::<_, StreamFault>(chunk)
            })
            .eventsource();
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                () = tokio::time::sleep(CANCEL_POLL) => {
                    if sender.is_cancelled() {
                        // Dropping the response closes the connection, which stops the engine.
                        return Ok(true);
                    }
                    continue;
                }
            };
            let Some(event) = event else {
                return Err(self.malformed("the stream ended before [DONE]".into()));
            };
            let event = event.map_err(|err| match err {
                eventsource_stream::EventStreamError::Transport(StreamFault::Transport(err)) => {
                    self.transport_error(&err, READ_TIMEOUT)
                }
                eventsource_stream::EventStreamError::Transport(StreamFault::EventTooLarge) => {
                    self.too_large("one event of a stream", MAX_EVENT_BYTES)
                }
                eventsource_stream::EventStreamError::Transport(StreamFault::StreamTooLarge) => {
                    self.too_large("a generation's stream", MAX_STREAM_BYTES)
                }
                // The parser's own messages quote the stream.
                eventsource_stream::EventStreamError::Utf8(_) => {
                    self.malformed("the stream is not UTF-8 text".into())
                }
                eventsource_stream::EventStreamError::Parser(_) => {
                    self.malformed("the stream is not a server-sent event stream".into())
                }
            })?;
            if event.data.trim() == "[DONE]" {
                return Ok(false);
            }
            let text = answer.read(&event.data).map_err(|err| match err {
                ChunkError::Malformed(message) => self.malformed(message),
                ChunkError::Reported(detail) => RemoteError::Reported {
                    name: self.spec.name.clone(),
                    detail,
                },
            })?;
            if let Some(text) = text {
                let text_event = GenerationEvent::Text {
                    text,
                    token_ids: Vec::new(),
                    sources: Vec::new(),
                    logprobs: Vec::new(),
                };
                if !sender.send(text_event) || sender.is_cancelled() {
                    return Ok(true);
                }
            }
        }
    }

    fn endpoint(&self, path: &str) -> String {
        format!("{}{path}", self.spec.url)
    }

    fn authorized(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.spec.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    /// The response when it succeeded; else the engine's error, told by its status and content
    /// type only: its body and headers are the remote's words, which may echo the key.
    fn checked(&self, response: reqwest::Response) -> Result<reqwest::Response, RemoteError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let content = content_kind(&response);
        let name = self.spec.name.clone();
        let code = status.as_u16();
        Err(match code {
            401 | 403 => RemoteError::Unauthorized {
                name,
                status: code,
                content,
            },
            _ => RemoteError::Refused {
                name,
                status: code,
                content,
                hint: if status.is_redirection() {
                    ": it sends the request to another address, which is not followed; give \
                     that address instead"
                } else if code == 404 {
                    ": is this the base address of an OpenAI-compatible engine?"
                } else {
                    ""
                },
            },
        })
    }

    /// The body of `response`, refused past `cap` bytes: it is read in pieces and dropped at
    /// the cap, whatever length the remote announced.
    async fn read_capped(
        &self,
        mut response: reqwest::Response,
        cap: usize,
        what: &'static str,
    ) -> Result<Vec<u8>, RemoteError> {
        if response
            .content_length()
            .is_some_and(|length| length > cap as u64)
        {
            return Err(self.too_large(what, cap));
        }
        let mut body = Vec::new();
        while let Some(piece) = response
            .chunk()
            .await
            .map_err(|err| self.transport_error(&err, MODELS_TIMEOUT))?
        {
            if body.len() + piece.len() > cap {
                return Err(self.too_large(what, cap));
            }
            body.extend_from_slice(&piece);
        }
        Ok(body)
    }

    fn transport_error(&self, err: &reqwest::Error, timeout: Duration) -> RemoteError {
        let name = self.spec.name.clone();
        if err.is_timeout() {
            return RemoteError::Timeout {
                name,
                seconds: timeout.as_secs(),
            };
        }
        // The innermost cause says what happened (connection refused, no such host), in the
        // words of the HTTP client and the system, never the remote's.
        let mut reason = err.to_string();
        let mut source = std::error::Error::source(err);
        while let Some(cause) = source {
            if cause.downcast_ref::<LinkLocalRefused>().is_some() {
                return RemoteError::InvalidSpec(format!(
                    "remote engine '{name}' at {}: {cause}",
                    self.spec.url
                ));
            }
            reason = cause.to_string();
            source = cause.source();
        }
        if err.is_connect() || err.is_request() {
            RemoteError::Unreachable {
                name,
                url: self.spec.url.clone(),
                reason,
            }
        } else {
            self.malformed(reason)
        }
    }

    fn too_large(&self, what: &'static str, limit_bytes: usize) -> RemoteError {
        RemoteError::TooLarge {
            name: self.spec.name.clone(),
            what,
            limit_bytes,
        }
    }

    fn malformed(&self, message: String) -> RemoteError {
        RemoteError::Malformed {
            name: self.spec.name.clone(),
            message,
        }
    }
}

/// Follows redirects within the engine's origin only: one to another host or port could lead the
/// server to a service its caller cannot reach (and the key with it).
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(TooManyRedirects)
        } else {
            attempt.follow()
        }
    })
}

#[derive(Debug, thiserror::Error)]
#[error("more than {MAX_REDIRECTS} redirects")]
struct TooManyRedirects;

/// A host name that resolves to link-local or metadata addresses only.
#[derive(Debug, thiserror::Error)]
#[error(
    "'{0}' resolves to a link-local or cloud metadata address, which remote engines may not \
     have unless the server is started with --allow-link-local-remotes"
)]
struct LinkLocalRefused(String);

/// The system's resolver, less link-local and metadata addresses.
struct GuardedResolver;

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            type BoxError = Box<dyn std::error::Error + Send + Sync>;
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|err| Box::new(err) as BoxError)?
                .collect();
            let allowed: Vec<SocketAddr> = resolved
                .iter()
                .copied()
                .filter(|addr| !is_link_local_or_metadata(addr.ip()))
                .collect();
            if allowed.is_empty() && !resolved.is_empty() {
                return Err(Box::new(LinkLocalRefused(host)) as BoxError);
            }
            Ok::<_, BoxError>(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// What stopped a generation's byte stream.
#[derive(Debug)]
enum StreamFault {
    Transport(reqwest::Error),
    EventTooLarge,
    StreamTooLarge,
}

impl std::fmt::Display for StreamFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transport(err) => err.fmt(f),
            Self::EventTooLarge => write!(f, "an event over {MAX_EVENT_BYTES} bytes"),
            Self::StreamTooLarge => write!(f, "a stream over {MAX_STREAM_BYTES} bytes"),
        }
    }
}

/// Counts a stream's bytes: all of them, and those since the last event ended (a blank line,
/// whichever of LF, CRLF and CR ends the lines).
#[derive(Default)]
struct StreamGuard {
    total: usize,
    in_event: usize,
    /// The line so far is empty.
    line_empty: bool,
    /// The last byte was CR, so an LF now ends no further line.
    after_cr: bool,
}

impl StreamGuard {
    fn admit(&mut self, bytes: &[u8]) -> Result<(), StreamFault> {
        self.total += bytes.len();
        if self.total > MAX_STREAM_BYTES {
            return Err(StreamFault::StreamTooLarge);
        }
        for &byte in bytes {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    if self.line_empty {
                        self.in_event = 0;
                    }
                    self.line_empty = true;
                    self.after_cr = byte == b'\r';
                }
                _ => {
                    self.line_empty = false;
                    self.after_cr = false;
                    self.in_event += 1;
                }
            }
        }
        if self.in_event > MAX_EVENT_BYTES {
            return Err(StreamFault::EventTooLarge);
        }
        Ok(())
    }
}

/// The content type of an answer in our words: one of [`NAMED_CONTENT_TYPES`], or none named.
fn content_kind(response: &reqwest::Response) -> &'static str {
    let Some(value) = response.headers().get(reqwest::header::CONTENT_TYPE) else {
        return "no content type";
    };
    let essence = value
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    NAMED_CONTENT_TYPES
        .into_iter()
        .find(|known| *known == essence)
        .unwrap_or("another content type")
}

/// The endpoint and the body that ask the remote engine for what `request` asks of the local
/// one: chat messages through chat completions, a raw prompt through completions. A plain
/// OpenAI server is sent OpenAI's fields only, since a strict one refuses others; llama-server,
/// vLLM and SGLang their shared sampling fields too; another `medusa serve` the playground's own.
fn request_body(request: &RemoteRequest) -> (&'static str, CompletionRequest) {
    let r = &request.request;
    let s = &r.sampling;
    let mut body = CompletionRequest {
        model: request.model.clone(),
        max_tokens: Some(r.max_tokens),
        temperature: Some(s.temperature),
        top_p: Some(s.top_p),
        presence_penalty: (s.presence_penalty != 0.0).then_some(s.presence_penalty),
        frequency_penalty: (s.frequency_penalty != 0.0).then_some(s.frequency_penalty),
        logit_bias: s
            .logit_bias
            .iter()
            .map(|b| (b.token.to_string(), b.bias))
            .collect(),
        seed: s.seed,
        stop: r.stop.clone(),
        stream: true,
        stream_options: Some(StreamOptions {
            include_usage: true,
        }),
        ..CompletionRequest::default()
    };
    if request.kind.takes_sampling_extensions() {
        body.top_k = (s.top_k > 0).then_some(s.top_k);
        body.min_p = Some(s.min_p);
        body.repeat_penalty = Some(s.repeat_penalty);
        body.repeat_last_n = Some(s.repeat_last_n);
        body.grammar = r.grammar.clone();
        // llama-server's field: only a request that must not reuse cached cells says so.
        body.cache_prompt = (!r.cache_prompt).then_some(false);
    }
    if request.kind.takes_playground_fields() {
        if r.mode != GenerationMode::Normal {
            body.mode = Some(r.mode.as_str().to_owned());
        }
        body.lookup_memory = (r.lookup_memory != LookupMemoryUse::ReadWrite)
            .then(|| r.lookup_memory.as_str().to_owned());
        match &r.draft {
            DraftPolicy::Auto => {}
            DraftPolicy::Tuned => body.tree = Some(TreeField::Name("tuned".into())),
            DraftPolicy::Tree(tree) => body.tree = Some(TreeField::Paths(tree.paths().to_vec())),
            DraftPolicy::Length(n) => body.draft_length = Some(*n),
        }
    }
    let path = match &r.prompt {
        Prompt::Chat(messages) => {
            body.messages = Some(
                messages
                    .iter()
                    .map(|m| RequestMessage {
                        role: m.role.clone(),
                        content: m.content.clone(),
                    })
                    .collect(),
            );
            if r.continue_final_message && request.kind.takes_sampling_extensions() {
                // vLLM's names; `medusa serve` takes them too.
                body.continue_final_message = Some(true);
                body.add_generation_prompt = Some(false);
            }
            "/v1/chat/completions"
        }
        Prompt::Text(text) => {
            body.prompt = Some(text.clone());
            "/v1/completions"
        }
    };
    (path, body)
}

#[cfg(test)]
mod tests;
