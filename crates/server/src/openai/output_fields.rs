//! The fields that constrain or report the output (JSON mode, JSON schemas, grammars,
//! log-probabilities), and those not honoured, which are refused by name.

use playground::AppError;
use serde::Deserialize;

use super::answer::Flavor;
use super::refusals::{invalid, unsupported};
use crate::error::ApiError;

/// What constrains or reports the output: JSON mode, JSON schemas and grammars, and
/// log-probabilities.
#[derive(Debug, Default, Deserialize)]
pub(super) struct OutputFields {
    #[serde(default)]
    pub(super) response_format: Option<ResponseFormat>,
    /// llama-server's: GBNF text.
    #[serde(default)]
    pub(super) grammar: Option<String>,
    /// llama-server's: a JSON schema at the top level.
    #[serde(default)]
    pub(super) json_schema: Option<serde_json::Value>,
    /// Chat: `true` asks for them. Completions: how many alternatives per token.
    #[serde(default)]
    pub(super) logprobs: Option<serde_json::Value>,
    /// Chat: how many alternatives per token.
    #[serde(default)]
    pub(super) top_logprobs: Option<usize>,
    /// Completions: the answer starts with the prompt (and its log-probabilities, when asked
    /// for), which is how evaluations score a given text.
    #[serde(default)]
    pub(super) echo: Option<bool>,
}

/// `response_format`: OpenAI's `{"type": "text" | "json_object" | "json_schema", ...}` as a
/// request gives it, any JSON, so that a format not known here is refused by name; or the schema
/// the Responses API's `text.format` gives.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum ResponseFormat {
    Given(serde_json::Value),
    #[serde(skip_deserializing)]
    JsonSchema(serde_json::Value),
}

/// What the answer must follow.
pub(super) enum Constraint {
    /// A JSON schema, and the field that gave it.
    Schema(serde_json::Value, &'static str),
    /// Any JSON object.
    AnyObject,
    /// GBNF text.
    Grammar(String),
}

impl OutputFields {
    /// What the answer must follow, if anything: from `response_format`, `json_schema` or
    /// `grammar` (one of them).
    pub(super) fn constraint(&self) -> Result<Option<Constraint>, ApiError> {
        let from_format = match &self.response_format {
            None => None,
            Some(ResponseFormat::Given(format)) => given_format(format)?,
            Some(ResponseFormat::JsonSchema(schema)) => {
                Some(Constraint::Schema(schema.clone(), "response_format"))
            }
        };
        let from_schema = match &self.json_schema {
            None | Some(serde_json::Value::Null) => None,
            Some(schema) => Some(Constraint::Schema(schema.clone(), "json_schema")),
        };
        let from_grammar = self
            .grammar
            .clone()
            .filter(|g| !g.trim().is_empty())
            .map(Constraint::Grammar);
        let mut given = [from_format, from_schema, from_grammar]
            .into_iter()
            .flatten();
        let constraint = given.next();
        if given.next().is_some() {
            return Err(invalid(
                "response_format",
                "give one of response_format, json_schema and grammar",
            ));
        }
        Ok(constraint)
    }

    /// The grammar the answer must follow, if any.
    pub(super) fn grammar(&self) -> Result<Option<String>, ApiError> {
        Ok(match self.constraint()? {
            None => None,
            Some(Constraint::Schema(schema, param)) => Some(schema_grammar(&schema, param)?),
            Some(Constraint::AnyObject) => Some(
                engine::json_object_grammar()
                    .map_err(|e| ApiError::from(e).param("response_format"))?,
            ),
            Some(Constraint::Grammar(gbnf)) => Some(gbnf),
        })
    }

    /// The JSON schema a reply beside tool calls must follow: a string unless the request
    /// gives one. A raw grammar cannot be combined with the tools' grammar.
    pub(super) fn reply_schema(&self) -> Result<Option<serde_json::Value>, ApiError> {
        match self.constraint()? {
            None => Ok(None),
            Some(Constraint::Schema(schema, _)) => Ok(Some(schema)),
            Some(Constraint::AnyObject) => Ok(Some(serde_json::json!({"type": "object"}))),
            Some(Constraint::Grammar(_)) => Err(invalid(
                "grammar",
                "a grammar cannot be combined with tools; give the reply's JSON schema in \
                 response_format instead",
            )),
        }
    }

    /// Whether the answer starts with the prompt (text completions only).
    pub(super) fn echo(&self, flavor: Flavor) -> Result<bool, ApiError> {
        match (flavor, self.echo) {
            (Flavor::Chat, Some(true)) => Err(invalid(
                "echo",
                "echo is for /v1/completions; a chat answer does not repeat the messages",
            )),
            (_, echo) => Ok(echo == Some(true)),
        }
    }

