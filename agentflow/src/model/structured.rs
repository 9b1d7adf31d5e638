//! Structured output: a reply parsed and validated into a typed value.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::{ChatModel, ChatReply, ChatRequest, ModelError, ResponseSchema, UsageTally};
use crate::core::error::{ErrorClass, NodeError};
use crate::core::message::{Message, Role};

/// A validated structured reply.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Structured<T> {
    /// The parsed value.
    pub value: T,
    /// Usage of every call it took, re-asks included.
    pub usage: UsageTally,
    /// How many times the model was asked again.
    pub reasks: u32,
}

/// Why [`structured`] failed, with the usage spent before it did.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{error} (after {reasks} re-asks)")]
#[non_exhaustive]
pub struct StructuredError {
    /// The last error: [`ModelError::InvalidOutput`] when the re-asks ran
    /// out, or the model call's own error.
    #[source]
    pub error: ModelError,
    /// Usage of the calls made, failed ones included.
    pub usage: UsageTally,
    /// How many times the model was asked again.
    pub reasks: u32,
}

impl StructuredError {
    /// The class of the underlying error.
    pub fn class(&self) -> ErrorClass {
        self.error.class()
    }
}

impl From<StructuredError> for NodeError {
    fn from(err: StructuredError) -> Self {
        let mut node = NodeError::from(err.error.clone());
        node.message = err.to_string();
        node
    }
}

/// Ask `model` for a `T`: see [`structured_request`]; this one sends just
/// `messages`.
///
/// Structured output: a reply parsed and validated into a typed value.
///
/// The schema comes from schemars and goes to the model twice: as the
/// request's [`ResponseSchema`] (for servers that constrain decoding) and in
/// the system instruction (for those that do not). The reply is validated by
/// deserializing it with serde, so the type's own rules apply: mark structs
/// `#[serde(deny_unknown_fields)]` and use enums for closed sets. A reply that
/// does not parse is fed back to the model as a correction and asked again, a
/// bounded number of times.
pub async fn structured<T, M>(
    model: &M,
    messages: Vec<Message>,
    max_reasks: u32,
) -> Result<Structured<T>, StructuredError>
where
    T: JsonSchema + DeserializeOwned,
    M: ChatModel + ?Sized,
{
    structured_request(model, ChatRequest::new(messages), max_reasks).await
}

/// Ask `model` for a `T`, sending `req` plus `T`'s schema (as
/// [`ResponseSchema`] and in the system instruction).
///
/// A reply that does not deserialize into `T` is appended with a correction
/// naming the problem, and the model is asked again, at most `max_reasks`
/// times; after that the error is [`ModelError::InvalidOutput`]
/// (correctable). Errors of the model call itself (rate limits, timeouts)
/// return at once, for the executor's retry policy.
pub async fn structured_request<T, M>(
    model: &M,
    req: ChatRequest,
    max_reasks: u32,
) -> Result<Structured<T>, StructuredError>
where
    T: JsonSchema + DeserializeOwned,
    M: ChatModel + ?Sized,
{
    let mut ask = Ask::<T>::new(req, max_reasks);
    loop {
        let reply = match model.chat(&ask.req).await {
            Ok(reply) => reply,
            Err(error) => return Err(StructuredError { error, usage: ask.usage, reasks: ask.reasks }),
        };
        match ask.feed(reply) {
            Fed::Done(done) => return Ok(done),
            Fed::Again => {}
            Fed::Invalid(error) => return Err(StructuredError { error, usage: ask.usage, reasks: ask.reasks }),
        }
    }
}

/// The re-ask loop's state, shared by [`structured_request`] and
/// [`Ctx::structured`](crate::Ctx::structured), which differ only in how they call the model.
pub(crate) struct Ask<T> {
    pub(crate) req: ChatRequest,
    usage: UsageTally,
    pub(crate) reasks: u32,
    max_reasks: u32,
    _value: std::marker::PhantomData<fn() -> T>,
}

