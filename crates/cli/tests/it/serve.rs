//! `medusa serve` as a process: runs survive a hard kill, and the one cut off is `interrupted`
//! with the output it had; a network address is not served without a key; grammar checks run in
//! children that are stopped at their deadline.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub(crate) struct Served {
    pub(crate) child: Child,
    pub(crate) base: String,
    // Held so that the server never writes to a closed pipe.
    _stdout: BufReader<ChildStdout>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn serve(db: &Path) -> Served {
    serve_with(db, &[])
}

/// `medusa serve` on a free port with `db` and the `extra` arguments.
fn serve_with(db: &Path, extra: &[&str]) -> Served {
    let model = models::default_model_path().expect("default model available");
    let mut child = Command::new(env!("CARGO_BIN_EXE_medusa"))
        .args(["serve", "--port", "0", "--ctx-size", "1024", "--db"])
        .arg(db)
        .args(extra)
        .env("MEDUSA_MODEL", model)
        .env_remove("MEDUSA_HEADS")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("medusa serve starts");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("a line on stdout");
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    // It listens while the model loads; the tests start once it serves.
    let ready = loop {
        line.clear();
        stdout.read_line(&mut line).expect("a line on stdout");
        if line.is_empty() || line.starts_with("ready: ") {
            break line.starts_with("ready: ");
        }
    };
    assert!(ready, "the server ended before its model loaded");
    Served {
        child,
        base,
        _stdout: stdout,
    }
}

pub(crate) fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(600))
        .build()
}

