//! Heads training jobs over real HTTP on the real default model: a job on a small prompt set
//! is refused while another runs, cancelled during collection (keeping its answers), resumed
//! from them to the end, its progress followed as server-sent events in order; the heads it
//! writes beside the model load and draft, and the job stays in the history and its export
//! until it is deleted with its answers.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use engine::{Engine, EngineConfig};
use playground::Playground;
use serde_json::{json, Value};

use crate::common::*;

const PHASES: [&str; 7] = [
    "starting",
    "loading_model",
    "collecting",
    "training",
    "writing",
    "tuning",
    "done",
];

/// A server on the default model without heads, whose only models folder is `dir`.
fn start_in(dir: &Path) -> String {
    let model = models::default_model_path().expect("default model available");
    let mut config = EngineConfig::new(model);
    config.ctx_size = Some(1024);
    let access = server::AccessPolicy {
        loadable_dirs: vec![dir.to_path_buf()],
        ..server::AccessPolicy::default()
    };
    serve(
        move |store| {
            let engine = Arc::new(Engine::load(config.clone()).expect("model loads"));
            Playground::new(engine, store, config)
        },
        None,
        access,
    )
}

/// The job's snapshots from its event stream, until it stops running; `each` sees every one
/// as it arrives.
fn follow(base: &str, id: i64, mut each: impl FnMut(&Value)) -> Vec<Value> {
    let (status, response) = send(
        agent().get(&format!("{base}/api/training/{id}/events")),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(response.content_type(), "text/event-stream");
    let mut jobs = Vec::new();
    for line in BufReader::new(response.into_reader()).lines() {
        let line = line.expect("line");
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let job: Value = serde_json::from_str(data).expect("a job");
        each(&job);
        jobs.push(job);
    }
    jobs
}

fn phase_index(job: &Value) -> usize {
    let phase = job["phase"].as_str().unwrap();
    PHASES
        .iter()
        .position(|p| *p == phase)
        .unwrap_or_else(|| panic!("unknown phase {phase}"))
}

#[test]
fn a_training_job_collects_cancels_resumes_and_writes_heads_that_load() {
    let dir = tempfile::tempdir().unwrap();
    let model: PathBuf = dir.path().join("tiny.gguf");
    std::fs::copy(models::default_model_path().unwrap(), &model).unwrap();
    let prompts = dir.path().join("prompts.txt");
    let lines: Vec<String> = training::DEFAULT_PROMPTS
        .lines()
        .take(40)
        .map(str::to_owned)
        .collect();
    std::fs::write(&prompts, lines.join("\n")).unwrap();
    let base = start_in(dir.path());
    let model_text = model.display().to_string();

    // Refusals name what is wrong, before any job exists.
    let outside = tempfile::tempdir().unwrap();
    let stray = outside.path().join("stray.gguf");
    std::fs::write(&stray, b"GGUF").unwrap();
    let request = |extra: Value| {
        let mut body = json!({"model": model_text, "prompts": prompts.display().to_string(),
                              "max_tokens": 32, "epochs": 2, "vocab_subset": 512,
                              "tune_prompts": 2, "tune_max_tokens": 16});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body.to_string()
    };
    assert_error(
        post_to(&base, "/api/training", &request(json!({"model": stray}))),
        403,
        "path_not_allowed",
    );
    for (extra, param) in [
        (json!({"epochs": 0}), "epochs"),
        (json!({"samples": 5}), "samples"),
        (json!({"samples": 41}), "samples"),
        (json!({"tune_prompts": 0}), "tune_prompts"),
        (
            json!({"prompts": dir.path().join("missing.txt")}),
            "prompts",
        ),
    ] {
        let answer = post_to(&base, "/api/training", &request(extra.clone()));
        assert_eq!(answer.1["error"]["param"], param, "{extra}: {}", answer.1);
        assert_error(answer, 400, "invalid_parameter");
    }
    let (_, jobs) = get_from(&base, "/api/training");
    assert_eq!(jobs, json!([]));

    // The form is told where the heads will go before a job starts.
    let heads = dir.path().join("tiny.medusa.gguf");
    let planned = |base: &str| {
        let query = format!("/api/training/heads?model={}", urlencode(&model_text));
        let (status, planned) = get_from(base, &query);
        assert_eq!(status, 200, "{planned}");
        assert_eq!(planned["model"], model_text);
        planned["heads_path"].as_str().unwrap().to_owned()
    };
    assert_eq!(planned(&base), heads.display().to_string());
    assert_error(
        get_from(
            &base,
            &format!(
                "/api/training/heads?model={}",
                urlencode(&stray.display().to_string())
            ),
        ),
        403,
        "path_not_allowed",
    );

    // Start; a second job waits for the first.
    let (status, job) = post_to(&base, "/api/training", &request(json!({})));
    assert_eq!(status, 201, "{job}");
    assert_eq!(job["status"], "running");
    assert_eq!(job["model_name"], "tiny");
    // Its heads file is chosen as it starts, and names it.
    assert_eq!(job["heads_path"], heads.display().to_string());
    assert_eq!(job["name"], "tiny.medusa.gguf");
    assert_eq!(job["settings"]["samples"], 40);
    let id = job["id"].as_i64().unwrap();
    // A job started now would not take that name, though no file has it yet.
    let second_heads = dir.path().join("tiny-2.medusa.gguf");
    assert_eq!(planned(&base), second_heads.display().to_string());
    assert_error(
        post_to(&base, "/api/training", &request(json!({}))),
        409,
        "training_in_progress",
    );
    assert_error(delete_job(&base, id), 409, "training_running");

    // Cancel once answers arrive: the job stops, keeping them.
    let mut cancelled = false;
    let first = follow(&base, id, |job| {
        if !cancelled && job["figures"]["answered"].as_u64().unwrap() > 0 {
            let (status, _) = send(
                agent().post(&format!("{base}/api/training/{id}/cancel")),
                Some(""),
            );
            assert_eq!(status, 204);
            cancelled = true;
        }
    });
    let stopped = first.last().unwrap();
    assert_eq!(stopped["status"], "cancelled", "{stopped}");
    let kept = stopped["figures"]["answered"].as_u64().unwrap();
    assert!(kept > 0, "{stopped}");
    assert_error(
        post_to(&base, &format!("/api/training/{id}/cancel"), ""),
        409,
        "not_running",
    );
    let (_, listed) = get_from(&base, "/api/training");
    assert_eq!(listed[0]["id"], id);
    assert_eq!(listed[0]["status"], "cancelled");

    // Resume: collection goes on from the answers kept, then training, the heads, the tune.
    let (status, resumed) = post_to(&base, &format!("/api/training/{id}/resume"), "");
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed["status"], "running");
    let jobs = follow(&base, id, |_| {});
    let last = jobs.last().unwrap();
    assert_eq!(last["status"], "finished", "{last}");
    let mut answered = kept;
    let mut phase = 0;
    let mut step = 0;
    for job in &jobs {
        let figures = &job["figures"];
        let now = figures["answered"].as_u64().unwrap();
        assert!(
            now >= answered,
            "answers counted back from {answered} to {now}"
        );
        answered = now;
        let index = phase_index(job);
        assert!(index >= phase, "phase went back to {}", job["phase"]);
        phase = index;
        let now = figures["step"].as_u64().unwrap();
        if job["phase"] == "training" {
            assert!(now >= step, "step went back from {step} to {now}");
        }
        step = now;
    }
    assert_eq!(last["phase"], "done");
    let figures = &last["figures"];
    assert_eq!(figures["answered"], 40);
    assert_eq!(figures["step"], figures["steps"]);
    assert_eq!(figures["tuned"], 2);
    assert!(figures["seconds_left"].is_null());
    let losses = figures["losses"].as_array().unwrap();
    assert!(!losses.is_empty());
    assert_eq!(losses.last().unwrap()["step"], figures["steps"]);
    assert_eq!(losses[0]["head_losses"].as_array().unwrap().len(), 4);
    // The untrained heads, then 4 evaluations in each of 2 epochs (fewer when an epoch has
    // fewer steps), the last at the end.
    let evaluations = figures["evaluations"].as_array().unwrap();
    assert_eq!(evaluations[0]["step"], 0);
    assert_eq!(evaluations.last().unwrap()["step"], figures["steps"]);
    let per_epoch = figures["steps"].as_u64().unwrap() / 2;
    assert_eq!(evaluations.len() as u64, 1 + 2 * per_epoch.min(4));
    for evaluation in evaluations {
        assert_eq!(evaluation["top1"].as_array().unwrap().len(), 4);
        assert!(evaluation["tree_tokens_per_step"].as_f64().unwrap() >= 1.0);
    }
    let phases: Vec<&str> = figures["phase_seconds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    for needed in ["collecting", "training", "writing", "tuning"] {
        assert!(phases.contains(&needed), "{phases:?}");
    }

    let report = &last["report"];
    assert_eq!(report["heads_path"], heads.display().to_string());
    assert_eq!(last["name"], "tiny.medusa.gguf");
    assert_eq!(last["heads_path"], report["heads_path"]);
    assert!(heads.is_file());
    assert_eq!(report["prompts"], 40);
    assert_eq!(report["heldout_top1"], evaluations.last().unwrap()["top1"]);
    assert!(report["tune"]["decision"]
        .as_str()
        .is_some_and(|d| !d.is_empty()));
    let data = PathBuf::from(last["data_path"].as_str().unwrap());
    assert!(data.is_absolute(), "{}", data.display());
    assert!(data.is_file(), "the collected answers stay for another run");

    // Picked as the model, the heads are refused at once, naming the model they go with.
    let (status, refused) = post_to(&base, "/api/model", &json!({ "model": heads }).to_string());
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "heads_not_model");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "tiny.medusa.gguf is a Medusa heads file, not a model: it goes with tiny.gguf beside it"
        ),
        "{message}"
    );

    // The heads load beside the model, and Medusa mode drafts with them.
    let (status, _) = post_to(
        &base,
        "/api/model",
        &json!({"model": model_text, "heads": heads}).to_string(),
    );
    assert_eq!(status, 202);
    let info = wait_for_info(&base, |info| {
        info["modes"]
            .as_array()
            .is_some_and(|m| m.contains(&json!("medusa")))
    });
    assert_eq!(info["heads_path"], heads.display().to_string());
    let events = generate(
        &base,
        &json!({"prompt": "Name three colours.", "mode": "medusa", "max_tokens": 8,
                "sampling": {"temperature": 0.0}}),
    )
    .expect("a Medusa run");
    assert_eq!(events.last().unwrap()["type"], "finished");

    // The job is in the history and its export; importing it again adds nothing.
    let (status, stored) = get_from(&base, &format!("/api/training/{id}"));
    assert_eq!(status, 200);
    assert_eq!(stored["status"], "finished");
    assert_eq!(stored["report"], *report);
    let (status, export) = get_from(&base, "/api/runs/export?format=json");
    assert_eq!(status, 200);
    assert_eq!(export["training_jobs"][0]["uid"], stored["uid"]);
    let (status, imported) = post_to(&base, "/api/runs/import", &export.to_string());
    assert_eq!(status, 200, "{imported}");
    assert_eq!(imported["training_jobs_imported"], 0);
    assert_error(
        post_to(&base, &format!("/api/training/{id}/resume"), ""),
        409,
        "not_resumable",
    );
    assert_error(get_from(&base, "/api/training/999"), 404, "not_found");

    // Deleting the job removes it with its collected answers; the heads it wrote stay.
    let data_bytes = std::fs::metadata(&data).unwrap().len();
    let (status, deleted) = delete_job(&base, id);
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted, json!({"id": id, "freed_bytes": data_bytes}));
    assert!(!data.exists());
    assert!(heads.is_file());
    assert_error(
        get_from(&base, &format!("/api/training/{id}")),
        404,
        "not_found",
    );
    assert_eq!(get_from(&base, "/api/training").1, json!([]));
    assert_error(delete_job(&base, id), 404, "not_found");
    // The next job's heads go beside the ones on disk.
    assert_eq!(planned(&base), second_heads.display().to_string());
}

