//! The served tool's calls and results as JSON, without I/O: what a call asks (start a thread,
//! or resume one), which waiting question a resume answers, the tool's schemas, and the shape
//! of what a call returns.
//!
//! A call's arguments:
//! - `{"thread": "t-1", "input": {..}}` starts thread `t-1` from `input` (the graph's state);
//! - `{"thread": "t-1", "resume": {..}}` continues it. `resume` is an object naming each waiting
//!   question by its id (the `id` of a `waiting_for` item of kind `interrupt`) with its answer:
//!   `{"<id>": value, ..}`; `{}` continues a thread that waits for nothing the caller gives
//!   (an approval decided meanwhile by a person). A value that is not an object answers the
//!   thread's only waiting question; it is refused, with the list of questions, when the
//!   thread waits on several. An object answer always goes in the named form, so an answer is
//!   never taken for a list of answers.
//!
//! Approvals and unknown outcomes are not decided through the tool: people decide them at the
//! approval desk (the inbox, `agentflow approve`), the caller then resumes with `{}`.

use serde_json::{Map, Value, json};

use crate::access::personal::MASK;
use crate::core::error::ErrorClass;
use crate::core::state::Field;
use crate::durable::ResumeError;
use crate::interrupt::{Pending, PendingKind};
use crate::outcome::{Outcome, RunError};

/// What a call of the served tool asks.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Call {
    /// Start thread `thread` from `input`.
    Start {
        /// The new thread's id, chosen by the caller.
        thread: String,
        /// The graph's input state, as JSON.
        input: Value,
    },
    /// Continue thread `thread` with `resume`.
    Resume {
        /// The thread to continue.
        thread: String,
        /// The answers (see the module docs).
        resume: Value,
    },
}

impl Call {
    /// The thread the call is about.
    pub(crate) fn thread(&self) -> &str {
        match self {
            Call::Start { thread, .. } | Call::Resume { thread, .. } => thread,
        }
    }
}

/// Why a call cannot be carried out as asked: the message the caller reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Refusal(pub(crate) String);

/// The arguments a call may give.
const KEYS: [&str; 3] = ["thread", "input", "resume"];

/// Reads a call's arguments: a thread id, and exactly one of `input` and `resume`.
pub(crate) fn parse_call(arguments: Option<&Map<String, Value>>) -> Result<Call, Refusal> {
    let empty = Map::new();
    let args = arguments.unwrap_or(&empty);
    if let Some(unknown) = args.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(Refusal(format!("unknown argument `{unknown}`; the arguments are `thread`, `input` and `resume`")));
    }
    let thread = match args.get("thread") {
        Some(Value::String(t)) if !t.trim().is_empty() => t.clone(),
        Some(Value::String(_)) | None => {
            return Err(Refusal("`thread` is required: the id of the thread to start or resume".into()));
        }
        Some(other) => return Err(Refusal(format!("`thread` must be a string, not {}", kind_of(other)))),
    };
    match (args.get("input"), args.get("resume")) {
        (Some(input), None) => Ok(Call::Start { thread, input: input.clone() }),
        (None, Some(resume)) => Ok(Call::Resume { thread, resume: resume.clone() }),
        (Some(_), Some(_)) => {
            Err(Refusal("give either `input` (start the thread) or `resume` (continue it), not both".into()))
        }
        (None, None) => Err(Refusal(format!(
            "give `input` to start thread `{thread}`, or `resume` to continue it (`{{}}` when it waits for \
             nothing you answer)"
        ))),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// What a resume does.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Plan {
    /// A plain resume: nothing is answered.
    Continue,
    /// Each named question gets its answer, in order; the last one continues the thread.
    Answer(Vec<(String, Value)>),
}

/// The id of a waiting item, as the caller names it: a question's id, an approval's id.
fn item_id(p: &Pending) -> Option<String> {
    match p.kind {
        PendingKind::Interrupt => Some(p.question_id()),
        PendingKind::Approval | PendingKind::OutcomeUnknown => {
            p.payload.get("approval").and_then(Value::as_str).map(str::to_string)
        }
        _ => None,
    }
}

/// The ids of the questions among `pending`, for messages.
fn question_list(questions: &[&Pending]) -> String {
    let ids: Vec<String> = questions.iter().map(|p| format!("`{}` (node `{}`)", p.question_id(), p.node)).collect();
    ids.join(", ")
}

