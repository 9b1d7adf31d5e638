//! Chat messages: what goes into a model and comes back out of it.
//!
//! # Message ids
//!
//! Every [`Message`] has a stable `id`. The `messages` reducer appends new
//! messages but replaces one whose id is already present, so ids must be the
//! same on every replay of a run. agentflow therefore never draws ids at
//! random. The constructors derive the id from the message itself: a role
//! prefix and a 64-bit FNV-1a hash of the role, content, tool calls and
//! tool-call id (`"human-8c3f…"`). The hash is fixed by this crate, not by the
//! standard library's hasher, so it does not change across Rust versions or
//! platforms.
//!
//! Two messages with the same role and content get the same id, so the
//! reducer keeps only one of them. Tool results and tool requests differ by
//! their call ids; when two plain messages may legitimately repeat (a user
//! answering "yes" twice), give them ids with [`Message::with_id`], e.g. from
//! the step number.

use crate::core::reducer::HasId;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Role {
    /// Instructions from the application.
    System,
    /// Input from the user.
    Human,
    /// Output of the model: text and/or tool calls.
    Ai,
    /// The result of one tool call, tied to it by `tool_call_id`.
    Tool,
}

impl Role {
    /// The lowercase name, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Human => "human",
            Role::Ai => "ai",
            Role::Tool => "tool",
        }
    }
}

/// A request by the model to run one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call id; the tool result carries it back as `tool_call_id`.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as the model sent them. Arguments that were not valid
    /// JSON on the wire are kept verbatim as a `Value::String`, so the tool
    /// layer rejects them as an invalid argument tied to this call id.
    pub arguments: Value,
}

impl ToolCall {
    /// A tool call.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ToolCall { id: id.into(), name: name.into(), arguments }
    }
}

/// A tool as offered to a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, its arguments and limits; the model reads this.
    pub description: String,
    /// JSON schema of the argument object.
    pub parameters: Value,
}

impl ToolSpec {
    /// A tool spec.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        ToolSpec { name: name.into(), description: description.into(), parameters }
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Stable id (see the [module docs](self) for how it is chosen).
    pub id: String,
    /// Who wrote it.
    pub role: Role,
    /// The text; may be empty for an AI message that only calls tools.
    #[serde(default)]
    pub content: String,
    /// For [`Role::Ai`]: the tools the model asked to run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For [`Role::Tool`]: the id of the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    fn build(role: Role, content: String, tool_calls: Vec<ToolCall>, tool_call_id: Option<String>) -> Self {
        let mut message = Message { id: String::new(), role, content, tool_calls, tool_call_id };
        message.id = message.content_id();
        message
    }

    /// A system instruction.
    pub fn system(content: impl Into<String>) -> Self {
        Self::build(Role::System, content.into(), Vec::new(), None)
    }

    /// A user message.
    pub fn human(content: impl Into<String>) -> Self {
        Self::build(Role::Human, content.into(), Vec::new(), None)
    }

    /// A model reply without tool calls.
    pub fn ai(content: impl Into<String>) -> Self {
        Self::build(Role::Ai, content.into(), Vec::new(), None)
    }

    /// A model reply that asks for tools (the text is often empty).
    pub fn ai_with_tool_calls(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self::build(Role::Ai, content.into(), tool_calls, None)
    }

    /// The result of the tool call `call_id`.
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::build(Role::Tool, content.into(), Vec::new(), Some(call_id.into()))
    }

    /// The same message with the given id.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// The id the constructors give this message: role prefix plus FNV-1a hash
    /// of role, content, tool calls and tool-call id.
    pub fn content_id(&self) -> String {
        let mut hash = Fnv::default();
        hash.field(self.role.as_str().as_bytes());
        hash.field(self.content.as_bytes());
        for call in &self.tool_calls {
            hash.field(call.id.as_bytes());
            hash.field(call.name.as_bytes());
            hash.field(call.arguments.to_string().as_bytes());
        }
        if let Some(id) = &self.tool_call_id {
            hash.field(id.as_bytes());
        }
        format!("{}-{:016x}", self.role.as_str(), hash.0)
    }
}

impl HasId for Message {
    fn id(&self) -> &str {
        &self.id
    }
}

/// 64-bit FNV-1a; each field is length-prefixed so ("ab", "c") != ("a", "bc").
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn field(&mut self, bytes: &[u8]) {
        for byte in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_deterministic_and_distinguish_roles() {
        assert_eq!(Message::human("3 + 4").id, Message::human("3 + 4").id);
        assert_ne!(Message::human("3 + 4").id, Message::ai("3 + 4").id);
        assert_ne!(Message::tool("call_1", "7").id, Message::tool("call_2", "7").id);
        assert!(Message::system("x").id.starts_with("system-"));
        assert_eq!(Message::human("a").with_id("m1").id(), "m1");
    }

    #[test]
    fn id_is_pinned() {
        // The hash is part of the persisted format: changing it breaks replays.
        assert_eq!(Message::human("hello").id, Message::human("hello").content_id());
        assert_eq!(Message::human("hello").id, "human-76ef2d96be01fb0c");
    }
}
