//! The server end to end: the real default model, a real SQLite file, real HTTP on loopback.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use engine::EngineConfig;
use playground::{LoadRequest, ModelSource, Playground};
use serde_json::{json, Value};

use crate::common::*;

#[test]
fn seed_api_generates_and_compares() {
    let (status, normal) = post(
        "/generate/normal",
        &json!({"prompt": "Once upon a time", "max_length": 8}),
    );
    assert_eq!(status, 200, "{normal}");
    assert!(!normal["text"].as_str().unwrap().is_empty());
    assert!(normal["tokens_generated"].as_u64().unwrap() >= 1);
    assert!(normal["generation_time"].as_f64().unwrap() > 0.0);
    assert!(normal["tokens_per_second"].as_f64().unwrap() > 0.0);
    assert_eq!(normal["speedup_factor"], 1.0);
    assert!(normal["acceptance_rate"].is_null());
    let run_id = normal["run_id"].as_i64().unwrap();
    let (status, run) = get(&format!("/api/runs/{run_id}"));
    assert_eq!(status, 200);
    assert_eq!(run["run"]["status"], "finished");
    assert_eq!(run["run"]["output"], normal["text"]);

    // Without heads, the default comparison is normal against lookup.
    let (status, compared) = post(
        "/compare",
        &json!({"prompt": "One, two, three, one, two, three, one, two,", "max_length": 8}),
    );
    assert_eq!(status, 200, "{compared}");
    for mode in ["normal", "lookup"] {
        assert!(compared[mode]["text"].is_string(), "{compared}");
    }
    assert!(compared.get("medusa").is_none());
    assert!(compared["lookup"]["speedup_factor"].as_f64().unwrap() > 0.0);
    assert!(compared["speedup"].as_f64().unwrap() > 0.0);
    assert!(compared["outputs_identical"].is_boolean());
    if compared["outputs_identical"] == true {
        assert!(compared["first_difference"].is_null());
    }
    let id = compared["comparison_id"].as_i64().unwrap();
    let (status, comparison) = get(&format!("/api/comparisons/{id}"));
    assert_eq!(status, 200);
    assert_eq!(comparison["runs"].as_array().unwrap().len(), 2);
    assert_eq!(compared["repeats"], 1);
    assert_eq!(comparison["repeats"], 1);
    assert_eq!(
        compared["figures"][1]["verdict"],
        comparison["modes"][1]["verdict"]
    );

    // Auto mode without heads drafts with lookup alone, is offered, and is recorded as auto.
    let (_, info) = get("/api/info");
    assert_eq!(info["modes"], json!(["normal", "lookup", "auto"]));
    let (status, auto) = post(
        "/compare",
        &json!({"prompt": "One, two, three, one, two, three, one, two,", "max_length": 8,
                "modes": ["normal", "auto"]}),
    );
    assert_eq!(status, 200, "{auto}");
    assert_eq!(auto["auto"]["text"], auto["normal"]["text"]);
    let id = auto["comparison_id"].as_i64().unwrap();
    let (_, comparison) = get(&format!("/api/comparisons/{id}"));
    assert_eq!(comparison["runs"][1]["mode"], "auto");
    let (status, refused) = post(
        "/v1/completions",
        &json!({"prompt": "Hi", "mode": "auto", "tree": "chain-2", "max_tokens": 2}),
    );
    assert_eq!(status, 409, "a named tree needs heads: {refused}");

    // Repeats: every mode three times, rounds in rotating order, medians and ranges per mode.
    let (status, repeated) = post(
        "/compare",
        &json!({"prompt": "One, two, three, one, two, three, one, two,", "max_length": 6,
                "modes": ["normal", "lookup"], "repeats": 3}),
    );
    assert_eq!(status, 200, "{repeated}");
    assert_eq!(repeated["repeats"], 3);
    let id = repeated["comparison_id"].as_i64().unwrap();
    let (_, comparison) = get(&format!("/api/comparisons/{id}"));
    let order: Vec<&str> = comparison["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["mode"].as_str().unwrap())
        .collect();
    assert_eq!(
        order,
        ["normal", "lookup", "lookup", "normal", "normal", "lookup"]
    );
    let lookup = &repeated["figures"][1];
    assert_eq!(lookup["mode"], "lookup");
    assert_eq!(lookup["runs"], 3);
    let speed = &lookup["decode_tokens_per_second"];
    assert!(speed["min"].as_f64() <= speed["median"].as_f64());
    assert!(speed["median"].as_f64() <= speed["max"].as_f64());
    assert_eq!(lookup["speedup"]["count"], 3);
    assert!(lookup["verdict"].is_string(), "{lookup}");
    for repeats in [0, 21] {
        assert_error(
            post("/compare", &json!({"prompt": "Hi", "repeats": repeats})),
            400,
            "invalid_parameter",
        );
    }
    let (status, list) = get("/api/comparisons");
    assert_eq!(status, 200);
    assert!(list["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["id"] == id));

    assert_error(
        post(
            "/generate/medusa",
            &json!({"prompt": "Hi", "max_length": 4}),
        ),
        409,
        "no_medusa_heads",
    );
    assert_error(
        post("/api/tune", &json!({"confirm": true})),
        409,
        "no_medusa_heads",
    );
}

#[test]
fn chat_completions_answer_whole_and_streamed() {
    // The model's name from /v1/models, as OpenAI clients send it; an unknown one is 404.
    let model = get("/v1/models").1["data"][0]["id"].clone();
    let (status, answer) = post(
        "/v1/chat/completions",
        &json!({
            "model": model,
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 6, "temperature": 0, "stop": "\n\n"
        }),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(answer["model"], model);
    let choice = &answer["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert!(choice["message"]["content"].is_string());
    assert!(["stop", "length"].contains(&choice["finish_reason"].as_str().unwrap()));
    let usage = &answer["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );
    // llama-server's timings: what was decoded of the prompt, what was generated, and drafts.
    let timings = &answer["timings"];
    assert_eq!(
        timings["predicted_n"], usage["completion_tokens"],
        "{timings}"
    );
    assert_eq!(
        timings["prompt_n"].as_u64().unwrap() + timings["cache_n"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap(),
        "{timings}"
    );
    assert!(timings["prompt_ms"].as_f64().unwrap() > 0.0, "{timings}");
    assert!(
        timings["predicted_ms"].as_f64().unwrap() >= 0.0,
        "{timings}"
    );
    assert_eq!(
        (
            timings["draft_n"].as_u64(),
            timings["draft_n_accepted"].as_u64()
        ),
        (Some(0), Some(0))
    );

    let data = sse_data(
        "/v1/chat/completions",
        &json!({
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello"}]}],
            "max_completion_tokens": 5, "temperature": 0, "stream": true,
            "stream_options": {"include_usage": true}, "stop": ["\n\n", "###"]
        }),
    );
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).expect("chunk is JSON"))
        .collect();
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(!text.is_empty());
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"]["completion_tokens"], 5);
    assert_eq!(usage_chunk["timings"]["predicted_n"], 5);
    let last_choice = &chunks[chunks.len() - 2];
    assert_eq!(last_choice["choices"][0]["finish_reason"], "length");
    assert_eq!(last_choice["timings"], usage_chunk["timings"]);
    assert!(chunks[..chunks.len() - 2]
        .iter()
        .all(|c| c.get("timings").is_none()));
}

#[test]
fn completions_and_models() {
    let (status, answer) = post(
        "/v1/completions",
        &json!({"prompt": "The sky is", "max_tokens": 4, "temperature": 0, "mode": "lookup"}),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["object"], "text_completion");
    assert!(answer["choices"][0]["text"].is_string());
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    assert_eq!(answer["usage"]["completion_tokens"], 4);
    // Lookup drafts from the prompt: what its steps drafted and kept is in the timings.
    let timings = &answer["timings"];
    assert!(
        timings["draft_n_accepted"].as_u64().unwrap() <= timings["draft_n"].as_u64().unwrap(),
        "{timings}"
    );

    let data = sse_data(
        "/v1/completions",
        &json!({"prompt": "The sky is", "max_tokens": 3, "stream": true}),
    );
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let first: Value = serde_json::from_str(&data[0]).unwrap();
    assert_eq!(first["object"], "text_completion");

    let (status, models) = get("/v1/models");
    assert_eq!(status, 200);
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["object"], "model");
    assert!(models["data"][0]["id"]
        .as_str()
        .is_some_and(|id| !id.is_empty()));
}

#[test]
fn openai_fields_not_supported_yet_are_refused_by_name_not_ignored() {
    let refused = |body: Value, param: &str| {
        let (status, answer) = post("/v1/chat/completions", &body);
        assert_eq!(status, 400, "{answer}");
        let error = &answer["error"];
        assert_eq!(error["code"], "unsupported_parameter", "{answer}");
        assert_eq!(error["type"], "invalid_request_error", "{answer}");
        assert_eq!(error["param"], param, "{answer}");
        error["message"].as_str().unwrap().to_owned()
    };
    let hi = json!([{"role": "user", "content": "Hi"}]);
    let tool = json!([{"name": "f", "parameters": {"type": "object"}}]);
    refused(json!({"messages": hi, "functions": tool}), "functions");
    let (status, answer) = post("/v1/chat/completions", &json!({"messages": hi, "n": 9}));
    assert_eq!(
        (status, answer["error"]["param"].as_str()),
        (400, Some("n"))
    );
    // OpenAI's temperature range, 0 to 2, named by its field.
    for temperature in [5.0, -0.5] {
        let body = json!({"messages": hi, "temperature": temperature});
        let (status, answer) = post("/v1/chat/completions", &body);
        assert_eq!(
            (status, answer["error"]["param"].as_str()),
            (400, Some("temperature")),
            "{answer}"
        );
    }

    // Legacy completions count alternatives in `logprobs` itself: the refusal names that field.
    let (status, answer) = post(
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 1, "logprobs": 50}),
    );
    assert_eq!(
        (status, answer["error"]["param"].as_str()),
        (400, Some("logprobs")),
        "{answer}"
    );

    // Values that ask for nothing pass, and the routes answer without `/v1` too.
    let (status, answer) = post(
        "/chat/completions",
        &json!({"messages": hi, "max_tokens": 2, "tools": [], "tool_choice": "none",
                "response_format": {"type": "text"}, "logprobs": false,
                "presence_penalty": 0, "frequency_penalty": 0.0}),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["object"], "chat.completion");
    let (status, answer) = post(
        "/completions",
        &json!({"prompt": "The sky is", "max_tokens": 2}),
    );
    assert_eq!(status, 200, "{answer}");
    let (status, _) = get("/models");
    assert_eq!(status, 200);

    // A prompt longer than the context, by OpenAI's code and field.
    let long = "word ".repeat(3000);
    let (status, answer) = post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": long}], "max_tokens": 2}),
    );
    assert_eq!(status, 400, "{answer}");
    assert_eq!(
        answer["error"]["code"], "context_length_exceeded",
        "{answer}"
    );
    assert_eq!(answer["error"]["param"], "messages");
    let (status, answer) = post("/v1/completions", &json!({"prompt": long, "max_tokens": 2}));
    assert_eq!(
        (status, answer["error"]["param"].as_str()),
        (400, Some("prompt")),
        "{answer}"
    );
}

#[test]
fn openai_json_mode_schemas_grammars_and_logprobs_are_honoured() {
    let ask = json!([{"role": "user", "content": "Give the name and age of a cat as JSON."}]);
    // JSON mode: the answer is a JSON object.
    let (status, answer) = post(
        "/v1/chat/completions",
        &json!({"messages": ask, "max_tokens": 160, "temperature": 0,
                "response_format": {"type": "json_object"}}),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop", "{answer}");
    let content = answer["choices"][0]["message"]["content"].as_str().unwrap();
    let object: Value = serde_json::from_str(content).expect("JSON mode answers JSON");
    assert!(object.is_object(), "{content}");

    // A schema, as the openai SDK's `parse` sends it.
    let schema = json!({"type": "object", "additionalProperties": false,
                        "properties": {"name": {"type": "string", "maxLength": 20},
                                       "legs": {"type": "integer"}},
                        "required": ["name", "legs"]});
    let (status, answer) = post(
        "/v1/chat/completions",
        &json!({"messages": ask, "max_tokens": 160, "temperature": 0, "mode": "lookup",
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": "Cat", "strict": true, "schema": schema}}}),
    );
    assert_eq!(status, 200, "{answer}");
    let content = answer["choices"][0]["message"]["content"].as_str().unwrap();
    let cat: Value = serde_json::from_str(content).expect("schema answers JSON");
    assert!(cat["name"].is_string() && cat["legs"].is_i64(), "{cat}");

    // A raw grammar (llama-server's field) on text completions.
    let (status, answer) = post(
        "/v1/completions",
        &json!({"prompt": "Is the sky blue? Answer:", "max_tokens": 8, "temperature": 0,
                "grammar": "root ::= \" yes\" | \" no\""}),
    );
    assert_eq!(status, 200, "{answer}");
    let text = answer["choices"][0]["text"].as_str().unwrap();
    assert!(text == " yes" || text == " no", "{text:?}");

    // What cannot be honoured is refused with the field and the reason.
    let bad = |body: Value, code: &str, param: &str| {
        let (status, answer) = post("/v1/chat/completions", &body);
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["code"], code, "{answer}");
        assert_eq!(answer["error"]["param"], param, "{answer}");
        answer["error"]["message"].as_str().unwrap().to_owned()
    };
    let hi = json!([{"role": "user", "content": "Hi"}]);
    let dangling = bad(
        json!({"messages": hi, "response_format": {"type": "json_schema",
               "json_schema": {"name": "X", "schema": {"$ref": "#/$defs/Missing"}}}}),
        "invalid_json_schema",
        "response_format",
    );
    assert!(dangling.contains("#/$defs/Missing"), "{dangling}");
    bad(
        json!({"messages": hi, "grammar": "root ::= nowhere"}),
        "invalid_grammar",
        "grammar",
    );
    let xml = bad(
        json!({"messages": hi, "response_format": {"type": "xml"}}),
        "invalid_parameter",
        "response_format",
    );
    assert!(xml.contains("'xml'"), "{xml}");
    bad(
        json!({"messages": hi, "logit_bias": {"cat": 5}}),
        "invalid_parameter",
        "logit_bias",
    );
    bad(
        json!({"messages": hi, "top_logprobs": 2}),
        "invalid_parameter",
        "top_logprobs",
    );

    // Log-probabilities: chat's entries, and the legacy lists of text completions.
    let (status, answer) = post(
        "/v1/chat/completions",
        &json!({"messages": hi, "max_tokens": 4, "temperature": 0,
                "logprobs": true, "top_logprobs": 2}),
    );
    assert_eq!(status, 200, "{answer}");
    let entries = answer["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap();
    assert_eq!(
        entries.len() as u64,
        answer["usage"]["completion_tokens"],
        "{answer}"
    );
    // The history keeps them with the run, as the answer gave them.
    let (_, run) = get(&format!("/api/runs/{}", answer["run_id"]));
    let kept = run["run"]["logprobs"]
        .as_array()
        .expect("kept with the run");
    assert_eq!(kept.len(), entries.len(), "{run}");
    for (kept, entry) in kept.iter().zip(entries) {
        assert_eq!(kept["text"], entry["token"]);
        assert_eq!(kept["logprob"], entry["logprob"]);
        assert_eq!(kept["top"].as_array().unwrap().len(), 2);
    }
    let content = answer["choices"][0]["message"]["content"].as_str().unwrap();
    let joined: String = entries
        .iter()
        .map(|e| e["token"].as_str().unwrap())
        .collect();
    assert_eq!(joined, content);
    for entry in entries {
        let top = entry["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 2, "{entry}");
        // Greedy: the chosen token is the likeliest.
        assert_eq!(top[0]["token"], entry["token"], "{entry}");
        assert!(entry["logprob"].as_f64().unwrap() <= 0.0);
    }
    let (status, answer) = post(
        "/v1/completions",
        &json!({"prompt": "The sky is", "max_tokens": 3, "temperature": 0, "logprobs": 1}),
    );
    assert_eq!(status, 200, "{answer}");
    let lists = &answer["choices"][0]["logprobs"];
    assert_eq!(lists["tokens"].as_array().unwrap().len(), 3, "{answer}");
    assert_eq!(lists["text_offset"][0], 0, "{answer}");
    assert_eq!(
        lists["top_logprobs"][0].as_object().unwrap().len(),
        1,
        "{answer}"
    );
    let (_, plain) = post(
        "/v1/completions",
        &json!({"prompt": "The sky is", "max_tokens": 2}),
    );
    assert_eq!(plain["choices"][0]["logprobs"], Value::Null);
    // A run that did not ask keeps none.
    let (_, run) = get(&format!("/api/runs/{}", plain["run_id"]));
    assert!(run["run"].get("logprobs").is_none(), "{run}");
}

#[test]
fn openai_tools_are_called_under_their_grammar_and_results_go_back_in() {
    let ask = json!([{"role": "user", "content": "What is the weather in Paris?"}]);
    let tools = json!([
        {"type": "function", "function": {"name": "get_weather",
         "description": "Current weather in a city",
         "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                        "required": ["city"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "get_time", "description": "The time now"}},
    ]);
    let call = |extra: Value| {
        let mut body = json!({"messages": ask, "tools": tools, "max_tokens": 64, "temperature": 0});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, answer) = post("/v1/chat/completions", &body);
        assert_eq!(status, 200, "{answer}");
        answer
    };

    // A call is required: the answer is one, with arguments that follow the tool's schema.
    let required = call(json!({"tool_choice": "required"}));
    let choice = &required["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{required}");
    assert_eq!(choice["message"]["content"], Value::Null, "{required}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(
        calls.len(),
        1,
        "one call unless parallel calls are asked for: {required}"
    );
    assert_eq!(calls[0]["type"], "function");
    assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));
    let name = calls[0]["function"]["name"].as_str().unwrap();
    let arguments: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    match name {
        "get_weather" => assert!(
            arguments["city"].is_string() && arguments.as_object().unwrap().len() == 1,
            "{arguments}"
        ),
        "get_time" => assert!(arguments.is_object(), "{arguments}"),
        other => panic!("a tool that was not offered: {other}"),
    }

    // A named tool is the one called, and drafting calls it exactly as plain decoding does.
    let named = json!({"type": "function", "function": {"name": "get_weather"}});
    let plain = call(json!({"tool_choice": named}));
    let plain_call = &plain["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(plain_call["name"], "get_weather", "{plain}");
    for mode in ["lookup", "auto"] {
        let drafted = call(json!({"tool_choice": named, "mode": mode}));
        assert_eq!(
            drafted["choices"][0]["message"]["tool_calls"][0]["function"], *plain_call,
            "{mode}: {drafted}"
        );
    }

    // Streamed: the call comes as a tool-call delta, then the finish reason.
    let data = sse_data(
        "/v1/chat/completions",
        &json!({"messages": ask, "tools": tools, "tool_choice": named, "max_tokens": 64,
                "temperature": 0, "stream": true}),
    );
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let deltas: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"].get("tool_calls"))
        .collect();
    assert_eq!(deltas.len(), 1, "{data:?}");
    assert_eq!(deltas[0][0]["index"], 0);
    assert_eq!(deltas[0][0]["function"], *plain_call);
    let finishes: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finishes, [&json!("tool_calls")]);

    // The call and its result go back in: the model reads the result under the tool's name.
    let call_message = plain["choices"][0]["message"].clone();
    let id = call_message["tool_calls"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut messages = ask.as_array().unwrap().clone();
    messages.push(call_message);
    messages.push(json!({"role": "tool", "tool_call_id": id, "content": "18 degrees and sunny"}));
    let (status, answer) = post(
        "/v1/chat/completions",
        &json!({"messages": messages, "tools": tools, "tool_choice": "none", "max_tokens": 8,
                "temperature": 0}),
    );
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["choices"][0]["message"]["content"].is_string(),
        "{answer}"
    );
    let (_, run) = get(&format!("/api/runs/{}", answer["run_id"]));
    let prompt = &run["run"]["prompt"]["content"];
    assert_eq!(
        prompt[1]["content"].as_str().unwrap(),
        format!(
            r#"{{"tool_calls":[{{"name":"get_weather","arguments":{}}}]}}"#,
            plain_call["arguments"].as_str().unwrap()
        ),
        "{run}"
    );
    assert_eq!(prompt[2]["role"], "user", "{run}");
    assert_eq!(
        prompt[2]["content"],
        r#"{"tool_response":{"name":"get_weather","content":"18 degrees and sunny"}}"#,
        "{run}"
    );

    // What cannot be honoured is refused with the field and the reason.
    let refused =
        |body: Value, path: &str, param: &str| refused_by(path, &body, "invalid_parameter", param);
    let chat = "/v1/chat/completions";
    let unknown = json!({"type": "function", "function": {"name": "get_news"}});
    refused(
        json!({"messages": ask, "tools": tools, "tool_choice": unknown}),
        chat,
        "tool_choice",
    );
    refused(
        json!({"messages": ask, "tool_choice": "required"}),
        chat,
        "tool_choice",
    );
    refused(
        json!({"messages": ask, "tools": tools, "grammar": "root ::= \"a\""}),
        chat,
        "grammar",
    );
    refused(
        json!({"prompt": "Hi", "tools": tools}),
        "/v1/completions",
        "tools",
    );
}

#[test]
fn a_tool_call_cut_by_the_token_limit_carries_only_the_arguments_the_model_wrote() {
    let ask = json!([{"role": "user", "content": "What is the weather in Paris?"}]);
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                       "required": ["city"]}}}]);
    let body = |max_tokens: u32| {
        json!({"messages": ask, "tools": tools, "tool_choice": "required",
               "max_tokens": max_tokens, "temperature": 0})
    };
    let (status, whole) = post("/v1/chat/completions", &body(64));
    assert_eq!(status, 200, "{whole}");
    assert_eq!(
        whole["choices"][0]["finish_reason"], "tool_calls",
        "{whole}"
    );
    let full = whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap()
        .to_owned();
    let bare = |text: &str| -> String { text.chars().filter(|c| !c.is_whitespace()).collect() };
    let mut cut_calls = 0;
    for max_tokens in 20..=36 {
        let (status, answer) = post("/v1/chat/completions", &body(max_tokens));
        assert_eq!(status, 200, "{answer}");
        let choice = &answer["choices"][0];
        if choice["finish_reason"] != "length" {
            continue;
        }
        let Some(call) = choice["message"]["tool_calls"].get(0) else {
            continue;
        };
        cut_calls += 1;
        let arguments = call["function"]["arguments"].as_str().unwrap();
        // Whole arguments are the call's own; cut ones a prefix of what the model wrote.
        match serde_json::from_str::<Value>(arguments) {
            Ok(value) => assert_eq!(value, serde_json::from_str::<Value>(&full).unwrap()),
            Err(_) => assert!(
                bare(&full).starts_with(&bare(arguments)),
                "max_tokens {max_tokens}: {arguments:?} is not a prefix of {full:?}"
            ),
        }
    }
    assert!(cut_calls > 0, "no limit from 20 to 36 cut the call");

    // On the Responses API the cut call is an incomplete item of an incomplete response.
    let cut_at = |max_output_tokens: u32| {
        let (status, response) = post(
            "/v1/responses",
            &json!({"input": "What is the weather in Paris?", "tool_choice": "required",
                    "tools": [{"type": "function", "name": "get_weather",
                               "parameters": tools[0]["function"]["parameters"]}],
                    "max_output_tokens": max_output_tokens, "temperature": 0}),
        );
        assert_eq!(status, 200, "{response}");
        response
    };
    let whole = cut_at(64);
    assert_eq!(whole["status"], "completed", "{whole}");
    assert_eq!(whole["output"][0]["status"], "completed", "{whole}");
    let response = (20..=36)
        .map(cut_at)
        .find(|r| r["output"][0]["type"] == "function_call")
        .expect("a call cut between 20 and 36 tokens");
    assert_eq!(response["status"], "incomplete", "{response}");
    assert_eq!(response["output"][0]["status"], "incomplete", "{response}");
}

