//! The batcher on the toy model: batching, trees and their verification, cancellation and a
//! full cache, each in milliseconds.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::*;
use crate::config::DEFAULT_DRAFT_CONFIDENCE;
use crate::events::RunSummary;
use crate::request::draft::RequestDraft;
use crate::request::valid::ValidRequest;
use crate::request::{DraftPolicy, GenerateRequest, GenerationMode, Prompt, SamplingParams};
use crate::speculative::model_drafter::{Agreement, DraftModelDrafter, Guesses, ModelProposer};
use crate::step::toy_model::{copied, next_letter, ToyModel, ToyVocabulary};
use crate::token::TokenId;

const TOKENS: u32 = 24;

/// A draft model that knows the toy model's rule but not its twist: a chain of the copies the
/// rule makes, then at the place after it two branches, the copy and the letter after it, one
/// of which is always the model's token.
struct ToyDraftModel;

impl ModelProposer for ToyDraftModel {
    fn prepare(&self, _asks: &[DraftAsk<'_>]) {}

    fn take_counts(&self) -> (u64, u64) {
        (0, 0)
    }

    fn propose(&self, _seq: usize, history: &[TokenId], n: usize) -> Result<Guesses, EngineError> {
        let mut context = history.to_vec();
        for _ in 0..n.saturating_sub(2) {
            context.push(copied(&context));
        }
        let next = copied(&context);
        Ok(Guesses {
            tokens: context[history.len()..].to_vec(),
            branches: vec![next, next_letter(next)],
            ..Guesses::default()
        })
    }
}

fn batcher(model: ToyModel, slots: usize) -> Batcher<'static, ToyModel> {
    batcher_with_cache(model, slots, 0)
}

/// A batcher that keeps up to `cache` finished requests' cells for later prompts.
fn batcher_with_cache(model: ToyModel, slots: usize, cache: usize) -> Batcher<'static, ToyModel> {
    let agreement = Agreement {
        rate: 0.8,
        guesses: 64,
        ms_per_token: 0.1,
    };
    Batcher::new(
        model,
        &ToyVocabulary,
        DrafterPool::new(None, Some(agreement), DEFAULT_DRAFT_CONFIDENCE)
            .with_step_drafter(Box::new(DraftModelDrafter::new(ToyDraftModel))),
        SequenceIds {
            slots,
            cache,
            n_seq_max: slots + cache + 16,
        },
        Arc::new(Shared::default()),
    )
}

fn request(prompt: &str, mode: GenerationMode, draft: DraftPolicy) -> GenerateRequest {
    GenerateRequest::new(Prompt::Text(prompt.into()), TOKENS)
        .with_sampling(SamplingParams::greedy())
        .with_mode(mode)
        .with_draft(draft)
}

/// Queues `request` as the engine's handle does; its events and its cancel flag.
fn submit(
    batcher: &mut Batcher<'_, ToyModel>,
    request: GenerateRequest,
) -> (UnboundedReceiver<GenerationEvent>, Arc<AtomicBool>) {
    let draft = RequestDraft::resolve(&request, None, None, true, false).expect("a valid request");
    let (events, receiver) = unbounded_channel();
    let cancel = Arc::new(AtomicBool::new(false));
    batcher.shared.queued.fetch_add(1, Ordering::Relaxed);
    batcher.queue(QueuedRequest {
        request: Box::new(ValidRequest::accepted(request, draft)),
        grammar: None,
        events,
        cancel: cancel.clone(),
        queued_at: Instant::now(),
    });
    (receiver, cancel)
}

/// Admits and steps until nothing runs or waits.
fn run(batcher: &mut Batcher<'_, ToyModel>) {
    for _ in 0..1000 {
        batcher.admit();
        if batcher.idle() {
            return;
        }
        batcher.guarded_step();
    }
    panic!("the batcher never went idle");
}

