//! Talking to one remote engine: its models (`GET /v1/models`) and streamed generations
//! (`POST /v1/chat/completions` or `/v1/completions`), read into the local engine's events.

use std::time::{Duration, Instant};

use engine::{
    GenerateRequest, GenerationEvent, GenerationMode, GenerationSender, GenerationStream, Prompt,
};
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tracing::Instrument;

use crate::chunks::{error_message, excerpt, Answer, ChunkError};
use crate::error::RemoteError;
use crate::spec::RemoteSpec;

/// A connection that does not open within this is an unreachable engine.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest silence between two pieces of an answer (a long prompt's prefill included).
const READ_TIMEOUT: Duration = Duration::from_secs(120);
/// The models list answers at once or not at all.
const MODELS_TIMEOUT: Duration = Duration::from_secs(15);
/// How often a generation waiting for the engine checks whether it was cancelled.
const CANCEL_POLL: Duration = Duration::from_millis(100);

/// One remote engine; cheap to clone (the HTTP client is shared).
#[derive(Clone, Debug)]
pub struct RemoteEngine {
    spec: RemoteSpec,
    client: reqwest::Client,
}

/// A generation on a remote engine: the request as the local engine would take it, and the
/// remote's model that runs it.
pub struct RemoteRequest {
    pub model: String,
    pub request: GenerateRequest,
}

#[derive(Deserialize)]
struct ModelList {
    data: Vec<ModelEntry>,
}

#[derive(Deserialize)]
struct ModelEntry {
    id: String,
}

impl RemoteEngine {
    pub fn new(spec: RemoteSpec) -> Result<Self, RemoteError> {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .build()
            .map_err(|err| RemoteError::InvalidSpec(err.to_string()))?;
        Ok(Self { spec, client })
    }

    pub fn spec(&self) -> &RemoteSpec {
        &self.spec
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The models the engine serves, as it lists them.
    #[tracing::instrument(skip(self), fields(remote = %self.spec.name), err(level = tracing::Level::WARN))]
    pub async fn models(&self) -> Result<Vec<String>, RemoteError> {
        let response = self
            .authorized(self.client.get(self.endpoint("/v1/models")))
            .timeout(MODELS_TIMEOUT)
            .send()
            .await
            .map_err(|err| self.transport_error(&err, MODELS_TIMEOUT))?;
        let response = self.checked(response).await?;
        let body = response
            .text()
            .await
            .map_err(|err| self.transport_error(&err, MODELS_TIMEOUT))?;
        let list: ModelList =
            serde_json::from_str(&body).map_err(|err| RemoteError::Malformed {
                name: self.spec.name.clone(),
                message: format!("the model list: {err} in {}", excerpt(&body)),
            })?;
        Ok(list.data.into_iter().map(|m| m.id).collect())
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
        let (path, body) = request_body(request);
        let response = self
            .authorized(self.client.post(self.endpoint(path)))
            .json(&body)
            .send()
            .await
            .map_err(|err| self.transport_error(&err, READ_TIMEOUT))?;
        let response = self.checked(response).await?;
        // The prompt's size is known only at the end (`usage`).
        if !sender.send(GenerationEvent::Started { prompt_tokens: 0 }) {
            return Ok(true);
        }
        let mut events = response.bytes_stream().eventsource();
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
                eventsource_stream::EventStreamError::Transport(err) => {
                    self.transport_error(&err, READ_TIMEOUT)
                }
                other => self.malformed(other.to_string()),
            })?;
            if event.data.trim() == "[DONE]" {
                return Ok(false);
            }
            let text = answer.read(&event.data).map_err(|err| match err {
                ChunkError::Malformed(message) => self.malformed(message),
                ChunkError::Reported(message) => RemoteError::Reported {
                    name: self.spec.name.clone(),
                    message,
                },
            })?;
            if let Some(text) = text {
                let text_event = GenerationEvent::Text {
                    text,
                    token_ids: Vec::new(),
                    sources: Vec::new(),
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

    /// The response when it succeeded; else the engine's error, its message read from the body.
    async fn checked(&self, response: reqwest::Response) -> Result<reqwest::Response, RemoteError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.text().await.unwrap_or_default();
        let message = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v.get("error").map(error_message))
            .unwrap_or_else(|| excerpt(body.trim()));
        let name = self.spec.name.clone();
        let status = status.as_u16();
        Err(if matches!(status, 401 | 403) {
            RemoteError::Unauthorized {
                name,
                status,
                message,
            }
        } else {
            RemoteError::Refused {
                name,
                status,
                message,
            }
        })
    }

