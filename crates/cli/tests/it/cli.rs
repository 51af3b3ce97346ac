//! The `medusa` binary end to end, on the real default model.

use std::process::{Command, Output};

use serde_json::Value;

fn medusa(args: &[&str]) -> Output {
    let model = models::default_model_path().expect("default model available");
    Command::new(env!("CARGO_BIN_EXE_medusa"))
        .args(args)
        .env("MEDUSA_MODEL", model)
        .output()
        .expect("medusa runs")
}

fn json_of(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("stdout is one JSON object")
}

#[test]
fn generate_json_reports_text_and_statistics() {
    let out = json_of(&medusa(&[
        "generate",
        "--prompt",
        "What is the capital of France?",
        "--chat",
        "--max-tokens",
        "12",
        "--temperature",
        "0",
        "--json",
    ]));
    assert!(!out["text"].as_str().unwrap().is_empty());
    let generated = out["tokens_generated"].as_u64().unwrap();
    assert!((1..=12).contains(&generated));
    assert!(out["tokens_per_second"].as_f64().unwrap() > 0.0);
    assert!(out["ttft_ms"].as_f64().unwrap() > 0.0);
    let stop = out["stop_reason"].as_str().unwrap();
    assert!(
        ["max_tokens", "end_of_generation"].contains(&stop),
        "{stop}"
    );
}

#[test]
fn generate_streams_text_to_stdout() {
    let output = medusa(&[
        "generate",
        "--prompt",
        "The sky is",
        "--max-tokens",
        "8",
        "--temperature",
        "0",
    ]);
    assert!(output.status.success());
    let json = json_of(&medusa(&[
        "generate",
        "--prompt",
        "The sky is",
        "--max-tokens",
        "8",
        "--temperature",
        "0",
        "--json",
    ]));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        json["text"].as_str().unwrap()
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("8 generated"));
}

#[test]
fn bench_reads_prompts_longer_than_a_batch_in_its_raw_loop_too() {
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("prompts.txt");
    // About 60 tokens, against batches of 16: llama.cpp aborts on a decode over its batch size.
    let prompt = "Count the colours of the rainbow and name each one in order. ".repeat(5);
    std::fs::write(&prompts, format!("{prompt}\n")).unwrap();
    let out = json_of(&medusa(&[
        "bench",
        "--json",
        "--no-heads",
        "--batch-size",
        "16",
        "--max-tokens",
        "4",
        "--modes",
        "normal",
        "--prompts",
        prompts.to_str().unwrap(),
    ]));
    assert!(out["baseline"]["tokens_per_second"].as_f64().unwrap() > 0.0);
    assert_eq!(
        out["outputs_identical"], 1,
        "greedy engine and raw loop must agree"
    );
}

