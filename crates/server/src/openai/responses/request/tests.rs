use super::*;
use crate::extract::parse_json;
use crate::openai::answer::Flavor;
use crate::openai::chat_messages;
use crate::openai::responses::responses_error;

fn request(body: &str) -> ResponsesRequest {
    parse_json(body.as_bytes()).unwrap()
}

fn translate(body: &str) -> Result<ChatRequest, ApiError> {
    request(body).take_chat().map_err(responses_error)
}

/// The refusal's code, field and message.
fn refusal(body: &str) -> (&'static str, Option<String>, String) {
    let err = parse_json::<ResponsesRequest>(body.as_bytes())
        .and_then(|mut request| request.take_chat())
        .map_err(responses_error)
        .unwrap_err()
        .0;
    (err.code, err.param, err.message)
}

#[test]
fn input_items_become_the_conversation_and_calls_made_together_one_message() {
    let chat = translate(
        r#"{"instructions": "Be brief.", "input": [
            {"role": "developer", "content": "Use metric units."},
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "Weather in "}, {"type": "input_text", "text": "Oslo?"}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"},
            {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "4 C"}
        ]}"#,
    )
    .unwrap();
    let messages = chat_messages(&chat.messages).unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "system", "user", "assistant", "user"]);
    assert_eq!(messages[2].content, "Weather in Oslo?");
    assert_eq!(
        messages[3].content,
        r#"{"tool_calls":[{"name":"get_weather","arguments":{"city":"Oslo"}},{"name":"get_time","arguments":{}}]}"#
    );
    assert_eq!(
        messages[4].content,
        r#"{"tool_response":{"name":"get_weather","content":"4 C"}}"#
    );
}

#[test]
fn flat_tools_a_named_choice_and_text_format_become_chats() {
    let chat = translate(
        r#"{"input": "Weather in Oslo?", "max_output_tokens": 9, "max_tokens": 5,
            "tools": [{"type": "function", "name": "get_weather",
                       "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "string"}}}}"#,
    )
    .unwrap();
    assert_eq!(chat.common.asked_max_tokens(), Some(9));
    assert!(chat.common.tools.plan().unwrap().is_some());
    assert!(matches!(
        chat.common.output.constraint().unwrap(),
        Some(crate::openai::output_fields::Constraint::Schema(
            _,
            "response_format"
        ))
    ));
    // A chat-style choice passes as it is.
    let chat = translate(
        r#"{"input": "Hi", "tools": [{"type": "function", "name": "f"}],
            "tool_choice": {"type": "function", "function": {"name": "f"}}}"#,
    )
    .unwrap();
    assert!(chat.common.tools.plan().unwrap().is_some());
}

#[test]
fn the_response_repeats_the_settings_as_given() {
    let mut request = request(
        r#"{"input": "Hi", "temperature": 0.5, "metadata": {"k": "v"},
            "tools": [{"type": "function", "name": "f", "strict": true}]}"#,
    );
    let chat = request.take_chat().unwrap();
    let envelope = Envelope::new(Flavor::Chat, "m".into(), false, false, true);
    let response = request.skeleton(&chat.common, &envelope, "resp_1");
    assert_eq!(response.temperature, Some(0.5));
    assert_eq!(response.tools[0].get("strict"), Some(&Value::Bool(true)));
    assert_eq!(response.tool_choice, ResponseObject::default_tool_choice());
    assert_eq!(response.text, ResponseObject::default_text());
    assert_eq!(response.metadata.get("k"), Some(&Value::from("v")));
}

#[test]
fn what_cannot_be_honoured_is_refused_by_name() {
    let unsupported = "unsupported_parameter";
    let invalid = "invalid_parameter";
    let cases = [
        (r#"{}"#, invalid, "input"),
        (
            r#"{"input": "Hi", "previous_response_id": "resp_1"}"#,
            unsupported,
            "previous_response_id",
        ),
        (
            r#"{"input": "Hi", "include": ["x"]}"#,
            unsupported,
            "include",
        ),
        (
            r#"{"input": [{"role": "robot", "content": "Hi"}]}"#,
            invalid,
            "input",
        ),
        (r#"{"input": [{"role": "user"}]}"#, invalid, "input"),
        (
            r#"{"input": [{"role": "user", "content": {"text": "Hi"}}]}"#,
            invalid,
            "input",
        ),
        (
            r#"{"input": [{"role": "user", "content": [{"type": "input_image"}]}]}"#,
            unsupported,
            "input",
        ),
        (
            r#"{"input": [{"type": "input_image", "image_url": "x"}]}"#,
            unsupported,
            "input",
        ),
        (
            r#"{"input": "Hi", "tools": [{"type": "web_search"}]}"#,
            unsupported,
            "tools",
        ),
        (
            r#"{"input": "Hi", "text": {"format": {"type": "json_schema", "name": "x"}}}"#,
            invalid,
            "text.format",
        ),
    ];
    for (body, code, param) in cases {
        let (got_code, got_param, message) = refusal(body);
        assert_eq!(
            (got_code, got_param.as_deref()),
            (code, Some(param)),
            "{body}: {message}"
        );
    }
    let (_, _, message) = refusal(r#"{"input": [{"role": "robot", "content": "Hi"}]}"#);
    assert!(message.ends_with(r#"got Some("robot")"#), "{message}");
    // What asks for nothing passes.
    assert!(translate(
        r#"{"input": "Hi", "background": false, "include": [], "conversation": null}"#
    )
    .is_ok());
    // A call without its name is malformed, and named by its place.
    let (code, param, message) =
        refusal(r#"{"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}"#);
    assert_eq!((code, param.as_deref()), (invalid, Some("input.[0]")));
    assert!(
        message.contains("a function_call item needs name"),
        "{message}"
    );
}