/// How a request ended: its summary, or its error.
fn outcome(events: &mut UnboundedReceiver<GenerationEvent>) -> Result<RunSummary, EngineError> {
    while let Ok(event) = events.try_recv() {
        match event {
            GenerationEvent::Finished(summary) => return Ok(summary),
            GenerationEvent::Failed(err) => return Err(err),
            _ => {}
        }
    }
    panic!("the request never ended");
}

const PROMPTS: &[&str] = &["abcab", "xyzxyq", "hello", "ababab", "qwerty", "mnomn"];

#[test]
fn a_batch_of_drafting_requests_writes_what_each_writes_alone() {
    let mut batcher = batcher(ToyModel::new(4096, 256, 128), 4);
    let kinds = [
        (GenerationMode::Draft, DraftPolicy::Length(4)),
        (GenerationMode::Lookup, DraftPolicy::Length(4)),
        (GenerationMode::Normal, DraftPolicy::Auto),
    ];
    let mut running = Vec::new();
    for (i, prompt) in PROMPTS.iter().enumerate() {
        let (mode, draft) = kinds[i % kinds.len()].clone();
        running.push((
            prompt,
            mode,
            submit(&mut batcher, request(prompt, mode, draft)).0,
        ));
    }
    run(&mut batcher);
    let (mut drafted, mut accepted) = (0, 0);
    for (prompt, mode, mut events) in running {
        let summary = outcome(&mut events).expect("finished");
        assert_eq!(
            summary.text,
            ToyModel::continuation(prompt, TOKENS as usize),
            "{prompt} in {mode} mode"
        );
        drafted += summary.draft_tokens.unwrap_or(0);
        accepted += summary.accepted_draft_tokens.unwrap_or(0);
    }
    assert!(accepted > 0, "no drafted token was accepted");
    assert!(drafted > accepted, "no drafted token was rejected");
    let metrics = batcher.shared.metrics();
    assert!(
        metrics.batch_tokens > metrics.steps,
        "no decode held more than one token"
    );
    assert_eq!(batcher.model().cells_held(), 0, "cells left behind");
}

#[test]
fn a_branch_of_a_tree_is_accepted_where_the_chain_is_wrong() {
    // With two guesses a step, both branches at the next place, one of them is the model's
    // token at every step, the twisted ones included.
    let mut batcher = batcher(ToyModel::new(4096, 256, 128), 1);
    let (mut events, _) = submit(
        &mut batcher,
        request("abcab", GenerationMode::Draft, DraftPolicy::Length(2)),
    );
    run(&mut batcher);
    let summary = outcome(&mut events).expect("finished");
    assert_eq!(
        summary.text,
        ToyModel::continuation("abcab", TOKENS as usize)
    );
    assert_eq!(summary.tokens_generated, TOKENS as usize);
    // Every step yields two tokens (the guess, from the chain or the branch, and the model's
    // own) but the first token and the last.
    assert!(
        summary.steps <= TOKENS as usize / 2 + 1,
        "{} steps for {TOKENS} tokens",
        summary.steps
    );
}

#[test]
fn a_cancelled_request_frees_its_slot_and_cells_and_the_others_finish() {
    let mut batcher = batcher(ToyModel::new(4096, 256, 128), 2);
    let draft = || DraftPolicy::Length(4);
    let (mut first, _) = submit(
        &mut batcher,
        request("abcab", GenerationMode::Lookup, draft()),
    );
    let (mut cancelled, cancel) = submit(
        &mut batcher,
        request("hello", GenerationMode::Draft, draft()),
    );
    let (mut waiting, _) = submit(
        &mut batcher,
        request("qwerty", GenerationMode::Normal, DraftPolicy::Auto),
    );
    for _ in 0..3 {
        batcher.admit();
        batcher.guarded_step();
    }
    assert_eq!(batcher.active(), 2, "the third request waits for a slot");
    cancel.store(true, Ordering::Relaxed);
    run(&mut batcher);
    let ended = outcome(&mut cancelled).expect("a cancelled run still reports");
    assert_eq!(ended.stop_reason, StopReason::Cancelled);
    assert!(ended.tokens_generated < TOKENS as usize);
    for (prompt, events) in [("abcab", &mut first), ("qwerty", &mut waiting)] {
        let summary = outcome(events).expect("finished");
        assert_eq!(
            summary.text,
            ToyModel::continuation(prompt, TOKENS as usize)
        );
    }
    assert_eq!(batcher.model().cells_held(), 0, "cells left behind");
}

