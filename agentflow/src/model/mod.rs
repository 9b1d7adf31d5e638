//! Chat models: the [`ChatModel`] trait, its request and reply, its errors,
//! and the adapters.
//!
//! - [`ScriptedModel`]: a deterministic test double for tests and examples.
//! - [`OpenAiCompatible`] (feature `openai`, on by default): the
//!   chat-completions HTTP API, as served by OpenAI, Ollama, vLLM and others.
//! - [`structured()`]: typed output validated against a schemars schema,
//!   with bounded re-asks.

mod chat;
#[cfg(feature = "openai")]
mod openai;
mod scripted;
mod stream;
mod structured;
mod usage;

pub use chat::{ChatModel, ChatReply, ChatRequest, ModelError, ResponseSchema};
#[cfg(feature = "openai")]
pub use openai::{OpenAiCompatible, OpenAiConfig};
pub use scripted::{SCRIPTED_MODEL_NAME, ScriptedModel, estimate_tokens};
pub use stream::{ChatChunk, ChunkSink, ReplyAssembler, ToolCallDelta};
pub use structured::{
    Structured, StructuredError, parse_reply, response_schema, schema_instruction, structured, structured_request,
};
pub use usage::{Usage, UsageTally};
