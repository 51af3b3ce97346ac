//! A large history import into `medusa serve` is read as it arrives: the server's memory grows
//! by a fraction of the document, where holding it whole took several times its size.

use serde_json::{json, Value};

use crate::serve::{agent, serve};

/// Runs, steps per run and drafted nodes per step of the document: some 70 MB of JSON, most of
/// it in the steps' trees, in few rows.
const RUNS: usize = 100;
const STEPS: usize = 20;
const NODES: usize = 400;

/// An export of [`RUNS`] finished runs, each of [`STEPS`] steps drafting [`NODES`] nodes.
fn drafted_document() -> String {
    let nodes: Vec<Value> = (0..NODES)
        .map(|i| {
            json!({
                "token": 7, "text": "a", "parent": i.checked_sub(1), "source": "medusa_head_1",
                "rank": 0, "accepted": i == 0,
            })
        })
        .collect();
    let steps: Vec<String> = (0..STEPS)
        .map(|index| {
            json!({
                "step_index": index, "tree_size": NODES, "tree_depth": NODES, "accepted_len": 2,
                "tokens": [7, 7], "sources": ["medusa", "model"], "depth_hits": [true, false],
                "draft_ms": 0.5, "verify_ms": 2.0,
                "tree": {
                    "root": {"token": 7, "text": "a"},
                    "nodes": nodes,
                    "model_token": {"token": 7, "text": "a"},
                },
            })
            .to_string()
        })
        .collect();
    let steps = steps.join(",");
    let runs: Vec<String> = (0..RUNS)
        .map(|i| {
            let run = json!({
                "id": i + 1,
                "uid": format!("00000000-0000-4000-8000-{i:012}"),
                "status": "finished",
                "created_at": "2025-03-01T12:00:00Z",
                "mode": "medusa",
                "model": {"name": "drafted", "path": "/models/drafted.gguf", "file_type": "Q4_1"},
                "prompt": {"kind": "text", "content": format!("drafted run {i}")},
                "sampling": {"temperature": 0.0},
                "max_tokens": 2 * STEPS,
                "stop": [],
                "output": "a".repeat(2 * STEPS),
                "tokens_generated": 2 * STEPS,
            });
            format!(r#"{{"run": {run}, "steps": [{steps}]}}"#)
        })
        .collect();
    format!(
        r#"{{"version": 2, "exported_at": "2025-03-01T12:00:00Z", "runs": [{}], "comparisons": []}}"#,
        runs.join(",")
    )
}

/// The most memory process `pid` has held resident so far (`VmHWM`), in bytes.
fn peak_resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the status");
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse::<u64>().ok())
        .expect("VmHWM in kB");
    kib << 10
}

#[test]
fn a_large_import_is_read_as_it_arrives_not_held_whole() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(&dir.path().join("history.sqlite"));
    let document = drafted_document();
    let pid = served.child.id();
    let before = peak_resident_bytes(pid);

    let report: Value = agent()
        .post(&format!("{}/api/runs/import", served.base))
        .set("Content-Type", "application/json")
        .send_string(&document)
        .expect("the import is answered")
        .into_json()
        .expect("a report");
    assert_eq!(report["imported"], RUNS, "{report}");
    assert_eq!(report["rejected"], 0, "{report}");

    // Held whole, the body alone was the document's size, and its runs read several times it.
    let grown = peak_resident_bytes(pid).saturating_sub(before);
    assert!(
        grown < document.len() as u64,
        "importing {} MB grew the server's peak memory by {} MB",
        document.len() >> 20,
        grown >> 20
    );
    // Every step came through with its tree.
    let listed: Value = agent()
        .get(&format!("{}/api/runs?limit=1", served.base))
        .call()
        .expect("runs listed")
        .into_json()
        .expect("JSON");
    let id = listed["runs"][0]["id"].as_i64().expect("a run id");
    let detail: Value = agent()
        .get(&format!("{}/api/runs/{id}", served.base))
        .call()
        .expect("the run")
        .into_json()
        .expect("JSON");
    let steps = detail["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), STEPS);
    assert_eq!(
        steps[STEPS - 1]["tree"]["nodes"].as_array().unwrap().len(),
        NODES
    );
}
