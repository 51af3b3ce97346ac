//! Tool calls, in llama.cpp's generic format for chat templates that know no tools: a system
//! message lists the tools, the answer is one JSON object held to a grammar (a call,
//! `{"tool_calls": [{"name": ..., "arguments": {...}}]}`, or a reply, `{"response": "..."}`),
//! and that object is read back into OpenAI's `tool_calls` or the message's content. Earlier
//! calls and their results are written into the conversation in the same format.

use std::collections::HashMap;

use engine::ChatMessage;
use openai_wire::{FunctionCall, ToolCall};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::refusals::invalid;
use crate::error::ApiError;

/// The request's tool fields.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ToolFields {
    #[serde(default)]
    pub(super) tools: Option<Vec<ToolSpec>>,
    #[serde(default)]
    pub(super) tool_choice: Option<ToolChoice>,
    /// Whether one answer may call several tools. No unless asked for, as with llama-server:
    /// small models otherwise repeat one call until the token limit.
    #[serde(default)]
    pub(super) parallel_tool_calls: Option<bool>,
}

/// `tool_choice`: `none`, `auto`, `required` or `{"type": "function", "function": {"name":
/// ...}}`. Any value is read, so that [`ToolFields::plan`] can refuse one it cannot take by name.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum ToolChoice {
    Mode(String),
    Function(NamedFunction),
    Other(serde::de::IgnoredAny),
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct NamedFunction {
    #[serde(rename = "type")]
    kind: String,
    function: FunctionName,
}

#[derive(Debug, Clone, Deserialize)]
struct FunctionName {
    name: String,
}

