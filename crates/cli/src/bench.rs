//! `medusa bench`: generation speed of the engine against the bare llama-cpp-2 loop, measured
//! in the same process on the same context, interleaved so that machine noise hits both alike.

use std::time::Instant;

use anyhow::Context;
use engine::{
    ChatMessage, Engine, GenerateRequest, GenerationMode, LookupMemoryUse, Prompt, RunSummary,
    SamplingParams, StepProfile,
};
use playground::run_order::balanced_order;

use crate::bench_args::{load_prompts, modes_with_normal_first, BenchArgs};
use crate::bench_report::{
    cpu_model, print_table, BaselineResult, BenchReport, ModeResult, PromptCacheResult,
};
use crate::bench_totals::{round_speedup, tokens_per_step, Totals};

pub fn run(mut args: BenchArgs) -> anyhow::Result<()> {
    args.read_output_grammar()?;
    let prompts = load_prompts(args.prompts.as_ref())?;
    let modes = modes_with_normal_first(&args.modes);
    anyhow::ensure!(
        args.concurrency.iter().all(|&n| (1..=64).contains(&n)),
        "--concurrency values must be between 1 and 64"
    );
    let mut model = args.model.clone();
    model.parallel = model
        .parallel
        .max(args.concurrency.iter().copied().max().unwrap_or(1));
    let engine = model.load()?;
    let info = engine.info().clone();
    let chat = |text: &str| Prompt::Chat(vec![ChatMessage::new("user", text)]);

    // Warm caches and the thread pool before measuring, and measure the decode costs the
    // draft budget needs now rather than inside the first speculative run.
    engine.raw_baseline(chat(prompts[0].as_str()), 8)?;
    if modes.len() > 1 {
        engine.decode_costs()?;
    }

    let remembered = remember(&engine, &args)?;

    let mut totals = vec![Totals::default(); modes.len()];
    let mut profiles = vec![StepProfile::default(); modes.len()];
    let mut baseline = Totals::default();
    let mut identical = 0;
    let total_runs = prompts.len() * args.rounds as usize;
    // Runner 0 is the baseline, runner k > 0 is modes[k - 1].
    let runners = modes.len() + 1;
    for round in 0..args.rounds as usize {
        for (i, text) in prompts.iter().enumerate() {
            let mut base_run = None;
            let mut runs: Vec<Option<RunSummary>> = vec![None; modes.len()];
            // Every runner goes first, and follows each other one, equally often, so that
            // neither drift in machine load nor what the run before leaves favours any of them.
            for runner in balanced_order(runners, round * prompts.len() + i) {
                if runner == 0 {
                    base_run = Some(engine.raw_baseline(chat(text), args.max_tokens as usize)?);
                } else {
                    let request = GenerateRequest::new(chat(text), args.max_tokens)
                        .with_sampling(SamplingParams::greedy())
                        .with_mode(modes[runner - 1]);
                    // Every run reads its whole prompt, as the raw loop does.
                    let request = args.with_drafts(GenerateRequest {
                        max_draft_tokens: args.max_draft,
                        cache_prompt: false,
                        ..request
                    });
                    let before = engine.step_profile();
                    runs[runner - 1] = Some(engine.generate(request)?.wait()?);
                    profiles[runner - 1].add(&engine.step_profile().since(&before));
                }
            }
            let base_run = base_run.context("baseline did not run")?;
            let runs: Vec<RunSummary> = runs.into_iter().flatten().collect();
            let normal_tokens = &runs[0].token_ids;
            baseline.add(
                base_run.tokens_generated,
                base_run.total_ms,
                base_run.ttft_ms,
            );
            identical += usize::from(&base_run.token_ids == normal_tokens);
            let mut line = format!(
                "[{}/{}] baseline {:.1} tok/s",
                round * prompts.len() + i + 1,
                total_runs,
                base_run.tokens_per_second
            );
            for (total, run) in totals.iter_mut().zip(&runs) {
                total.add_run(round, run);
                total.identical_to_normal += usize::from(&run.token_ids == normal_tokens);
                line.push_str(&format!(
                    ", {} {:.1} tok/s ({:.2}/step)",
                    run.mode, run.tokens_per_second, run.mean_accepted
                ));
            }
            eprintln!("{line}");
        }
    }

    let normal_tps = totals[0].tokens_per_second();
    let normal_rounds = totals[0].round_tokens_per_second();
    let results = modes
        .iter()
        .zip(&totals)
        .zip(&profiles)
        .map(|((&mode, t), profile)| ModeResult {
            mode,
            concurrency: 1,
            tokens_per_second: t.tokens_per_second(),
            ttft_ms: t.mean_ttft_ms(),
            tokens_generated: t.tokens,
            total_ms: t.ms,
            runs: t.runs,
            mean_accepted: tokens_per_step(t.tokens, t.runs, t.steps),
            acceptance_by_depth: t
                .depth_counts
                .iter()
                .map(|&(accepted, reached)| accepted / reached.max(1.0))
                .collect(),
            speedup_vs_normal: t.tokens_per_second() / normal_tps.max(1e-9),
            round_speedup: round_speedup(&t.round_tokens_per_second(), &normal_rounds),
            round_tokens_per_second: t.round_tokens_per_second(),
            outputs_identical_to_normal: t.identical_to_normal,
            sequential_tokens_per_second: None,
            throughput_vs_sequential: None,
            step_profile: Some(*profile),
        })
        .collect::<Vec<_>>();
    let mut results = results;
    for &streams in args.concurrency.iter().filter(|&&n| n > 1) {
        results.extend(bench_concurrency(
            &engine, &prompts, &modes, streams, &args,
        )?);
    }
    let prompt_cache = bench_prompt_cache(&engine, &prompts, args.max_tokens)?;
    let report = BenchReport {
        model: info.name.clone(),
        model_path: info.path.clone(),
        model_file_type: info.file_type.clone(),
        threads: info.threads,
        cpu: cpu_model(),
        cpu_kernels: info.cpu_kernels,
        cpu_instruction_set: info.cpu_instruction_set.clone(),
        prompts: prompts.len(),
        rounds: args.rounds,
        max_tokens: args.max_tokens,
        remembered_prompts: remembered,
        results,
        baseline: BaselineResult {
            name: "llama.cpp raw decode loop",
            tokens_per_second: baseline.tokens_per_second(),
            ttft_ms: baseline.mean_ttft_ms(),
            tokens_generated: baseline.tokens,
            total_ms: baseline.ms,
        },
        normal_vs_baseline: normal_tps / baseline.tokens_per_second().max(1e-9),
        outputs_identical: identical,
        decode_costs: if modes.len() > 1 {
            Some(engine.decode_costs()?)
        } else {
            None
        },
        medusa_plan: info
            .medusa_plan
            .clone()
            .filter(|_| modes.contains(&GenerationMode::Medusa)),
        prompt_cache,
        outlook: engine.drafting_outlook()?,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

/// Tokens a follow-up answer may have: its time to first token is what is measured.
const FOLLOW_UP_TOKENS: u32 = 16;

fn bench_prompt_cache(
    engine: &Engine,
    prompts: &[String],
    max_tokens: u32,
) -> anyhow::Result<PromptCacheResult> {
    // Adds nothing to lookup's memory: later runs must not draft these answers.
    let greedy = |prompt: Prompt, max_tokens: u32| GenerateRequest {
        lookup_memory: LookupMemoryUse::ReadOnly,
        ..GenerateRequest::new(prompt, max_tokens).with_sampling(SamplingParams::greedy())
    };
    let (mut cold_ms, mut cached_ms, mut prompt_tokens, mut cached_tokens) = (0.0, 0.0, 0, 0);
    let mut identical = 0;
    for (i, text) in prompts.iter().enumerate() {
        let first = vec![ChatMessage::new("user", text.as_str())];
        let answer = engine
            .generate(greedy(Prompt::Chat(first.clone()), max_tokens))?
            .wait()?;
        let mut follow_up = first;
        follow_up.push(ChatMessage::new("assistant", answer.text));
        follow_up.push(ChatMessage::new(
            "user",
            "Thank you. Now say it again more briefly.",
        ));
        let run = |cache_prompt: bool| -> anyhow::Result<RunSummary> {
            let request = GenerateRequest {
                cache_prompt,
                ..greedy(Prompt::Chat(follow_up.clone()), FOLLOW_UP_TOKENS)
            };
            Ok(engine.generate(request)?.wait()?)
        };
        // The cold run keeps nothing, so the cached one finds the first turn either way.
        let (cold, cached) = if i % 2 == 0 {
            let cold = run(false)?;
            (cold, run(true)?)
        } else {
            let cached = run(true)?;
            (run(false)?, cached)
        };
        eprintln!(
            "[follow-up {}/{}] {} prompt tokens, first token after {:.0} ms read whole, {:.0} ms with {} cached",
            i + 1,
            prompts.len(),
            cold.prompt_tokens,
            cold.ttft_ms,
            cached.ttft_ms,
            cached.cached_prompt_tokens
        );
        cold_ms += cold.ttft_ms;
        cached_ms += cached.ttft_ms;
        prompt_tokens += cold.prompt_tokens;
        cached_tokens += cached.cached_prompt_tokens;
        identical += usize::from(cold.token_ids == cached.token_ids);
    }
    let n = prompts.len().max(1) as f64;
    Ok(PromptCacheResult {
        follow_ups: prompts.len(),
        prompt_tokens: prompt_tokens as f64 / n,
        cached_prompt_tokens: cached_tokens as f64 / n,
        ttft_ms_cold: cold_ms / n,
        ttft_ms_cached: cached_ms / n,
        cached_over_cold: cached_ms / cold_ms.max(1e-9),
        outputs_identical: identical,
    })
}

/// Totals of N requests, run together or one after another.
#[derive(Default)]
struct BatchTotals {
    tokens: usize,
    wall_ms: f64,
    ttft_ms: f64,
    steps: usize,
    runs: usize,
    identical_to_normal: usize,
}

impl BatchTotals {
    fn tokens_per_second(&self) -> f64 {
        self.tokens as f64 * 1000.0 / self.wall_ms.max(1e-9)
    }
}

/// Runs `requests` together (all submitted at once) or one after another; returns the
/// summaries and the wall time.
fn run_requests(
    engine: &Engine,
    requests: Vec<GenerateRequest>,
    together: bool,
) -> anyhow::Result<(Vec<RunSummary>, f64)> {
    let started = Instant::now();
    let summaries = if together {
        let streams = requests
            .into_iter()
            .map(|r| engine.generate(r))
            .collect::<Result<Vec<_>, _>>()?;
        streams
            .into_iter()
            .map(|s| s.wait())
            .collect::<Result<Vec<_>, _>>()?
    } else {
        requests
            .into_iter()
            .map(|r| engine.generate(r).and_then(|s| s.wait()))
            .collect::<Result<Vec<_>, _>>()?
    };
    Ok((summaries, started.elapsed().as_secs_f64() * 1000.0))
}

/// Aggregate throughput of `streams` concurrent requests against the same requests in a row.
fn bench_concurrency(
    engine: &Engine,
    prompts: &[String],
    modes: &[GenerationMode],
    streams: usize,
    args: &BenchArgs,
) -> anyhow::Result<Vec<ModeResult>> {
    let chat = |text: &str| Prompt::Chat(vec![ChatMessage::new("user", text)]);
    let mut together = Vec::new();
    let mut in_a_row = Vec::new();
    for _ in modes {
        together.push(BatchTotals::default());
        in_a_row.push(BatchTotals::default());
    }
    for round in 0..args.rounds as usize {
        let texts: Vec<&String> = (0..streams)
            .map(|i| &prompts[(i + round) % prompts.len()])
            .collect();
        let mut normal_tokens: Vec<Vec<i32>> = Vec::new();
        for (m, &mode) in modes.iter().enumerate() {
            let requests = || {
                texts
                    .iter()
                    .map(|t| {
                        args.with_drafts(GenerateRequest {
                            max_draft_tokens: args.max_draft,
                            cache_prompt: false,
                            ..GenerateRequest::new(chat(t), args.max_tokens)
                                .with_sampling(SamplingParams::greedy())
                                .with_mode(mode)
                        })
                    })
                    .collect::<Vec<_>>()
            };
            // Alternate which goes first so that drift in machine load favours neither.
            let order = if round % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for concurrent in order {
                let (summaries, wall_ms) = run_requests(engine, requests(), concurrent)?;
                let totals = if concurrent {
                    &mut together[m]
                } else {
                    &mut in_a_row[m]
                };
                totals.wall_ms += wall_ms;
                for summary in &summaries {
                    totals.tokens += summary.tokens_generated;
                    totals.ttft_ms += summary.ttft_ms;
                    totals.steps += summary.steps;
                    totals.runs += 1;
                }
                if concurrent {
                    if mode == GenerationMode::Normal {
                        normal_tokens = summaries.iter().map(|s| s.token_ids.clone()).collect();
                    }
                    totals.identical_to_normal += summaries
                        .iter()
                        .zip(&normal_tokens)
                        .filter(|(s, n)| &s.token_ids == *n)
                        .count();
                }
            }
            eprintln!(
                "[{streams} streams, round {}] {mode}: together {:.1} tok/s, one after another {:.1} tok/s",
                round + 1,
                together[m].tokens_per_second(),
                in_a_row[m].tokens_per_second()
            );
        }
    }
    let normal_tps = together[0].tokens_per_second();
    Ok(modes
        .iter()
        .zip(together.iter().zip(&in_a_row))
        .map(|(&mode, (t, seq))| ModeResult {
            mode,
            concurrency: streams,
            tokens_per_second: t.tokens_per_second(),
            ttft_ms: t.ttft_ms / t.runs.max(1) as f64,
            tokens_generated: t.tokens,
            total_ms: t.wall_ms,
            runs: t.runs,
            mean_accepted: tokens_per_step(t.tokens, t.runs, t.steps),
            acceptance_by_depth: Vec::new(),
            speedup_vs_normal: t.tokens_per_second() / normal_tps.max(1e-9),
            round_tokens_per_second: Vec::new(),
            round_speedup: None,
            outputs_identical_to_normal: t.identical_to_normal,
            sequential_tokens_per_second: Some(seq.tokens_per_second()),
            throughput_vs_sequential: Some(
                t.tokens_per_second() / seq.tokens_per_second().max(1e-9),
            ),
            step_profile: None,
        })
        .collect())
}

/// Answers the prompts of `--remember` so that lookup's memory holds their text; how many.
fn remember(engine: &Engine, args: &BenchArgs) -> anyhow::Result<usize> {
    let mut remembered = 0;
    for file in &args.remember {
        let prompts = load_prompts(Some(file))?;
        for text in &prompts {
            let request = GenerateRequest::new(
                Prompt::Chat(vec![ChatMessage::new("user", text.as_str())]),
                args.max_tokens,
            )
            .with_sampling(SamplingParams::greedy());
            engine.generate(request)?.wait()?;
        }
        eprintln!(
            "lookup remembers the answers to {} prompts of {}",
            prompts.len(),
            file.display()
        );
        remembered += prompts.len();
    }
    Ok(remembered)
}