#[test]
fn the_responses_api_answers_whole_and_as_typed_events() {
    let (status, whole) = post(
        "/v1/responses",
        &json!({"input": "Name a colour.", "instructions": "Answer in one word.",
                "max_output_tokens": 6, "temperature": 0}),
    );
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["object"], "response");
    assert!(whole["id"].as_str().unwrap().starts_with("resp_"));
    assert!(
        ["completed", "incomplete"].contains(&whole["status"].as_str().unwrap()),
        "{whole}"
    );
    let item = &whole["output"][0];
    assert_eq!(
        (item["type"].as_str(), item["role"].as_str()),
        (Some("message"), Some("assistant"))
    );
    assert_eq!(
        item["status"], whole["status"],
        "the item ends as the response does"
    );
    let text = item["content"][0]["text"].as_str().unwrap().to_owned();
    assert_eq!(item["content"][0]["type"], "output_text");
    assert_eq!(
        whole["usage"]["output_tokens"], whole["timings"]["predicted_n"],
        "{whole}"
    );
    let (_, run) = get(&format!("/api/runs/{}", whole["run_id"]));
    assert_eq!(
        run["run"]["prompt"]["content"][0]["content"],
        "Answer in one word."
    );

    // Streamed: the same text in deltas, between the events that open and close its item,
    // numbered in order, and the whole response last.
    let data = sse_data(
        "/responses",
        &json!({"input": [{"role": "developer", "content": "Answer in one word."},
                          {"role": "user", "content": [{"type": "input_text", "text": "Name a colour."}]}],
                "max_output_tokens": 6, "temperature": 0, "stream": true}),
    );
    let events: Vec<Value> = data
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let deltas = types
        .iter()
        .filter(|t| **t == "response.output_text.delta")
        .count();
    assert!(deltas >= 1, "{types:?}");
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    expected.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]);
    let last = *types.last().unwrap();
    assert!(
        ["response.completed", "response.incomplete"].contains(&last),
        "{types:?}"
    );
    expected.push(last);
    assert_eq!(types, expected);
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], n as u64);
    }
    let streamed: String = events
        .iter()
        .filter_map(|e| e.get("delta").and_then(Value::as_str))
        .collect();
    assert_eq!(streamed, text, "greedy: the same text whole and streamed");
    assert_eq!(
        events.last().unwrap()["response"]["output"][0]["content"][0]["text"],
        text
    );

    // Function tools, flat as this API writes them, and a named choice.
    let tools = json!([{"type": "function", "name": "get_weather",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                                       "required": ["city"]}}]);
    let (status, called) = post(
        "/v1/responses",
        &json!({"input": "What is the weather in Paris?", "tools": tools, "max_output_tokens": 64,
                "tool_choice": {"type": "function", "name": "get_weather"}, "temperature": 0}),
    );
    assert_eq!(status, 200, "{called}");
    let call = &called["output"][0];
    assert_eq!(call["type"], "function_call", "{called}");
    assert_eq!(call["name"], "get_weather");
    assert!(call["call_id"].as_str().unwrap().starts_with("call_"));
    let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(arguments["city"].is_string(), "{arguments}");

    // The call and its output go back in as input items.
    let (status, answer) = post(
        "/v1/responses",
        &json!({"input": [{"role": "user", "content": "What is the weather in Paris?"},
                          {"type": "function_call", "call_id": call["call_id"], "name": "get_weather",
                           "arguments": call["arguments"]},
                          {"type": "function_call_output", "call_id": call["call_id"], "output": "18 C"}],
                "max_output_tokens": 4, "temperature": 0}),
    );
    assert_eq!(status, 200, "{answer}");
    let (_, run) = get(&format!("/api/runs/{}", answer["run_id"]));
    assert_eq!(
        run["run"]["prompt"]["content"][2]["content"],
        r#"{"tool_response":{"name":"get_weather","content":"18 C"}}"#
    );

    // What is not kept here is refused by name, and chat's fields by this API's names.
    let refused =
        |body: Value, code: &str, param: &str| refused_by("/v1/responses", &body, code, param);
    refused(
        json!({"input": "Hi", "previous_response_id": "resp_1"}),
        "unsupported_parameter",
        "previous_response_id",
    );
    refused(
        json!({"input": [{"type": "input_image", "image_url": "x"}]}),
        "unsupported_parameter",
        "input",
    );
    refused(
        json!({"input": "Hi", "tools": [{"type": "web_search"}]}),
        "unsupported_parameter",
        "tools",
    );
    refused(json!({}), "invalid_parameter", "input");
    refused(
        json!({"input": "Hi", "text": {"format": {"type": "json_schema", "name": "X",
               "schema": {"type": "string", "pattern": "[a-z]+"}}}}),
        "invalid_json_schema",
        "text.format",
    );
    refused(
        json!({"input": "word ".repeat(3000)}),
        "context_length_exceeded",
        "input",
    );
}