impl ToolChoice {
    /// The function named `name`.
    pub(super) fn function(name: String) -> Self {
        Self::Function(NamedFunction {
            kind: "function".into(),
            function: FunctionName { name },
        })
    }
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct ToolSpec {
    #[serde(rename = "type")]
    kind: String,
    function: FunctionSpec,
}

impl ToolSpec {
    /// A function tool.
    pub(super) fn function(function: FunctionSpec) -> Self {
        Self {
            kind: "function".into(),
            function,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct FunctionSpec {
    name: String,
    #[serde(default)]
    description: Option<String>,
    /// The arguments' JSON schema; none means no arguments.
    #[serde(default)]
    parameters: Option<Value>,
}

/// The tools this answer may call, and whether it must call one.
#[derive(Debug, Clone)]
pub(super) struct ToolPlan {
    functions: Vec<FunctionSpec>,
    required: bool,
    parallel: bool,
}

impl ToolFields {
    /// Whether the request asks for anything tool-related.
    pub(super) fn given(&self) -> bool {
        self.tools.as_ref().is_some_and(|t| !t.is_empty()) || self.tool_choice.is_some()
    }

    /// The plan, or none when no tool may be called (no tools, or `tool_choice: "none"`).
    pub(super) fn plan(&self) -> Result<Option<ToolPlan>, ApiError> {
        let tools = self.tools.as_deref().unwrap_or_default();
        let mut seen = HashMap::new();
        for tool in tools {
            if tool.kind != "function" {
                return Err(invalid(
                    "tools",
                    format!(
                        "tools of type '{}' are not supported; send functions",
                        tool.kind
                    ),
                ));
            }
            let name = &tool.function.name;
            let valid = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid {
                return Err(invalid(
                    "tools",
                    format!(
                        "tool name '{name}' must be 1 to 64 letters, digits, underscores or dashes"
                    ),
                ));
            }
            if seen.insert(name.as_str(), ()).is_some() {
                return Err(invalid("tools", format!("tool '{name}' is given twice")));
            }
        }
        let functions: Vec<FunctionSpec> = tools.iter().map(|t| t.function.clone()).collect();
        let (functions, required) = match &self.tool_choice {
            None => (functions, false),
            Some(ToolChoice::Mode(choice)) => match choice.as_str() {
                "none" => return Ok(None),
                "auto" => (functions, false),
                "required" => (functions, true),
                other => {
                    return Err(invalid(
                        "tool_choice",
                        format!(
                            "tool_choice must be none, auto, required or a function, got '{other}'"
                        ),
                    ))
                }
            },
            Some(ToolChoice::Function(named)) if named.kind == "function" => {
                let name = &named.function.name;
                let chosen: Vec<FunctionSpec> =
                    functions.into_iter().filter(|f| &f.name == name).collect();
                if chosen.is_empty() {
                    return Err(invalid(
                        "tool_choice",
                        format!("tool_choice names '{name}', which is not among the tools"),
                    ));
                }
                (chosen, true)
            }
            Some(_) => {
                return Err(invalid(
                    "tool_choice",
                    "tool_choice must be none, auto, required or \
                     {\"type\": \"function\", \"function\": {\"name\": ...}}",
                ))
            }
        };
        if functions.is_empty() {
            if required {
                return Err(invalid(
                    "tool_choice",
                    "tool_choice requires a tool call, but no tools are given",
                ));
            }
            return Ok(None);
        }
        Ok(Some(ToolPlan {
            functions,
            required,
            parallel: self.parallel_tool_calls.unwrap_or(false),
        }))
    }
}

impl ToolPlan {
    /// Adds the tools and the answer's format to the system message (a new first one when
    /// there is none).
    pub(super) fn instruct(&self, messages: &mut Vec<ChatMessage>) {
        let mut text = String::from(
            "You can call tools. Each tool is described by one line of JSON: its name, what it \
             does, and the JSON schema of its arguments.\n",
        );
        for function in &self.functions {
            let line = json!({
                "name": function.name,
                "description": function.description.clone().unwrap_or_default(),
                "parameters": function.arguments_schema(),
            });
            text.push_str(&line.to_string());
            text.push('\n');
        }
        text.push_str(
            "Answer with one JSON object. To call tools: \
             {\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<its arguments>}}]}",
        );
        if self.required {
            text.push_str(". Call a tool now.");
        } else {
            text.push_str(
                ". To answer the user directly instead: {\"response\": \"<your answer>\"}.",
            );
        }
        text.push_str(
            " Tool results come back as {\"tool_response\": {\"name\": ..., \"content\": ...}}.",
        );
        match messages.first_mut().filter(|m| m.role == "system") {
            Some(system) => {
                system.content.push_str("\n\n");
                system.content.push_str(&text);
            }
            None => messages.insert(0, ChatMessage::new("system", text)),
        }
    }

    /// The JSON schema the answer must follow: a call of the tools, or (unless a call is
    /// required) a reply following `reply` (a string when none is given).
    pub(super) fn schema(&self, reply: Option<Value>) -> Result<Value, ApiError> {
        let mut defs = Map::new();
        let mut calls = Vec::new();
        for function in &self.functions {
            let mut arguments = function.arguments_schema();
            // References such as "#/$defs/Item" point at the root: the tool's definitions
            // move there.
            for key in ["$defs", "definitions"] {
                let Some(Value::Object(own)) =
                    arguments.as_object_mut().and_then(|a| a.remove(key))
                else {
                    continue;
                };
                let merged = defs
                    .entry(key.to_owned())
                    .or_insert_with(|| Value::Object(Map::new()));
                for (name, def) in own {
                    match merged.get(&name) {
                        Some(existing) if *existing != def => {
                            return Err(invalid(
                                "tools",
                                format!(
                                    "tools define {key}/{name} differently; give their \
                                     definitions distinct names"
                                ),
                            ))
                        }
                        _ => {
                            merged[&name] = def;
                        }
                    }
                }
            }
            calls.push(json!({
                "type": "object",
                "properties": {
                    "name": {"const": function.name},
                    "arguments": arguments,
                },
                "required": ["name", "arguments"],
            }));
        }
        let call = if calls.len() == 1 {
            calls.remove(0)
        } else {
            json!({ "anyOf": calls })
        };
        let mut list = json!({"type": "array", "items": call, "minItems": 1});
        if !self.parallel {
            list["maxItems"] = json!(1);
        }
        let call = json!({
            "type": "object",
            "properties": {"tool_calls": list},
            "required": ["tool_calls"],
        });
        let mut schema = if self.required {
            call
        } else {
            let reply = json!({
                "type": "object",
                "properties": {"response": reply.unwrap_or_else(|| json!({"type": "string"}))},
                "required": ["response"],
            });
            json!({ "anyOf": [call, reply] })
        };
        if let Value::Object(root) = &mut schema {
            root.extend(defs);
        }
        Ok(schema)
    }
}

impl FunctionSpec {
    fn arguments_schema(&self) -> Value {
        self.parameters
            .clone()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}))
    }
}

/// What an answer under a [`ToolPlan`] says: the tools to call, else the reply. An answer cut
/// short by the token limit gives what it says so far (see [`read_cut_answer`]), never the
/// object the model writes.
pub(super) fn read_answer(text: &str) -> (Option<String>, Vec<ToolCall>) {
    let Ok(Value::Object(answer)) = serde_json::from_str::<Value>(text.trim()) else {
        return read_cut_answer(text);
    };
    if let Some(Value::Array(calls)) = answer.get("tool_calls") {
        let calls: Vec<ToolCall> = calls
            .iter()
            .filter_map(|call| {
                let name = call.get("name")?.as_str()?.to_owned();
                let arguments = call.get("arguments").cloned().unwrap_or(json!({}));
                Some(tool_call(name, arguments.to_string()))
            })
            .collect();
        if !calls.is_empty() {
            return (None, calls);
        }
    }
    match answer.get("response") {
        Some(Value::String(reply)) => (Some(reply.clone()), Vec::new()),
        Some(reply) => (Some(reply.to_string()), Vec::new()),
        None => (Some(text.to_owned()), Vec::new()),
    }
}

/// An answer cut short: the reply so far, or the calls so far (each once its name is complete,
/// its arguments exactly as the model wrote them: a whole JSON value, or as far as it got, as
/// OpenAI sends a call cut by the limit), else an empty reply.
fn read_cut_answer(text: &str) -> (Option<String>, Vec<ToolCall>) {
    if let Some(reply) = value_of(text, "response") {
        return match reply.strip_prefix('"') {
            Some(string) => (Some(string_prefix(string).0), Vec::new()),
            None => (Some(reply.to_owned()), Vec::new()),
        };
    }
    let calls = read_cut_calls(text);
    if calls.is_empty() {
        (Some(String::new()), Vec::new())
    } else {
        (None, calls)
    }
}

/// The text after `"key":` in `text`, from its value's first character.
fn value_of<'t>(text: &'t str, key: &str) -> Option<&'t str> {
    let at = text.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = text[at..].trim_start().strip_prefix(':')?;
    Some(rest.trim_start())
}