/// What a resume of `thread` with `resume` does, given what the thread waits for; refused when
/// it is not clear which question an answer is for, or when it would decide an approval.
pub(crate) fn plan_resume(thread: &str, pending: &[Pending], resume: Value) -> Result<Plan, Refusal> {
    let questions: Vec<&Pending> = pending.iter().filter(|p| p.kind == PendingKind::Interrupt).collect();
    let named = |id: &str| questions.iter().any(|p| p.question_id() == id);
    let answers = match resume {
        Value::Object(map) => map.into_iter().collect::<Vec<_>>(),
        value => match questions.as_slice() {
            [one] => return Ok(Plan::Answer(vec![(one.question_id(), value)])),
            [] if value.is_null() => return Ok(Plan::Continue),
            [] => {
                return Err(Refusal(format!(
                    "thread `{thread}` waits for no answer; resume it with `{{}}` to continue it"
                )));
            }
            several => {
                return Err(Refusal(format!(
                    "thread `{thread}` waits on {} questions: {}; name the one each answer is for: \
                     `\"resume\": {{\"<id>\": value}}`",
                    several.len(),
                    question_list(several)
                )));
            }
        },
    };
    for (id, _) in &answers {
        if named(id) {
            continue;
        }
        if let Some(p) = pending.iter().find(|p| p.kind != PendingKind::Interrupt && item_id(p).as_deref() == Some(id))
        {
            let what = if p.kind == PendingKind::Approval { "approval" } else { "unknown outcome" };
            return Err(Refusal(format!(
                "`{id}` is an {what}: people decide it at the approval desk (the inbox, `agentflow approve`), not \
                 through this tool; once it is decided, resume thread `{thread}` with `{{}}`"
            )));
        }
        let waiting = if questions.is_empty() {
            "it waits on no question".to_string()
        } else {
            format!("its questions are {}", question_list(&questions))
        };
        return Err(Refusal(format!("thread `{thread}` does not wait on a question `{id}`; {waiting}")));
    }
    if answers.is_empty() {
        if !questions.is_empty() {
            return Err(Refusal(format!(
                "thread `{thread}` waits for answers to {}; give each its answer: `\"resume\": {{\"<id>\": value}}`",
                question_list(&questions)
            )));
        }
        return Ok(Plan::Continue);
    }
    Ok(Plan::Answer(answers))
}

/// A waiting item as the caller reads it. `hide` replaces what a question asks and an
/// approval's arguments with the mask (for a caller who may not see personal data, when the
/// state has personal fields: neither is a state field, so which part is personal is unknown).
pub(crate) fn describe_pending(p: &Pending, hide: bool) -> Value {
    let kind = serde_json::to_value(p.kind).unwrap_or(Value::Null);
    let mut item = json!({ "kind": kind, "node": p.node });
    if let Some(i) = p.instance {
        item["instance"] = json!(i);
    }
    if let Some(id) = item_id(p) {
        item["id"] = json!(id);
    }
    let shown = |v: &Value| if hide { Value::String(MASK.to_string()) } else { v.clone() };
    match p.kind {
        PendingKind::Interrupt => item["asks"] = shown(&p.payload),
        PendingKind::Approval | PendingKind::OutcomeUnknown => {
            for key in ["tool", "risk", "reason", "expires_at"] {
                if let Some(v) = p.payload.get(key) {
                    item[key] = v.clone();
                }
            }
            if let Some(args) = p.payload.get("args") {
                item["args"] = shown(args);
            }
        }
        PendingKind::Sleep => {
            if let Some(until) = p.payload.get("until") {
                item["until"] = until.clone();
            }
        }
        _ => {}
    }
    item
}

/// A call's result: its structured content, a line for people, and whether it is an error.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Shaped {
    /// `structuredContent`.
    pub(crate) value: Value,
    /// The text content.
    pub(crate) text: String,
    /// `isError`.
    pub(crate) is_error: bool,
}

/// A call that failed before or while running: `{"status": "failed", "thread", "error"}`.
pub(crate) fn failed(thread: &str, error: &str) -> Shaped {
    Shaped {
        value: json!({ "status": "failed", "thread": thread, "error": error }),
        text: if thread.is_empty() { error.to_string() } else { format!("thread `{thread}`: {error}") },
        is_error: true,
    }
}

/// A thread that waits for `items` (described by [`describe_pending`]):
/// `{"status": "waiting", "thread", "waiting_for"}`, not an error.
fn waiting(thread: &str, items: Vec<Value>) -> Shaped {
    Shaped {
        text: format!("thread `{thread}` is waiting for {}", waits_for(thread, &items)),
        value: json!({ "status": "waiting", "thread": thread, "waiting_for": items }),
        is_error: false,
    }
}