#[test]
fn a_full_cache_fails_the_requests_of_that_decode_and_the_next_ones_run() {
    // 40 cells: two prompts of 6 and their trees fill it long before 24 tokens each.
    let mut batcher = batcher(ToyModel::new(40, 64, 64), 2);
    let draft = || DraftPolicy::Length(4);
    let mut full: Vec<_> = ["abcabc", "xyzxyz"]
        .iter()
        .map(|p| submit(&mut batcher, request(p, GenerationMode::Lookup, draft())).0)
        .collect();
    run(&mut batcher);
    for events in &mut full {
        let err = outcome(events).expect_err("the cache ran out");
        assert!(err.to_string().contains("no room in the cache"), "{err}");
    }
    assert_eq!(
        batcher.model().cells_held(),
        0,
        "the failed requests' cells stay"
    );
    let mut small = request("abc", GenerationMode::Lookup, draft());
    small.max_tokens = 8;
    let (mut events, _) = submit(&mut batcher, small);
    run(&mut batcher);
    let summary = outcome(&mut events).expect("finished");
    assert_eq!(summary.text, ToyModel::continuation("abc", 8));
}

/// Runs `request` alone to its end.
fn run_alone(batcher: &mut Batcher<'_, ToyModel>, request: GenerateRequest) -> RunSummary {
    let (mut events, _) = submit(batcher, request);
    run(batcher);
    outcome(&mut events).expect("finished")
}

#[test]
fn a_follow_up_reuses_the_cached_cells_and_writes_what_a_cold_start_writes() {
    let mut batcher = batcher_with_cache(ToyModel::new(4096, 256, 128), 2, 2);
    let lookup = || DraftPolicy::Length(4);
    let first = run_alone(
        &mut batcher,
        request("abcab", GenerationMode::Lookup, lookup()),
    );
    let follow_up = format!("abcab{}zz", first.text);
    let warm = run_alone(
        &mut batcher,
        request(&follow_up, GenerationMode::Lookup, lookup()),
    );
    // The first prompt and its answer but its last token (whose cell was never decoded).
    assert_eq!(warm.cached_prompt_tokens, 5 + TOKENS as usize - 1);
    let again = run_alone(
        &mut batcher,
        request(&follow_up, GenerationMode::Lookup, lookup()),
    );
    assert_eq!(again.cached_prompt_tokens, again.prompt_tokens - 1);
    let mut cold = request(&follow_up, GenerationMode::Lookup, lookup());
    cold.cache_prompt = false;
    let cold = run_alone(&mut batcher, cold);
    assert_eq!(cold.cached_prompt_tokens, 0);
    // The toy model reads every cell a token sees: a misplaced cached cell would change these.
    let expected = ToyModel::continuation(&follow_up, TOKENS as usize);
    for (label, summary) in [("warm", &warm), ("again", &again), ("cold", &cold)] {
        assert_eq!(summary.text, expected, "{label}");
    }
}