/// The calls of a cut answer, in order, up to the one the limit cut.
fn read_cut_calls(mut text: &str) -> Vec<ToolCall> {
    let mut calls = Vec::new();
    loop {
        let Some((name, complete)) = value_of(text, "name")
            .and_then(|v| v.strip_prefix('"'))
            .map(string_prefix)
        else {
            return calls;
        };
        if !complete {
            return calls;
        }
        let Some(arguments) = value_of(text, "arguments") else {
            calls.push(tool_call(name, String::new()));
            return calls;
        };
        // The arguments end where their JSON value does, before the wrapper's `}]`.
        let mut values = serde_json::Deserializer::from_str(arguments).into_iter::<Value>();
        match values.next() {
            Some(Ok(whole)) => {
                calls.push(tool_call(name, whole.to_string()));
                text = &arguments[values.byte_offset()..];
            }
            _ => {
                calls.push(tool_call(name, arguments.to_owned()));
                return calls;
            }
        }
    }
}

/// The text of a JSON string literal from just after its opening quote, as far as it goes, and
/// whether its closing quote was reached.
fn string_prefix(literal: &str) -> (String, bool) {
    let mut out = String::new();
    let mut chars = literal.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return (out, true),
            '\\' => {
                let decoded = match chars.next() {
                    Some('n') => '\n',
                    Some('t') => '\t',
                    Some('r') => '\r',
                    Some('b') => '\u{8}',
                    Some('f') => '\u{c}',
                    Some('u') => {
                        let hex: String = chars.by_ref().take(4).collect();
                        match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                            Some(c) if hex.len() == 4 => c,
                            _ => break,
                        }
                    }
                    Some(other) => other,
                    None => break,
                };
                out.push(decoded);
            }
            c => out.push(c),
        }
    }
    (out, false)
}

