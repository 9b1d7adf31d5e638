//! The events a run emits, in order, for tracing and UIs.

use std::fmt;
use std::time::Duration;

use crate::core::error::NodeError;
use crate::core::state::State;
use crate::outcome::Outcome;

/// One thing that happened during a run.
///
/// Its `Display` is one line of at most 240 characters: line breaks in
/// messages show as spaces and a long update or error is cut, ending with `…`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event<S: State> {
    /// A super-step begins with these active nodes, in declaration order.
    StepStarted {
        /// The step number, from 0.
        step: u32,
        /// The active nodes.
        nodes: Vec<&'static str>,
    },
    /// A node attempt begins.
    NodeStarted {
        /// The step number.
        step: u32,
        /// The node.
        node: &'static str,
        /// For an instance of a map worker, the index of its payload.
        instance: Option<u32>,
        /// The attempt, from 1.
        attempt: u32,
    },
    /// A node attempt failed with a transient error and will run again.
    NodeRetrying {
        /// The step number.
        step: u32,
        /// The node.
        node: &'static str,
        /// For an instance of a map worker, the index of its payload.
        instance: Option<u32>,
        /// The attempt that failed.
        attempt: u32,
        /// Why it failed.
        error: NodeError,
        /// How long the executor waits before the next attempt.
        delay: Duration,
    },
    /// A node finished: its update and where it routes.
    NodeFinished {
        /// The step number.
        step: u32,
        /// The node.
        node: &'static str,
        /// For an instance of a map worker, the index of its payload.
        instance: Option<u32>,
        /// The partial update it returned.
        update: S::Update,
        /// The nodes it routes to (empty for `END`).
        next: Vec<&'static str>,
    },
    /// A node failed for good (after its retries).
    NodeFailed {
        /// The step number.
        step: u32,
        /// The node.
        node: &'static str,
        /// For an instance of a map worker, the index of its payload.
        instance: Option<u32>,
        /// The error.
        error: NodeError,
    },
    /// A model or tool call, or an approval step, inside a node.
    Activity(Activity),
    /// The run ended.
    Finished {
        /// How it ended.
        outcome: Outcome,
        /// How many super-steps completed.
        steps: u32,
    },
}

/// The longest an update is shown in an event's line, in characters.
pub(crate) const MAX_UPDATE_CHARS: usize = 120;
/// The longest an event's line is, in characters.
pub(crate) const MAX_LINE_CHARS: usize = 240;

/// One line for a trace or a terminal: an event's text with its line breaks
/// and other control characters shown as spaces, an update cut to 120
/// characters and the whole line to 240 (a cut ends with `…`).
impl<S: State> fmt::Display for Event<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = String::new();
        self.write_line(&mut line)?;
        f.write_str(&one_line(&line, MAX_LINE_CHARS))
    }
}

/// `text` on one line (control characters as spaces), cut to `max` characters.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max * 4));
    for (n, c) in text.chars().enumerate() {
        if n + 1 == max && text.chars().nth(max).is_some() {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

impl<S: State> Event<S> {
    fn write_line(&self, f: &mut String) -> fmt::Result {
        use fmt::Write;
        match self {
            Event::StepStarted { step, nodes } => write!(f, "step {step}: [{}]", nodes.join(", ")),
            Event::NodeStarted { step, node, instance, attempt } => {
                write!(f, "step {step}: {node}{} started (attempt {attempt})", Instance(*instance))
            }
            Event::NodeRetrying { step, node, instance, attempt, error, delay } => {
                let i = Instance(*instance);
                write!(f, "step {step}: {node}{i} attempt {attempt} failed ({error}); retrying in {delay:?}")
            }
            Event::NodeFinished { step, node, instance, update, next } => {
                let next = if next.is_empty() { "END".to_string() } else { next.join(", ") };
                let update = one_line(&format!("{update:?}"), MAX_UPDATE_CHARS);
                write!(f, "step {step}: {node}{} -> {next} with {update}", Instance(*instance))
            }
            Event::NodeFailed { step, node, instance, error } => {
                write!(f, "step {step}: {node}{} failed: {error}", Instance(*instance))
            }
            Event::Activity(a) => write!(f, "  {a}"),
            Event::Finished { outcome, steps } => {
                write!(f, "finished after {steps} steps: {outcome}")
            }
        }
    }
}

/// `[3]` after the name of a map worker's instance 3; nothing for a plain node.
struct Instance(Option<u32>);

impl fmt::Display for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(i) => write!(f, "[{i}]"),
            None => Ok(()),
        }
    }
}

/// What happens inside a node that is worth a trace line.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Activity {
    /// A model answered.
    ModelCall {
        /// The node.
        node: &'static str,
        /// The model's name.
        model: String,
        /// How many tool calls it asked for.
        tool_calls: usize,
        /// What it reported using (`None`: unknown).
        usage: Option<crate::model::Usage>,
    },
    /// A tool call went through the gateway.
    ToolCall {
        /// The node.
        node: &'static str,
        /// The model's call id.
        call_id: String,
        /// The tool.
        tool: String,
        /// `ok`, or the refusal code.
        result: String,
    },
    /// A call waits for a human: an approval record was written.
    ApprovalRequested {
        /// The node.
        node: &'static str,
        /// The approval record.
        approval: String,
        /// The tool.
        tool: String,
    },
    /// A compensation ran (saga): it undid, or failed to undo, a completed call.
    Compensation {
        /// The forward tool whose call was undone.
        tool: String,
        /// The compensating tool.
        compensation: String,
        /// The forward call's id.
        call_id: String,
        /// `ok` or `failed`.
        result: String,
    },
    /// A tool's circuit breaker changed state (shared by every thread of
    /// the store; this run's call caused the change). See [`breaker`](crate::breaker).
    CircuitBreaker {
        /// The node whose call moved it.
        node: &'static str,
        /// The tool.
        tool: String,
        /// The state before.
        from: crate::breaker::BreakerState,
        /// The state now.
        to: crate::breaker::BreakerState,
        /// The streak of consecutive failures now.
        failures: u32,
    },
}

impl fmt::Display for Activity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Activity::ModelCall { node, model, tool_calls, usage } => {
                let usage = usage.map_or("usage unknown".to_string(), |u| format!("{} tokens", u.total()));
                write!(f, "{node}: model `{model}` answered with {tool_calls} tool call(s), {usage}")
            }
            Activity::ToolCall { node, call_id, tool, result } => {
                write!(f, "{node}: tool `{tool}` [{call_id}] -> {result}")
            }
            Activity::ApprovalRequested { node, approval, tool } => {
                write!(f, "{node}: tool `{tool}` waits for approval `{approval}`")
            }
            Activity::Compensation { tool, compensation, call_id, result } => {
                write!(f, "saga: `{compensation}` undoing `{tool}` [{call_id}] -> {result}")
            }
            Activity::CircuitBreaker { node, tool, from, to, failures } => {
                write!(f, "{node}: circuit breaker of `{tool}` {from} -> {to} ({failures} consecutive failure(s))")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn one_line_keeps_short_text_and_cuts_long_text_at_the_limit() {
        assert_eq!(one_line("a\nb\tc", 10), "a b c");
        assert_eq!(one_line("abcde", 5), "abcde");
        assert_eq!(one_line("abcdef", 5), "abcd…");
        assert_eq!(one_line("ééééé€", 5).chars().count(), 5);
        assert_eq!(one_line("", 5), "");
    }
}
