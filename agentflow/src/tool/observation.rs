//! What a tool call gives back to the model: a structured observation tied
//! to the call id, for success and for every kind of refusal.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::core::message::Message;

/// Why a call did not produce a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum Code {
    /// The arguments did not validate; the model can correct them.
    InvalidArgument,
    /// The tool refused (e.g. division by zero); the model can re-plan.
    ToolError,
    /// The tool is not allowed here, or the policy denies it. Not executed.
    PermissionDenied,
    /// A human rejected the call. Not executed.
    Rejected,
    /// The approval expired before it was used. Not executed.
    ApprovalExpired,
    /// The approval was cancelled, already used, or does not match the call. Not executed.
    ApprovalInvalid,
    /// The tool's circuit breaker is open (it kept failing): the call did not
    /// run. The observation's `retry_at` (unix ms), when present, is when a
    /// trial call may run. See [`breaker`](crate::breaker).
    CircuitOpen,
}

impl Code {
    /// The code as the model sees it, lower-cased: `invalid_argument`, `tool_error`, ...
    pub fn as_str(&self) -> &'static str {
        match self {
            Code::InvalidArgument => "invalid_argument",
            Code::ToolError => "tool_error",
            Code::PermissionDenied => "permission_denied",
            Code::Rejected => "rejected",
            Code::ApprovalExpired => "approval_expired",
            Code::ApprovalInvalid => "approval_invalid",
            Code::CircuitOpen => "circuit_open",
        }
    }
}

/// The result of one tool call, as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// The call it answers.
    pub call_id: String,
    /// The tool called.
    pub tool: String,
    /// `{"ok":true,"result":..}` or `{"ok":false,"code":..,"detail":..}`.
    pub body: Value,
}

impl Observation {
    /// A successful call.
    pub fn ok(call_id: &str, tool: &str, result: Value) -> Self {
        Observation { call_id: call_id.into(), tool: tool.into(), body: json!({ "ok": true, "result": result }) }
    }

    /// A call that did not produce a result.
    pub fn error(call_id: &str, tool: &str, code: Code, detail: impl Into<String>) -> Self {
        Observation {
            call_id: call_id.into(),
            tool: tool.into(),
            body: json!({ "ok": false, "code": code, "detail": detail.into() }),
        }
    }

    /// Whether the call produced a result.
    pub fn is_ok(&self) -> bool {
        self.body.get("ok") == Some(&Value::Bool(true))
    }

    /// The refusal code, if the call did not produce a result.
    pub fn code(&self) -> Option<Code> {
        self.body.get("code").and_then(|c| serde_json::from_value(c.clone()).ok())
    }

    /// The result, if the call produced one.
    pub fn result(&self) -> Option<&Value> {
        self.body.get("result")
    }

    /// The tool-result message for the conversation.
    pub fn into_message(self) -> Message {
        Message::tool(self.call_id, self.body.to_string())
    }
}
