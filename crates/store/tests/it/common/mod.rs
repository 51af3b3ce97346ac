//! Fixtures shared by the integration tests: hand-made runs on real SQLite files in temp dirs.

use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::json;
use store::{
    DraftDecisionRecord, DraftNodeRecord, DraftSkipRecord, DrafterEvidenceRecord, HeadsRef,
    ListedRun, MessageRecord, ModelRef, NewRun, PromptRecord, Run, RunOutcome, RunStatus,
    StepRecord, StepTokenRecord, StepTreeRecord, Store, TokenLogprobRecord, TopLogprobRecord,
};
use tempfile::TempDir;
use uuid::Uuid;

pub async fn temp_store() -> (TempDir, Store) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path().join("history.sqlite"))
        .await
        .expect("open store");
    (dir, store)
}

/// 2025-03-01 12:00 UTC plus `minutes`, with a sub-microsecond part to check full precision.
pub fn at(minutes: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 1, 12, 0, 0).unwrap()
        + Duration::minutes(minutes)
        + Duration::nanoseconds(123_456_789)
}

pub fn model(name: &str) -> ModelRef {
    ModelRef {
        name: name.into(),
        path: format!("/models/{name}.gguf"),
        file_type: "Q4_1".into(),
        identity: format!("sha256:{name}"),
    }
}

pub fn chat(text: &str) -> PromptRecord {
    PromptRecord::Chat(vec![
        MessageRecord {
            role: "system".into(),
            content: "Be brief.".into(),
        },
        MessageRecord {
            role: "user".into(),
            content: text.into(),
        },
    ])
}

/// A run with every optional field filled in.
pub fn new_run(mode: &str, model_name: &str, prompt: PromptRecord, minutes: i64) -> NewRun {
    let mut run = NewRun::new(
        mode,
        model(model_name),
        prompt,
        json!({"temperature": 0.0, "top_k": 40, "top_p": 0.95, "seed": null}),
        64,
    );
    run.uid = Uuid::new_v4();
    run.created_at = at(minutes);
    if mode == "medusa" {
        run.heads = Some(HeadsRef {
            path: "/models/heads.medusa.gguf".into(),
            identity: "heads-v1".into(),
        });
        run.tree = Some(json!([[0], [0, 0], [1]]));
        // The store keeps whatever optional fields a run has, whichever mode would use them.
        run.draft_model = Some(model("smollm2-135m-q4_0"));
    }
    run.stop = vec!["\n\n".into(), "</s>".into()];
    run.queue_ms = Some(1.25);
    run
}

pub fn outcome(output: &str, tokens_per_second: f64, minutes: i64) -> RunOutcome {
    RunOutcome {
        output: output.into(),
        stop_reason: "max_tokens".into(),
        prompt_tokens: 12,
        tokens_generated: 64,
        queue_ms: Some(2.0),
        ttft_ms: 35.5,
        total_ms: 64.0 / tokens_per_second * 1000.0,
        tokens_per_second,
        // Doubling is exact, so ratios of decode speeds equal those of the end-to-end speeds.
        decode_tokens_per_second: tokens_per_second * 2.0,
        steps: 40,
        mean_accepted: 1.6,
        acceptance_by_depth: vec![0.5, 0.25, 0.125],
        draft_tokens: Some(70),
        accepted_draft_tokens: Some(24),
        token_ids: Some(vec![7, 0, -1, i32::MAX]),
        logprobs: Some(vec![TokenLogprobRecord {
            token_id: 7,
            text: " ü".into(),
            logprob: -0.5,
            top: vec![TopLogprobRecord {
                token_id: 0,
                text: "\n".into(),
                logprob: -1.25,
            }],
        }]),
        seed: u64::MAX,
        finished_at: at(minutes) + Duration::seconds(3),
    }
}

