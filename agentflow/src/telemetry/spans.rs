//! One constructor per span kind; every span is a `tracing` span at level INFO whose
//! OpenTelemetry name, kind and status go through the `otel.*` fields. Field values are
//! evaluated only when a subscriber takes the span: with none, each constructor costs what a
//! disabled span costs.

use tracing::Span;
use tracing::field::Empty;

use super::names;
use crate::core::usage::Usage;

/// The root span of a durable thread's trace, closed at once: every invocation of the thread
/// is a child of it.
pub(crate) fn create_thread(graph: &str, thread: &str) -> Span {
    tracing::info_span!(
        parent: None,
        "create_thread",
        "otel.name" = "create_thread",
        { names::THREAD_ID } = thread,
        { names::CONVERSATION_ID } = thread,
        { names::AGENT_NAME } = graph,
    )
}

/// One invocation of a graph (a run, a resume): `invoke_agent {graph}`.
pub(crate) fn invoke_agent(graph: &str, thread: Option<&str>, resumed: bool) -> Span {
    tracing::info_span!(
        "invoke_agent",
        "otel.name" = format_args!("invoke_agent {graph}"),
        { names::OPERATION_NAME } = names::OP_INVOKE_AGENT,
        { names::AGENT_NAME } = graph,
        { names::CONVERSATION_ID } = thread,
        { names::RESUMED } = resumed,
        { names::OUTCOME } = Empty,
        "otel.status_code" = Empty,
        { names::ERROR_TYPE } = Empty,
    )
}

/// How an invocation ended: the outcome's kind, and for a failure the class of its error.
pub(crate) fn end_invoke(span: &Span, outcome: &str, error_type: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    span.record(names::OUTCOME, outcome);
    if let Some(error_type) = error_type {
        failed(span, error_type);
    }
}

/// One super-step: `step` (a low-cardinality name; the number is `agentflow.step`).
pub(crate) fn step(step: u32) -> Span {
    tracing::info_span!("step", { names::STEP } = i64::from(step))
}

/// One node run (all its attempts): `node {name}`, a child of its step's span; its attempt is
/// 1 until a retry records another.
pub(crate) fn node(step_span: &Span, name: &str, step: u32, instance: Option<u32>) -> Span {
    tracing::info_span!(
        parent: step_span,
        "node",
        "otel.name" = format_args!("node {name}"),
        { names::NODE } = name,
        { names::STEP } = i64::from(step),
        { names::INSTANCE } = instance.map(i64::from),
        { names::ATTEMPT } = Empty,
        "otel.status_code" = Empty,
        { names::ERROR_TYPE } = Empty,
    )
}

/// One model call: `chat {request model}`, a client span.
pub(crate) fn chat(provider: &str, model: &str) -> Span {
    tracing::info_span!(
        "chat",
        "otel.name" = format_args!("chat {model}"),
        "otel.kind" = "client",
        { names::OPERATION_NAME } = names::OP_CHAT,
        { names::PROVIDER_NAME } = provider,
        { names::REQUEST_MODEL } = model,
        { names::RESPONSE_MODEL } = Empty,
        { names::USAGE_INPUT_TOKENS } = Empty,
        { names::USAGE_OUTPUT_TOKENS } = Empty,
        "otel.status_code" = Empty,
        { names::ERROR_TYPE } = Empty,
    )
}

/// What a model call answered: the model, the usage and why it stopped.
pub(crate) fn end_chat(span: &Span, response_model: &str, usage: Option<Usage>, finish_reason: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    if !response_model.is_empty() {
        span.record(names::RESPONSE_MODEL, response_model);
    }
    if let Some(usage) = usage {
        span.record(names::USAGE_INPUT_TOKENS, int(usage.input_tokens));
        span.record(names::USAGE_OUTPUT_TOKENS, int(usage.output_tokens));
    }
    if let Some(reason) = finish_reason {
        super::attrs::set_strings(span, super::names::RESPONSE_FINISH_REASONS, &[reason]);
    }
}

/// One tool call through the gateway: `execute_tool {tool}`.
pub(crate) fn execute_tool(allowed: Option<(&str, &str)>) -> Span {
    // A tool the node may not call keeps the model's text (name and call id) off the span.
    let Some((tool, call_id)) = allowed else {
        return tracing::info_span!(
            "execute_tool",
            { names::OPERATION_NAME } = names::OP_EXECUTE_TOOL,
            { names::TOOL_NAME } = NOT_ALLOWED,
            { names::TOOL_CALL_ID } = "",
            { names::TOOL_TYPE } = "function",
            { names::TOOL_REPLAYED } = Empty,
            "otel.status_code" = Empty,
            { names::ERROR_TYPE } = Empty,
        );
    };
    tracing::info_span!(
        "execute_tool",
        "otel.name" = format_args!("execute_tool {tool}"),
        { names::OPERATION_NAME } = names::OP_EXECUTE_TOOL,
        { names::TOOL_NAME } = tool,
        { names::TOOL_CALL_ID } = call_id,
        { names::TOOL_TYPE } = "function",
        { names::TOOL_REPLAYED } = Empty,
        "otel.status_code" = Empty,
        { names::ERROR_TYPE } = Empty,
    )
}

/// The tool name spans and metrics give a call to a tool the node may not call.
pub(crate) const NOT_ALLOWED: &str = "(not allowed)";

/// A tool call stopped to wait for a person's approval (closed at once).
pub(crate) fn await_approval(tool: &str, approval: &str) -> Span {
    tracing::info_span!(
        "await_approval",
        "otel.name" = format_args!("await_approval {tool}"),
        { names::TOOL_NAME } = tool,
        { names::APPROVAL_ID } = approval,
    )
}

/// A node stopped for a person's answer (closed at once); no content.
pub(crate) fn interrupt(kind: &str) -> Span {
    tracing::info_span!("interrupt", "otel.name" = "interrupt", { names::INTERRUPT } = kind)
}

/// A person's decision on an approval (approve, reject, edit, settle, a person's cancel); a
/// co-signer's partial sign-off and the runtime's own cancellations (sweeps) make none.
pub(crate) fn approval_decision(tool: &str, approval: &str, decision: &str, waited_ms: u64) -> Span {
    tracing::info_span!(
        parent: None,
        "approval_decision",
        "otel.name" = format_args!("approval_decision {tool}"),
        { names::TOOL_NAME } = tool,
        { names::APPROVAL_ID } = approval,
        { names::APPROVAL_DECISION } = decision,
        { names::APPROVAL_WAITED_MS } = int(waited_ms),
    )
}

/// One compensation of a saga step: `compensate {compensation tool}` (tool names only: the
/// step's effect key holds a hash of the arguments and the model's call id).
pub(crate) fn compensate(compensation: &str, of_tool: &str) -> Span {
    tracing::info_span!(
        "compensate",
        "otel.name" = format_args!("compensate {compensation}"),
        { names::TOOL_NAME } = compensation,
        { names::COMPENSATION_OF } = of_tool,
        "otel.status_code" = Empty,
        { names::ERROR_TYPE } = Empty,
    )
}

/// `n` as the OpenTelemetry layer records an int (it records unsigned values as strings).
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Marks `span` failed with an error of class `error_type` (never the message).
pub(crate) fn failed(span: &Span, error_type: impl std::fmt::Display) {
    if span.is_disabled() {
        return;
    }
    span.record("otel.status_code", "ERROR");
    span.record(names::ERROR_TYPE, tracing::field::display(error_type));
}