    fn transport_error(&self, err: &reqwest::Error, timeout: Duration) -> RemoteError {
        let name = self.spec.name.clone();
        if err.is_timeout() {
            return RemoteError::Timeout {
                name,
                seconds: timeout.as_secs(),
            };
        }
        // The innermost cause says what happened (connection refused, no such host).
        let mut reason = err.to_string();
        let mut source = std::error::Error::source(err);
        while let Some(cause) = source {
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

    fn malformed(&self, message: String) -> RemoteError {
        RemoteError::Malformed {
            name: self.spec.name.clone(),
            message,
        }
    }
}

/// The endpoint and the body that ask the remote engine for what `request` asks of the local
/// one: chat messages through chat completions, a raw prompt through completions.
fn request_body(request: &RemoteRequest) -> (&'static str, Value) {
    let r = &request.request;
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    let path = match &r.prompt {
        Prompt::Chat(messages) => {
            body.insert("messages".into(), json!(messages));
            if r.continue_final_message {
                // vLLM's names; `medusa serve` takes them too.
                body.insert("continue_final_message".into(), json!(true));
                body.insert("add_generation_prompt".into(), json!(false));
            }
            "/v1/chat/completions"
        }
        Prompt::Text(text) => {
            body.insert("prompt".into(), json!(text));
            "/v1/completions"
        }
    };
    let s = &r.sampling;
    body.insert("max_tokens".into(), json!(r.max_tokens));
    body.insert("temperature".into(), json!(s.temperature));
    body.insert("top_p".into(), json!(s.top_p));
    // vLLM, SGLang and llama-server all take these beside OpenAI's own.
    if s.top_k > 0 {
        body.insert("top_k".into(), json!(s.top_k));
    }
    body.insert("min_p".into(), json!(s.min_p));
    if let Some(seed) = s.seed {
        body.insert("seed".into(), json!(seed));
    }
    if !r.stop.is_empty() {
        body.insert("stop".into(), json!(r.stop));
    }
    // `medusa serve`'s own field; other engines ignore what they do not know.
    if r.mode != GenerationMode::Normal {
        body.insert("mode".into(), json!(r.mode.as_str()));
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({ "include_usage": true }));
    (path, Value::Object(body))
}

#[cfg(test)]
mod tests {
    use engine::ChatMessage;

    use super::*;

    #[test]
    fn chat_goes_to_chat_completions_and_text_to_completions() {
        let mut request = GenerateRequest::new(
            Prompt::Chat(vec![ChatMessage {
                role: "user".into(),
                content: "Hi".into(),
            }]),
            12,
        );
        request.sampling.seed = Some(3);
        request.sampling.top_k = 0;
        request.mode = GenerationMode::Medusa;
        let (path, body) = request_body(&RemoteRequest {
            model: "m".into(),
            request,
        });
        assert_eq!(path, "/v1/chat/completions");
        assert_eq!(body["messages"][0]["content"], "Hi");
        assert_eq!(body["max_tokens"], 12);
        assert_eq!(body["seed"], 3);
        assert_eq!(body["mode"], "medusa");
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert!(body.get("top_k").is_none());
        assert!(body.get("stop").is_none());

        let request =
            GenerateRequest::new(Prompt::Text("Once".into()), 4).with_stop(vec!["\n".into()]);
        let (path, body) = request_body(&RemoteRequest {
            model: "m".into(),
            request,
        });
        assert_eq!(path, "/v1/completions");
        assert_eq!(body["prompt"], "Once");
        assert_eq!(body["stop"][0], "\n");
        assert!(body.get("mode").is_none());
        assert!(body.get("seed").is_none());
    }
}