/// What `items` are, in words, and how to resume.
fn waits_for(thread: &str, items: &[Value]) -> String {
    let what: Vec<String> = items.iter().map(waiting_line).collect();
    format!("{}; resume it with {{\"thread\": \"{thread}\", \"resume\": ..}}", what.join("; "))
}

/// A call that was refused while the thread goes on waiting, e.g. an answer of the wrong shape
/// for its question: `{"status": "waiting", "thread", "waiting_for", "error"}` with `isError`,
/// so a caller reads both why the call failed and that the thread still waits for `pending`
/// (`hide`: see [`describe_pending`]).
pub(crate) fn still_waiting(thread: &str, error: &str, pending: &[Pending], hide: bool) -> Shaped {
    let items: Vec<Value> = pending.iter().map(|p| describe_pending(p, hide)).collect();
    Shaped {
        text: format!("thread `{thread}`: {error}; it is still waiting for {}", waits_for(thread, &items)),
        value: json!({ "status": "waiting", "thread": thread, "waiting_for": items, "error": error }),
        is_error: true,
    }
}

/// Whether `outcome` is a run that failed on an answer of the wrong shape: the thread still
/// waits for an answer where it asked (see [`crate::App::pending`]).
pub(crate) fn refused_answer(outcome: &Outcome) -> Option<&str> {
    match outcome {
        Outcome::Failed { error, .. } if error.class == ErrorClass::NeedsInput => Some(&error.message),
        _ => None,
    }
}

/// How a run that neither finished nor waits ended, in words for the caller.
fn ended(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Failed { node, error } => format!("node `{node}` failed ({} error): {}", error.class, error.message),
        Outcome::BudgetExhausted { which } => {
            format!("the thread used up its `{which}` budget; a person may raise its limits, then resume it")
        }
        Outcome::Cancelled => "the run was cancelled".to_string(),
        Outcome::Compensated { reason, undone, unknown } => {
            let mut text = format!("the run stopped ({reason}) and its completed calls were undone");
            if !undone.is_empty() {
                let calls: Vec<String> =
                    undone.iter().map(|u| format!("`{}` by `{}`", u.tool, u.compensation)).collect();
                text.push_str(&format!(": {}", calls.join(", ")));
            }
            if !unknown.is_empty() {
                text.push_str(&format!(
                    "; whether {} acted is unknown: a person settles it at the approval desk",
                    unknown.join(", ")
                ));
            }
            text
        }
        Outcome::CompensationFailed { compensation, tool, error, .. } => format!(
            "undoing the call of `{tool}` with `{compensation}` failed: {error}; the thread stays \
             compensating until a person looks at it"
        ),
        other => format!("the run ended: {other}"),
    }
}

/// What a run error means to the caller of the tool, in its terms (`input`, `resume`), not in
/// the Rust API's (`.resume()`): the messages that name a method are reworded; the others are
/// the error's own text.
pub(crate) fn run_error(thread: &str, error: &RunError) -> String {
    match error {
        RunError::Resume(ResumeError::UnknownThread { .. }) => unknown_thread(thread),
        RunError::NotWaiting { status, .. } => format!(
            "thread `{thread}` waits for no answer ({status}); call again with `\"resume\": {{}}` to continue it"
        ),
        RunError::ValueRequired { node, .. } => format!(
            "thread `{thread}` waits at node `{node}` for an answer; call again with `resume` naming its question: \
             `\"resume\": {{\"<id>\": value}}`"
        ),
        RunError::SeveralQuestions { questions, .. } | RunError::QuestionsDiffer { questions, .. } => format!(
            "thread `{thread}` waits for answers to {} questions (ids {}); call again with `resume` naming each: \
             `\"resume\": {{\"<id>\": value}}`",
            questions.len(),
            questions.join(", ")
        ),
        other => other.to_string(),
    }
}

/// The answer for a thread the caller cannot reach: one that does not exist, and one of a
/// tenant the actor does not act for, alike.
pub(crate) fn unknown_thread(thread: &str) -> String {
    format!("no thread `{thread}`; start it with `input`")
}

/// The answer for a start of `thread` when a thread of that id exists: `own` when the actor
/// can see it (it may resume it), else the id is taken, saying nothing of whose it is.
pub(crate) fn thread_exists(thread: &str, own: bool) -> String {
    if own {
        format!(
            "thread `{thread}` exists already; to continue it, call again with `resume` instead of `input` \
             (`{{}}` when it waits for nothing you answer), or start a new thread under another id"
        )
    } else {
        format!("the thread id `{thread}` is taken; start the thread under another id")
    }
}