/// Runs `medusa` with `args` (no input), which must fail; its error output.
fn refused(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_medusa"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("medusa runs");
    assert!(!output.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn runs(base: &str, query: &str) -> Vec<Value> {
    let answer: Value = agent()
        .get(&format!("{base}/api/runs{query}"))
        .call()
        .expect("runs listed")
        .into_json()
        .expect("JSON");
    answer["runs"].as_array().expect("runs array").clone()
}

#[test]
fn runs_survive_a_killed_server() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("history.sqlite");
    let mut finished = Vec::new();
    {
        let server = serve(&db);
        for prompt in ["The first run", "The second run"] {
            let answer: Value = agent()
                .post(&format!("{}/generate/normal", server.base))
                .send_json(json!({"prompt": prompt, "max_length": 4}))
                .expect("generated")
                .into_json()
                .expect("JSON");
            finished.push(answer);
        }

        let response = agent()
            .post(&format!("{}/v1/completions", server.base))
            .send_json(json!({
                "prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
                "max_tokens": 900, "temperature": 0, "stream": true
            }))
            .expect("stream starts");
        let mut reader = BufReader::new(response.into_reader());
        // Read the stream past the interval at which a running run's output is written.
        let mut streamed = String::new();
        let mut first_text = None;
        while first_text.is_none_or(|at: Instant| at.elapsed() < Duration::from_secs(3)) {
            let mut line = String::new();
            assert!(
                reader.read_line(&mut line).expect("read") > 0,
                "stream ended"
            );
            let Some(data) = line.trim().strip_prefix("data: ") else {
                continue;
            };
            assert_ne!(data, "[DONE]", "the run ended before the kill");
            let chunk: Value = serde_json::from_str(data).expect("a JSON chunk");
            streamed.push_str(chunk["choices"][0]["text"].as_str().unwrap_or_default());
            first_text.get_or_insert_with(Instant::now);
        }
        let running = runs(&server.base, "?status=running");
        assert_eq!(running.len(), 1, "{running:?}");
        let killed_id = running[0]["id"].as_i64().unwrap();
        drop(server); // SIGKILL mid-run.
        let mut rest = Vec::new();
        let _ = reader.read_to_end(&mut rest);
        finished.push(json!({"killed": killed_id, "streamed": streamed}));
    }

    let server = serve(&db);
    let all = runs(&server.base, "?sort=created_at&order=asc");
    assert_eq!(all.len(), 3, "{all:?}");
    for (run, answer) in all.iter().zip(&finished[..2]) {
        assert_eq!(run["id"], answer["run_id"]);
        assert_eq!(run["status"], "finished");
        assert_eq!(run["output"], answer["text"]);
        assert_eq!(run["tokens_generated"], answer["tokens_generated"]);
    }
    assert_eq!(all[2]["id"], finished[2]["killed"]);
    assert_eq!(all[2]["status"], "interrupted");
    // What was produced until a moment before the kill is kept.
    let kept = all[2]["output"].as_str().expect("partial output kept");
    let streamed = finished[2]["streamed"].as_str().unwrap();
    assert!(
        !kept.is_empty() && streamed.starts_with(kept),
        "{kept:?} / {streamed:?}"
    );
    assert!(all[2]["tokens_generated"].as_i64().unwrap() > 0);
}

#[test]
fn a_network_address_is_not_served_without_a_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let refuse = |args: &[&str], key: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_medusa"));
        command
            .args(["serve", "--port", "0", "--no-ui", "--db"])
            .arg(dir.path().join("h.sqlite"))
            .args(args)
            .env_remove("MEDUSA_API_KEY");
        if let Some(key) = key {
            command.env("MEDUSA_API_KEY", key);
        }
        let output = command.output().expect("medusa runs");
        assert!(!output.status.success(), "{args:?} served");
        String::from_utf8(output.stderr).unwrap()
    };
    let open = refuse(&["--host", "0.0.0.0"], None);
    assert!(open.contains("give --api-key KEY"), "{open}");
    let short = refuse(&["--host", "0.0.0.0"], Some("short"));
    assert!(short.contains("at least 16"), "{short}");
    let both = refuse(&["--no-auth", "--api-key", "0123456789abcdef"], None);
    assert!(both.contains("cannot be used with"), "{both}");

    // A key file must hold a key; a key given twice is refused rather than one picked.
    let empty = dir.path().join("empty.key");
    std::fs::write(&empty, " \n").unwrap();
    let empty = empty.to_str().unwrap();
    let refused_empty = refuse(&["--host", "0.0.0.0", "--api-key-file", empty], None);
    assert!(refused_empty.contains("is empty"), "{refused_empty}");
    let missing = dir.path().join("missing.key");
    let missing = missing.to_str().unwrap();
    let refused_missing = refuse(&["--api-key-file", missing], None);
    assert!(
        refused_missing.contains("--api-key-file"),
        "{refused_missing}"
    );
    let twice = refuse(
        &["--api-key", "0123456789abcdef", "--api-key-file", empty],
        None,
    );
    assert!(twice.contains("cannot be used with"), "{twice}");
}

#[test]
fn a_model_that_cannot_load_ends_the_server_with_the_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("h.sqlite");
    let serve = |model: &Path| {
        refused(&[
            "serve",
            "--port",
            "0",
            "--no-ui",
            "--db",
            db.to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
        ])
    };
    // Not there: refused before it listens.
    let missing = serve(&dir.path().join("missing.gguf"));
    assert!(missing.contains("missing.gguf"), "{missing}");
    // There but no model: the load fails in the background, and the server ends.
    let garbage = dir.path().join("garbage.gguf");
    std::fs::write(&garbage, b"not a model at all").unwrap();
    let failed = serve(&garbage);
    assert!(failed.contains("the model did not load"), "{failed}");
}

#[test]
fn the_key_can_come_from_a_file() {
    const KEY: &str = "file-key-0123456789abcdef";
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("api.key");
    // Editors and `echo` leave a newline: it is not part of the key.
    std::fs::write(&file, format!("{KEY}\n")).unwrap();
    let served = serve_with(
        &dir.path().join("h.sqlite"),
        &["--no-ui", "--api-key-file", file.to_str().unwrap()],
    );
    let url = format!("{}/api/info", served.base);
    match agent().get(&url).call() {
        Err(ureq::Error::Status(status, _)) => assert_eq!(status, 401),
        other => panic!("served without the key: {other:?}"),
    }
    let answer = agent()
        .get(&url)
        .set("Authorization", &format!("Bearer {KEY}"))
        .call()
        .expect("served with the key");
    assert_eq!(answer.status(), 200);
}

