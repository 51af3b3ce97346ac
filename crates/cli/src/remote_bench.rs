//! `medusa bench --endpoint URL`: the bench's prompts, rounds and report against a running
//! OpenAI-compatible server (another `medusa serve`, llama-server, vLLM, SGLang), timed on this
//! side from the request to each streamed chunk. Speculative figures come from the answers'
//! llama-server `timings` when the server sends them.

use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use engine::GenerationMode;
use serde::Serialize;
use serde_json::{json, Value};
use store::Spread;

use crate::bench::{load_prompts, modes_with_normal_first, round_speedup, BenchArgs, Totals};
use crate::run_order::balanced_order;

/// Longest a request may take; a server that stops answering is an error, not a hang.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// One streamed answer, as measured here.
#[derive(Debug, Clone, Default, PartialEq)]
struct RemoteRun {
    text: String,
    tokens: usize,
    ttft_ms: f64,
    total_ms: f64,
    /// From the server's `timings`, when it sent them.
    drafted: Option<usize>,
    accepted: Option<usize>,
}

/// A mode's totals, with the drafts the server's timings reported (when it sent any).
#[derive(Debug, Clone, Default)]
struct ModeTotals {
    totals: Totals,
    drafted: Option<usize>,
    accepted: Option<usize>,
}

impl ModeTotals {
    fn add(&mut self, round: usize, run: &RemoteRun) {
        self.totals
            .add_in_round(round, run.tokens, run.total_ms, run.ttft_ms);
        if let (Some(drafted), Some(accepted)) = (run.drafted, run.accepted) {
            *self.drafted.get_or_insert(0) += drafted;
            *self.accepted.get_or_insert(0) += accepted;
        }
    }

    /// Tokens per step: every step yields the model's own token plus the drafts it accepted.
    fn mean_accepted(&self) -> Option<f64> {
        let accepted = self.accepted?;
        let steps = self.totals.tokens.saturating_sub(accepted).max(1);
        Some(self.totals.tokens as f64 / steps as f64)
    }
}

#[derive(Debug, Serialize)]
struct RemoteModeResult {
    mode: GenerationMode,
    tokens_per_second: f64,
    ttft_ms: f64,
    tokens_generated: usize,
    total_ms: f64,
    runs: usize,
    /// From the server's `timings`; null when it sends none.
    mean_accepted: Option<f64>,
    draft_tokens: Option<usize>,
    accepted_tokens: Option<usize>,
    speedup_vs_normal: f64,
    round_tokens_per_second: Vec<f64>,
    round_speedup: Option<Spread>,
    outputs_identical_to_normal: usize,
}

#[derive(Debug, Serialize)]
struct RemoteBenchReport {
    endpoint: String,
    model: String,
    prompts: usize,
    rounds: u32,
    max_tokens: u32,
    results: Vec<RemoteModeResult>,
}

/// The server's base URL without a trailing `/` or `/v1`.
fn base_url(endpoint: &str) -> anyhow::Result<String> {
    let trimmed = endpoint.trim().trim_end_matches('/');
    let base = trimmed.strip_suffix("/v1").unwrap_or(trimmed);
    if !base.starts_with("http://") && !base.starts_with("https://") {
        bail!("--endpoint must be an http:// or https:// URL, got {endpoint:?}");
    }
    Ok(base.to_owned())
}

struct Endpoint {
    base: String,
    api_key: Option<String>,
    agent: ureq::Agent,
}

impl Endpoint {
    fn request(&self, method: &str, path: &str) -> ureq::Request {
        let request = self.agent.request(method, &format!("{}{path}", self.base));
        match &self.api_key {
            Some(key) => request.set("Authorization", &format!("Bearer {key}")),
            None => request,
        }
    }

    /// The answer, or an error that says what the server said.
    fn call(&self, request: ureq::Request, body: Option<Value>) -> anyhow::Result<ureq::Response> {
        let result = match body {
            Some(body) => request.send_json(body),
            None => request.call(),
        };
        match result {
            Ok(response) => Ok(response),
            Err(ureq::Error::Status(401, _)) => bail!(
                "{} refused the request (401): pass its key with --api-key",
                self.base
            ),
            Err(ureq::Error::Status(status, response)) => {
                let text = response.into_string().unwrap_or_default();
                bail!("{} answered {status}: {}", self.base, text.trim())
            }
            Err(err) => bail!("cannot reach {}: {err}", self.base),
        }
    }