/// `text` for a query string.
fn urlencode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

fn delete_job(base: &str, id: i64) -> (u16, Value) {
    let (status, response) = send(agent().delete(&format!("{base}/api/training/{id}")), None);
    (status, response.into_json().expect("JSON answer"))
}

/// A stored job as an export holds it, interrupted while it collected.
fn exported_job(n: u32, model: &Path, prompts: &Path, heads: &Path, data: &Path) -> Value {
    let settings = playground::training_figures::TrainingSettings {
        prompts_file: Some(prompts.display().to_string()),
        samples: 2,
        max_tokens: 16,
        epochs: 1,
        heads: 2,
        vocab_subset: Some(512),
        path_input: true,
        heldout_every: 10,
        evaluations_per_epoch: 1,
        tune_prompts: 1,
        tune_max_tokens: 16,
    };
    let figures = playground::training_figures::TrainingFigures::planned(2, 1, 1);
    json!({
        "id": n, "uid": format!("00000000-0000-4000-8000-{n:012}"),
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
        "status": "interrupted", "phase": "collecting", "name": "",
        "model_name": "tiny", "model_path": model, "settings": settings,
        "data_path": data, "heads_path": heads, "figures": figures,
        "report": null, "error": null,
    })
}

/// An import's paths are somebody else's input: a job whose model or prompt file the server may
/// not read is left out of the import; one imported is checked again when it resumes (its files
/// may have changed since), writes its heads only beside its model, and keeps its answers in the
/// history's own folder whatever path it holds.
#[test]
fn imported_jobs_read_and_write_only_where_a_new_job_may() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    std::fs::copy(models::default_model_path().unwrap(), &model).unwrap();
    let prompts = dir.path().join("prompts.txt");
    std::fs::write(&prompts, "Name a colour.\nName a fruit.\n").unwrap();
    let swapped = dir.path().join("swapped.txt");
    std::fs::write(&swapped, "Name a colour.\nName a fruit.\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "not for the server\n").unwrap();
    let stray = |name: &str| outside.path().join(name);
    let heads = dir.path().join("tiny.medusa.gguf");
    let data = dir.path().join("job.data");
    let base = start_in(dir.path());

    let (status, mut export) = get_from(&base, "/api/runs/export?format=json");
    assert_eq!(status, 200);
    export["training_jobs"] = json!([
        exported_job(1, &stray("tiny.gguf"), &prompts, &heads, &data),
        exported_job(2, &model, Path::new("/dev/zero"), &heads, &data),
        exported_job(3, &model, &prompts, &stray("tiny.medusa.gguf"), &data),
        exported_job(4, &model, &swapped, &heads, &data),
        exported_job(5, &model, &prompts, &heads, &stray("job.data")),
    ]);
    let (status, report) = post_to(&base, "/api/runs/import", &export.to_string());
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["training_jobs_imported"], 3, "{report}");
    assert_eq!(report["rejected"], 2, "{report}");
    let reasons: Vec<&str> = report["rejections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons[0].contains("training job 1:")
            && reasons[0].contains("tiny.gguf is not a file in the models directory"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("training job 2:") && reasons[1].contains("/dev/zero"),
        "{reasons:?}"
    );

    let (_, jobs) = get_from(&base, "/api/training");
    let id_of = |n: u32| {
        let uid = format!("00000000-0000-4000-8000-{n:012}");
        jobs.as_array()
            .unwrap()
            .iter()
            .find(|job| job["uid"] == uid)
            .unwrap_or_else(|| panic!("job {n} imported: {jobs}"))["id"]
            .as_i64()
            .unwrap()
    };
    let resume = |id: i64| post_to(&base, &format!("/api/training/{id}/resume"), "");

    // Heads written anywhere but beside the model are refused.
    let (status, refused) = resume(id_of(3));
    assert_eq!(
        (status, refused["error"]["code"].clone()),
        (403, json!("path_not_allowed")),
        "{refused}"
    );
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not a heads file beside its model"));
    // A prompt file that now leads out of the allowed folder is refused as at a start.
    std::fs::remove_file(&swapped).unwrap();
    std::os::unix::fs::symlink(&secret, &swapped).unwrap();
    assert_error(resume(id_of(4)), 403, "path_not_allowed");

    // A job whose only stray path is its answers' file keeps them in the history's folder.
    let id = id_of(5);
    let (status, resumed) = resume(id);
    assert_eq!(status, 200, "{resumed}");
    let kept = resumed["data_path"].as_str().unwrap();
    assert!(
        kept.ends_with(&format!("/training/job-{id}.data")),
        "{kept}"
    );
    // Stopped, or already past what a cancel can stop (ended, or tuning its few heads on a
    // busy machine): it ends either way.
    let cancel = agent().post(&format!("{base}/api/training/{id}/cancel"));
    let (status, answer) = send(cancel, Some(""));
    if status != 204 {
        let refusal: Value = answer.into_json().unwrap();
        assert_eq!(status, 409, "{refusal}");
        let code = refusal["error"]["code"].as_str().unwrap_or_default();
        assert!(
            ["not_running", "training_tuning"].contains(&code),
            "{refusal}"
        );
    }
    let last = follow(&base, id, |_| {}).pop().unwrap();
    assert_ne!(last["status"], "running", "{last}");
    let mut left: Vec<_> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["secret.txt"],
        "nothing is written outside the allowed folders"
    );
    assert!(!data.exists());
}