#[test]
fn embeddings_are_unit_vectors_as_numbers_or_base64() {
    let texts = json!([
        "The cat sat on the mat.",
        "A cat was sitting on a rug.",
        "Stock markets fell sharply today."
    ]);
    let (status, answer) = post("/v1/embeddings", &json!({"input": texts}));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["object"], "list");
    let vectors: Vec<Vec<f64>> = answer["data"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, item)| {
            assert_eq!(
                (item["object"].as_str(), item["index"].as_u64()),
                (Some("embedding"), Some(i as u64))
            );
            item["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    for vector in &vectors {
        assert_eq!(vector.len(), vectors[0].len());
        assert!((dot(vector, vector) - 1.0).abs() < 1e-4);
    }
    // Two sentences about a cat are nearer each other than either is to the markets.
    assert!(dot(&vectors[0], &vectors[1]) > dot(&vectors[0], &vectors[2]));
    assert!(answer["usage"]["prompt_tokens"].as_u64().unwrap() >= 3);

    // One text alone, as base64: the same numbers, whatever else was in the batch.
    let (status, one) = post(
        "/embeddings",
        &json!({"input": "The cat sat on the mat.", "encoding_format": "base64"}),
    );
    assert_eq!(status, 200, "{one}");
    let bytes = base64_decode(one["data"][0]["embedding"].as_str().unwrap());
    let decoded: Vec<f64> = bytes
        .chunks_exact(4)
        .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        .collect();
    assert_eq!(decoded.len(), vectors[0].len());
    for (a, b) in decoded.iter().zip(&vectors[0]) {
        assert!((a - b).abs() < 1e-5, "{a} {b}");
    }

    // Token ids of the model's vocabulary, as OpenAI takes them: one list, or a list of lists.
    let embedded = |input: Value| {
        let (status, answer) = post("/v1/embeddings", &json!({"input": input}));
        assert_eq!(status, 200, "{answer}");
        answer["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["embedding"].clone())
            .collect::<Vec<_>>()
    };
    let one = embedded(json!([1, 2, 3]));
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].as_array().unwrap().len(), vectors[0].len());
    assert_eq!(embedded(json!([[1, 2, 3], "Hi"]))[0], one[0]);
    // An id beyond this model's vocabulary that OpenAI's tokenizer writes for a text (`'av`
    // in cl100k_base) is that text.
    assert_eq!(
        embedded(json!([[49152], "'av"]))[0],
        embedded(json!(["'av"]))[0]
    );

    let refused =
        |body: Value, code: &str, param: &str| refused_by("/v1/embeddings", &body, code, param);
    // Beyond this model's vocabulary and OpenAI's tokenizer's alike.
    refused(json!({"input": [[200_000]]}), "invalid_parameter", "input");
    refused(json!({"input": [[-1]]}), "invalid_parameter", "input");
    refused(
        json!({"input": [{"text": "Hi"}]}),
        "invalid_parameter",
        "input",
    );
    refused(
        json!({"input": "Hi", "dimensions": 8}),
        "unsupported_parameter",
        "dimensions",
    );
    refused(
        json!({"input": "Hi", "encoding_format": "hex"}),
        "invalid_parameter",
        "encoding_format",
    );
    refused(json!({"input": []}), "invalid_parameter", "input");
    refused(
        json!({"input": "word ".repeat(3000)}),
        "context_length_exceeded",
        "input",
    );
}