/// The result of a run of `thread` that ended with `outcome` and `state` (masked already for
/// the caller); `hide`: see [`describe_pending`].
pub(crate) fn shape(thread: &str, outcome: &Outcome, state: Value, hide: bool) -> Shaped {
    let waiting = |items: Vec<Value>| waiting(thread, items);
    match outcome {
        Outcome::Completed => Shaped {
            text: format!("thread `{thread}` finished"),
            value: json!({ "status": "done", "thread": thread, "state": state }),
            is_error: false,
        },
        Outcome::Interrupted { pending, .. } => waiting(pending.iter().map(|p| describe_pending(p, hide)).collect()),
        Outcome::Sleeping { until, .. } => {
            waiting(vec![json!({ "kind": "sleep", "until": crate::outcome::unix_ms::of(*until) })])
        }
        Outcome::Paused => waiting(vec![json!({ "kind": "paused" })]),
        other => failed(thread, &ended(other)),
    }
}

/// One waiting item in words.
fn waiting_line(item: &Value) -> String {
    let text = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
    match item.get("kind").and_then(Value::as_str) {
        Some("interrupt") => format!("an answer to question `{}` of node `{}`", text("id"), text("node")),
        Some("approval") => format!(
            "a person's decision on approval `{}` of tool `{}` (node `{}`)",
            text("id"),
            text("tool"),
            text("node")
        ),
        Some("outcome_unknown") => format!("a person to settle the unknown outcome `{}`", text("id")),
        Some("sleep") => "a timer".to_string(),
        Some("paused") => "a resume after a pause".to_string(),
        _ => format!("a resume at node `{}`", text("node")),
    }
}

/// The JSON schema of a state with `fields`: each field by the JSON type its Rust type reads
/// as (any JSON for types it does not know).
pub(crate) fn state_schema(fields: &[Field]) -> Value {
    let properties: Map<String, Value> = fields.iter().map(|f| (f.name.to_string(), type_schema(f.ty, 0))).collect();
    json!({ "type": "object", "properties": properties })
}

/// The schema of Rust type `ty` (as written, without whitespace).
fn type_schema(ty: &str, depth: u32) -> Value {
    let inner = |prefix: &str| ty.strip_prefix(prefix).and_then(|t| t.strip_suffix('>'));
    if depth > 8 {
        return json!({});
    }
    if let Some(t) = inner("Option<") {
        let mut schema = type_schema(t, depth + 1);
        return match schema.get("type").cloned() {
            Some(Value::String(name)) => {
                schema["type"] = json!([name, "null"]);
                schema
            }
            _ => schema,
        };
    }
    if let Some(t) = inner("Vec<") {
        return json!({ "type": "array", "items": type_schema(t, depth + 1) });
    }
    match ty {
        "String" | "&str" | "char" => json!({ "type": "string" }),
        "bool" => json!({ "type": "boolean" }),
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => json!({ "type": "integer", "minimum": 0 }),
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => json!({ "type": "integer" }),
        "f32" | "f64" => json!({ "type": "number" }),
        _ => json!({}),
    }
}

/// The tool's input schema: `thread`, and `input` (of schema `input`) or `resume`.
pub(crate) fn input_schema(input: Value) -> Map<String, Value> {
    let schema = json!({
        "type": "object",
        "properties": {
            "thread": {
                "type": "string",
                "minLength": 1,
                "description": "The thread to start (with `input`) or continue (with `resume`)."
            },
            "input": input,
            "resume": {
                "description": "The answers to the thread's waiting questions, by question id: {\"<id>\": value}; \
                                {} continues a thread whose approvals were decided. A value that is not an object \
                                answers the only waiting question."
            }
        },
        "required": ["thread"],
        "additionalProperties": false
    });
    match schema {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// The tool's output schema: the `structuredContent` of every result.
pub(crate) fn output_schema() -> Map<String, Value> {
    let schema = json!({
        "type": "object",
        "properties": {
            "status": { "type": "string", "enum": ["done", "waiting", "failed"] },
            "thread": { "type": "string" },
            "state": { "description": "The final state (status `done`), personal fields masked." },
            "waiting_for": { "type": "array", "items": { "type": "object" } },
            "error": { "type": "string" }
        },
        "required": ["status", "thread"]
    });
    match schema {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests;