#[test]
fn cached_cells_make_way_for_running_requests() {
    let mut batcher = batcher_with_cache(ToyModel::new(4096, 256, 128), 2, 2);
    let normal = |prompt: &str| request(prompt, GenerationMode::Normal, DraftPolicy::Auto);
    // One at a time: each finished request is kept, the oldest giving way (two slots, so at
    // most two entries while nothing runs).
    for prompt in ["abcab", "xyzxy", "qwerty"] {
        run_alone(&mut batcher, normal(prompt));
        assert!(batcher.shared.metrics().cached_sequences <= 2);
    }
    assert_eq!(batcher.shared.metrics().cached_sequences, 2);
    assert_eq!(
        run_alone(&mut batcher, normal("abcab")).cached_prompt_tokens,
        0
    );
    let kept = run_alone(&mut batcher, normal("qwerty"));
    assert_eq!(kept.cached_prompt_tokens, kept.prompt_tokens - 1);
    // Two requests at once take both slots: the cache empties for them, and both finish.
    let mut both: Vec<_> = ["hello", "mnomn"]
        .iter()
        .map(|p| (p, submit(&mut batcher, normal(p)).0))
        .collect();
    batcher.admit();
    assert_eq!(batcher.shared.metrics().cached_sequences, 0);
    run(&mut batcher);
    for (prompt, events) in &mut both {
        let summary = outcome(events).expect("finished");
        assert_eq!(
            summary.text,
            ToyModel::continuation(prompt, TOKENS as usize)
        );
    }
    // Once idle, only the cache holds cells.
    let metrics = batcher.shared.metrics();
    assert!(metrics.cached_sequences <= 2);
    assert_eq!(metrics.idle_sequences_in_kv, 0);
    assert_eq!(
        batcher.model().cells_held(),
        batcher.kv.cached_tokens(),
        "cells held outside the cache"
    );
}

#[test]
fn the_summary_counts_the_steps_its_step_events_report() {
    let mut batcher = batcher(ToyModel::new(4096, 256, 128), 2);
    let (mut events, _) = submit(
        &mut batcher,
        request("abcab", GenerationMode::Draft, DraftPolicy::Length(4)),
    );
    run(&mut batcher);
    let mut steps = Vec::new();
    let mut summary = None;
    while let Ok(event) = events.try_recv() {
        match event {
            GenerationEvent::Step(step) => steps.push(step),
            GenerationEvent::Finished(done) => summary = Some(done),
            _ => {}
        }
    }
    let summary = summary.expect("finished");
    assert!(!steps.is_empty());
    // Reading the prompt gives the first token and is no step: every step sends an event,
    // numbered from 1.
    assert_eq!(summary.steps, steps.len());
    let indices: Vec<usize> = steps.iter().map(|s| s.index).collect();
    assert_eq!(indices, (1..=steps.len()).collect::<Vec<_>>());
    let yielded: usize = steps.iter().map(|s| s.accepted_len).sum();
    assert_eq!(summary.mean_accepted, yielded as f64 / steps.len() as f64);
    assert_eq!(
        summary.accepted_draft_tokens,
        Some(steps.iter().map(|s| s.accepted_len - 1).sum())
    );
    assert_eq!(
        summary.draft_tokens,
        Some(steps.iter().map(|s| s.tree_depth).sum())
    );
    let depth = steps.iter().map(|s| s.tree_depth).max().unwrap_or(0);
    let by_depth: Vec<f64> = (0..depth)
        .map(|d| {
            let reached = steps.iter().filter(|s| s.depth_hits.len() > d);
            let (hits, seen) = reached.fold((0, 0), |(h, n), s| {
                (h + usize::from(s.depth_hits[d]), n + 1)
            });
            hits as f64 / seen as f64
        })
        .collect();
    assert_eq!(summary.acceptance_by_depth, by_depth);
    // The first token and what the steps kept (the last step may yield past max_tokens).
    assert!(1 + yielded >= summary.tokens_generated);
}

#[test]
fn a_run_that_ends_at_its_first_token_has_no_steps() {
    let mut batcher = batcher(ToyModel::new(4096, 256, 128), 1);
    let request = GenerateRequest::new(Prompt::Text("abcab".into()), 1)
        .with_sampling(SamplingParams::greedy())
        .with_mode(GenerationMode::Lookup)
        .with_draft(DraftPolicy::Length(4));
    let (mut events, _) = submit(&mut batcher, request);
    run(&mut batcher);
    let summary = outcome(&mut events).expect("finished");
    assert_eq!(summary.tokens_generated, 1);
    assert_eq!(summary.steps, 0);
    assert_eq!(summary.mean_accepted, 1.0);
    assert_eq!(summary.acceptance_by_depth, Vec::<f64>::new());
    assert_eq!(summary.accepted_draft_tokens, Some(0));
}