/// A job stopped while tuning (the process killed, say) had trained and written its heads: its
/// resume tunes those heads and keeps them, rather than training again beside them.
#[test]
fn a_job_stopped_while_tuning_resumes_with_its_tune_and_keeps_its_heads() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    std::fs::copy(models::default_model_path().unwrap(), &model).unwrap();
    let heads = dir.path().join("tiny.medusa.gguf");
    std::fs::copy(models::default_heads_path().unwrap(), &heads).unwrap();
    let prompts = dir.path().join("prompts.txt");
    std::fs::write(&prompts, "Name a colour.\nName a fruit.\n").unwrap();
    let data = dir.path().join("job.data");
    let trained = json!({
        "heads_path": heads, "file_bytes": 1234, "prompts": 2, "generated_tokens": 32,
        "train_positions": 28, "heldout_positions": 4, "untrained_top1": [0.0, 0.0],
        "heldout_top1": [0.5, 0.25], "heldout_top5": [0.75, 0.5], "tree_nodes": 3,
        "expected_tokens_per_step": 1.5, "tree_tokens_per_step": 1.6, "tune": null,
    });
    let mut job = exported_job(1, &model, &prompts, &heads, &data);
    job["phase"] = json!("tuning");
    job["report"] = trained.clone();
    let base = start_in(dir.path());
    let (_, mut export) = get_from(&base, "/api/runs/export?format=json");
    export["training_jobs"] = json!([job]);
    let (status, report) = post_to(&base, "/api/runs/import", &export.to_string());
    assert_eq!(
        (status, report["training_jobs_imported"].clone()),
        (200, json!(1)),
        "{report}"
    );
    let (_, jobs) = get_from(&base, "/api/training");
    let id = jobs[0]["id"].as_i64().unwrap();
    let heads_before = std::fs::read(&heads).unwrap();

    let (status, resumed) = post_to(&base, &format!("/api/training/{id}/resume"), "");
    assert_eq!(status, 200, "{resumed}");
    let snapshots = follow(&base, id, |_| {});
    let last = snapshots.last().unwrap();
    assert_eq!(last["status"], "finished", "{last}");
    let phases: Vec<&str> = snapshots
        .iter()
        .map(|job| job["phase"].as_str().unwrap())
        .collect();
    assert!(
        phases
            .iter()
            .all(|phase| ["starting", "tuning", "done"].contains(phase)),
        "nothing collected or trained again: {phases:?}"
    );
    let report = &last["report"];
    assert!(report["tune"].is_object(), "{report}");
    for field in ["heads_path", "prompts", "heldout_top1", "tree_nodes"] {
        assert_eq!(report[field], trained[field], "{field}: {report}");
    }
    assert_eq!(last["heads_path"], json!(heads));
    assert_eq!(std::fs::read(&heads).unwrap(), heads_before);
    let mut files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(
        files,
        ["prompts.txt", "tiny.gguf", "tiny.medusa.gguf"],
        "no second heads file"
    );
}
