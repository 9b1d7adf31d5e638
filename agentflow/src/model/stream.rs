//! Streamed model replies: the pieces a model's reply arrives in
//! ([`ChatChunk`]), where a streaming call hands them ([`ChunkSink`]), and
//! how they add up to the whole reply ([`ReplyAssembler`]).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{ChatReply, Usage};
use crate::message::ToolCall;
use crate::stream::Room;

/// One piece of a model's reply, as it arrives from a streaming call
/// ([`ChatModel::chat_stream`](super::ChatModel::chat_stream)).
///
/// The pieces of one reply add up to it ([`ReplyAssembler`]): the texts
/// concatenated, each tool call's pieces (same [`ToolCallDelta::index`])
/// joined, and the usage, which comes once, usually in the last chunk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatChunk {
    /// More of the reply's text (may be empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// Pieces of tool calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallDelta>,
    /// The reply's token usage, when this chunk reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

impl ChatChunk {
    /// A chunk of text.
    pub fn text(text: impl Into<String>) -> Self {
        ChatChunk { text: text.into(), ..Self::default() }
    }

    /// A chunk with pieces of tool calls.
    pub fn tool_calls(deltas: Vec<ToolCallDelta>) -> Self {
        ChatChunk { tool_calls: deltas, ..Self::default() }
    }

    /// A chunk reporting the reply's usage.
    pub fn usage(usage: Usage) -> Self {
        ChatChunk { usage: Some(usage), ..Self::default() }
    }

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
        ChatChunk { text: reply.text.clone(), tool_calls, usage: reply.usage }
    }
}

/// A piece of one tool call of a streamed reply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolCallDelta {
    /// Which call of the reply this piece belongs to, from 0.
    pub index: u32,
    /// The call's id, in the piece that carries it (usually the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tool's name, or a piece of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A piece of the arguments' JSON text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub arguments: String,
}

impl ToolCallDelta {
    /// A piece of call `index`.
    pub fn new(index: u32, id: Option<String>, name: Option<String>, arguments: impl Into<String>) -> Self {
        ToolCallDelta { index, id, name, arguments: arguments.into() }
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

/// Where a streaming model call hands its chunks.
///
/// Inside a run, [`Ctx::chat`](crate::Ctx::chat) passes a sink that forwards
/// each chunk to the run's stream ([`StreamMode::Messages`](crate::StreamMode::Messages)),
/// and [`ChunkSink::send`] waits while the stream's buffer is full, so a
/// slow reader slows the model call too. Outside a run, build one with
/// [`ChunkSink::new`]:
///
/// ```
/// use std::sync::Mutex;
/// use agentflow::message::Message;
/// use agentflow::model::{ChatModel, ChatRequest, ChunkSink, ScriptedModel};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// // A scripted test double: it streams its reply word by word.
/// let model = ScriptedModel::new().reply_text("seven, I think");
/// let pieces = Mutex::new(Vec::new());
/// let push = |chunk: agentflow::model::ChatChunk| pieces.lock().unwrap().push(chunk.text);
/// let req = ChatRequest::new(vec![Message::human("3 + 4?")]);
/// let reply = model.chat_stream(&req, &ChunkSink::new(&push)).await.unwrap();
/// assert_eq!(reply.text, "seven, I think");
/// assert_eq!(pieces.lock().unwrap().concat(), "seven, I think");
/// # });
/// ```
pub struct ChunkSink<'a> {
    push: &'a (dyn Fn(ChatChunk) + Send + Sync + 'a),
    room: Option<&'a (dyn Room + 'a)>,
}

impl std::fmt::Debug for ChunkSink<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkSink").field("waits_for_room", &self.room.is_some()).finish_non_exhaustive()
    }
}

impl<'a> ChunkSink<'a> {
    /// A sink that calls `push` with every chunk.
    pub fn new(push: &'a (dyn Fn(ChatChunk) + Send + Sync + 'a)) -> Self {
        ChunkSink { push, room: None }
    }

    /// A sink that waits for room in a run's stream before each chunk.
    pub(crate) fn with_room(push: &'a (dyn Fn(ChatChunk) + Send + Sync + 'a), room: &'a (dyn Room + 'a)) -> Self {
        ChunkSink { push, room: Some(room) }
    }

    /// Hands over one chunk (after waiting for room, in a run's stream).
    pub async fn send(&self, chunk: ChatChunk) {
        if let Some(room) = self.room {
            crate::stream::room(room).await;
        }
        (self.push)(chunk);
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
    }

    /// Records the model that answered, as the server named it.
    pub fn set_model(&mut self, model: impl Into<String>) {
        self.model = model.into();
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
        ChatReply { text: self.text, tool_calls, usage: self.usage, model: self.model }
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
        };
        let mut asm = ReplyAssembler::new();
        asm.push(&ChatChunk::whole(&reply));
        assert_eq!(asm.finish(), reply);
    }
}
