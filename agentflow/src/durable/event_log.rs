//! What a run writes to its thread's event log ([`App::event_log`](crate::App::event_log)),
//! event by event, each in the commit it tells of:
//!
//! | kind | commit | data |
//! |---|---|---|
//! | `run.started` | the run's first (a new thread's input checkpoint; for a resumed run, its first commit, whatever it is) | `{"run", "graph", "resumed", "checkpoint"}`: `checkpoint` is the one the run starts from (a new thread's input checkpoint, 0; a resumed run's latest) |
//! | `step` | each super-step's checkpoint | `{"run", "step", "checkpoint", "nodes", "updates": [{"node", "instance", "update"}]}` |
//! | `interrupt` | the one that records the thread `interrupted` | `{"run", "questions": [{"id", "node", "instance", "kind", "question"}], "approvals": [{"id", "tool", "node", "instance", "kind"}]}` |
//! | `run.finished` | the one that records how the run ended | `{"run", "status", "checkpoint", "detail"}` |
//!
//! `run` names the run in its thread (`<unix ms>-<8 hex digits>`). An update is the node's, as
//! its checkpoint stores it, less the fields marked `#[state(credential)]`; every event passes
//! the credential scan of stored values. The runs of an app without the log build nothing: a
//! [`Checkpointer`](super::Checkpointer) without a [`RunLog`] attaches no event.

use std::io::Write;

use agentflow_store::{NewEvent, ThreadStatus};
use serde_json::{Value, json};

use super::document::{Allowed, refuse_credentials};
use super::error::PersistError;
use crate::core::clock::now_ms;
use crate::core::state::Field;
use crate::interrupt::{Pending, PendingKind};

/// The kind of the event that opens a run.
pub(crate) const RUN_STARTED: &str = "run.started";
/// The kind of a super-step's event.
pub(crate) const STEP: &str = "step";
/// The kind of the event of a run that waits for a person.
pub(crate) const INTERRUPT: &str = "interrupt";
/// The kind of the event that closes a run.
pub(crate) const RUN_FINISHED: &str = "run.finished";

/// How the credential scan names an event it refuses.
const WHAT: &str = "an event of the thread's log";

/// One run's part of its thread's log: its id, and what waits for its next commit.
pub(crate) struct RunLog {
    /// The run's id in its thread.
    run: String,
    /// The graph's name.
    graph: String,
    /// Events to write with the run's next commit, before its own (a resumed run's
    /// `run.started`): kept until a commit carrying them succeeds.
    pub(super) waiting: Vec<NewEvent>,
    /// What the run ends waiting for, when it ends `interrupted` (see
    /// [`Checkpointer::parked_on`](super::Checkpointer::parked_on)).
    pub(super) parked: Option<Vec<Pending>>,
}

impl RunLog {
    /// The log of a new run of graph `graph`, with a fresh id.
    pub(crate) fn new(graph: &str) -> Self {
        RunLog { run: run_id(), graph: graph.to_string(), waiting: Vec::new(), parked: None }
    }

    /// The run's id.
    #[cfg(test)]
    pub(crate) fn run(&self) -> &str {
        &self.run
    }

    /// `run.started` of a run that starts from checkpoint `checkpoint` (a new thread's input
    /// checkpoint, or the latest of the stored thread a resumed run continues: `resumed`).
    pub(crate) fn started(&self, resumed: bool, checkpoint: u64) -> Result<NewEvent, PersistError> {
        event(
            RUN_STARTED,
            &json!({ "run": self.run, "graph": self.graph, "resumed": resumed, "checkpoint": checkpoint }),
        )
    }

    /// The `step` event of super-step `step`, committed as checkpoint `checkpoint`: `nodes` ran
    /// (each once), and `updates` are their updates as the checkpoint stores them (its delta),
    /// each with the node and map instance in `ran` at the same place. The `fields` marked as
    /// credentials are left out of every update.
    pub(crate) fn step(
        &self,
        step: u32,
        checkpoint: u64,
        nodes: &[String],
        ran: &[(&str, Option<u32>)],
        updates: &[Vec<u8>],
        fields: &[Field],
    ) -> Result<NewEvent, PersistError> {
        let size = 96 + self.run.len() + updates.iter().map(|u| u.len() + 48).sum::<usize>();
        let mut out = Vec::with_capacity(size);
        let encode = |source| PersistError::Encode { what: "an event of the thread's log", source };
        out.extend_from_slice(b"{\"run\":");
        serde_json::to_writer(&mut out, &self.run).map_err(encode)?;
        // Writing to a `Vec` cannot fail.
        let _ = write!(out, ",\"step\":{step},\"checkpoint\":{checkpoint},\"nodes\":");
        serde_json::to_writer(&mut out, nodes).map_err(encode)?;
        out.extend_from_slice(b",\"updates\":[");
        let secret: Vec<&str> = fields.iter().filter(|f| f.credential).map(|f| f.name).collect();
        for (i, ((node, instance), update)) in ran.iter().zip(updates).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"node\":");
            serde_json::to_writer(&mut out, node).map_err(encode)?;
            match instance {
                Some(n) => {
                    let _ = write!(out, ",\"instance\":{n}");
                }
                None => out.extend_from_slice(b",\"instance\":null"),
            }
            out.extend_from_slice(b",\"update\":");
            if secret.is_empty() {
                out.extend_from_slice(update);
            } else {
                let mut value: Value = serde_json::from_slice(update).map_err(encode)?;
                if let Value::Object(map) = &mut value {
                    for name in &secret {
                        map.remove(*name);
                    }
                }
                serde_json::to_writer(&mut out, &value).map_err(encode)?;
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
        refuse_credentials(&out, WHAT, Allowed::NONE)?;
        Ok(NewEvent::new(STEP, out))
    }

