//! Adding streamed chunks up to the reply they make ([`ReplyAssembler`]), and
//! a whole reply as one chunk ([`ChatChunk::whole`]).

use serde_json::{Value, json};

use crate::core::message::ToolCall;
use crate::core::usage::Usage;
use crate::model::chat::ChatReply;
use crate::model::chunk::{ChatChunk, ToolCallDelta};

impl ChatChunk {
    /// A whole reply as one chunk: what a model that cannot stream sends
    /// (the default [`ChatModel::chat_stream`](super::ChatModel::chat_stream)).
    pub fn whole(reply: &ChatReply) -> Self {
        let tool_calls = reply
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, call)| ToolCallDelta {
                index: u32::try_from(i).unwrap_or(u32::MAX),
                id: Some(call.id.clone()),
                name: Some(call.name.clone()),
                arguments: arguments_text(&call.arguments),
            })
            .collect();
        ChatChunk {
            text: reply.text.clone(),
            tool_calls,
            usage: reply.usage,
            finish_reason: reply.finish_reason.clone(),
        }
    }
}

/// The arguments of a tool call as the wire sends them: a JSON text, or the
/// raw text that was not JSON.
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// The arguments text parsed as JSON; `""` reads as `{}`; text that is not
/// JSON stays a string, for the tool layer to reject with the call's id.
pub(crate) fn parse_arguments(arguments: Value) -> Value {
    match arguments {
        Value::Null => json!({}),
        Value::String(raw) if raw.trim().is_empty() => json!({}),
        Value::String(raw) => serde_json::from_str(&raw).unwrap_or(Value::String(raw)),
        other => other,
    }
}

/// Adds streamed [`ChatChunk`]s up to the [`ChatReply`] they make, for
/// adapters implementing [`ChatModel::chat_stream`](super::ChatModel::chat_stream).
///
/// Texts are concatenated; tool-call pieces are joined per index (the id is
/// the first one given, names and arguments are concatenated), in the order
/// their indexes first appeared; a call without an id gets `call_{n}` (`n`
/// from 1, its position); arguments that are empty read as `{}` and
/// arguments that are not JSON are kept as a string (as
/// [`OpenAiCompatible`](super::OpenAiCompatible) does for whole replies). The
/// last usage reported wins.
#[derive(Debug, Clone, Default)]
pub struct ReplyAssembler {
    text: String,
    calls: Vec<(u32, Option<String>, String, String)>,
    usage: Option<Usage>,
    model: String,
    finish_reason: Option<String>,
}

impl ReplyAssembler {
    /// Nothing received yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one chunk.
    pub fn push(&mut self, chunk: &ChatChunk) {
        self.text.push_str(&chunk.text);
        for delta in &chunk.tool_calls {
            let at = match self.calls.iter().position(|(i, ..)| *i == delta.index) {
                Some(at) => at,
                None => {
                    self.calls.push((delta.index, None, String::new(), String::new()));
                    self.calls.len() - 1
                }
            };
            let (_, id, name, arguments) = &mut self.calls[at];
            if id.is_none() {
                id.clone_from(&delta.id);
            }
            if let Some(piece) = &delta.name {
                name.push_str(piece);
            }
            arguments.push_str(&delta.arguments);
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        if chunk.finish_reason.is_some() {
            self.finish_reason.clone_from(&chunk.finish_reason);
        }
    }

    /// Records the model that answered, as the server named it.
    pub fn set_model(&mut self, model: impl Into<String>) {
        self.model = model.into();
    }

    /// Records why the model stopped, as the server said.
    pub fn set_finish_reason(&mut self, reason: impl Into<String>) {
        self.finish_reason = Some(reason.into());
    }

    /// The reply the chunks make.
    pub fn finish(self) -> ChatReply {
        let tool_calls = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(n, (_, id, name, arguments))| {
                let id = id.unwrap_or_else(|| format!("call_{}", n + 1));
                ToolCall::new(id, name, parse_arguments(Value::String(arguments)))
            })
            .collect();
        ChatReply {
            text: self.text,
            tool_calls,
            usage: self.usage,
            model: self.model,
            finish_reason: self.finish_reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_add_up_to_the_reply() {
        let mut asm = ReplyAssembler::new();
        asm.push(&ChatChunk::text("Sev"));
        asm.push(&ChatChunk::text("en"));
        asm.push(&ChatChunk::tool_calls(vec![ToolCallDelta::new(1, None, Some("mul".into()), "")]));
        asm.push(&ChatChunk::tool_calls(vec![ToolCallDelta::new(0, Some("c0".into()), Some("add".into()), "{\"a\"")]));
        asm.push(&ChatChunk::tool_calls(vec![
            ToolCallDelta::new(0, Some("ignored".into()), None, ":1}"),
            ToolCallDelta::new(1, None, None, "{oops"),
        ]));
        asm.push(&ChatChunk::usage(Usage::new(3, 4)));
        asm.set_model("m");
        let reply = asm.finish();
        assert_eq!(reply.text, "Seven");
        assert_eq!(
            reply.tool_calls,
            vec![ToolCall::new("call_1", "mul", json!("{oops")), ToolCall::new("c0", "add", json!({"a": 1}))]
        );
        assert_eq!(reply.usage, Some(Usage::new(3, 4)));
        assert_eq!(reply.model, "m");
    }

    #[test]
    fn a_whole_reply_as_one_chunk_assembles_to_itself() {
        let reply = ChatReply {
            text: "t".into(),
            tool_calls: vec![ToolCall::new("x", "add", json!({"a": 1})), ToolCall::new("y", "raw", json!("{no"))],
            usage: Some(Usage::new(1, 2)),
            model: String::new(),
            finish_reason: None,
        };
        let mut asm = ReplyAssembler::new();
        asm.push(&ChatChunk::whole(&reply));
        assert_eq!(asm.finish(), reply);
    }
}