pub fn step(index: i64) -> StepRecord {
    StepRecord {
        step_index: index,
        tree_size: 4,
        tree_depth: 2,
        accepted_len: 2,
        tokens: vec![100 + index as i32, -1],
        sources: vec!["model".into(), "medusa".into()],
        depth_hits: vec![true, index % 2 == 0],
        draft_ms: 0.5 + index as f64,
        verify_ms: 9.25,
        // Even steps drafted a tree, odd ones drafted nothing and say why.
        tree: (index % 2 == 0).then(|| StepTreeRecord {
            root: StepTokenRecord {
                token: 7,
                text: " the".into(),
            },
            nodes: vec![
                // Guessed by lookup and by the first head (auto mode).
                DraftNodeRecord {
                    also_proposed_by: Some("medusa_head_0".into()),
                    ..node(100 + index as i32, None, "lookup", 0, true)
                },
                node(5, None, "medusa_head_0", 1, false),
                node(6, Some(0), "medusa_head_1", 0, false),
            ],
            model_token: StepTokenRecord {
                token: -1,
                text: "<|im_end|>".into(),
            },
        }),
        skip: (index % 2 == 1).then(|| DraftSkipRecord {
            reason: "not_worth_it".into(),
            message: "auto drafting found nothing that pays here".into(),
        }),
        // Every third step was weighed by the draft budget.
        decision: (index % 3 == 0).then(|| DraftDecisionRecord {
            expected_tokens: 1.5,
            step_ms: 12.25,
            plain_ms: 8.5,
            evidence: vec![DrafterEvidenceRecord {
                drafter: "lookup".into(),
                class: 2,
                accepted: 30,
                tried: 40,
                cautious_rate: 0.65,
                proposed: 8,
                drafted: 3,
            }],
        }),
    }
}

fn node(
    token: i32,
    parent: Option<u32>,
    source: &str,
    rank: u32,
    accepted: bool,
) -> DraftNodeRecord {
    DraftNodeRecord {
        token,
        text: format!("t{token}"),
        parent,
        source: source.into(),
        rank,
        also_proposed_by: None,
        accepted,
    }
}

pub fn steps(range: std::ops::Range<i64>) -> Vec<StepRecord> {
    range.map(step).collect()
}

/// The stored form of `new` after `outcome` finished it.
pub fn expected_finished(id: i64, new: &NewRun, outcome: &RunOutcome) -> Run {
    ListedRun {
        id,
        uid: new.uid,
        status: RunStatus::Finished,
        created_at: new.created_at,
        mode: new.mode.clone(),
        model: new.model.clone(),
        heads: new.heads.clone(),
        draft_model: new.draft_model.clone(),
        tree: new.tree.clone(),
        prompt: new.prompt.clone(),
        sampling: new.sampling.clone(),
        max_tokens: new.max_tokens,
        stop: new.stop.clone(),
        comparison_id: new.comparison_id,
        // The engine's figure at the end, where it gave one.
        queue_ms: outcome.queue_ms.or(new.queue_ms),
        engine: new.engine.clone(),
        output: Some(outcome.output.clone()),
        stop_reason: Some(outcome.stop_reason.clone()),
        prompt_tokens: Some(outcome.prompt_tokens),
        tokens_generated: Some(outcome.tokens_generated),
        ttft_ms: Some(outcome.ttft_ms),
        total_ms: Some(outcome.total_ms),
        tokens_per_second: Some(outcome.tokens_per_second),
        decode_tokens_per_second: Some(outcome.decode_tokens_per_second),
        steps: Some(outcome.steps),
        mean_accepted: Some(outcome.mean_accepted),
        acceptance_by_depth: Some(outcome.acceptance_by_depth.clone()),
        draft_tokens: outcome.draft_tokens,
        accepted_draft_tokens: outcome.accepted_draft_tokens,
        seed: Some(outcome.seed),
        error: None,
        finished_at: Some(outcome.finished_at),
    }
    .with_tokens(outcome.token_ids.clone(), outcome.logprobs.clone())
}

/// Begins, fills with `step_count` steps and finishes a run; returns its id.
pub async fn finished_run(
    store: &Store,
    new: &NewRun,
    outcome: &RunOutcome,
    step_count: i64,
) -> i64 {
    let id = store.begin_run(new).await.expect("begin");
    store
        .append_steps(id, &steps(0..step_count))
        .await
        .expect("append");
    store.finish_run(id, outcome).await.expect("finish");
    id
}

/// A raw connection to the same file, for looking at what the store wrote.
pub async fn raw_connection(store: &Store) -> sqlx::SqliteConnection {
    use sqlx::Connection;
    let url = format!("sqlite://{}", store.path().display());
    sqlx::SqliteConnection::connect(&url)
        .await
        .expect("raw connection")
}
