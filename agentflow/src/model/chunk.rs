//! Streamed model replies: the pieces a model's reply arrives in
//! ([`ChatChunk`]) and where a streaming call hands them ([`ChunkSink`]).

use serde::{Deserialize, Serialize};

use crate::back_pressure::Room;
use crate::core::usage::Usage;

/// One piece of a model's reply, as it arrives from a streaming call
/// ([`ChatModel::chat_stream`](super::ChatModel::chat_stream)).
///
/// The pieces of one reply add up to it ([`ReplyAssembler`](super::ReplyAssembler)): the texts
/// concatenated, each tool call's pieces (same [`ToolCallDelta::index`])
/// joined, and the usage, which comes once, usually in the last chunk.
/// [`ChatChunk::whole`] makes one chunk of a whole reply.
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
    /// Why the model stopped, when this chunk says it (the last one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
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

    /// A chunk saying why the model stopped (`stop`, `tool_calls`, ...).
    pub fn finish(reason: impl Into<String>) -> Self {
        ChatChunk { finish_reason: Some(reason.into()), ..Self::default() }
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
            crate::back_pressure::room(room).await;
        }
        (self.push)(chunk);
    }
}