#[test]
fn bench_measures_another_server_through_its_openai_api() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = serve(&dir.path().join("history.sqlite"));
    let prompts = dir.path().join("prompts.txt");
    std::fs::write(
        &prompts,
        "Write the word hello ten times.\nName a colour.\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_medusa"))
        .args(["bench", "--json", "-n", "12", "--modes", "normal,lookup"])
        .args(["--draft-length", "4", "--endpoint"])
        .arg(format!("{}/v1", server.base))
        .arg("--prompts")
        .arg(&prompts)
        .output()
        .expect("bench runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    assert_eq!(report["endpoint"], server.base.as_str());
    assert_eq!(report["prompts"], 2);
    let results = report["results"].as_array().unwrap();
    assert_eq!(results[0]["mode"], "normal");
    assert_eq!(results[1]["mode"], "lookup");
    for result in results {
        assert_eq!(result["runs"], 2, "{result}");
        assert!(
            result["tokens_per_second"].as_f64().unwrap() > 0.0,
            "{result}"
        );
        assert!(result["ttft_ms"].as_f64().unwrap() > 0.0, "{result}");
    }
    // The server's timings say what lookup drafted; normal drafts nothing.
    assert_eq!(results[0]["draft_tokens"], 0, "{}", results[0]);
    assert!(
        results[1]["draft_tokens"].as_u64().unwrap() > 0,
        "{}",
        results[1]
    );
    assert!(results[1]["mean_accepted"].as_f64().unwrap() >= 1.0);
    // Every run was recorded by the server, as its own runs are.
    assert_eq!(
        runs(&server.base, "").len(),
        1 + 2 * 2,
        "a warm-up and two per mode"
    );

    // A server that is not there is a clear error.
    drop(server);
    let message = refused(&["bench", "--endpoint", "http://127.0.0.1:9", "-n", "4"]);
    assert!(
        message.contains("cannot be reached at http://127.0.0.1:9"),
        "{message}"
    );
}