/// Whether `events` holds generated text yet.
fn has_text(events: &mut UnboundedReceiver<GenerationEvent>) -> bool {
    let mut text = false;
    while let Ok(event) = events.try_recv() {
        text |= matches!(event, GenerationEvent::Text { .. });
    }
    text
}

#[test]
fn a_short_prompt_starts_within_a_step_of_arriving_beside_a_long_prompt() {
    let mut batcher = batcher(ToyModel::new(8192, 2048, 2048), 2);
    let long_prompt = "abcdefghij".repeat(100);
    let normal = |prompt: &str| request(prompt, GenerationMode::Normal, DraftPolicy::Auto);
    let (mut long, _) = submit(&mut batcher, normal(&long_prompt));
    batcher.admit();
    batcher.guarded_step();
    let long_slot = batcher.slots.iter().position(Option::is_some).unwrap();
    let prefilled =
        |batcher: &Batcher<'_, ToyModel>| batcher.slots[long_slot].as_ref().unwrap().prefilled;
    // Alone, the long prompt is read a bounded chunk a step, not a whole batch.
    assert_eq!(prefilled(&batcher), PREFILL_CHUNK_ALONE);

    // A short prompt that arrives meanwhile is read whole in the next step, before the rest of
    // the long one, and writes its first token there.
    let (mut short, _) = submit(&mut batcher, normal("abcab"));
    batcher.admit();
    batcher.guarded_step();
    assert!(has_text(&mut short), "the short prompt waited");
    assert_eq!(prefilled(&batcher), 2 * PREFILL_CHUNK_ALONE - 5);
    // While it decodes, the long prompt goes on a small chunk a step.
    batcher.guarded_step();
    assert_eq!(
        prefilled(&batcher),
        2 * PREFILL_CHUNK_ALONE - 5 + PREFILL_CHUNK_WHEN_BUSY
    );
    assert!(!has_text(&mut long));
    run(&mut batcher);
    let (long, short) = (outcome(&mut long).unwrap(), outcome(&mut short).unwrap());
    assert_eq!(
        long.text,
        ToyModel::continuation(&long_prompt, TOKENS as usize)
    );
    assert_eq!(short.text, ToyModel::continuation("abcab", TOKENS as usize));
}

#[test]
fn a_long_prefill_does_not_stall_running_decodes() {
    let mut batcher = batcher(ToyModel::new(4096, 1024, 128), 2);
    let (mut runner, _) = submit(
        &mut batcher,
        request("abcab", GenerationMode::Normal, DraftPolicy::Auto),
    );
    // The runner decodes by its third step.
    for _ in 0..3 {
        batcher.admit();
        batcher.guarded_step();
    }
    while runner.try_recv().is_ok() {}
    let long_prompt = "the river flows past the old mill ".repeat(20);
    let (mut newcomer, _) = submit(
        &mut batcher,
        request(&long_prompt, GenerationMode::Normal, DraftPolicy::Auto),
    );
    let mut steps = 0;
    let first_token = loop {
        batcher.admit();
        batcher.guarded_step();
        steps += 1;
        let started = std::iter::from_fn(|| newcomer.try_recv().ok())
            .any(|event| matches!(event, GenerationEvent::Text { .. }));
        if started || steps == 100 {
            break started;
        }
    };
    assert!(first_token, "the newcomer never wrote");
    let runner_texts = std::iter::from_fn(|| runner.try_recv().ok())
        .filter(|event| matches!(event, GenerationEvent::Text { .. }))
        .count();
    // The toy reads a letter a token: 520 prompt tokens, read 64 a step beside the runner's
    // decodes, take 9 steps, with a token of the runner's in each.
    assert_eq!(steps, 520usize.div_ceil(PREFILL_CHUNK_WHEN_BUSY));
    assert_eq!(runner_texts, steps);
}