    /// The `interrupt` event of a run that waits for `pending`: the questions asked of a person
    /// (`cx.interrupt`, and breakpoints, whose question is `null`) and the approvals to decide
    /// (and calls of unknown outcome to settle). A timer is for no person: left out.
    pub(crate) fn interrupt(&self, pending: &[Pending]) -> Result<NewEvent, PersistError> {
        let mut questions = Vec::new();
        let mut approvals = Vec::new();
        for p in pending {
            let kind = kind_name(p.kind);
            match p.kind {
                PendingKind::Approval | PendingKind::OutcomeUnknown => approvals.push(json!({
                    "id": p.payload.get("approval").cloned().unwrap_or(Value::Null),
                    "tool": p.payload.get("tool").cloned().unwrap_or(Value::Null),
                    "node": p.node,
                    "instance": p.instance,
                    "kind": kind,
                })),
                PendingKind::Sleep => {}
                _ => questions.push(json!({
                    "id": p.question_id(),
                    "node": p.node,
                    "instance": p.instance,
                    "kind": kind,
                    "question": p.payload,
                })),
            }
        }
        event(INTERRUPT, &json!({ "run": self.run, "questions": questions, "approvals": approvals }))
    }

    /// The `run.finished` event of a run that ended `status` with the thread at checkpoint
    /// `checkpoint`, its status line `detail` (as the thread record stores it: credential-like
    /// parts redacted). A detail the scan still refuses is left out rather than the run's last
    /// commit refused.
    pub(crate) fn finished(
        &self,
        status: ThreadStatus,
        checkpoint: u64,
        detail: &str,
    ) -> Result<NewEvent, PersistError> {
        let (run, status) = (&self.run, status.as_str());
        event(RUN_FINISHED, &json!({ "run": run, "status": status, "checkpoint": checkpoint, "detail": detail }))
            .or_else(|_| {
                event(RUN_FINISHED, &json!({ "run": run, "status": status, "checkpoint": checkpoint, "detail": "" }))
            })
    }
}

/// The event `kind` with document `data`, refused if it holds a credential-like value.
fn event(kind: &str, data: &Value) -> Result<NewEvent, PersistError> {
    let bytes = serde_json::to_vec(data)
        .map_err(|source| PersistError::Encode { what: "an event of the thread's log", source })?;
    refuse_credentials(&bytes, WHAT, Allowed::NONE)?;
    Ok(NewEvent::new(kind, bytes))
}

/// How a wait is named in an event: as [`PendingKind`] is stored (`interrupt`, `approval`, ...).
fn kind_name(kind: PendingKind) -> Value {
    serde_json::to_value(kind).unwrap_or(Value::Null)
}