/// What to do after a reply.
pub(crate) enum Fed<T> {
    /// It parsed.
    Done(Structured<T>),
    /// It did not; the correction is appended to the request: ask again.
    Again,
    /// It did not, and the re-asks are used up.
    Invalid(ModelError),
}

impl<T: JsonSchema + DeserializeOwned> Ask<T> {
    /// `req` plus `T`'s schema (as [`ResponseSchema`] and in the system instruction).
    pub(crate) fn new(mut req: ChatRequest, max_reasks: u32) -> Self {
        let schema = response_schema::<T>();
        add_instruction(&mut req.messages, &schema_instruction(&schema));
        req.response_schema = Some(schema);
        Ask { req, usage: UsageTally::default(), reasks: 0, max_reasks, _value: std::marker::PhantomData }
    }

    pub(crate) fn feed(&mut self, reply: ChatReply) -> Fed<T> {
        self.usage.record(reply.usage);
        let detail = match parse_reply::<T>(&reply.text) {
            Ok(value) => return Fed::Done(Structured { value, usage: self.usage, reasks: self.reasks }),
            Err(_) if reply.text.trim().is_empty() && !reply.tool_calls.is_empty() => {
                "expected a JSON reply, not tool calls".to_owned()
            }
            Err(detail) => detail,
        };
        if self.reasks == self.max_reasks {
            return Fed::Invalid(ModelError::InvalidOutput { detail, raw: reply.text });
        }
        self.reasks += 1;
        self.req.messages.push(Message::ai(reply.text));
        self.req.messages.push(Message::human(format!(
            "Your reply is not valid: {detail}. Reply again with only a JSON value that \
             matches the schema."
        )));
        Fed::Again
    }
}

/// `T`'s JSON schema (schemars), named after the type for the wire format.
pub fn response_schema<T: JsonSchema>() -> ResponseSchema {
    let name: String =
        T::schema_name().chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-')).take(64).collect();
    ResponseSchema {
        name: if name.is_empty() { "response".into() } else { name },
        schema: schemars::schema_for!(T).to_value(),
    }
}

/// The system instruction that states the schema.
pub fn schema_instruction(schema: &ResponseSchema) -> String {
    format!(
        "Reply with a single JSON value, and nothing else, that matches this JSON schema \
         (no extra fields):\n{}",
        schema.schema
    )
}

/// Parse a model's text as `T`, tolerating surrounding whitespace and a
/// Markdown code fence. The error is worded for the model.
pub fn parse_reply<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let text = text.trim();
    let unfenced = text
        .strip_prefix("```")
        .and_then(|rest| rest.strip_suffix("```"))
        .map(|body| body.trim_start_matches("json").trim())
        .unwrap_or(text);
    if unfenced.is_empty() {
        return Err("the reply is empty".into());
    }
    serde_json::from_str(unfenced).map_err(|e| e.to_string())
}

/// Append `instruction` to a leading system message, or prepend one.
fn add_instruction(messages: &mut Vec<Message>, instruction: &str) {
    match messages.first_mut() {
        Some(first) if first.role == Role::System => {
            first.content = format!("{}\n\n{instruction}", first.content);
        }
        _ => messages.insert(0, Message::system(instruction)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_tolerates_fences() {
        let v: serde_json::Value = parse_reply("```json\n{\"a\": 1}\n```").unwrap();
        assert_eq!(v, serde_json::json!({"a": 1}));
        assert!(parse_reply::<serde_json::Value>("  ").is_err());
    }

    #[test]
    fn instruction_merges_into_leading_system_message() {
        let mut messages = vec![Message::system("be brief"), Message::human("hi")];
        add_instruction(&mut messages, "json only");
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].content, "be brief\n\njson only");
        let mut messages = vec![Message::human("hi")];
        add_instruction(&mut messages, "json only");
        assert_eq!(messages[0].role, Role::System);
    }
}
