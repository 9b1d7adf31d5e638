//! A thread's event log in the AG-UI vocabulary: how a reader sees a thread's state (each
//! field's reducer, which fields are personal), what it is shown masked, and the AG-UI events
//! the log's entries map to (a reader's mapping maps them, entry by entry).
//!
//! | log entry | AG-UI events, by their place `K` in the entry's mapping |
//! |---|---|
//! | `run.started` | 0 `RUN_ERROR {code: "abandoned"}` when the run before it has no `run.finished` (it stopped: its process died or lost the thread); 1 `RUN_STARTED {threadId, runId}`; 2 `STATE_SNAPSHOT` and 3 `MESSAGES_SNAPSHOT` of the checkpoint the run starts from |
//! | `step` | per node's update: `STEP_STARTED {stepName}`; its messages (a `messages` field): text as `TEXT_MESSAGE_START`, `TEXT_MESSAGE_CONTENT` (non-empty text only), `TEXT_MESSAGE_END`; an AI message's tool calls as `TOOL_CALL_START`, `TOOL_CALL_ARGS`, `TOOL_CALL_END`; a tool message as `TOOL_CALL_RESULT`; then `STATE_DELTA` (a JSON Patch of the overwritten and appended fields) and `STEP_FINISHED` |
//! | `interrupt` | 0 `CUSTOM {name: "agentflow.interrupt", value: the entry}` |
//! | `run.finished` | 0 `STATE_SNAPSHOT` (the state at the checkpoint the entry names) when the entry is the log's newest when read; 1 `RUN_FINISHED {threadId, runId, result: {status, detail}}` (`outcome: {type: "interrupt", interrupts}` for a run that waits for people, `{type: "cancelled"}` for a cancelled one), or `RUN_ERROR {message, code: "failed"}` |
//! | another kind | 0 `CUSTOM {name: "agentflow.KIND", value: the entry}` |
//!
//! An event's place `K` depends on the entry alone: an event a reader is not sent (a snapshot
//! it cannot be shown, a message its client holds already) keeps its place, so the ids of the
//! others do not move, whoever reads and whenever.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::access::personal::{MASK, credential_in_description, holds_personal, mask_fields, personal_in_description};
use crate::server::inspect::fold;

/// The `CUSTOM` event name of a run parked for a person (its value: the log entry).
pub const INTERRUPT: &str = "agentflow.interrupt";
/// The `CUSTOM` event name sent when the reader's position is older than the log keeps.
pub const GAP: &str = "agentflow.gap";
/// The `CUSTOM` event name sent for log entries that cannot be read (their data does not decode
/// or open): `{id, error}`.
pub const UNREADABLE: &str = "agentflow.unreadable";
/// The `RUN_ERROR` code of a run that stopped without finishing.
pub const ABANDONED: &str = "abandoned";
/// The `RUN_ERROR` code that closes a run whose end the log no longer keeps.
pub const LOST: &str = "lost";

/// How a reader sees a thread's log: each state field's reducer and whether it is personal or a
/// credential (from the graph's stored description), and whether the reader may see personal
/// data.
#[derive(Debug, Clone)]
pub struct Vocabulary {
    thread: String,
    reducers: BTreeMap<String, String>,
    personal: Vec<String>,
    credential: Vec<String>,
    sees_personal: bool,
}

impl Vocabulary {
    /// The vocabulary of thread `thread`, whose graph's stored description is `description`
    /// (`None`: every field is taken as overwritten, none as personal), for a reader who may
    /// see personal data or not.
    pub fn new(thread: impl Into<String>, description: Option<&Value>, sees_personal: bool) -> Self {
        let reducers = fold::fields(description).map(|f| f.reducers).unwrap_or_default();
        Vocabulary {
            thread: thread.into(),
            reducers,
            personal: description.map(personal_in_description).unwrap_or_default(),
            credential: description.map(credential_in_description).unwrap_or_default(),
            sees_personal,
        }
    }

    /// The thread.
    pub fn thread(&self) -> &str {
        &self.thread
    }

    /// Whether the reader may see personal data.
    pub fn sees_personal(&self) -> bool {
        self.sees_personal
    }