/// Posts `body` to `path` and checks that it is refused: 400 with `code`, naming `param`.
fn refused_by(path: &str, body: &Value, code: &str, param: &str) {
    let (status, answer) = post(path, body);
    assert_eq!(status, 400, "{answer}");
    let error = &answer["error"];
    assert_eq!(
        (error["code"].as_str(), error["param"].as_str()),
        (Some(code), Some(param)),
        "{answer}"
    );
}

/// Standard base64 (the test's own decoder, so that it checks the server's encoder).
fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut count = 0;
    let mut out = Vec::new();
    for c in text.bytes().filter(|&c| c != b'=') {
        let value = ALPHABET
            .iter()
            .position(|&a| a == c)
            .expect("base64 alphabet") as u32;
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    out
}

#[test]
fn echo_scores_a_given_text_as_generation_would() {
    // A continuation written by the model, then scored as a given text.
    let (status, generated) = post(
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0,
                "logprobs": 1, "echo": true}),
    );
    assert_eq!(status, 200, "{generated}");
    let choice = &generated["choices"][0];
    let text = choice["text"].as_str().unwrap();
    assert!(
        text.starts_with("The capital of France is") && text.len() > 24,
        "{text:?}"
    );
    let lists = &choice["logprobs"];
    let tokens: Vec<&str> = lists["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        tokens.concat(),
        text,
        "the tokens spell the prompt and the answer"
    );
    assert_eq!(
        lists["token_logprobs"][0],
        Value::Null,
        "nothing predicts the first token"
    );
    assert_eq!(lists["top_logprobs"][0], Value::Null);
    let offsets: Vec<u64> = lists["text_offset"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_u64().unwrap())
        .collect();
    let mut at = 0;
    for (token, offset) in tokens.iter().zip(&offsets) {
        assert_eq!(*offset, at);
        at += token.chars().count() as u64;
    }

    let (status, scored) = post(
        "/v1/completions",
        &json!({"prompt": text, "max_tokens": 0, "echo": true, "logprobs": 2}),
    );
    assert_eq!(status, 200, "{scored}");
    let choice = &scored["choices"][0];
    assert_eq!(choice["text"], text);
    assert_eq!(choice["finish_reason"], "length");
    let scored_lists = &choice["logprobs"];
    let scored_tokens = scored_lists["tokens"].as_array().unwrap();
    assert_eq!(
        scored["usage"]["prompt_tokens"].as_u64(),
        Some(scored_tokens.len() as u64)
    );
    assert_eq!(scored["usage"]["completion_tokens"], 0);
    // Text read back may split differently from how it was written (two "\n" tokens become
    // one "\n\n"); where the tokens agree, so do the figures. The prompt's five and the first
    // written token at least agree.
    let same = tokens
        .iter()
        .zip(scored_tokens)
        .take_while(|(a, b)| b.as_str() == Some(**a))
        .count();
    assert!(same >= 6, "{scored}");
    for i in 1..same {
        let given = scored_lists["token_logprobs"][i].as_f64().unwrap();
        let written = lists["token_logprobs"][i].as_f64().unwrap();
        assert!(
            (given - written).abs() < 1e-3,
            "token {i}: scored {given}, generated {written}"
        );
        assert_eq!(
            scored_lists["top_logprobs"][i].as_object().unwrap().len(),
            2
        );
    }

    // Streamed, the prompt comes first, in a chunk of its own.
    let data = sse_data(
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 2, "temperature": 0,
                "echo": true, "stream": true}),
    );
    let first: Value = serde_json::from_str(&data[0]).unwrap();
    assert_eq!(first["choices"][0]["text"], "The capital of France is");

    let (status, answer) = post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "echo": true}),
    );
    assert_eq!(
        (status, answer["error"]["param"].as_str()),
        (400, Some("echo")),
        "{answer}"
    );
}

#[test]
fn openai_n_choices_run_side_by_side_and_differ_when_sampled() {
    let (status, answer) = post(
        "/v1/completions",
        &json!({"prompt": "Once upon a time", "max_tokens": 6, "n": 3,
                "temperature": 1.0, "seed": 5}),
    );
    assert_eq!(status, 200, "{answer}");
    let choices = answer["choices"].as_array().unwrap();
    let indices: Vec<u64> = choices
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indices, vec![0, 1, 2]);
    assert_eq!(answer["usage"]["completion_tokens"], 18, "{answer}");
    let texts: std::collections::HashSet<&str> = choices
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect();
    assert!(
        texts.len() > 1,
        "seeds seed + i gave the same text: {texts:?}"
    );
    // The same request again gives the same choices: each keeps its own seed.
    let (_, again) = post(
        "/v1/completions",
        &json!({"prompt": "Once upon a time", "max_tokens": 6, "n": 3,
                "temperature": 1.0, "seed": 5}),
    );
    assert_eq!(again["choices"], answer["choices"]);
}

#[test]
fn history_lists_exports_and_imports() {
    for prompt in ["Export me", "Export me too"] {
        let (status, _) = post(
            "/generate/normal",
            &json!({"prompt": prompt, "max_length": 3}),
        );
        assert_eq!(status, 200);
    }
    // Runs created before this instant form a fixed set, whatever other tests do meanwhile.
    std::thread::sleep(Duration::from_millis(20));
    let until = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    std::thread::sleep(Duration::from_millis(20));
    let list = |query: &str| -> Vec<Value> {
        let (status, answer) = send(
            agent()
                .get(&format!("{}/api/runs", base()))
                .query("until", &until)
                .query_pairs(url_pairs(query)),
            None,
        );
        assert_eq!(status, 200);
        let answer: Value = answer.into_json().unwrap();
        answer["runs"].as_array().unwrap().clone()
    };
    let runs = list("");
    assert!(runs.len() >= 2);
    let normal = list("mode=normal&status=finished&sort=tokens_generated&order=asc");
    assert!(normal
        .iter()
        .all(|r| r["mode"] == "normal" && r["status"] == "finished"));
    let limited = list("limit=1&offset=1");
    assert_eq!(limited.len(), 1);
    assert_eq!(limited[0]["id"], runs[1]["id"]);
    assert_error(get("/api/runs?sort=nonsense"), 400, "invalid_parameter");
    assert_error(get("/api/runs?since=yesterday"), 400, "invalid_parameter");

    let export = |format: &str| -> (String, String, String) {
        let (status, response) = send(
            agent()
                .get(&format!("{}/api/runs/export", base()))
                .query("format", format)
                .query("until", &until),
            None,
        );
        assert_eq!(status, 200);
        let content_type = response.content_type().to_owned();
        let disposition = response.header("Content-Disposition").unwrap().to_owned();
        (content_type, disposition, response.into_string().unwrap())
    };
    let ids: Vec<i64> = runs.iter().map(|r| r["id"].as_i64().unwrap()).collect();

    let (content_type, disposition, json_text) = export("json");
    assert_eq!(content_type, "application/json");
    assert!(disposition.starts_with("attachment; filename=\"") && disposition.contains(".json\""));
    let document: Value = serde_json::from_str(&json_text).unwrap();
    assert_eq!(document["runs"].as_array().unwrap().len(), runs.len());

    let (content_type, disposition, jsonl) = export("jsonl");
    assert_eq!(content_type, "application/jsonl");
    assert!(disposition.contains(".jsonl\""));
    let lines: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let line_ids: Vec<i64> = lines
        .iter()
        .map(|l| l["run"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(line_ids, ids);

    let (content_type, disposition, csv_text) = export("csv");
    assert_eq!(content_type, "text/csv");
    assert!(disposition.contains(".csv\""));
    let mut reader = csv::Reader::from_reader(csv_text.as_bytes());
    let headers = reader.headers().unwrap().clone();
    let id_column = headers.iter().position(|h| h == "id").unwrap();
    let prompt_column = headers.iter().position(|h| h == "prompt").unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.unwrap()).collect();
    let csv_ids: Vec<i64> = rows.iter().map(|r| r[id_column].parse().unwrap()).collect();
    assert_eq!(csv_ids, ids);
    for (row, run) in rows.iter().zip(&runs) {
        if let Some(text) = run["prompt"]["content"].as_str() {
            assert_eq!(&row[prompt_column], text);
        }
    }
    assert_error(get("/api/runs/export?format=xml"), 400, "invalid_parameter");

    // Importing twice into another database adds the runs once.
    let (status, report) = post_to(refusing(), "/api/runs/import", &json_text);
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["imported"], runs.len());
    assert_eq!(report["skipped_duplicates"], 0);
    // The second time padded past the 1 MiB request limit: imports may be much bigger.
    let padded = format!("{json_text}{}", " ".repeat(2 << 20));
    let (status, report) = post_to(refusing(), "/api/runs/import", &padded);
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["imported"], 0);
    assert_eq!(report["skipped_duplicates"], runs.len());
    let (status, imported) = get_from(refusing(), "/api/runs");
    assert_eq!(status, 200);
    assert_eq!(imported["runs"].as_array().unwrap().len(), runs.len());
    assert_error(
        post_to(refusing(), "/api/runs/import", r#"{"version": 1}"#),
        400,
        "invalid_parameter",
    );
}

