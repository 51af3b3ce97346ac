//! `medusa generate`: one prompt, streamed to the terminal or reported as one JSON object; also
//! the speculative-decoding options and the streaming that `medusa chat` shares.

use std::io::Write;

use clap::Args;
use engine::{
    AcceptanceRule, ChatMessage, DraftPolicy, GenerateRequest, GenerationEvent, GenerationMode,
    GenerationStream, Prompt, RunSummary, SamplingParams, StepEvent,
};
use serde::Serialize;

use crate::model_args::ModelArgs;
use crate::progress::LiveLine;
use crate::sampling_args::SamplingArgs;

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt text.
    #[arg(long, short = 'p')]
    pub prompt: String,
    /// Treat the prompt as a user message in the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// System message (with --chat).
    #[arg(long, requires = "chat")]
    pub system: Option<String>,
    /// Most tokens to generate.
    #[arg(long, short = 'n', default_value_t = 256)]
    pub max_tokens: u32,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Stop before this text (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    #[command(flatten)]
    pub speculative: SpeculativeArgs,
    /// Print each speculative step (drafted, accepted, timings) to stderr.
    #[arg(long)]
    pub steps: bool,
    /// Print one JSON object with the text and statistics instead of streaming.
    #[arg(long)]
    pub json: bool,
}

/// How tokens are produced: plainly, or drafted and verified.
#[derive(Args, Debug, Clone)]
pub struct SpeculativeArgs {
    /// normal, medusa, lookup, auto (lookup, the heads and the draft model, each where it
    /// pays) or draft (the draft model, `--draft-model`) (default: normal; auto for `chat`).
    #[arg(long)]
    pub mode: Option<GenerationMode>,
    /// Most drafted tokens per step (speculative modes, `--tree auto`).
    #[arg(long)]
    pub max_draft: Option<usize>,
    /// Lookup, draft and eagle modes: draft this many tokens at every step that has a guess,
    /// whatever they cost (default: as many as pay). The draft model's chain ends early at a
    /// guess it gives less than 75%.
    #[arg(long, value_name = "N")]
    pub draft_length: Option<usize>,
    /// Accept drafted tokens by typical acceptance (threshold 0.09, alpha 0.3) instead of
    /// exact speculative sampling; faster with sampling, but changes the output distribution.
    #[arg(long)]
    pub typical: bool,
}

impl SpeculativeArgs {
    /// `request` in `mode` with these options.
    pub fn apply(&self, mut request: GenerateRequest, mode: GenerationMode) -> GenerateRequest {
        request.mode = mode;
        request.max_draft_tokens = self.max_draft;
        if let (GenerationMode::Lookup | GenerationMode::Draft | GenerationMode::Eagle, Some(n)) =
            (mode, self.draft_length)
        {
            request.draft = DraftPolicy::Length(n);
        }
        if self.typical {
            request.acceptance = AcceptanceRule::TYPICAL_DEFAULT;
        }
        request
    }
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    // Refuse out-of-range settings before the model loads.
    args.sampling
        .params(&SamplingParams::default())
        .validate()?;
    let engine = args.model.load()?;
    let prompt = if args.chat {
        let mut messages = Vec::new();
        if let Some(system) = &args.system {
            messages.push(ChatMessage::new("system", system));
        }
        messages.push(ChatMessage::new("user", &args.prompt));
        Prompt::Chat(messages)
    } else {
        Prompt::Text(args.prompt.clone())
    };
    let request = args.model.with_default_draft(
        args.speculative.apply(
            GenerateRequest::new(prompt, args.max_tokens)
                .with_sampling(args.sampling.params(&SamplingParams::default()))
                .with_stop(args.stop.clone()),
            args.speculative.mode.unwrap_or(GenerationMode::Normal),
        ),
    );
    let plan = engine.info().medusa_plan.as_ref();
    if let (GenerationMode::Medusa, Some(plan), false) = (request.mode, plan, args.json) {
        eprintln!("{}", plan.decision);
    }
    let stream = engine.generate(request)?;
    if args.json {
        let (summary, steps) = collect(stream)?;
        let report = GenerateReport::new(&summary, &steps, engine.info());
        println!("{}", serde_json::to_string(&report)?);
    } else {
        stream_to_terminal(stream, args.steps)?;
    }
    Ok(())
}

/// Waits for the end of a run, keeping its step events.
fn collect(mut stream: GenerationStream) -> anyhow::Result<(RunSummary, Vec<StepEvent>)> {
    let mut steps = Vec::new();
    while let Some(event) = stream.blocking_next() {
        match event {
            GenerationEvent::Step(step) => steps.push(step),
            GenerationEvent::Finished(summary) => return Ok((summary, steps)),
            GenerationEvent::Failed(err) => return Err(err.into()),
            GenerationEvent::Started { .. } | GenerationEvent::Text { .. } => {}
        }
    }
    Err(engine::EngineError::EngineStopped.into())
}

/// Prints text as it arrives, with a live progress line; returns the run's summary.
pub fn stream_to_terminal(
    mut stream: GenerationStream,
    show_steps: bool,
) -> anyhow::Result<RunSummary> {
    let mut live = LiveLine::new();
    let mut stdout = std::io::stdout();
    while let Some(event) = stream.blocking_next() {
        match event {
            GenerationEvent::Started { .. } => {}
            GenerationEvent::Text {
                text, token_ids, ..
            } => {
                stdout.write_all(text.as_bytes())?;
                stdout.flush()?;
                // A remote engine's text comes without ids: a piece counts as one token.
                live.tokens(token_ids.len().max(1));
            }
            GenerationEvent::Step(step) => {
                live.step(step.accepted_len);
                if show_steps {
                    eprintln!("\n{}", crate::progress::step_line(&step));
                }
            }
            GenerationEvent::Finished(summary) => {
                live.finish(&summary);
                return Ok(summary);
            }
            GenerationEvent::Failed(err) => return Err(err.into()),
        }
    }
    Err(engine::EngineError::EngineStopped.into())
}

/// `medusa generate --json`: the run's summary with its steps and the model's plan.
#[derive(Serialize)]
struct GenerateReport<'a> {
    mode: GenerationMode,
    medusa_plan: Option<&'a Option<engine::medusa::plan::MedusaPlan>>,
    mean_accepted: f64,
    acceptance_by_depth: &'a [f64],
    steps: usize,
    step_events: &'a [StepEvent],
    text: &'a str,
    model: &'a str,
    prompt_tokens: usize,
    tokens_generated: usize,
    tokens_per_second: f64,
    decode_tokens_per_second: f64,
    ttft_ms: f64,
    total_ms: f64,
    stop_reason: engine::StopReason,
    seed: u64,
    token_ids: &'a [engine::TokenId],
}

impl<'a> GenerateReport<'a> {
    fn new(s: &'a RunSummary, steps: &'a [StepEvent], model: &'a engine::ModelInfo) -> Self {
        Self {
            mode: s.mode,
            medusa_plan: (s.mode == GenerationMode::Medusa).then_some(&model.medusa_plan),
            mean_accepted: s.mean_accepted,
            acceptance_by_depth: &s.acceptance_by_depth,
            steps: s.steps,
            step_events: steps,
            text: &s.text,
            model: &model.name,
            prompt_tokens: s.prompt_tokens,
            tokens_generated: s.tokens_generated,
            tokens_per_second: s.tokens_per_second,
            decode_tokens_per_second: s.decode_tokens_per_second,
            ttft_ms: s.ttft_ms,
            total_ms: s.total_ms,
            stop_reason: s.stop_reason,
            seed: s.seed,
            token_ids: &s.token_ids,
        }
    }
}