    /// The first model the server lists.
    fn model(&self) -> anyhow::Result<String> {
        let models: Value = self
            .call(self.request("GET", "/v1/models"), None)?
            .into_json()
            .context("reading /v1/models")?;
        models["data"][0]["id"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("{} lists no model at /v1/models", self.base))
    }

    /// Streams one greedy chat completion, timing it from the request. `extra`: fields only
    /// `medusa serve` knows (mode and drafts), sent only when the bench's flags ask for them.
    fn complete(
        &self,
        model: &str,
        prompt: &str,
        extra: &serde_json::Map<String, Value>,
        max_tokens: u32,
    ) -> anyhow::Result<RemoteRun> {
        let mut body = json!({
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": true,
            "stream_options": {"include_usage": true},
            // llama-server's field (ours too): every run reads its whole prompt, as the local
            // bench's do, so that no run starts warm and outputs compare exactly.
            "cache_prompt": false,
        });
        for (key, value) in extra {
            body[key] = value.clone();
        }
        let started = Instant::now();
        let response = self.call(self.request("POST", "/v1/chat/completions"), Some(body))?;
        let mut run = RemoteRun::default();
        let mut chunks = 0;
        for line in BufReader::new(response.into_reader()).lines() {
            let line = line.with_context(|| format!("the stream from {} broke", self.base))?;
            let Some(data) = line.strip_prefix("data:").map(str::trim) else {
                continue;
            };
            if data == "[DONE]" {
                break;
            }
            let chunk: Value = serde_json::from_str(data)
                .with_context(|| format!("{} sent a malformed chunk: {data}", self.base))?;
            if let Some(error) = chunk.get("error") {
                bail!("{} failed mid-answer: {error}", self.base);
            }
            if let Some(text) = chunk["choices"][0]["delta"]["content"].as_str() {
                if !text.is_empty() {
                    if run.text.is_empty() {
                        run.ttft_ms = started.elapsed().as_secs_f64() * 1000.0;
                    }
                    run.text.push_str(text);
                    chunks += 1;
                }
            }
            if let Some(tokens) = chunk["usage"]["completion_tokens"].as_u64() {
                run.tokens = tokens as usize;
            }
            if let Some(timings) = chunk.get("timings") {
                run.drafted = timings["draft_n"].as_u64().map(|n| n as usize);
                run.accepted = timings["draft_n_accepted"].as_u64().map(|n| n as usize);
            }
        }
        run.total_ms = started.elapsed().as_secs_f64() * 1000.0;
        if run.tokens == 0 {
            // Without usage, one content chunk per token is the best count there is.
            run.tokens = chunks;
        }
        Ok(run)
    }
}

/// What `medusa serve` takes beyond OpenAI's fields: the mode (when modes are compared), the
/// tree of `--tree` for Medusa and `--draft-length` for lookup. Other servers never see them
/// unless asked for.
fn extra_fields(
    args: &BenchArgs,
    mode: GenerationMode,
    compared: bool,
) -> serde_json::Map<String, Value> {
    let mut extra = serde_json::Map::new();
    if compared {
        extra.insert("mode".into(), mode.as_str().into());
    }
    match mode {
        mode if mode.drafts_trees() && args.model.tree.trim() != "auto" => {
            extra.insert("tree".into(), args.model.tree.trim().into());
        }
        GenerationMode::Lookup => {
            if let Some(n) = args.draft_length {
                extra.insert("draft_length".into(), n.into());
            }
        }
        _ => {}
    }
    extra
}