#[test]
fn a_page_of_an_allowed_origin_may_send_the_openai_sdks_headers() {
    let base = serve_without_model_under(server::AccessPolicy {
        allowed_origins: vec!["http://localhost:5173".into()],
        ..server::AccessPolicy::default()
    });
    let asked = "authorization,content-type,x-stainless-os,x-stainless-retry-count";
    let (status, answer) = raw_http(
        &base,
        &format!(
            "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Origin: http://localhost:5173\r\nAccess-Control-Request-Method: POST\r\n\
             Access-Control-Request-Headers: {asked}\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(status, 200, "{answer}");
    let answer = answer.to_ascii_lowercase();
    assert!(
        answer.contains(&format!("access-control-allow-headers: {asked}")),
        "{answer}"
    );
    assert!(
        answer.contains("access-control-allow-origin: http://localhost:5173"),
        "{answer}"
    );
}

#[test]
fn imports_are_read_one_at_a_time_and_a_second_is_refused_before_it_is_read() {
    use std::io::{Read, Write};
    let base = serve_without_model();
    let document = heavy_document(1, 1_000);
    // The first import sends its head and half its body, then waits.
    let head = format!(
        "POST /api/runs/import HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        document.len()
    );
    let (half, rest) = document.as_bytes().split_at(document.len() / 2);
    let start_first = || {
        let mut first = std::net::TcpStream::connect(base.trim_start_matches("http://")).unwrap();
        first.write_all(head.as_bytes()).unwrap();
        first.write_all(half).unwrap();
        first
    };
    let mut first = start_first();
    // Another import meanwhile is refused, once the first holds the place. Until then the
    // second may take it, and the first is then refused in its turn (its answer already waits
    // on its connection): it starts again.
    let deadline = Instant::now() + Duration::from_secs(30);
    let refusal = loop {
        let (status, answer) = post_to(&base, "/api/runs/import", &document);
        if status == 503 {
            break answer;
        }
        assert_eq!(status, 200, "{answer}");
        if has_been_answered(&first) {
            first = start_first();
        }
        assert!(
            Instant::now() < deadline,
            "the second import was never refused"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(refusal["error"]["code"], "import_busy", "{refusal}");
    // The first goes on to the end.
    first.write_all(rest).unwrap();
    let mut answer = String::new();
    first.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Then the place is free again.
    let (status, report) = post_to(&base, "/api/runs/import", &document);
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["skipped_duplicates"], 1, "{report}");
}

/// Whether the server has answered (or closed) a connection whose request is still unsent in part.
fn has_been_answered(connection: &std::net::TcpStream) -> bool {
    connection.set_nonblocking(true).unwrap();
    let waiting = matches!(
        connection.peek(&mut [0u8; 1]),
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock
    );
    connection.set_nonblocking(false).unwrap();
    !waiting
}

#[test]
fn runs_of_millions_of_tokens_stay_out_of_listings_and_an_import_over_the_total_is_refused() {
    let base = serve_without_model();
    let per_run = (store::MAX_IMPORT_TOKENS / 2) as usize;
    let (status, report) = post_to(&base, "/api/runs/import", &heavy_document(2, per_run));
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["imported"], 2, "{report}");

    // A page of the listing stays small: no per-token arrays.
    let listing = || {
        let (status, response) = send(agent().get(&format!("{base}/api/runs?limit=50")), None);
        assert_eq!(status, 200);
        response.into_string().unwrap()
    };
    let listed = listing();
    assert!(listed.len() < 16 << 10, "{} bytes", listed.len());
    assert!(
        !listed.contains("token_ids") && !listed.contains("logprobs"),
        "{listed}"
    );
    let runs: Value = serde_json::from_str(&listed).unwrap();
    let ids: Vec<i64> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    // A run's own record carries them.
    let (status, detail) = get_from(&base, &format!("/api/runs/{}", ids[0]));
    assert_eq!(status, 200);
    assert_eq!(
        detail["run"]["token_ids"].as_array().unwrap().len(),
        per_run
    );

    // So does the export, streamed: no length is known before its end.
    let (status, response) = send(
        agent().get(&format!("{base}/api/runs/export?format=json")),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(response.content_type(), "application/json");
    assert!(response.header("Content-Length").is_none());
    let exported: Value = serde_json::from_reader(response.into_reader()).unwrap();
    let token_counts: Vec<usize> = exported["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["run"]["token_ids"].as_array().unwrap().len())
        .collect();
    assert_eq!(token_counts, [per_run, per_run]);

    // One run more is over the total: refused whole, naming the limit; the history is as it was.
    let refusal = post_to(&base, "/api/runs/import", &heavy_document(3, per_run));
    assert_error(refusal.clone(), 413, "import_too_large");
    let message = refusal.1["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&store::MAX_IMPORT_TOKENS.to_string()),
        "{message}"
    );
    assert_eq!(listing(), listed);
    assert_eq!(
        get_from(&base, &format!("/api/runs/{}", ids[0])),
        (200, detail)
    );
}

fn url_pairs(query: &str) -> Vec<(&str, &str)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| p.split_once('='))
        .collect()
}

#[test]
fn health_info_and_metrics() {
    let (status, health) = get("/health");
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");
    assert!(health["model"].is_string());

    let (status, info) = get("/api/info");
    assert_eq!(status, 200);
    assert_eq!(info["model"]["n_ctx"], 1024);
    assert!(info["heads"].is_null());
    assert_eq!(info["metrics"]["slots"], 4);
    let compute = &info["model"]["compute"];
    assert_eq!(
        compute["total_layers"].as_u64(),
        info["model"]["n_layer"].as_u64().map(|n| n + 1)
    );
    assert!(compute["gpu_layers"].as_u64() <= compute["total_layers"].as_u64());
    assert!(
        compute["devices"].as_array().is_some_and(|d| !d.is_empty()),
        "{compute}"
    );

    let (status, _) = post(
        "/generate/normal",
        &json!({"prompt": "Count:", "max_length": 2}),
    );
    assert_eq!(status, 200);
    let (status, response) = send(agent().get(&format!("{}/metrics", base())), None);
    assert_eq!(status, 200);
    assert_eq!(response.content_type(), "application/openmetrics-text");
    let text = response.into_string().unwrap();
    assert!(
        text.contains("medusa_http_requests_total{endpoint=\"/generate/normal\",status=\"200\"}")
    );
    for name in [
        "medusa_tokens_generated_total",
        "medusa_queue_depth",
        "medusa_active_requests",
        "medusa_slots 4",
        "medusa_engine_steps_total",
        "medusa_batch_tokens_total",
        // No draft model here.
        "medusa_draft_model_decodes_total 0",
        "medusa_draft_model_tokens_total 0",
        "medusa_heads_evaluations_total",
        "medusa_heads_queries_total",
        "medusa_runs_total{status=\"finished\"}",
    ] {
        assert!(text.contains(name), "{name} missing from\n{text}");
    }
}

#[test]
fn ui_stream_delivers_every_event() {
    let events: Vec<Value> = sse_data(
        "/api/generate",
        &json!({
            "messages": [{"role": "user", "content": "Repeat: red, green, red, green"}],
            "mode": "lookup", "max_tokens": 6, "sampling": {"temperature": 0.0}
        }),
    )
    .iter()
    .map(|d| serde_json::from_str(d).unwrap())
    .collect();
    assert_eq!(events[0]["type"], "started");
    let run_id = events[0]["run_id"].as_i64().unwrap();
    assert!(events
        .iter()
        .any(|e| e["type"] == "text" && e["token_ids"].is_array()));
    assert!(events.iter().any(|e| e["type"] == "step"));
    let last = events.last().unwrap();
    assert_eq!(last["type"], "finished");
    assert_eq!(last["run_id"], run_id);
    assert_eq!(last["tokens_generated"], 6);
    let (_, run) = get(&format!("/api/runs/{run_id}"));
    assert_eq!(run["run"]["status"], "finished");
    assert!(!run["steps"].as_array().unwrap().is_empty());
}

#[test]
fn divergence_says_where_two_outputs_part_and_how_likely_each_token_was() {
    let messages = json!([{"role": "user", "content": "Name three colours of the rainbow."}]);
    let events = generate(
        base(),
        &json!({"messages": messages, "max_tokens": 12, "sampling": {"temperature": 0.0}}),
    )
    .unwrap();
    let finished = events.last().unwrap();
    assert_eq!(finished["type"], "finished", "{finished}");
    let expected: Vec<i64> = finished["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_i64().unwrap())
        .collect();
    assert!(expected.len() > 4, "{expected:?}");
    let ask = |got: &[i64]| {
        post(
            "/api/divergence",
            &json!({"messages": messages, "expected": expected, "got": got}),
        )
    };
    // The same output does not part.
    let (status, same) = ask(&expected);
    assert_eq!(status, 200, "{same}");
    assert!(same.is_null(), "{same}");
    // With its fifth token replaced, it parts there: normal's token is the model's first choice
    // when the shared tokens are decoded again in one pass (exact mode), the other less likely.
    let mut got = expected.clone();
    got[4] = if expected[4] == expected[0] {
        expected[1]
    } else {
        expected[0]
    };
    let (status, found) = ask(&got);
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["at"], 4);
    assert_eq!(found["expected"]["token_id"], expected[4]);
    assert_eq!(found["expected"]["rank"], 1, "{found}");
    assert_eq!(found["got"]["token_id"], got[4]);
    assert!(found["got"]["rank"].as_u64().unwrap() > 1, "{found}");
    let logprob = |side: &str| found[side]["logprob"].as_f64().unwrap();
    assert!(logprob("got") < logprob("expected") && logprob("expected") <= 0.0);
    assert_eq!(
        found["near_tie"],
        logprob("expected") - logprob("got") < 1.0,
        "{found}"
    );
    assert!(!found["expected"]["text"].as_str().unwrap().is_empty());
    // Bad input is refused with a code.
    assert_error(
        post(
            "/api/divergence",
            &json!({"messages": messages, "expected": [1], "got": [1 << 30]}),
        ),
        400,
        "invalid_parameter",
    );
    assert_error(
        post(
            "/api/divergence",
            &json!({"prompt": "Hi", "messages": messages, "expected": [1], "got": [2]}),
        ),
        400,
        "invalid_parameter",
    );
}

#[test]
fn a_client_that_goes_away_leaves_a_cancelled_run() {
    let (status, response) = send(
        agent().post(&format!("{}/api/generate", base())),
        Some(
            &json!({"prompt": "Count from one to one thousand: one, two,", "max_tokens": 500})
                .to_string(),
        ),
    );
    assert_eq!(status, 200);
    let mut lines = BufReader::new(response.into_reader()).lines();
    let started: Value = loop {
        let line = lines.next().expect("an event").expect("line");
        if let Some(data) = line.strip_prefix("data: ") {
            break serde_json::from_str(data).unwrap();
        }
    };
    assert_eq!(started["type"], "started");
    let run_id = started["run_id"].as_i64().unwrap();
    drop(lines);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (_, run) = get(&format!("/api/runs/{run_id}"));
        if run["run"]["status"] != "running" {
            assert_eq!(run["run"]["status"], "cancelled", "{run}");
            assert_eq!(run["run"]["stop_reason"], "cancelled");
            break;
        }
        assert!(Instant::now() < deadline, "run {run_id} still running");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn bad_input_is_refused_with_a_code() {
    assert_error(
        post_to(base(), "/generate/normal", "{\"prompt\": "),
        400,
        "invalid_json",
    );
    assert_error(
        post_to(base(), "/v1/chat/completions", "not json"),
        400,
        "invalid_json",
    );
    assert_error(
        post("/generate/normal", &json!({"max_length": 5})),
        400,
        "empty_prompt",
    );
    assert_error(
        post("/generate/normal", &json!({"prompt": "  "})),
        400,
        "empty_prompt",
    );
    assert_error(
        post(
            "/generate/normal",
            &json!({"prompt": "Hi", "max_length": 0}),
        ),
        400,
        "invalid_parameter",
    );
    assert_error(
        post(
            "/generate/normal",
            &json!({"prompt": "Hi", "temperature": 7.5}),
        ),
        400,
        "invalid_parameter",
    );
    assert_error(
        post(
            "/generate/normal",
            &json!({"prompt": "Hi", "max_length": "many"}),
        ),
        400,
        "invalid_parameter",
    );
    assert_error(
        post(
            "/compare",
            &json!({"prompt": "Hi", "modes": ["normal", "fast"]}),
        ),
        400,
        "invalid_parameter",
    );
    let chat = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        post("/v1/chat/completions", &body)
    };
    assert_error(chat(json!({"mode": "fast"})), 400, "invalid_parameter");
    assert_error(chat(json!({"n": 0})), 400, "invalid_parameter");
    assert_error(chat(json!({"max_tokens": 0})), 400, "invalid_parameter");
    assert_error(chat(json!({"top_p": 0})), 400, "invalid_parameter");
    assert_error(
        post("/v1/chat/completions", &json!({"messages": []})),
        400,
        "empty_prompt",
    );
    assert_error(
        post("/v1/completions", &json!({"prompt": ""})),
        400,
        "empty_prompt",
    );
    assert_error(
        post("/api/generate", &json!({"prompt": "Hi", "mode": "fast"})),
        400,
        "invalid_parameter",
    );

    // Three times the limit, more than socket buffers hold: ureq sends it whole before reading,
    // so the server must read the rest for the 413 to arrive instead of a broken pipe.
    let huge = json!({"prompt": "a".repeat(3 << 20)}).to_string();
    assert_error(
        post_to(base(), "/generate/normal", &huge),
        413,
        "body_too_large",
    );

    // Longer than the 1024-token context: refused before any answer starts, streamed or not.
    let long = "word ".repeat(1500);
    assert_error(
        post(
            "/generate/normal",
            &json!({"prompt": long, "max_length": 4}),
        ),
        400,
        "prompt_too_long",
    );
    assert_error(
        post(
            "/v1/completions",
            &json!({"prompt": long, "max_tokens": 4, "stream": true}),
        ),
        400,
        // OpenAI's code on the OpenAI routes.
        "context_length_exceeded",
    );
    assert_error(
        post("/api/generate", &json!({"prompt": long, "max_tokens": 4})),
        400,
        "prompt_too_long",
    );

    assert_error(get("/api/runs/999999"), 404, "not_found");
    assert_error(get("/api/runs/abc"), 404, "not_found");
    assert_error(get("/api/comparisons/999999"), 404, "not_found");
    assert_error(get("/no/such/endpoint"), 404, "not_found");
}

#[test]
fn a_full_queue_answers_503_with_retry_after() {
    let (status, response) = send(
        agent().post(&format!("{}/generate/normal", refusing())),
        Some(&json!({"prompt": "Hi", "max_length": 2}).to_string()),
    );
    assert_eq!(status, 503);
    let retry: u64 = response
        .header("Retry-After")
        .expect("Retry-After header")
        .parse()
        .expect("seconds");
    assert!(retry >= 1);
    let body: Value = response.into_json().unwrap();
    assert_eq!(body["error"]["code"], "queue_full");
}

#[test]
fn a_running_run_is_cancelled_by_id() {
    let (status, response) = send(
        agent().post(&format!("{}/api/generate", base())),
        Some(
            &json!({"prompt": "Count from one to one thousand: one, two,", "max_tokens": 400})
                .to_string(),
        ),
    );
    assert_eq!(status, 200);
    let mut events = BufReader::new(response.into_reader())
        .lines()
        .map(|l| l.expect("line"))
        .filter_map(|l| l.strip_prefix("data: ").map(str::to_owned))
        .map(|d| serde_json::from_str::<Value>(&d).unwrap());
    let started = events.next().expect("started");
    let run_id = started["run_id"].as_i64().unwrap();
    let (status, _) = send(
        agent().post(&format!("{}/api/runs/{run_id}/cancel", base())),
        Some("{}"),
    );
    assert_eq!(status, 204);
    let last = events.last().expect("a last event");
    assert_eq!(last["type"], "finished");
    assert_eq!(last["stop_reason"], "cancelled");
    assert!(last["tokens_generated"].as_u64().unwrap() < 400);
    assert_error(
        post(&format!("/api/runs/{run_id}/cancel"), &json!({})),
        409,
        "not_running",
    );
}

#[test]
fn comparisons_link_runs_of_one_prompt() {
    let prompt = "One, two, three, one, two, three, one, two,";
    let run = |mode: &str| {
        let (status, answer) = post(
            &format!("/generate/{mode}"),
            &json!({"prompt": prompt, "max_length": 6}),
        );
        assert_eq!(status, 200, "{answer}");
        answer["run_id"].as_i64().unwrap()
    };
    let (normal, again) = (run("normal"), run("normal"));
    let (status, comparison) = post("/api/comparisons", &json!({"run_ids": [normal, again]}));
    assert_eq!(status, 201, "{comparison}");
    assert_eq!(comparison["runs"][0]["run_id"], normal);
    assert_eq!(comparison["runs"][1]["run_id"], again);
    assert_eq!(comparison["outputs_identical"], true);
    let (status, stored) = get(&format!("/api/comparisons/{}", comparison["id"]));
    assert_eq!(status, 200);
    assert_eq!(stored["id"], comparison["id"]);

    let (_, other) = post(
        "/generate/normal",
        &json!({"prompt": "Another prompt", "max_length": 2}),
    );
    let other = other["run_id"].as_i64().unwrap();
    let fresh = run("normal");
    assert_error(
        post("/api/comparisons", &json!({"run_ids": [fresh, other]})),
        400,
        "invalid_parameter",
    );
    assert_error(
        post("/api/comparisons", &json!({"run_ids": [fresh]})),
        400,
        "invalid_parameter",
    );
    assert_error(
        post("/api/comparisons", &json!({"run_ids": [fresh, 987654]})),
        404,
        "not_found",
    );
}

/// Polls `/api/info` until `done` holds.
#[test]
fn models_load_in_the_background_and_the_ui_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let ui = dir.path().join("ui");
    std::fs::create_dir(&ui).unwrap();
    std::fs::write(ui.join("index.html"), "<title>Medusa Playground</title>").unwrap();
    std::fs::write(ui.join("app.js"), "console.log(1)").unwrap();
    let missing = dir.path().join("missing.gguf");
    let loadable = dir.path().to_path_buf();
    let template = {
        let mut config = EngineConfig::new(PathBuf::new());
        config.ctx_size = Some(512);
        config
    };
    let base = serve(
        move |store| {
            Playground::loading(
                store,
                template,
                LoadRequest {
                    model: ModelSource::Path(missing),
                    heads: None,
                    draft_model: None,
                    drafter: None,
                    tree: None,
                    ctx_size: None,
                    exact: None,
                },
            )
        },
        Some(ui),
        server::AccessPolicy {
            loadable_dirs: vec![loadable.clone(), models::cache_dir().unwrap()],
            ..server::AccessPolicy::default()
        },
    );

    // No model: the server answers, says why, and refuses generations with 503.
    let (_, info) = get_from(&base, "/api/info");
    assert!(info["model"].is_null());
    assert_eq!(info["error"]["code"], "file_not_found");
    assert_eq!(info["modes"], json!([]));
    assert_error(
        post_to(&base, "/api/generate", r#"{"prompt": "Hi"}"#),
        503,
        "no_model",
    );

    // The UI's files, its own routes, and JSON 404s for unknown API paths.
    let page = |path: &str| {
        let (status, response) = send(agent().get(&format!("{base}{path}")), None);
        (status, response.into_string().unwrap())
    };
    assert_eq!(page("/"), (200, "<title>Medusa Playground</title>".into()));
    assert_eq!(page("/app.js"), (200, "console.log(1)".into()));
    assert_eq!(page("/history").1, "<title>Medusa Playground</title>");
    assert_error(get_from(&base, "/api/nothing"), 404, "not_found");

    // Load the real model: 202 at once, then ready.
    let model = models::default_model_path().unwrap();
    let load = |body: Value| post_to(&base, "/api/model", &body.to_string());
    assert_error(
        load(json!({"model": dir.path().join("nope.gguf")})),
        400,
        "file_not_found",
    );
    // Outside the models directories nothing loads, and whether a file exists is not told.
    for path in ["/etc/passwd", "/etc/no-such-file", "/proc/self/environ"] {
        let refused = load(json!({"model": path}));
        assert_error(refused.clone(), 403, "path_not_allowed");
        assert!(refused.1["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{path} is not a file in the models directory")));
    }
    let escape = format!("{}/../../../etc/passwd", dir.path().display());
    assert_error(load(json!({"model": escape})), 403, "path_not_allowed");
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), r#"["sk-SECRET-token-123"]"#).unwrap();
    assert_error(
        load(json!({"model": model, "tree": secret.path()})),
        403,
        "path_not_allowed",
    );
    // A tree file inside is read, but its content never comes back.
    let tree = dir.path().join("tree.json");
    std::fs::write(&tree, r#"["sk-SECRET-token-123"]"#).unwrap();
    let (status, answer) = load(json!({"model": model, "tree": tree}));
    assert_eq!(status, 400, "{answer}");
    assert!(!answer.to_string().contains("SECRET"), "{answer}");
    let (status, _) = load(json!({"model": model}));
    assert_eq!(status, 202);
    let info = wait_for_info(&base, |i| i["loading"].is_null());
    assert_eq!(info["model"]["architecture"], "llama", "{info}");
    assert!(info["error"].is_null());
    let (status, answer) = post_to(
        &base,
        "/generate/normal",
        r#"{"prompt": "Hello", "max_length": 2}"#,
    );
    assert_eq!(status, 200, "{answer}");

    // A corrupt replacement fails to load; the loaded model keeps serving.
    let corrupt = dir.path().join("corrupt.gguf");
    std::fs::write(&corrupt, b"GGUF\x03\x00\x00\x00garbage").unwrap();
    let (status, _) = load(json!({"model": corrupt}));
    assert_eq!(status, 202);
    let info = wait_for_info(&base, |i| i["loading"].is_null());
    assert!(
        info["error"]["message"]
            .as_str()
            .unwrap()
            .contains("corrupt.gguf"),
        "{info}"
    );
    assert_eq!(info["model"]["path"], json!(model));
    let (status, _) = post_to(
        &base,
        "/generate/normal",
        r#"{"prompt": "Hello", "max_length": 2}"#,
    );
    assert_eq!(status, 200);
}

/// Runs whose prompt holds `marker` (other tests generate on the same server meanwhile).
fn runs_with(marker: &str) -> usize {
    let (status, runs) = get("/api/runs?limit=1000");
    assert_eq!(status, 200);
    runs["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter(|run| run["prompt"].to_string().contains(marker))
        .count()
}

#[test]
fn foreign_hosts_and_other_sites_pages_are_refused() {
    let base = base();
    let own = base.trim_start_matches("http://");
    // DNS rebinding: the right address under another name. Every route refuses it, reads too.
    let routes = [
        ("GET", "/api/runs/export?format=json"),
        ("GET", "/api/runs"),
        ("GET", "/api/runs/1"),
        ("GET", "/api/comparisons"),
        ("GET", "/api/comparisons/1"),
        ("GET", "/api/info"),
        ("GET", "/v1/models"),
        ("GET", "/metrics"),
        ("GET", "/health"),
        ("GET", "/"),
        ("GET", "/index.html"),
        ("GET", "/api/nothing"),
        ("POST", "/generate/normal"),
        ("POST", "/generate/medusa"),
        ("POST", "/compare"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/completions"),
        ("POST", "/api/generate"),
        ("POST", "/api/model"),
        ("POST", "/api/tune"),
        ("POST", "/api/comparisons"),
        ("POST", "/api/runs/import"),
        ("POST", "/api/runs/1/cancel"),
    ];
    for (method, path) in routes {
        let (status, answer) = raw_http(
            base,
            &format!(
                "{method} {path} HTTP/1.1\r\nHost: attacker.example\r\n\
                 Content-Type: application/json\r\nContent-Length: 2\r\n\
                 Connection: close\r\n\r\n{{}}"
            ),
        );
        assert_eq!(status, 403, "{method} {path}: {answer}");
        assert!(answer.contains("forbidden_host"), "{answer}");
    }

    // A page of another site posting what a form or a no-cors fetch may send.
    let marker = "a page of another site asks";
    let body = format!(r#"{{"messages":[{{"role":"user","content":"{marker}"}}],"max_tokens":2}}"#);
    for (path, content_type) in [
        ("/v1/chat/completions", "text/plain"),
        ("/v1/chat/completions", "application/json"),
        ("/api/model", "text/plain"),
        ("/api/runs/import", "application/x-www-form-urlencoded"),
        ("/api/runs/1/cancel", "text/plain"),
    ] {
        let (status, answer) = raw_http(
            base,
            &format!(
                "POST {path} HTTP/1.1\r\nHost: {own}\r\nOrigin: https://evil.example\r\n\
                 Content-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        );
        assert_eq!(status, 403, "{path}: {answer}");
        assert!(answer.contains("forbidden_origin"), "{answer}");
    }
    assert_eq!(runs_with(marker), 0, "a refused request was run");

    // Without an Origin (not a page), a JSON endpoint still takes JSON only.
    let (status, answer) = raw_http(
        base,
        &format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: {own}\r\nContent-Type: text/plain\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    assert_eq!(status, 415, "{answer}");
    assert!(answer.contains("unsupported_media_type"), "{answer}");
    assert_eq!(runs_with(marker), 0);

    // The server's own pages may post, under any loopback name.
    let (status, answer) = raw_http(
        base,
        &format!(
            "POST /api/comparisons HTTP/1.1\r\nHost: {own}\r\nOrigin: {base}\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        ),
    );
    assert_eq!(status, 400, "{answer}");
    let port = own.rsplit(':').next().unwrap();
    let (status, _) = raw_http(
        base,
        &format!("GET /health HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 200);
}

#[test]
fn with_a_key_every_request_but_health_needs_it() {
    const KEY: &str = "0123456789abcdef-secret";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("index.html"),
        "<title>Medusa Playground</title>",
    )
    .unwrap();
    let model = models::default_model_path().unwrap();
    let base = serve(
        move |store| {
            let mut config = EngineConfig::new(model);
            config.ctx_size = Some(512);
            let engine = std::sync::Arc::new(engine::Engine::load(config.clone()).unwrap());
            Playground::new(engine, store, config)
        },
        Some(dir.path().to_path_buf()),
        server::AccessPolicy {
            api_key: Some(server::ApiKey::new(KEY).unwrap()),
            ..server::AccessPolicy::default()
        },
    );
    let port = base.rsplit(':').next().unwrap();
    let request = |head: &str| {
        raw_http(
            &base,
            &format!("{head}\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"),
        )
    };
    assert_eq!(request("GET /health HTTP/1.1").0, 200);
    for path in [
        "/api/info",
        "/v1/models",
        "/",
        "/api/runs/export?format=json",
    ] {
        let (status, answer) = request(&format!("GET {path} HTTP/1.1"));
        assert_eq!(status, 401, "{path}: {answer}");
        // OpenAI clients know the case by OpenAI's code.
        let code = if path.starts_with("/v1/") {
            "\"invalid_api_key\""
        } else {
            "\"unauthorized\""
        };
        assert!(answer.contains(code), "{answer}");
        assert!(answer.contains("\"authentication_error\""), "{answer}");
        assert!(
            answer.to_lowercase().contains("www-authenticate: bearer"),
            "{answer}"
        );
    }
    let wrong = request("GET /v1/models HTTP/1.1\r\nAuthorization: Bearer 0123456789abcdef-secreT");
    assert_eq!(wrong.0, 401);
    let (status, answer) = request(&format!(
        "GET /v1/models HTTP/1.1\r\nAuthorization: Bearer {KEY}"
    ));
    assert_eq!(status, 200, "{answer}");
    // With the key, the name the server is reached by does not matter.
    let (status, _) = raw_http(
        &base,
        &format!(
            "GET /api/info HTTP/1.1\r\nHost: box.lan:{port}\r\nAuthorization: Bearer {KEY}\r\n\
             Connection: close\r\n\r\n"
        ),
    );
    assert_eq!(status, 200);

    // The printed link: the cookie is set, and the token leaves the address bar.
    let (status, answer) = request(&format!("GET /?token={KEY} HTTP/1.1"));
    assert_eq!(status, 303, "{answer}");
    assert!(answer.contains("location: /\r\n"), "{answer}");
    let cookie = format!("medusa_token_{port}={KEY}");
    assert!(
        answer.contains(&format!(
            "set-cookie: {cookie}; HttpOnly; SameSite=Strict; Path=/"
        )),
        "{answer}"
    );
    let (status, page) = request(&format!("GET / HTTP/1.1\r\nCookie: {cookie}"));
    assert_eq!(status, 200);
    assert!(page.contains("Medusa Playground"));
    let (status, _) = request(&format!("GET /api/info HTTP/1.1\r\nCookie: {cookie}"));
    assert_eq!(status, 200);
    // A page of another site gets no further with the cookie (were it sent at all).
    let (status, answer) = request(&format!(
        "POST /api/runs/1/cancel HTTP/1.1\r\nCookie: {cookie}\r\nOrigin: https://evil.example"
    ));
    assert_eq!(status, 403, "{answer}");
}

#[test]
fn every_api_takes_the_draft_fields() {
    let chat = |extra: Value| {
        let mut body = json!({
            "messages": [{"role": "user", "content": "Say a, b, a, b, a, b."}],
            "max_tokens": 8, "temperature": 0,
        });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        post("/v1/chat/completions", &body)
    };
    let (status, answer) = chat(json!({"mode": "lookup", "draft_length": 4}));
    assert_eq!(status, 200, "{answer}");
    let events = sse_data(
        "/api/generate",
        &json!({"prompt": "a b a b", "mode": "lookup", "draft_length": 3, "max_tokens": 4}),
    );
    assert!(
        events.last().unwrap().contains("\"finished\""),
        "{events:?}"
    );
    for (path, body, field) in [
        (
            "/v1/chat/completions",
            json!({"mode": "lookup", "draft_length": 0}),
            "draft_length",
        ),
        (
            "/v1/chat/completions",
            json!({"mode": "lookup", "draft_length": 500}),
            "draft_length",
        ),
        (
            "/compare",
            json!({"prompt": "Hi", "modes": ["normal", "medusa"], "tree": "/etc/passwd"}),
            "tree",
        ),
        (
            "/generate/medusa",
            json!({"prompt": "Hi", "tree": [[0, 0]]}),
            "tree",
        ),
        (
            "/api/generate",
            json!({"prompt": "Hi", "mode": "medusa", "tree": "chain-9"}),
            "tree",
        ),
    ] {
        let mut full = json!({"messages": [{"role": "user", "content": "Hi"}]});
        if path != "/v1/chat/completions" {
            full = json!({});
        }
        full.as_object_mut()
            .unwrap()
            .extend(body.as_object().unwrap().clone());
        let answer = post(path, &full);
        assert_error(answer.clone(), 400, "invalid_parameter");
        assert!(
            answer.1["error"]["message"]
                .as_str()
                .unwrap()
                .contains(field),
            "{path}: {}",
            answer.1
        );
    }
}

#[test]
fn answers_carry_headers_that_stop_framing_and_sniffing() {
    let (status, response) = send(agent().get(&format!("{}/health", base())), None);
    assert_eq!(status, 200);
    let csp = response.header("content-security-policy").expect("CSP");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(csp.contains("default-src 'self'"), "{csp}");
    assert_eq!(response.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(response.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(response.header("x-frame-options"), Some("DENY"));
}

#[test]
fn a_client_that_never_finishes_its_headers_is_disconnected() {
    use std::io::{Read, Write};
    let address = base().trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).expect("connects");
    stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .expect("sends");
    // The server's header timeout is 10 s; a server without one would keep waiting past this.
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let mut rest = Vec::new();
    let closed = stream.read_to_end(&mut rest);
    assert!(closed.is_ok(), "the connection stayed open: {closed:?}");
}

#[test]
fn settings_tree_applies_without_reloading_and_steps_keep_their_trees() {
    let base = start(|config| {
        config.heads_path = Some(models::default_heads_path().expect("default heads installed"));
    });
    let put_tree = |tree: Value| {
        let url = format!("{base}/api/model/tree");
        let (status, response) = send(
            agent().put(&url),
            Some(&json!({ "tree": tree }).to_string()),
        );
        (status, response.into_json::<Value>().expect("JSON answer"))
    };
    // Drafts with what Settings set; returns the stored run's steps.
    let medusa_steps = || {
        let (status, answer) = post_to(
            &base,
            "/generate/medusa",
            &json!({"prompt": "The capital of France is", "max_length": 12}).to_string(),
        );
        assert_eq!(status, 200, "{answer}");
        let (_, run) = get_from(&base, &format!("/api/runs/{}", answer["run_id"]));
        run["steps"].as_array().unwrap().clone()
    };
    let (_, info) = get_from(&base, "/api/info");
    assert!(info["default_tree"].is_null());

    let (status, info) = put_tree(json!("chain-2"));
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["default_tree"], "chain-2");
    assert!(info["loading"].is_null(), "nothing is reloaded: {info}");
    let steps = medusa_steps();
    assert!(!steps.is_empty());
    for step in &steps {
        let nodes = step["tree"]["nodes"].as_array().unwrap();
        assert_eq!(nodes.len() as u64, step["tree_size"].as_u64().unwrap());
        assert!(nodes.len() <= 2, "{step}");
        assert!(step["tree"]["root"]["text"].is_string());
        assert!(step["tree"]["model_token"]["token"].is_i64());
    }
    // Whole chains wherever two more tokens were left.
    assert!(steps.iter().filter(|s| s["tree_size"] == 2).count() >= steps.len() - 2);

    // The tuner's fastest tree, whatever it costs here.
    let (status, info) = put_tree(json!("tuned"));
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["default_tree"], "tuned");
    let tuned = info["model"]["medusa_plan"]["tuned_tree"]
        .as_array()
        .unwrap()
        .len() as u64;
    let first = &medusa_steps()[0];
    assert_eq!(
        first["tree_size"].as_u64().unwrap(),
        tuned.min(10),
        "{first}"
    );

    let (status, info) = put_tree(json!([[0], [1], [0, 0]]));
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["default_tree"], json!([[0], [1], [0, 0]]));
    for bad in [
        json!("chain-9"),
        json!("/etc/passwd"),
        json!([[0, 0]]),
        json!(7),
    ] {
        let (status, answer) = put_tree(bad.clone());
        assert!(status == 400 || status == 422, "{bad}: {status} {answer}");
        assert!(answer["error"]["code"].is_string(), "{answer}");
    }
    assert_eq!(
        get_from(&base, "/api/info").1["default_tree"],
        json!([[0], [1], [0, 0]])
    );
    let (status, info) = put_tree(json!("auto"));
    assert_eq!(status, 200);
    assert!(info["default_tree"].is_null());
}

#[test]
fn a_repeated_conversation_reuses_its_cells_unless_asked_not_to() {
    // A server of its own: other tests' requests would take the cache's room.
    let base = start(|_| {});
    let finished = |extra: Value| {
        let mut body = json!({
            "messages": [{"role": "user", "content": "Which planet is closest to the sun?"}],
            "max_tokens": 4, "sampling": {"temperature": 0},
        });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, response) = send(
            agent().post(&format!("{base}/api/generate")),
            Some(&body.to_string()),
        );
        assert_eq!(status, 200);
        let last = BufReader::new(response.into_reader())
            .lines()
            .map(|l| l.expect("line"))
            .filter_map(|l| l.strip_prefix("data: ").map(str::to_owned))
            .last()
            .expect("events");
        let last: Value = serde_json::from_str(&last).unwrap();
        assert_eq!(last["type"], "finished", "{last}");
        last
    };
    finished(json!({}));
    let again = finished(json!({}));
    assert_eq!(
        again["cached_prompt_tokens"].as_u64().unwrap() + 1,
        again["prompt_tokens"].as_u64().unwrap(),
        "{again}"
    );
    let cold = finished(json!({"cache_prompt": false}));
    assert_eq!(cold["cached_prompt_tokens"], 0, "{cold}");
}

#[test]
fn runs_are_searched_by_their_words_and_deleted() {
    let generate = |prompt: &str| {
        let (status, answer) = post(
            "/generate/normal",
            &json!({"prompt": prompt, "max_length": 3}),
        );
        assert_eq!(status, 200, "{answer}");
        answer["run_id"].as_i64().unwrap()
    };
    let first = generate("Quokkas are marsupials from");
    let second = generate("Quokkas live on Rottnest");
    let (_, found) = get("/api/runs?search=quokka%20rottnest");
    let found: Vec<i64> = found["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(found, [second]);
    let (_, by_model) = get("/api/runs?model=SMOLLM&limit=1000");
    assert!(by_model["runs"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["id"] == first));

    let (status, report) = post("/api/runs/delete", &json!({"run_ids": [first]}));
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["deleted"], 1);
    assert_error(get(&format!("/api/runs/{first}")), 404, "not_found");
    let url = format!("{}/api/runs/{second}", base());
    let (status, response) = send(agent().delete(&url), None);
    assert_eq!(status, 200);
    assert_eq!(response.into_json::<Value>().unwrap()["deleted"], 1);
    assert_error(
        post("/api/runs/delete", &json!({"run_ids": [second]})),
        404,
        "not_found",
    );
    assert_error(
        post("/api/runs/delete", &json!({"run_ids": []})),
        400,
        "invalid_parameter",
    );
}