fn tool_call(name: String, arguments: String) -> ToolCall {
    ToolCall {
        id: format!("call_{}", &uuid::Uuid::new_v4().simple().to_string()[..24]),
        kind: "function".into(),
        function: FunctionCall { name, arguments },
    }
}

/// An earlier assistant message's calls, as the model writes them.
pub(super) fn calls_text(calls: &[InToolCall]) -> String {
    let calls: Vec<Value> = calls
        .iter()
        .map(|call| {
            // Arguments arrive as JSON text; text that is not JSON stays a string.
            let arguments = serde_json::from_str(&call.function.arguments)
                .unwrap_or_else(|_| Value::String(call.function.arguments.clone()));
            json!({"name": call.function.name, "arguments": arguments})
        })
        .collect();
    json!({ "tool_calls": calls }).to_string()
}

/// A tool's result, as the model reads it; `name` is the called tool's, found by the call's id.
pub(super) fn response_text(name: Option<&str>, content: &str) -> String {
    json!({"tool_response": {"name": name, "content": content}}).to_string()
}

/// A call in an earlier assistant message.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct InToolCall {
    #[serde(default)]
    pub(super) id: Option<String>,
    pub(super) function: InFunctionCall,
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct InFunctionCall {
    pub(super) name: String,
    #[serde(default)]
    pub(super) arguments: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(value: Value) -> ToolFields {
        serde_json::from_value(value).unwrap()
    }

    fn weather() -> Value {
        json!([{"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}}])
    }

    #[test]
    fn tool_choice_decides_whether_and_which_tool_is_called() {
        assert!(fields(json!({})).plan().unwrap().is_none());
        let none = fields(json!({"tools": weather(), "tool_choice": "none"}));
        assert!(none.plan().unwrap().is_none());
        let auto = fields(json!({"tools": weather(), "parallel_tool_calls": true}));
        let auto = auto.plan().unwrap().unwrap();
        assert!(!auto.required && auto.parallel);
        let named = fields(json!({"tools": weather(),
                                  "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}));
        let named = named.plan().unwrap().unwrap();
        assert!(named.required && !named.parallel);
        let error = |value: Value| fields(value).plan().unwrap_err().0;
        let unknown = error(json!({"tools": weather(),
                                   "tool_choice": {"type": "function", "function": {"name": "x"}}}));
        assert_eq!(unknown.param.as_deref(), Some("tool_choice"));
        assert_eq!(
            error(json!({"tool_choice": "required"})).param.as_deref(),
            Some("tool_choice")
        );
        assert_eq!(
            error(json!({"tools": weather(), "tool_choice": "always"}))
                .param
                .as_deref(),
            Some("tool_choice")
        );
        let spaced = json!([{"type": "function", "function": {"name": "get weather"}}]);
        assert_eq!(
            error(json!({"tools": spaced})).param.as_deref(),
            Some("tools")
        );
    }

    #[test]
    fn the_schema_is_a_call_or_a_reply_and_tools_definitions_move_to_the_root() {
        let tools = json!([
            {"type": "function", "function": {"name": "add",
             "parameters": {"type": "object", "properties": {"item": {"$ref": "#/$defs/Item"}},
                            "$defs": {"Item": {"type": "string"}}}}},
            {"type": "function", "function": {"name": "now"}},
        ]);
        let plan = fields(json!({"tools": tools})).plan().unwrap().unwrap();
        let schema = plan.schema(None).unwrap();
        assert_eq!(schema["$defs"], json!({"Item": {"type": "string"}}));
        let call = &schema["anyOf"][0]["properties"]["tool_calls"];
        assert_eq!(call["maxItems"], 1);
        assert_eq!(
            call["items"]["anyOf"][0]["properties"]["name"],
            json!({"const": "add"})
        );
        assert!(call["items"]["anyOf"][0]["properties"]["arguments"]
            .get("$defs")
            .is_none());
        assert_eq!(
            call["items"]["anyOf"][1]["properties"]["arguments"],
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(
            schema["anyOf"][1]["properties"]["response"],
            json!({"type": "string"})
        );
        assert!(engine::json_schema_grammar(&schema).is_ok());
    }

    #[test]
    fn answers_are_read_into_calls_or_a_reply() {
        let (content, calls) = read_answer(
            r#" {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}"#,
        );
        assert_eq!(content, None);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].function.name, "get_weather");
        assert_eq!(calls[0].function.arguments, r#"{"city":"Oslo"}"#);
        assert!(calls[0].id.starts_with("call_") && calls[0].id.len() == 29);
        assert_eq!(
            read_answer(r#"{"response": "Hi"}"#),
            (Some("Hi".into()), Vec::new())
        );
        assert_eq!(
            read_answer(r#"{"response": {"a": 1}}"#),
            (Some(r#"{"a":1}"#.into()), Vec::new())
        );
        // Cut short by the token limit: never the object the model writes.
        assert_eq!(
            read_answer(r#"{"tool_calls": [{"na"#),
            (Some(String::new()), Vec::new())
        );
        let (content, calls) =
            read_answer(r#"{"tool_calls": [{"name": "final_result", "arguments": {"city": "Os"#);
        assert_eq!(content, None);
        assert_eq!(calls[0].function.name, "final_result");
        assert_eq!(calls[0].function.arguments, r#"{"city": "Os"#);
        // Cut after the arguments: they are the JSON the model wrote, never the wrapper.
        for cut in [
            r#"{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}"#,
            r#"{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}"#,
            r#"{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]"#,
            r#"{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}], "x"#,
        ] {
            let (content, calls) = read_answer(cut);
            assert_eq!(content, None, "{cut}");
            assert_eq!(calls.len(), 1, "{cut}");
            assert_eq!(calls[0].function.arguments, r#"{"city":"Paris"}"#, "{cut}");
        }
        // Parallel calls cut in the second: the first whole, the second as far as written.
        let (_, calls) = read_answer(
            r#"{"tool_calls": [{"name": "a", "arguments": {"n": 1}}, {"name": "b", "arguments": {"n": [2,"#,
        );
        let calls: Vec<_> = calls
            .iter()
            .map(|c| (c.function.name.as_str(), c.function.arguments.as_str()))
            .collect();
        assert_eq!(calls, [("a", r#"{"n":1}"#), ("b", r#"{"n": [2,"#)]);
        let (_, calls) =
            read_answer(r#"{"tool_calls": [{"name": "a", "arguments": {}}, {"name": "b"#);
        assert_eq!(calls.len(), 1);
        assert_eq!(
            read_answer(r#"{"response": "Hello \"you\"\nand th"#),
            (Some("Hello \"you\"\nand th".into()), Vec::new())
        );
        assert_eq!(
            read_answer(r#"{"response": "caf\u00e9 \u00"#).0.as_deref(),
            Some("café ")
        );
    }

    #[test]
    fn earlier_calls_and_results_are_written_as_the_model_answers() {
        let calls: Vec<InToolCall> = serde_json::from_value(json!([
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}
        ]))
        .unwrap();
        assert_eq!(
            calls_text(&calls),
            r#"{"tool_calls":[{"name":"get_weather","arguments":{"city":"Oslo"}}]}"#
        );
        assert_eq!(
            response_text(Some("get_weather"), "4 degrees"),
            r#"{"tool_response":{"name":"get_weather","content":"4 degrees"}}"#
        );
    }

    #[test]
    fn the_instruction_joins_the_system_message() {
        let plan = fields(json!({"tools": weather(), "tool_choice": "required"}))
            .plan()
            .unwrap()
            .unwrap();
        let mut messages = vec![ChatMessage::new("user", "Weather in Oslo?")];
        plan.instruct(&mut messages);
        assert_eq!(messages[0].role, "system");
        assert!(messages[0].content.contains(r#""name":"get_weather""#));
        assert!(!messages[0].content.contains("\"response\""));
        let mut messages = vec![
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi"),
        ];
        plan.instruct(&mut messages);
        assert_eq!(messages.len(), 2);
        assert!(messages[0]
            .content
            .starts_with("Be brief.\n\nYou can call tools."));
    }
}