    /// From now on the reader may see personal data, or not.
    pub(crate) fn set_sees_personal(&mut self, sees: bool) {
        self.sees_personal = sees;
    }

    /// The reducer of field `field` (`overwrite` for a field the description does not name).
    pub(crate) fn reducer(&self, field: &str) -> &str {
        self.reducers.get(field).map_or("overwrite", String::as_str)
    }

    /// The fields whose reducer is `messages`, in order.
    pub(crate) fn message_fields(&self) -> impl Iterator<Item = &str> {
        self.reducers.iter().filter(|(_, r)| r.as_str() == "messages").map(|(f, _)| f.as_str())
    }

    /// Masks the JSON object `value` (a state, an update) for the reader: credential fields
    /// always, personal ones unless the reader may see them. Returns whether it shows personal
    /// fields unmasked.
    pub fn mask(&self, value: &mut Value) -> bool {
        mask_fields(value, &self.credential);
        if self.sees_personal {
            return holds_personal(value, &self.personal);
        }
        mask_fields(value, &self.personal);
        false
    }

    /// Whether values that are no state field (a question's value, another kind's entry) are
    /// masked for the reader: the state has personal fields and the reader may not see them
    /// (which of such a value is personal is not known), as an answer is masked in the audit
    /// log.
    fn masks_other_values(&self) -> bool {
        !self.sees_personal && !self.personal.is_empty()
    }

    /// An `interrupt` entry's data masked for the reader: each question's value.
    pub(crate) fn mask_interrupt(&self, data: &mut Value) {
        if !self.masks_other_values() {
            return;
        }
        for question in data.get_mut("questions").and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(value) = question.get_mut("question")
                && !value.is_null()
            {
                *value = Value::String(MASK.to_string());
            }
        }
    }

    /// The data of an entry of a kind the stream does not map, masked for the reader: every
    /// value but the run's id.
    pub(crate) fn mask_other(&self, data: &mut Value) {
        if !self.masks_other_values() {
            return;
        }
        match data {
            Value::Object(map) => {
                for (key, value) in map.iter_mut() {
                    if key != "run" {
                        *value = Value::String(MASK.to_string());
                    }
                }
            }
            other => *other = Value::String(MASK.to_string()),
        }
    }

    /// The `STATE_DELTA` operations of an update (already masked): overwritten fields replaced,
    /// appended items each added at the end; fields of other reducers are left to a snapshot.
    pub(crate) fn patch(&self, update: &Map<String, Value>) -> Vec<Value> {
        let mut patch = Vec::new();
        for (field, value) in update {
            match self.reducer(field) {
                "overwrite" => patch.push(json!({ "op": "add", "path": pointer(field), "value": value })),
                "append" => match value {
                    Value::Array(items) => patch.extend(
                        items.iter().map(|v| json!({ "op": "add", "path": pointer(field) + "/-", "value": v })),
                    ),
                    // Masked: the whole field reads `•••`.
                    other => patch.push(json!({ "op": "add", "path": pointer(field), "value": other })),
                },
                // Messages are sent as messages; added, merged or custom fields show in a snapshot.
                _ => {}
            }
        }
        patch
    }

    /// `RUN_STARTED` of run `run`.
    pub(crate) fn run_started(&self, run: &str) -> Value {
        json!({ "type": "RUN_STARTED", "threadId": self.thread, "runId": run })
    }

    /// How run `run` ended (`status`, `detail`): `RUN_FINISHED`, or `RUN_ERROR` for a failed
    /// run; `waits`: the masked `interrupt` entry the run parked on, if it did.
    pub(crate) fn run_finished(&self, run: &str, status: &str, detail: &str, waits: Option<&Value>) -> Value {
        if status == "failed" {
            let message = if detail.is_empty() { "the run failed" } else { detail };
            return json!({ "type": "RUN_ERROR", "message": message, "code": "failed" });
        }
        let mut end = json!({
            "type": "RUN_FINISHED",
            "threadId": self.thread,
            "runId": run,
            "result": { "status": status, "detail": detail },
        });
        match status {
            "cancelled" => end["outcome"] = json!({ "type": "cancelled" }),
            "interrupted" => {
                let interrupts = waits.map(interrupts).unwrap_or_default();
                if !interrupts.is_empty() {
                    end["outcome"] = json!({ "type": "interrupt", "interrupts": interrupts });
                }
            }
            _ => {}
        }
        end
    }
}