#[test]
fn bench_json_compares_with_the_raw_loop() {
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("prompts.txt");
    std::fs::write(&prompts, "Say hello.\n\nName a fruit.\n").unwrap();
    let out = json_of(&medusa(&[
        "bench",
        "--json",
        "--max-tokens",
        "8",
        "--modes",
        "lookup",
        "--rounds",
        "2",
        "--prompts",
        prompts.to_str().unwrap(),
    ]));
    assert_eq!(out["prompts"], 2);
    assert_eq!(out["rounds"], 2);
    assert!(out["threads"].as_u64().unwrap() >= 1);
    let normal = &out["results"][0];
    assert_eq!(normal["mode"], "normal");
    assert_eq!(normal["concurrency"], 1);
    assert!(normal["tokens_per_second"].as_f64().unwrap() > 0.0);
    assert!(normal["ttft_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(out["baseline"]["name"], "llama.cpp raw decode loop");
    assert!(out["baseline"]["tokens_per_second"].as_f64().unwrap() > 0.0);
    assert!(out["normal_vs_baseline"].as_f64().unwrap() > 0.0);
    assert_eq!(
        out["outputs_identical"], 4,
        "greedy engine and raw loop must agree"
    );
    assert_eq!(normal["mean_accepted"], 1.0);
    assert_eq!(normal["speedup_vs_normal"], 1.0);
    let lookup = &out["results"][1];
    assert_eq!(lookup["mode"], "lookup");
    assert!(lookup["mean_accepted"].as_f64().unwrap() >= 1.0);
    assert!(lookup["speedup_vs_normal"].as_f64().unwrap() > 0.0);
    assert!(lookup["acceptance_by_depth"].is_array());
    // The spread of the rounds: each round's speed, and the speed-up's median and range.
    assert_eq!(
        lookup["round_tokens_per_second"].as_array().unwrap().len(),
        2
    );
    let spread = &lookup["round_speedup"];
    assert_eq!(spread["count"], 2);
    assert!(spread["min"].as_f64() <= spread["median"].as_f64());
    assert!(spread["median"].as_f64() <= spread["max"].as_f64());
    assert_eq!(normal["round_speedup"]["median"], 1.0);
    // A follow-up turn per prompt, read whole and with the first turn's cells.
    let cache = &out["prompt_cache"];
    assert_eq!(cache["follow_ups"], 2);
    assert!(
        cache["cached_prompt_tokens"].as_f64().unwrap() > 0.0,
        "{cache}"
    );
    assert!(cache["cached_prompt_tokens"].as_f64() < cache["prompt_tokens"].as_f64());
    assert!(cache["ttft_ms_cold"].as_f64().unwrap() > 0.0);
    assert!(cache["ttft_ms_cached"].as_f64().unwrap() > 0.0);
    let costs = out["decode_costs"]["points"]
        .as_array()
        .expect("measured for speculative modes");
    assert_eq!(costs[0]["tokens"], 1);
    // Every figure inside its band (its size depends on the machine's load, so not asserted).
    for point in costs {
        let figure = |key: &str| point[key].as_f64().unwrap();
        assert!(0.0 < figure("low_ms"), "{point}");
        assert!(figure("low_ms") <= figure("ms") && figure("ms") <= figure("high_ms"));
    }
}

#[test]
fn generate_lookup_reports_its_steps() {
    let out = json_of(&medusa(&[
        "generate",
        "--chat",
        "--prompt",
        "Repeat three times: one two three four five.",
        "--max-tokens",
        "40",
        "--temperature",
        "0",
        "--mode",
        "lookup",
        "--json",
    ]));
    assert_eq!(out["mode"], "lookup");
    let steps = out["step_events"].as_array().unwrap();
    assert_eq!(steps.len(), out["steps"].as_u64().unwrap() as usize);
    let emitted: u64 = steps
        .iter()
        .map(|s| s["accepted_len"].as_u64().unwrap())
        .sum();
    assert!(emitted + 1 >= out["tokens_generated"].as_u64().unwrap());
    let output = medusa(&["generate", "--prompt", "hi", "--mode", "fast"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr)
        .contains("normal, medusa, lookup, auto, draft or eagle"));
}

#[test]
fn missing_model_fails_with_a_clear_message() {
    let output = Command::new(env!("CARGO_BIN_EXE_medusa"))
        .args([
            "generate",
            "--prompt",
            "hi",
            "--model",
            "/no/such/file.gguf",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("model file not found: /no/such/file.gguf"),
        "{stderr}"
    );
}

#[test]
fn out_of_range_parameters_fail_without_panicking() {
    for args in [
        &["generate", "--prompt", "hi", "--temperature=-1"][..],
        &["generate", "--prompt", "hi", "--max-tokens", "0"][..],
        &["generate", "--prompt", "", "--max-tokens", "4"][..],
        &["quantize", "--out", "/tmp/never.gguf", "--type", "q9_9"][..],
    ] {
        let output = medusa(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn chat_reads_turns_from_stdin() {
    use std::io::Write;
    let model = models::default_model_path().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_medusa"))
        .args(["chat", "--max-tokens", "6", "--temperature", "0"])
        .env("MEDUSA_MODEL", model)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Hello!\nAnd again?\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    // One statistics line per answered turn.
    assert_eq!(stderr.matches(" generated, ").count(), 2, "{stderr}");
}

#[test]
fn bench_measures_concurrent_streams_against_the_same_requests_in_a_row() {
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("prompts.txt");
    std::fs::write(&prompts, "Say hello.\nName a fruit.\n").unwrap();
    let out = json_of(&medusa(&[
        "bench",
        "--json",
        "--max-tokens",
        "6",
        "--concurrency",
        "1,2",
        "--prompts",
        prompts.to_str().unwrap(),
    ]));
    let results = out["results"].as_array().unwrap();
    let pair = results
        .iter()
        .find(|r| r["concurrency"] == 2)
        .expect("a result for 2 streams");
    assert_eq!(pair["mode"], "normal");
    assert_eq!(pair["runs"], 2);
    assert!(pair["tokens_per_second"].as_f64().unwrap() > 0.0);
    assert!(pair["sequential_tokens_per_second"].as_f64().unwrap() > 0.0);
    assert!(pair["throughput_vs_sequential"].as_f64().unwrap() > 0.0);
    let bad = medusa(&["bench", "--concurrency", "0"]);
    assert!(!bad.status.success());
}

/// A FasterDecoding checkpoint of `heads` zero-initialised residual blocks (Medusa's own
/// initialisation: each head then proposes the model's next token again) for width `n_embd`.
fn write_zero_checkpoint(path: &std::path::Path, heads: usize, n_embd: usize) {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for h in 0..heads {
        for (name, shape) in [("weight", vec![n_embd, n_embd]), ("bias", vec![n_embd])] {
            let bytes = shape.iter().product::<usize>() * 4;
            header.insert(
                format!("{h}.0.linear.{name}"),
                serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + bytes]}),
            );
            offset += bytes;
        }
    }
    let mut header = Value::Object(header).to_string();
    header.push_str(&" ".repeat((8 - header.len() % 8) % 8));
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.resize(file.len() + offset, 0);
    std::fs::write(path, file).unwrap();
}

#[test]
fn tune_reports_each_budget_and_falls_back_when_no_tree_pays() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir.path().join("zero.safetensors");
    let heads = dir.path().join("zero.medusa.gguf");
    let info = json_of(&medusa(&["info", "--json"]));
    write_zero_checkpoint(&checkpoint, 4, info["n_embd"].as_u64().unwrap() as usize);
    let converted = medusa(&[
        "convert-heads",
        "--checkpoint",
        checkpoint.to_str().unwrap(),
        "--out",
        heads.to_str().unwrap(),
    ]);
    assert!(converted.status.success(), "{converted:?}");

    let prompts = dir.path().join("prompts.txt");
    std::fs::write(&prompts, "Count from one to ten.\nName three colours.\n").unwrap();
    let tree = dir.path().join("tree.json");
    let report = json_of(&medusa(&[
        "tune",
        "--heads",
        heads.to_str().unwrap(),
        "--prompts",
        prompts.to_str().unwrap(),
        "-n",
        "24",
        "--max-nodes",
        "16",
        "--out",
        tree.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(report["head_top1_accuracy"].as_array().unwrap().len(), 4);
    assert!(report["positions"][0].as_u64().unwrap() >= 10, "{report}");
    let budgets = report["budgets"].as_array().unwrap();
    assert!(!budgets.is_empty() && budgets.len() <= 16);
    let measured = report["measured_tokens_per_step"].as_array().unwrap();
    assert_eq!(measured.len(), budgets.len());
    for (i, budget) in budgets.iter().enumerate() {
        assert_eq!(budget["nodes"], i + 1);
        let speedup = budget["predicted_speedup"].as_f64().unwrap();
        assert!(speedup > 0.0 && speedup.is_finite());
        // A tree yields the model's own token plus at most its depth in guesses.
        let tokens = measured[i].as_f64().unwrap();
        let depth = budget["depth"].as_f64().unwrap();
        assert!((1.0..=1.0 + depth).contains(&tokens), "{tokens}");
    }
    assert_eq!(report["reference_tree"]["name"], "mc_sim_7b_63");
    assert_eq!(report["reference_tree"]["nodes"], 63);
    assert!(
        report["reference_tree"]["measured_tokens_per_step"]
            .as_f64()
            .unwrap()
            >= 1.0
    );
    // Heads that guess the wrong position almost never pay on a CPU: plain decoding is kept and
    // no tree file is written.
    if report["chosen"].is_null() {
        assert!(report["decision"]
            .as_str()
            .unwrap()
            .starts_with("plain decoding"));
        assert!(!tree.exists());
    } else {
        assert!(tree.exists());
    }

    let refused = medusa(&["tune", "--json"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--heads"));
}

#[test]
fn info_forecasts_each_named_tree_drafted_in_full() {
    let heads = models::default_heads_path().expect("default heads installed");
    let info = json_of(&medusa(&[
        "info",
        "--json",
        "--heads",
        heads.to_str().unwrap(),
    ]));
    let forecasts = info["medusa_plan"]["forecasts"]
        .as_array()
        .expect("forecasts");
    let names: Vec<&str> = forecasts
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["mc_sim_7b_63", "chain-1", "chain-2", "chain-3", "chain-4"]
    );
    // What depends on the heads' record alone is exact; figures from decode timings depend on
    // how busy the machine is, so only their consistency is checked.
    for forecast in forecasts {
        assert!(forecast["expected_tokens"].as_f64().unwrap() > 1.0);
        let figure = |key: &str| forecast[key].as_f64().unwrap();
        for key in ["predicted_speedup", "step_ms"] {
            assert!(figure(key) > 0.0, "{key} in {forecast}");
        }
        assert!(figure("extra_token_ms") >= 0.0, "{forecast}");
        assert!(figure("speedup_low") <= figure("predicted_speedup") + 1e-9);
        assert!(figure("predicted_speedup") <= figure("speedup_high") + 1e-9);
        let verdict = forecast["verdict"].as_str().unwrap();
        let expected = if figure("speedup_low") > 1.0 {
            "faster"
        } else if figure("speedup_high") < 1.0 {
            "slower"
        } else {
            "uncertain"
        };
        assert_eq!(verdict, expected, "{forecast}");
    }
    // 63 nodes guess more than a chain of one.
    let expected = |i: usize| forecasts[i]["expected_tokens"].as_f64().unwrap();
    assert!(expected(0) > expected(1));
    assert_eq!(forecasts[0]["nodes"], 63);
    let costs = &info["medusa_plan"]["decode_costs"];
    assert_eq!(costs["points"][0]["tokens"], 1, "{costs}");
}

#[test]
fn out_of_range_sampling_gets_the_range_error() {
    for args in [
        &["generate", "-p", "Hi", "--temperature", "-1"][..],
        &["chat", "--temperature", "-1"][..],
    ] {
        let command = args[0];
        let out = medusa(args);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("temperature"), "{command}: {stderr}");
        assert!(
            !stderr.contains("unexpected argument"),
            "{command}: {stderr}"
        );
    }
}

/// `medusa chat` (greedy, no heads, answers of at most `max_tokens`) in a pseudo-terminal of
/// `rows` by `cols`, as a terminal window gives its size.
fn chat_in_terminal(rows: u16, cols: u16, max_tokens: u32) -> rexpect::session::PtySession {
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!(
            "stty rows {rows} cols {cols} && exec \"$0\" chat --no-heads --max-tokens {max_tokens} --temperature 0"
        ))
        .arg(env!("CARGO_BIN_EXE_medusa"))
        .env("MEDUSA_MODEL", models::default_model_path().unwrap())
        .env("TERM", "xterm");
    // A busy machine may decode a token a second: the answers' waits are long.
    rexpect::session::spawn_command(command, Some(600_000)).expect("spawns")
}

/// `/save`s the chat's conversation to `path` and reads it back.
fn save_conversation(chat: &mut rexpect::session::PtySession, path: &std::path::Path) -> Value {
    chat.send_line(&format!("/save {}", path.display()))
        .unwrap();
    chat.exp_string("(saved to").unwrap();
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn chat_in_a_terminal_stops_an_answer_on_ctrl_c_and_keeps_the_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("talk.json");
    let mut chat = chat_in_terminal(24, 80, 400);
    chat.exp_string("> ").unwrap();
    // Commands are answered by the program, never sent to the model.
    chat.send_line("/help").unwrap();
    chat.exp_string("/system TEXT").unwrap();
    chat.send_line("/mode fast").unwrap();
    chat.exp_string("unknown mode").unwrap();
    chat.send_line("/mode medusa").unwrap();
    chat.exp_string("needs heads").unwrap();
    chat.send_line("/system You are a storyteller.").unwrap();
    chat.exp_string("(system message set)").unwrap();

    chat.send_line("Write a long story about a dragon who learns to read.")
        .unwrap();
    // The live status line: at least 10 tokens of the answer have streamed.
    chat.exp_regex(r"\[[1-9][0-9]+ tokens, ").unwrap();
    // Typed while the answer streams: not in the answer, and dropped rather than left to the
    // next prompt (where it would turn "/save" into a message).
    chat.send("zzqx").unwrap();
    chat.flush().unwrap();
    chat.send_control('c').unwrap();
    let answer = chat.exp_string("(stopped").unwrap();
    assert!(!answer.contains("zzqx"), "{answer}");
    assert!(answer.contains("stop: cancelled"), "{answer}");
    chat.exp_string("> ").unwrap();

    let conversation = save_conversation(&mut chat, &saved);
    let messages = conversation["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant"], "{conversation}");
    let partial = messages[2]["content"].as_str().unwrap();
    assert!(
        !partial.is_empty() && !partial.contains("zzqx"),
        "{partial}"
    );

    // Ctrl-C on an empty line asks first; a second one leaves.
    chat.send_control('c').unwrap();
    chat.exp_string("Ctrl-C again").unwrap();
    chat.send_control('c').unwrap();
    chat.exp_eof().unwrap();
}

#[test]
fn lines_typed_while_the_chat_model_loads_are_all_taken_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("typed-ahead.json");
    let mut command = Command::new(env!("CARGO_BIN_EXE_medusa"));
    command
        .args([
            "chat",
            "--no-heads",
            "--mode",
            "normal",
            "--max-tokens",
            "8",
            "--temperature",
            "0",
        ])
        .env("MEDUSA_MODEL", models::default_model_path().unwrap())
        .env("TERM", "xterm");
    let mut chat = rexpect::session::spawn_command(command, Some(300_000)).expect("spawns");
    // Typed at once, while the model is still loading: the terminal holds all three lines when
    // the line editor first reads.
    chat.send("/help\n/system Answer in one word.\nWhat is the capital of France?\n")
        .unwrap();
    chat.flush().unwrap();
    chat.exp_string("/system TEXT").unwrap();
    chat.exp_string("(system message set)").unwrap();
    let answer = chat.exp_string("stop: ").unwrap();
    assert!(answer.contains("prompt tokens"), "{answer}");
    chat.exp_string("> ").unwrap();
    let conversation = save_conversation(&mut chat, &saved);
    let messages = conversation["messages"].as_array().unwrap();
    let turns: Vec<(&str, &str)> = messages
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .take(2)
        .collect();
    assert_eq!(
        turns,
        [
            ("system", "Answer in one word."),
            ("user", "What is the capital of France?")
        ],
        "{conversation}"
    );
    assert_eq!(messages.len(), 3, "{conversation}");
    assert_eq!(messages[2]["role"], "assistant", "{conversation}");
    chat.send_line("/quit").unwrap();
    chat.exp_eof().unwrap();
}

/// The rows a terminal `cols` wide shows `text` on (no wide characters in it).
fn wrapped_rows(text: &str, cols: usize) -> Vec<String> {
    let mut rows = Vec::new();
    for line in text.split('\n') {
        let chars: Vec<char> = line.chars().collect();
        if chars.is_empty() {
            rows.push(String::new());
        }
        for chunk in chars.chunks(cols) {
            rows.push(chunk.iter().collect::<String>().trim_end().to_owned());
        }
    }
    rows
}

#[test]
fn chat_in_a_short_terminal_keeps_the_answer_whole_on_screen() {
    const ROWS: u16 = 12;
    const COLS: u16 = 40;
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("talk.json");
    let mut chat = chat_in_terminal(ROWS, COLS, 130);
    let size = |n: u16| std::num::NonZeroU16::new(n).unwrap();
    let mut terminal = vt100::Parser::new(size(ROWS), size(COLS), 0);
    terminal.process(chat.exp_string("> ").unwrap().as_bytes());
    terminal.process(b"> ");
    chat.send_line("Write a long story about a dragon who learns to read.")
        .unwrap();
    // The answer streams with the live status line, then its figures follow it.
    let (answer, stats) = chat.exp_regex(r"stop: [a-z_]+, seed \d+").unwrap();
    terminal.process(answer.as_bytes());
    terminal.process(stats.as_bytes());
    assert!(
        answer.contains(" tokens, "),
        "the live status line was drawn"
    );

    chat.exp_string("> ").unwrap();
    let conversation = save_conversation(&mut chat, &saved);
    let text = conversation["messages"][1]["content"].as_str().unwrap();
    let expected = wrapped_rows(text, usize::from(COLS));
    assert!(
        expected.len() > usize::from(ROWS),
        "the answer is longer than the terminal: {text}"
    );

    let screen: Vec<String> = terminal
        .screen()
        .rows(0, COLS)
        .map(|row| row.trim_end().to_owned())
        .collect();
    let stats_row = screen
        .iter()
        .position(|row| row.starts_with("[") && row.contains("prompt tokens"))
        .unwrap_or_else(|| panic!("the figures are on screen: {screen:#?}"));
    assert!(stats_row >= 4, "the answer keeps the screen: {screen:#?}");
    // Every row above the figures is the answer's, whole, in order: none was erased or
    // overwritten by the status line.
    assert_eq!(
        screen[..stats_row],
        expected[expected.len() - stats_row..],
        "on screen: {screen:#?}"
    );
    chat.send_line("/quit").unwrap();
    chat.exp_eof().unwrap();
}