    /// How many alternatives per token to report, if log-probabilities are asked for.
    pub(super) fn logprobs(&self, flavor: Flavor) -> Result<Option<usize>, ApiError> {
        use serde_json::Value;
        match (flavor, &self.logprobs) {
            (_, None | Some(Value::Null) | Some(Value::Bool(false))) => {
                if self.top_logprobs.is_some_and(|n| n > 0) {
                    return Err(invalid("top_logprobs", "top_logprobs needs logprobs: true"));
                }
                Ok(None)
            }
            (Flavor::Chat, Some(Value::Bool(true))) => Ok(Some(self.top_logprobs.unwrap_or(0))),
            // Checked here so that the refusal names the field this client sent.
            (Flavor::Completion, Some(Value::Number(n))) => match n.as_u64() {
                Some(n) => {
                    let n = usize::try_from(n).unwrap_or(usize::MAX);
                    engine::check_top_logprobs("logprobs", n).map_err(AppError::from)?;
                    Ok(Some(n))
                }
                None => Err(invalid("logprobs", "logprobs must be a count from 0")),
            },
            (Flavor::Completion, Some(Value::Bool(true))) => Ok(Some(0)),
            (Flavor::Chat, _) => Err(invalid("logprobs", "logprobs must be true or false")),
            (Flavor::Completion, _) => Err(invalid("logprobs", "logprobs must be a count")),
        }
    }
}

/// What `response_format`, as a request gives it, asks the answer to follow.
fn given_format(format: &serde_json::Value) -> Result<Option<Constraint>, ApiError> {
    use serde_json::Value;
    Ok(match format {
        Value::Null => None,
        Value::Object(format) => match format.get("type").and_then(Value::as_str) {
            Some("text") => None,
            // llama-server takes a schema beside json_object too.
            Some("json_object") => Some(match format.get("schema") {
                Some(schema) => Constraint::Schema(schema.clone(), "response_format"),
                None => Constraint::AnyObject,
            }),
            Some("json_schema") => {
                let schema = format
                    .get("json_schema")
                    .and_then(|j| j.get("schema"))
                    .ok_or_else(|| {
                        invalid(
                            "response_format",
                            "response_format json_schema needs json_schema.schema",
                        )
                    })?;
                Some(Constraint::Schema(schema.clone(), "response_format"))
            }
            other => {
                return Err(invalid(
                    "response_format",
                    format!(
                        "response_format.type must be text, json_object or json_schema, got {}",
                        other.map_or("nothing".to_owned(), |t| format!("'{t}'"))
                    ),
                ))
            }
        },
        _ => {
            return Err(invalid(
                "response_format",
                "response_format must be an object such as {\"type\": \"json_object\"}",
            ))
        }
    })
}

/// A JSON schema's grammar; a schema the converter cannot take names `param`.
pub(super) fn schema_grammar(schema: &serde_json::Value, param: &str) -> Result<String, ApiError> {
    engine::json_schema_grammar(schema).map_err(|e| ApiError::from(e).param(param))
}

/// OpenAI fields this server does not honour. Each is refused with 400
/// (`unsupported_parameter`, naming it) when it asks for something, rather than accepted and
/// ignored: a client that asked for a function call and got prose would fail later, far from
/// the cause. Values that ask for nothing pass.
#[derive(Debug, Default, Deserialize)]
pub(super) struct NotYetSupported {
    #[serde(default)]
    pub(super) functions: Option<serde_json::Value>,
    #[serde(default)]
    pub(super) function_call: Option<serde_json::Value>,
}

impl NotYetSupported {
    /// The first field that asks for something not done here, and why it is refused.
    pub(super) fn check(&self) -> Result<(), ApiError> {
        use serde_json::Value;
        let asks = |value: &Option<Value>| match value {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Array(items)) => !items.is_empty(),
            Some(Value::Object(map)) => !map.is_empty(),
            Some(Value::String(s)) => !matches!(s.as_str(), "" | "none" | "auto"),
            Some(_) => true,
        };
        let deprecated =
            "the deprecated functions API is not supported; send tools and tool_choice";
        let refused = [
            ("functions", asks(&self.functions), deprecated),
            ("function_call", asks(&self.function_call), deprecated),
        ];
        match refused.iter().find(|(_, asked, _)| *asked) {
            Some((param, _, why)) => Err(unsupported(param, format!("{param}: {why}"))),
            None => Ok(()),
        }
    }
}