/// A `CUSTOM` event.
pub(crate) fn custom(name: &str, value: Value) -> Value {
    json!({ "type": "CUSTOM", "name": name, "value": value })
}

/// The JSON Pointer of top-level field `field` (`~` and `/` escaped).
fn pointer(field: &str) -> String {
    format!("/{}", field.replace('~', "~0").replace('/', "~1"))
}

/// The `RUN_ERROR` before the `RUN_STARTED` of run `next`: run `stopped`, before it, has no
/// end in the log (its process stopped, or lost the thread), and `next` goes on from its last
/// commit.
pub(crate) fn abandoned(stopped: &str, next: &str) -> Value {
    json!({
        "type": "RUN_ERROR",
        "message": format!(
            "run {stopped} stopped without finishing (its process stopped or lost the thread); run {next} goes on \
             from its last commit"
        ),
        "code": ABANDONED,
    })
}

/// The `RUN_ERROR` that closes run `run`, whose client holds it open, when the log no longer
/// keeps its end (retention removed it while the reader was behind).
pub(crate) fn lost(run: &str) -> Value {
    json!({
        "type": "RUN_ERROR",
        "message": format!("the log no longer keeps how run {run} went on (see the agentflow.gap event)"),
        "code": LOST,
    })
}

/// The `CUSTOM` event a reader gets when the log no longer keeps the events after its position
/// `from` (retention removed them): `to` is the oldest entry the log keeps, the next one sent.
pub fn gap(from: &str, to: &str) -> Value {
    custom(GAP, json!({ "from": from, "to": to }))
}

/// The `CUSTOM` event of log entry `id`, which cannot be read (`error`); `from`: the position
/// after which every entry up to `id` was passed over, when more than the one entry may have
/// been.
pub fn unreadable(id: &str, from: Option<&str>, error: &str) -> Value {
    let mut value = json!({ "id": id, "error": error });
    if let Some(from) = from {
        value["from"] = Value::String(from.to_string());
    }
    custom(UNREADABLE, value)
}

/// The AG-UI `Interrupt`s of an `interrupt` entry's data (masked): a question (`reason`: its
/// kind, `interrupt`, `before` or `after`; `message`: its value when that is text) and an
/// approval (`reason`: `approval` or `outcome_unknown`), each with where it was asked as
/// `metadata`.
pub(crate) fn interrupts(waits: &Value) -> Vec<Value> {
    let list = |key: &str| waits.get(key).and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    let mut out = Vec::new();
    for q in list("questions") {
        let Some(id) = q.get("id").and_then(Value::as_str) else { continue };
        let mut interrupt = json!({
            "id": id,
            "reason": q.get("kind").and_then(Value::as_str).unwrap_or("interrupt"),
            "metadata": {
                "node": q.get("node").cloned().unwrap_or(Value::Null),
                "instance": q.get("instance").cloned().unwrap_or(Value::Null),
                "question": q.get("question").cloned().unwrap_or(Value::Null),
            },
        });
        if let Some(text) = q.get("question").and_then(Value::as_str) {
            interrupt["message"] = Value::String(text.to_string());
        }
        out.push(interrupt);
    }
    for a in list("approvals") {
        let Some(id) = a.get("id").and_then(Value::as_str) else { continue };
        let tool = a.get("tool").and_then(Value::as_str).unwrap_or("?");
        out.push(json!({
            "id": id,
            "reason": a.get("kind").and_then(Value::as_str).unwrap_or("approval"),
            "message": format!("the call of `{tool}` waits for a decision"),
            "metadata": {
                "tool": tool,
                "node": a.get("node").cloned().unwrap_or(Value::Null),
                "instance": a.get("instance").cloned().unwrap_or(Value::Null),
            },
        }));
    }
    out
}
