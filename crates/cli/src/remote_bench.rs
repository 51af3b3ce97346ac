//! `medusa bench --endpoint URL`: the bench's prompts, rounds and report against a running
//! OpenAI-compatible server (another `medusa serve`, llama-server, vLLM, SGLang), timed on this
//! side from the request to each streamed chunk. Speculative figures come from the answers'
//! llama-server `timings` when the server sends them.

use anyhow::{bail, Context};
use engine::{
    ChatMessage, DraftPolicy, GenerateRequest, GenerationMode, Prompt, RunSummary, SamplingParams,
    TreeSpec,
};
use playground::run_order::balanced_order;
use remote::{RemoteAccess, RemoteEngine, RemoteError, RemoteKind, RemoteRequest, RemoteSpec};
use serde::Serialize;
use store::Spread;

use crate::bench_args::{load_prompts, modes_with_normal_first, BenchArgs};
use crate::bench_totals::{round_speedup, Totals};

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

impl From<RunSummary> for RemoteRun {
    fn from(summary: RunSummary) -> Self {
        Self {
            tokens: summary.tokens_generated,
            ttft_ms: summary.ttft_ms,
            total_ms: summary.total_ms,
            drafted: summary.draft_tokens,
            accepted: summary.accepted_draft_tokens,
            text: summary.text,
        }
    }
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

/// The server under test, through the remote engines' client, and the runtime its streams run on.
struct Endpoint {
    engine: RemoteEngine,
    runtime: tokio::runtime::Runtime,
}

impl Endpoint {
    fn new(url: &str, api_key: Option<String>) -> anyhow::Result<Self> {
        let spec = RemoteSpec::new("endpoint", url, api_key)
            .with_context(|| format!("--endpoint {url}"))?;
        // Whoever runs the bench typed the address: no address is off limits to them.
        let access = RemoteAccess {
            allow_link_local: true,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        Ok(Self {
            engine: RemoteEngine::with_access(spec, access)?,
            runtime,
        })
    }

    fn url(&self) -> &str {
        &self.engine.spec().url
    }

    /// The first model the server lists, and what kind of server its list tells.
    fn model(&self) -> anyhow::Result<(String, RemoteKind)> {
        let listing = self
            .runtime
            .block_on(self.engine.listing())
            .map_err(with_hint)?;
        let model = listing
            .models
            .into_iter()
            .next()
            .with_context(|| format!("{} lists no model at /v1/models", self.url()))?;
        Ok((model, listing.kind))
    }

    /// Streams one completion of `request` on `model`, timed here from the request.
    fn complete(
        &self,
        model: &str,
        kind: &RemoteKind,
        request: GenerateRequest,
    ) -> anyhow::Result<RemoteRun> {
        let stream = {
            let _entered = self.runtime.enter();
            self.engine.generate(RemoteRequest {
                model: model.to_owned(),
                request,
                kind: kind.clone(),
            })
        };
        let summary = stream.wait()?;
        Ok(summary.into())
    }
}

/// The remote client's error, with what to do about a refused key.
fn with_hint(err: RemoteError) -> anyhow::Error {
    match err {
        RemoteError::Unauthorized { .. } => {
            anyhow::anyhow!("{err}: pass its key with --api-key")
        }
        err => err.into(),
    }
}

/// A greedy chat completion of `prompt` in `mode`, with the drafts the bench's flags ask for.
/// Every run reads its whole prompt, as the local bench's do, so that no run starts warm and
/// outputs compare exactly.
fn bench_request(
    args: &BenchArgs,
    prompt: &str,
    mode: GenerationMode,
    max_tokens: u32,
) -> anyhow::Result<GenerateRequest> {
    let draft = match mode {
        mode if mode.drafts_trees() => match args.model.tree.trim() {
            "auto" => DraftPolicy::Auto,
            "tuned" => DraftPolicy::Tuned,
            name => DraftPolicy::Tree(
                TreeSpec::from_name_or_file(name).with_context(|| format!("--tree {name}"))?,
            ),
        },
        GenerationMode::Lookup | GenerationMode::Draft | GenerationMode::Eagle => args
            .draft_length
            .map_or(DraftPolicy::Auto, DraftPolicy::Length),
        _ => DraftPolicy::Auto,
    };
    let mut request = GenerateRequest::new(
        Prompt::Chat(vec![ChatMessage::new("user", prompt)]),
        max_tokens,
    )
    .with_sampling(SamplingParams::greedy())
    .with_mode(mode)
    .with_draft(draft);
    request.cache_prompt = false;
    Ok(request)
}

pub fn run(endpoint: &str, args: &BenchArgs) -> anyhow::Result<()> {
    if args.concurrency.iter().any(|&n| n > 1) {
        bail!("--concurrency above 1 is measured on the local engine only, not with --endpoint");
    }
    if args.max_draft.is_some() {
        bail!("--max-draft applies to the local engine; with --endpoint, use --tree or --draft-length");
    }
    let endpoint = Endpoint::new(endpoint, args.api_key.clone())?;
    let prompts = load_prompts(args.prompts.as_ref())?;
    let modes = modes_with_normal_first(&args.modes);
    let (model, kind) = endpoint.model()?;
    // Each mode must be what runs: a server that decodes plainly is benched in normal mode only.
    for &mode in &modes {
        if kind.resolve_mode(endpoint.engine.name(), mode)? != mode {
            bail!(
                "{} decodes as it was started (its model list names no medusa serve modes); \
                 bench it with --modes normal",
                endpoint.url()
            );
        }
    }
    let warm_up = bench_request(args, &prompts[0], GenerationMode::Normal, 8)?;
    endpoint.complete(&model, &kind, warm_up)?;

    let mut totals = vec![ModeTotals::default(); modes.len()];
    let total_runs = prompts.len() * args.rounds as usize;
    for round in 0..args.rounds as usize {
        for (i, prompt) in prompts.iter().enumerate() {
            let mut runs = vec![RemoteRun::default(); modes.len()];
            // Every mode goes first, and follows each other one, equally often.
            for m in balanced_order(modes.len(), round * prompts.len() + i) {
                let request = bench_request(args, prompt, modes[m], args.max_tokens)?;
                runs[m] = endpoint.complete(&model, &kind, request)?;
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
        endpoint: endpoint.url().to_owned(),
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
