//! Span and attribute names: the GenAI semantic conventions' (the version
//! `agentflow::otel::SEMCONV_VERSION` pins) and ours under `agentflow.*`.

/// The GenAI semantic conventions version the names follow.
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(crate) const SEMCONV_VERSION: &str = "1.37.0";

/// The operation a GenAI span stands for (`invoke_agent`, `chat`, `execute_tool`).
pub(crate) const OPERATION_NAME: &str = "gen_ai.operation.name";
/// The model provider (`openai`, ...).
pub(crate) const PROVIDER_NAME: &str = "gen_ai.provider.name";
/// The model a chat request asked for.
pub(crate) const REQUEST_MODEL: &str = "gen_ai.request.model";
/// The model that answered.
pub(crate) const RESPONSE_MODEL: &str = "gen_ai.response.model";
/// Prompt tokens.
pub(crate) const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// Completion tokens.
pub(crate) const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// Why the model stopped, one per choice (a string array).
pub(crate) const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// The tool's name.
pub(crate) const TOOL_NAME: &str = "gen_ai.tool.name";
/// The tool call's id.
pub(crate) const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// The tool's type (`function`).
pub(crate) const TOOL_TYPE: &str = "gen_ai.tool.type";
/// The agent (graph) name.
pub(crate) const AGENT_NAME: &str = "gen_ai.agent.name";
/// The conversation (thread) id.
pub(crate) const CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// The chat's input messages (captured content only).
pub(crate) const INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// The chat's output messages (captured content only).
pub(crate) const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// The chat's system instructions (captured content only).
pub(crate) const SYSTEM_INSTRUCTIONS: &str = "gen_ai.system_instructions";
/// A tool call's arguments (captured content only).
pub(crate) const TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// A tool call's result (captured content only).
pub(crate) const TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";
/// The class of the error a span ended with.
pub(crate) const ERROR_TYPE: &str = "error.type";

/// `gen_ai.operation.name` of an invocation.
pub(crate) const OP_INVOKE_AGENT: &str = "invoke_agent";
/// `gen_ai.operation.name` of a model call.
pub(crate) const OP_CHAT: &str = "chat";
/// `gen_ai.operation.name` of a tool call.
pub(crate) const OP_EXECUTE_TOOL: &str = "execute_tool";

// Ours, under `agentflow.*`.
/// The thread's id (on `create_thread`).
pub(crate) const THREAD_ID: &str = "agentflow.thread.id";
/// Whether the invocation resumed a thread.
pub(crate) const RESUMED: &str = "agentflow.resumed";
/// How the invocation ended (`completed`, `interrupted`, `failed`, ...).
pub(crate) const OUTCOME: &str = "agentflow.outcome";
/// The super-step number.
pub(crate) const STEP: &str = "agentflow.step";
/// The node's name.
pub(crate) const NODE: &str = "agentflow.node";
/// A map worker's instance.
pub(crate) const INSTANCE: &str = "agentflow.instance";
/// The node's attempt, from 1.
pub(crate) const ATTEMPT: &str = "agentflow.attempt";
/// Whether the effect journal answered a tool call without running the tool.
pub(crate) const TOOL_REPLAYED: &str = "agentflow.tool.replayed";
/// An approval record's id.
pub(crate) const APPROVAL_ID: &str = "agentflow.approval.id";
/// What a person decided (`approved`, `rejected`, `edited`, ...).
pub(crate) const APPROVAL_DECISION: &str = "agentflow.approval.decision";
/// How long the approval waited for the decision, in milliseconds.
pub(crate) const APPROVAL_WAITED_MS: &str = "agentflow.approval.waited_ms";
/// Why a node stopped for a person (`interrupt`, `outcome_unknown`, `sleep`).
pub(crate) const INTERRUPT: &str = "agentflow.interrupt";
/// The forward tool a compensation undoes.
pub(crate) const COMPENSATION_OF: &str = "agentflow.compensation.of";
