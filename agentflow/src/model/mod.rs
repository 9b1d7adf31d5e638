//! Chat models: the [`ChatModel`] trait, its request and reply, its errors,
//! and the adapters.
//!
//! - [`ScriptedModel`]: a deterministic test double for tests and examples.
//! - [`OpenAiCompatible`] (feature `openai`, on by default): the
//!   chat-completions HTTP API, as served by OpenAI, Ollama, vLLM and others.
//! - [`structured()`]: typed output validated against a schemars schema,
//!   with bounded re-asks.

mod assemble;
mod chat;
mod chunk;
#[cfg(feature = "openai")]
mod openai;
mod scripted;
mod structured;

pub use crate::core::usage::{Usage, UsageTally};
pub use assemble::ReplyAssembler;
pub use chat::{ChatModel, ChatReply, ChatRequest, ModelError, ResponseSchema};
pub use chunk::{ChatChunk, ChunkSink, ToolCallDelta};
#[cfg(feature = "openai")]
pub use openai::{OpenAiCompatible, OpenAiConfig};
pub use scripted::{SCRIPTED_MODEL_NAME, ScriptedModel, estimate_tokens};
pub(crate) use structured::{Ask, Fed};
pub use structured::{
    Structured, StructuredError, parse_reply, response_schema, schema_instruction, structured, structured_request,
};