/// A new run's id: when it started (unix millis) and 32 random bits, `<ms>-<8 hex digits>`.
fn run_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let now = now_ms();
    // `RandomState` is seeded from the operating system's randomness (and differs per call).
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(now);
    hasher.write_u64(RUNS.fetch_add(1, Ordering::Relaxed));
    format!("{now}-{:08x}", hasher.finish() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::state::ReducerKind;

    fn data(event: &NewEvent) -> Value {
        serde_json::from_slice(&event.data).unwrap()
    }

    #[test]
    fn a_run_id_is_when_it_started_and_eight_hex_digits_and_two_runs_differ() {
        let (a, b) = (RunLog::new("g"), RunLog::new("g"));
        assert_ne!(a.run(), b.run());
        let (ms, hex) = a.run().split_once('-').unwrap();
        assert!(ms.parse::<u64>().unwrap() > 1_600_000_000_000);
        assert!(hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit()), "{hex}");
    }

    #[test]
    fn a_step_event_names_each_update_and_leaves_credential_fields_out() {
        let log = RunLog::new("triage");
        let fields = [
            Field::new("notes", ReducerKind::Append, "Vec<String>"),
            Field::new("key", ReducerKind::Overwrite, "String").credential(),
            Field::new("email", ReducerKind::Overwrite, "String").personal(),
        ];
        let updates = vec![
            br#"{"notes":["a \"quoted\" note"],"key":"sk-proj-4fT9xQ2mL7vN1cB8zR5kW3yH6jD0sA2eG9uP4iO7tY1rE5wQ"}"#
                .to_vec(),
            br#"{"email":"ada@example.com"}"#.to_vec(),
            br#"{"notes":["b"]}"#.to_vec(),
        ];
        let ran = [("plan", None), ("work", Some(0)), ("work", Some(1))];
        let nodes = ["plan".to_string(), "work".to_string()];
        let event = log.step(3, 7, &nodes, &ran, &updates, &fields).unwrap();
        assert_eq!(event.kind, "step");
        assert!(!String::from_utf8_lossy(&event.data).contains("sk-proj-"));
        assert_eq!(
            data(&event),
            json!({
                "run": log.run(), "step": 3, "checkpoint": 7, "nodes": ["plan", "work"],
                "updates": [
                    {"node": "plan", "instance": null, "update": {"notes": ["a \"quoted\" note"]}},
                    // Personal data is logged (a reader masks it).
                    {"node": "work", "instance": 0, "update": {"email": "ada@example.com"}},
                    {"node": "work", "instance": 1, "update": {"notes": ["b"]}},
                ]
            })
        );
        // Without credential fields the stored update is copied as it is.
        let plain = log.step(1, 1, &nodes[..1], &ran[..1], &updates[2..], &fields[..1]).unwrap();
        assert_eq!(data(&plain)["updates"][0]["update"], json!({"notes": ["b"]}));
    }

    #[test]
    fn a_step_event_holding_a_credential_outside_a_credential_field_is_refused() {
        let log = RunLog::new("g");
        let updates = vec![br#"{"notes":["token ghp_16C7e42F292c6912E7710c838347Ae178B4a"]}"#.to_vec()];
        let fields = [Field::new("notes", ReducerKind::Append, "Vec<String>")];
        let err = log.step(1, 1, &["n".into()], &[("n", None)], &updates, &fields).unwrap_err();
        assert!(matches!(err, PersistError::Credential { .. }), "{err}");
        assert!(!err.to_string().contains("ghp_"), "{err}");
    }

    #[test]
    fn an_interrupt_event_lists_questions_and_approvals_but_no_timer() {
        let log = RunLog::new("g");
        let pending = |node: &str, instance, kind, payload| Pending { node: node.into(), instance, kind, payload };
        let waits = [
            pending("review", Some(2), PendingKind::Interrupt, json!({"draft": "hello"})),
            pending("pay", None, PendingKind::Approval, json!({"approval": "apr-1", "tool": "refund", "args": {}})),
            pending("ship", None, PendingKind::OutcomeUnknown, json!({"approval": "unk-2", "tool": "ship"})),
            pending("nap", None, PendingKind::Sleep, json!({"until": 5})),
            pending("check", None, PendingKind::Before, Value::Null),
        ];
        let event = log.interrupt(&waits).unwrap();
        assert_eq!(event.kind, "interrupt");
        assert_eq!(
            data(&event),
            json!({
                "run": log.run(),
                "questions": [
                    {"id": waits[0].question_id(), "node": "review", "instance": 2, "kind": "interrupt",
                     "question": {"draft": "hello"}},
                    {"id": waits[4].question_id(), "node": "check", "instance": null, "kind": "before",
                     "question": null},
                ],
                "approvals": [
                    {"id": "apr-1", "tool": "refund", "node": "pay", "instance": null, "kind": "approval"},
                    {"id": "unk-2", "tool": "ship", "node": "ship", "instance": null, "kind": "outcome_unknown"},
                ],
            })
        );
    }

    #[test]
    fn the_start_and_the_end_of_a_run_name_it() {
        let log = RunLog::new("triage");
        let started = log.started(true, 6).unwrap();
        assert_eq!(started.kind, "run.started");
        assert_eq!(data(&started), json!({"run": log.run(), "graph": "triage", "resumed": true, "checkpoint": 6}));
        assert_eq!(data(&log.started(false, 0).unwrap())["checkpoint"], 0);
        let finished = log.finished(ThreadStatus::BudgetExhausted, 4, "out of steps").unwrap();
        assert_eq!(finished.kind, "run.finished");
        assert_eq!(
            data(&finished),
            json!({"run": log.run(), "status": "budget_exhausted", "checkpoint": 4, "detail": "out of steps"})
        );
        // A status line the scan refuses is left out, not the run's end.
        let refused = log.finished(ThreadStatus::Failed, 4, "ghp_16C7e42F292c6912E7710c838347Ae178B4a").unwrap();
        assert_eq!(data(&refused)["detail"], "");
        assert_eq!(data(&refused)["status"], "failed");
    }
}