pub fn run(endpoint: &str, args: &BenchArgs) -> anyhow::Result<()> {
    if args.concurrency.iter().any(|&n| n > 1) {
        bail!("--concurrency above 1 is measured on the local engine only, not with --endpoint");
    }
    if args.max_draft.is_some() {
        bail!("--max-draft applies to the local engine; with --endpoint, use --tree or --draft-length");
    }
    let endpoint = Endpoint {
        base: base_url(endpoint)?,
        api_key: args.api_key.clone(),
        // HTTPS certificates are checked against the system's trusted roots.
        agent: ureq::AgentBuilder::new()
            .timeout(REQUEST_TIMEOUT)
            .tls_connector(Arc::new(
                native_tls::TlsConnector::new().context("setting up TLS")?,
            ))
            .build(),
    };
    let prompts = load_prompts(args.prompts.as_ref())?;
    let modes = modes_with_normal_first(&args.modes);
    let model = endpoint.model()?;
    endpoint.complete(&model, &prompts[0], &Default::default(), 8)?;

    let mut totals = vec![ModeTotals::default(); modes.len()];
    let total_runs = prompts.len() * args.rounds as usize;
    for round in 0..args.rounds as usize {
        for (i, prompt) in prompts.iter().enumerate() {
            let mut runs = vec![RemoteRun::default(); modes.len()];
            // Every mode goes first, and follows each other one, equally often.
            for m in balanced_order(modes.len(), round * prompts.len() + i) {
                let extra = extra_fields(args, modes[m], modes.len() > 1);
                runs[m] = endpoint.complete(&model, prompt, &extra, args.max_tokens)?;
            }
            let mut line = format!("[{}/{total_runs}]", round * prompts.len() + i + 1);
            for (m, run) in runs.iter().enumerate() {
                totals[m].add(round, run);
                totals[m].totals.identical_to_normal += usize::from(run.text == runs[0].text);
                line.push_str(&format!(
                    " {} {:.1} tok/s",
                    modes[m],
                    run.tokens as f64 * 1000.0 / run.total_ms.max(1e-9)
                ));
            }
            eprintln!("{line}");
        }
    }
    let normal = &totals[0].totals;
    let normal_rounds = normal.round_tokens_per_second();
    let results = modes
        .iter()
        .zip(&totals)
        .map(|(&mode, m)| {
            let t = &m.totals;
            RemoteModeResult {
                mode,
                tokens_per_second: t.tokens_per_second(),
                ttft_ms: t.mean_ttft_ms(),
                tokens_generated: t.tokens,
                total_ms: t.ms,
                runs: t.runs,
                mean_accepted: m.mean_accepted(),
                draft_tokens: m.drafted,
                accepted_tokens: m.accepted,
                speedup_vs_normal: t.tokens_per_second() / normal.tokens_per_second().max(1e-9),
                round_speedup: round_speedup(&t.round_tokens_per_second(), &normal_rounds),
                round_tokens_per_second: t.round_tokens_per_second(),
                outputs_identical_to_normal: t.identical_to_normal,
            }
        })
        .collect();
    let report = RemoteBenchReport {
        endpoint: endpoint.base.clone(),
        model,
        prompts: prompts.len(),
        rounds: args.rounds,
        max_tokens: args.max_tokens,
        results,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{} at {}", report.model, report.endpoint);
        for r in &report.results {
            let accepted = r
                .mean_accepted
                .map_or_else(|| "-".to_owned(), |a| format!("{a:.2}"));
            println!(
                "{:<8} {:>8.1} tok/s  ttft {:>7.1} ms  {accepted} tok/step  {:.2}x normal  {}/{} identical",
                r.mode.as_str(),
                r.tokens_per_second,
                r.ttft_ms,
                r.speedup_vs_normal,
                r.outputs_identical_to_normal,
                r.runs
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_taken_with_or_without_v1() {
        assert_eq!(
            base_url("http://127.0.0.1:8080/v1/").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(base_url("https://box.lan/v1").unwrap(), "https://box.lan");
        assert!(base_url("127.0.0.1:8080").is_err());
    }

    #[test]
    fn tokens_per_step_come_from_the_accepted_drafts() {
        let mut totals = ModeTotals::default();
        let run = RemoteRun {
            tokens: 12,
            total_ms: 100.0,
            drafted: Some(10),
            accepted: Some(4),
            ..RemoteRun::default()
        };
        totals.add(0, &run);
        assert_eq!(totals.mean_accepted(), Some(1.5));
        assert_eq!(totals.totals.round_tokens_per_second(), [120.0]);
        let plain = RemoteRun {
            drafted: None,
            ..run
        };
        let mut totals = ModeTotals::default();
        totals.add(0, &plain);
        assert_eq!(totals.mean_accepted(), None);
    }
}