#[test]
fn serve_runs_on_remote_engines_given_on_the_command_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let remote = serve(&dir.path().join("remote.sqlite"));
    let lab = format!("lab={}", remote.base);
    let server = serve_with(
        &dir.path().join("history.sqlite"),
        &["--remote", &lab, "--remote", "dead=http://127.0.0.1:9"],
    );
    let remotes: Value = agent()
        .get(&format!("{}/api/remotes", server.base))
        .call()
        .expect("remotes listed")
        .into_json()
        .unwrap();
    assert_eq!(remotes[0]["name"], "lab");
    assert_eq!(remotes[0]["saved"], false, "for this process only");
    assert!(remotes[0]["models"][0].is_string(), "{remotes}");
    assert_eq!(remotes[1]["error"]["code"], "remote_unreachable");
    // Nothing was written for them: the next start does not know them.
    assert!(!dir.path().join("history.sqlite.remotes.json").exists());
    assert!(!dir.path().join("remotes.json").exists());

    let answer = agent()
        .post(&format!("{}/api/generate", server.base))
        .send_json(json!({"prompt": "Name a colour.", "max_tokens": 5, "engine": "lab"}))
        .expect("generation")
        .into_string()
        .unwrap();
    assert!(answer.contains(r#""type":"finished""#), "{answer}");
    let here = runs(&server.base, "");
    assert_eq!(here[0]["engine"], "lab");
    assert_eq!(here[0]["output"], runs(&remote.base, "")[0]["output"]);

    // A malformed --remote is refused before anything starts.
    let message = refused(&["serve", "--port", "0", "--remote", "lab=gpu-box:8000"]);
    assert!(
        message.contains("not an address such as http://gpu-box:8000"),
        "{message}"
    );
    // So are an impossible port and, without the flag that allows it, a link-local address
    // (where cloud metadata services answer); neither is contacted.
    let message = refused(&["serve", "--port", "0", "--remote", "lab=http://h:99999"]);
    assert!(message.contains("1 to 65535"), "{message}");
    let message = refused(&[
        "serve",
        "--port",
        "0",
        "--remote",
        "meta=http://169.254.169.254/latest",
    ]);
    assert!(message.contains("--allow-link-local-remotes"), "{message}");
}

#[test]
fn chat_talks_to_a_remote_engine() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("temp dir");
    let remote = serve(&dir.path().join("remote.sqlite"));
    let mut chat = Command::new(env!("CARGO_BIN_EXE_medusa"))
        .args([
            "chat",
            "--max-tokens",
            "6",
            "--temperature",
            "0",
            "--remote",
        ])
        .arg(format!("lab={}", remote.base))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chat starts");
    chat.stdin
        .take()
        .unwrap()
        .write_all(b"Name a colour.\n/tree chain-3\n")
        .unwrap();
    let output = chat.wait_with_output().expect("chat ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("on lab ("), "{stderr}");
    assert!(
        stderr.contains("trees are for a model loaded here"),
        "{stderr}"
    );
    // The answer printed here is the one the remote engine recorded.
    let answer = String::from_utf8_lossy(&output.stdout);
    let recorded = runs(&remote.base, "");
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["mode"], "normal");
    let text = recorded[0]["output"].as_str().unwrap();
    assert!(!text.is_empty());
    assert!(answer.contains(text), "{answer:?} holds {text:?}");

    // An engine that is not there: a clear error before the first message.
    let message = refused(&["chat", "--remote", "dead=http://127.0.0.1:9"]);
    assert!(message.contains("cannot be reached"), "{message}");
}

/// A heads training job whose server is killed while it collects answers comes back
/// `interrupted`, and resumes from the answers it had written.
#[test]
fn a_training_job_cut_off_by_a_kill_resumes_from_its_answers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("history.sqlite");
    let models_dir = dir.path().join("models");
    std::fs::create_dir(&models_dir).unwrap();
    let model = models_dir.join("tiny.gguf");
    std::fs::copy(models::default_model_path().unwrap(), &model).unwrap();
    let extra = ["--no-ui", "--models-dir", models_dir.to_str().unwrap()];
    let job = |base: &str, id: i64| -> Value {
        agent()
            .get(&format!("{base}/api/training/{id}"))
            .call()
            .expect("the job")
            .into_json()
            .expect("JSON")
    };

    let (id, seen) = {
        let server = serve_with(&db, &extra);
        let started: Value = agent()
            .post(&format!("{}/api/training", server.base))
            .send_json(
                json!({"model": model, "samples": 40, "max_tokens": 32, "epochs": 1,
                              "vocab_subset": 256, "tune_prompts": 1, "tune_max_tokens": 8}),
            )
            .expect("the job starts")
            .into_json()
            .unwrap();
        let id = started["id"].as_i64().unwrap();
        let deadline = Instant::now() + Duration::from_secs(600);
        let seen = loop {
            let now = job(&server.base, id);
            let answered = now["figures"]["answered"].as_u64().unwrap();
            if answered >= 2 {
                break answered;
            }
            assert!(Instant::now() < deadline, "no answers collected: {now}");
            std::thread::sleep(Duration::from_millis(50));
        };
        (id, seen)
        // SIGKILL mid-collection (or later, on a fast machine).
    };

    let server = serve_with(&db, &extra);
    let cut = job(&server.base, id);
    assert_eq!(cut["status"], "interrupted", "{cut}");
    let resumed = agent()
        .post(&format!("{}/api/training/{id}/resume", server.base))
        .send_string("")
        .expect("resumes");
    assert_eq!(resumed.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut lowest = u64::MAX;
    let done = loop {
        let now = job(&server.base, id);
        if now["phase"] != "starting" {
            lowest = lowest.min(now["figures"]["answered"].as_u64().unwrap());
        }
        if now["status"] != "running" {
            break now;
        }
        assert!(Instant::now() < deadline, "the job did not end: {now}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(done["status"], "finished", "{done}");
    assert_eq!(done["figures"]["answered"], 40);
    // Every answer written before the kill was kept: counting never started again below them.
    assert!(
        lowest >= seen,
        "resumed at {lowest} answers after {seen} were seen"
    );
    assert!(models_dir.join("tiny.medusa.gguf").is_file());
}

#[test]
fn a_first_start_listens_at_once_and_answers_while_it_measures_decode_costs() {
    // A models folder of its own: no decode costs kept there yet, so this start measures them,
    // which takes seconds: the server must answer meanwhile.
    let dir = tempfile::tempdir().expect("temp dir");
    let model = models::default_model_path().expect("default model available");
    let heads = models::default_heads_path().expect("default heads installed");
    let mut child = Command::new(env!("CARGO_BIN_EXE_medusa"))
        .args([
            "serve",
            "--port",
            "0",
            "--no-ui",
            "--ctx-size",
            "1024",
            "--heads",
        ])
        .arg(&heads)
        .arg("--db")
        .arg(dir.path().join("history.sqlite"))
        .env("MEDUSA_MODEL", model)
        .env("MEDUSA_MODELS_DIR", dir.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("medusa serve starts");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("a line on stdout");
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    // Loading: the UI's info shows the load, a generation is refused with the stage, and
    // health says so.
    let info: Value = agent()
        .get(&format!("{base}/api/info"))
        .call()
        .expect("info answers while loading")
        .into_json()
        .expect("json");
    assert!(info["model"].is_null(), "{info}");
    assert!(info["loading"]["stage"].is_string(), "{info}");
    let completion = agent()
        .post(&format!("{base}/v1/completions"))
        .send_json(json!({"prompt": "Hello", "max_tokens": 1}));
    let Err(ureq::Error::Status(503, answer)) = completion else {
        panic!("a completion while loading: {completion:?}");
    };
    let error: Value = answer.into_json().expect("json");
    assert_eq!(error["error"]["code"], "model_loading", "{error}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("still loading (loading model")
            || message.contains("still loading (measuring decode costs"),
        "{message}"
    );
    let health = |base: &str| -> Value {
        agent()
            .get(&format!("{base}/health"))
            .call()
            .expect("health answers")
            .into_json()
            .expect("json")
    };
    assert_eq!(health(&base)["status"], "loading");
    // Then the ready line, and the model serves.
    line.clear();
    stdout
        .read_line(&mut line)
        .expect("a second line on stdout");
    assert!(line.starts_with("ready: "), "{line:?}");
    assert_eq!(health(&base)["status"], "ok");
    let _ = child.kill();
    let _ = child.wait();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr read");
    // Not a terminal: a line as each stage starts, the model first.
    let stages: Vec<&str> = stderr.lines().filter(|l| l.ends_with('…')).collect();
    assert_eq!(
        stages,
        [
            "loading model…",
            "measuring decode costs (first load only)…"
        ],
        "{stderr}"
    );
}

/// The processes `pid` has started that still run (from any of its threads).
fn children_of(pid: u32) -> Vec<String> {
    let mut children = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the server's threads") {
        let listed = std::fs::read_to_string(task.expect("a thread").path().join("children"));
        children.extend(
            listed
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_owned),
        );
    }
    children
}

#[test]
fn ambiguous_grammars_are_stopped_at_their_refusal_and_a_schema_answers_beside_them() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(&dir.path().join("history.sqlite"));
    let ask = |body: Value| {
        let answer = agent()
            .post(&format!("{}/v1/chat/completions", served.base))
            .send_json(body);
        match answer {
            Ok(response) => (response.status(), response.into_json::<Value>().unwrap()),
            Err(ureq::Error::Status(status, response)) => {
                (status, response.into_json::<Value>().unwrap())
            }
            Err(err) => panic!("{err}"),
        }
    };
    let question = |extra: Value| {
        let mut body = json!({
            "messages": [{"role": "user", "content": "Name a colour."}],
            "max_tokens": 4,
            "temperature": 0,
        });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    // Four ambiguous grammars at once from this machine (one client), each with its own literal
    // so that nothing is shared. While they are asked, the server's children are counted.
    let asking = std::sync::atomic::AtomicBool::new(true);
    let (refused, most_checks) = std::thread::scope(|scope| {
        let counted = scope.spawn(|| {
            let mut most = 0;
            while asking.load(std::sync::atomic::Ordering::SeqCst) {
                most = most.max(children_of(served.child.id()).len());
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            most
        });
        let asked: Vec<_> = (0..4)
            .map(|i| {
                let grammar = format!(
                    "root ::= a\na ::= [a-m] a | [a-m] a \"..x{i}\" | [a-m] a \"..y{i}\" | [a-m]"
                );
                let body = question(json!({ "grammar": grammar }));
                scope.spawn(move || ask(body))
            })
            .collect();
        let refused: Vec<(u16, Value)> = asked.into_iter().map(|a| a.join().unwrap()).collect();
        asking.store(false, std::sync::atomic::Ordering::SeqCst);
        (refused, counted.join().unwrap())
    });
    // One client holds at most its share of the checks' places: the others wait for one, and
    // are refused at their deadline as busy (or, given a place at its very end, as too complex).
    assert!(
        most_checks <= engine::MAX_GRAMMAR_CHECKS_PER_CLIENT,
        "{most_checks} checks ran at once"
    );
    let too_complex = refused
        .iter()
        .filter(|(status, body)| *status == 400 && body["error"]["code"] == "grammar_too_complex")
        .count();
    assert!(
        too_complex >= engine::MAX_GRAMMAR_CHECKS_PER_CLIENT,
        "{refused:?}"
    );
    for (status, body) in &refused {
        let busy = *status == 503 && body["error"]["code"] == "grammars_busy";
        assert!(
            busy || body["error"]["code"] == "grammar_too_complex",
            "{status} {body}"
        );
    }
    // Their checks were stopped, not left running.
    assert_eq!(children_of(served.child.id()), Vec::<String>::new());
    // A schema sent afterwards compiles and answers as it would alone.
    let (status, body) = ask(question(json!({
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "colour",
                "schema": {
                    "type": "object",
                    "properties": { "colour": { "type": "string" } },
                    "required": ["colour"],
                },
            },
        },
    })));
    assert_eq!(status, 200, "{body}");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.starts_with('{'), "{content:?}");
}

#[test]
fn lookup_remembers_answers_from_the_history_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.sqlite");
    let ask = |base: &str, mode: &str, memory: &str| {
        let answer: Value = agent()
            .post(&format!("{base}/v1/chat/completions"))
            .send_json(json!({
                "messages": [{"role": "user", "content": "Write a short poem about the sea."}],
                "max_tokens": 48,
                "temperature": 0,
                "mode": mode,
                "lookup_memory": memory,
                // Drafted whatever the budget has learnt yet, so that what it remembers shows.
                "draft_length": if mode == "lookup" { Some(8) } else { None },
            }))
            .expect("answered")
            .into_json()
            .unwrap();
        answer["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let normal = {
        let served = serve(&db);
        ask(&served.base, "normal", "read_write")
    };
    // A new server over the same history: its memory starts from the history's answers.
    let served = serve(&db);
    let forgetting = ask(&served.base, "lookup", "off");
    let remembering = ask(&served.base, "lookup", "read_only");
    assert_eq!(forgetting, normal);
    assert_eq!(remembering, normal);
    let listed = runs(&served.base, "?limit=2");
    let tokens_per_step = |run: &Value| run["mean_accepted"].as_f64().unwrap();
    let (remembered, forgot) = (&listed[0], &listed[1]);
    assert_eq!(remembered["mode"], "lookup");
    eprintln!(
        "lookup after a restart: {} tokens per step remembering, {} forgetting",
        tokens_per_step(remembered),
        tokens_per_step(forgot)
    );
    assert!(
        tokens_per_step(remembered) >= tokens_per_step(forgot) + 2.0,
        "remembered {} against {} tokens per step",
        tokens_per_step(remembered),
        tokens_per_step(forgot)
    );
}
