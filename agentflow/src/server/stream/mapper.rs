//! One reader's mapping of a thread's log to AG-UI events, entry by entry (see
//! [`ag_ui`](super::ag_ui) for the table), keeping what the mapping of the next entry needs:
//! the entry before it (a run that never finished, the questions a run parked on), the run the
//! reader's client holds open, and the messages it holds.
//!
//! The client of a reader that starts in the middle of the log (it comes back, or the log was
//! trimmed) holds nothing: before the first entry it gets, the reader is brought in step
//! ([`Mapper::sync`]): a `RUN_STARTED` of the entry's run when that entry does not start one,
//! and the state and messages from before the entry, so the deltas that follow apply and the
//! messages that follow are told from those it holds.

use agentflow_store::{EventId, Store, StoredEvent};
use serde_json::{Map, Value, json};

use super::ag_ui::{INTERRUPT, Vocabulary, abandoned, custom, lost};
use super::messages::{Known, Verdict, ag_ui_message, message_item};
use super::snapshot::Snapshots;

/// The kind of the entry that starts a run.
pub(crate) const RUN_STARTED: &str = "run.started";
/// The kind of a super-step's entry.
pub(crate) const STEP: &str = "step";
/// The kind of the entry of a run parked for people.
pub(crate) const PARKED: &str = "interrupt";
/// The kind of the entry that ends a run.
pub(crate) const RUN_FINISHED: &str = "run.finished";

/// What a mapping reads besides the entry: the store (for the state at a checkpoint) and the
/// log's newest entry when the entry was read.
#[derive(Clone, Copy)]
pub(crate) struct Cx<'a> {
    /// The store.
    pub(crate) store: &'a dyn Store,
    /// The newest entry of the log when the entry was read.
    pub(crate) newest: Option<EventId>,
}

/// The AG-UI events of one log entry for one reader.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Mapped {
    /// Events without an id, sent before the entry's (closing a run the client holds open
    /// that the log lost track of; bringing the reader in step).
    pub(crate) before: Vec<Value>,
    /// The entry's events by their place `K`: `None` for one this reader is not sent.
    pub(crate) slots: Vec<Option<Value>>,
    /// Whether they show personal fields unmasked: a read to audit.
    pub(crate) shows_personal: bool,
    /// Whether they hold a state or messages snapshot (a page ends after such an entry).
    pub(crate) snapshots: bool,
}

/// The entry mapped before the next one.
#[derive(Debug, Clone)]
struct Previous {
    kind: String,
    run: String,
    /// An `interrupt` entry's data, masked for the reader.
    waits: Option<Value>,
}

/// One reader's mapping (see the [module](self)).
#[derive(Debug)]
pub(crate) struct Mapper {
    pub(crate) vocabulary: Vocabulary,
    snapshots: Snapshots,
    known: Known,
    previous: Option<Previous>,
    /// The run the reader's client holds open: it got its `RUN_STARTED` and not its end.
    open: Option<String>,
}

impl Mapper {
    /// A mapping in `vocabulary`, with the states `snapshots` reads.
    pub(crate) fn new(vocabulary: Vocabulary, snapshots: Snapshots) -> Self {
        Mapper { vocabulary, snapshots, known: Known::default(), previous: None, open: None }
    }

    /// Whether the reader's client holds a run open.
    pub(crate) fn holds_run(&self) -> bool {
        self.open.is_some()
    }

    /// The entry before the first one the reader maps is `entry` (`None`: there is none, or it
    /// cannot be read): not sent, but the next entry's mapping depends on it.
    pub(crate) fn look_back(&mut self, entry: Option<&StoredEvent>) {
        self.previous = entry.map(|e| {
            let data = serde_json::from_slice::<Value>(&e.data).unwrap_or(Value::Null);
            let waits = (e.kind == PARKED).then(|| {
                let mut waits = data.clone();
                self.vocabulary.mask_interrupt(&mut waits);
                waits
            });
            Previous { kind: e.kind.clone(), run: run_of(&data, e.id), waits }
        });
    }

    /// The log lost the entries before the next one (a gap): the next entry's mapping depends
    /// on none.
    pub(crate) fn forget_previous(&mut self) {
        self.previous = None;
    }

    /// Log entry `id` cannot be read: the next entry's mapping cannot depend on it.
    pub(crate) fn passed_unreadable(&mut self, id: EventId) {
        self.previous = Some(Previous { kind: "unreadable".into(), run: id.to_string(), waits: None });
    }

    /// The events that bring the reader in step before entry `next`, the first it gets after
    /// its start or a gap (see the [module](self)); `checkpoint`: the checkpoint that entry's
    /// commit names elsewhere (an `interrupt` entry names none; the `run.finished` after it
    /// does).
    pub(crate) fn sync(&mut self, cx: Cx<'_>, next: &StoredEvent, checkpoint: Option<u64>) -> Mapped {
        let mut out = Mapped::default();
        if next.kind == RUN_STARTED {
            // Its own mapping starts the run.
            return out;
        }
        let data = serde_json::from_slice::<Value>(&next.data).unwrap_or(Value::Null);
        let run = run_of(&data, next.id);
        if self.open.as_deref() != Some(run.as_str()) {
            if let Some(open) = self.open.take() {
                out.before.push(lost(&open));
            }
            out.before.push(self.vocabulary.run_started(&run));
            self.open = Some(run);
        }
        let named = data.get("checkpoint").and_then(Value::as_u64);
        let before_entry = match next.kind.as_str() {
            // The state before the step: its checkpoint's parent.
            STEP => named.and_then(|seq| seq.checked_sub(1)),
            RUN_FINISHED => named,
            _ => checkpoint,
        };
        if let Some(seq) = before_entry {
            let (state, messages) = self.snapshot_events(cx, Some(seq), &mut out.shows_personal);
            out.snapshots = state.is_some() || messages.is_some();
            out.before.extend(state.into_iter().chain(messages));
        }
        out
    }

    /// How many places (events, sent or not) entry `entry` maps to: the entry's alone, whoever
    /// reads it.
    pub(crate) fn places(&self, entry: &StoredEvent) -> usize {
        let Ok(data) = serde_json::from_slice::<Value>(&entry.data) else { return 1 };
        match entry.kind.as_str() {
            RUN_STARTED => 4,
            RUN_FINISHED => 2,
            STEP => {
                let updates = data.get("updates").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
                updates
                    .iter()
                    .enumerate()
                    .map(|(n, item)| {
                        let Some(Value::Object(update)) = item.get("update") else { return 2 };
                        let messages: usize = update
                            .iter()
                            .filter(|(field, _)| self.vocabulary.reducer(field) == "messages")
                            .filter_map(|(_, value)| value.as_array())
                            .flat_map(|items| items.iter().enumerate())
                            .filter_map(|(i, m)| message_item(m, &format!("{}-{n}-{i}", entry.id)))
                            .map(|m| m.events.len())
                            .sum();
                        2 + messages + usize::from(self.has_delta(update))
                    })
                    .sum()
            }
            _ => 1,
        }
    }

    /// The AG-UI events of log entry `entry`.
    pub(crate) fn entry(&mut self, cx: Cx<'_>, entry: &StoredEvent) -> Mapped {
        let mut out = Mapped::default();
        let data: Value = match serde_json::from_slice(&entry.data) {
            Ok(data) => data,
            Err(e) => {
                let value = json!({ "unreadable": format!("the log entry's data is not JSON: {e}") });
                out.slots.push(Some(custom(&format!("agentflow.{}", entry.kind), value)));
                self.previous = Some(Previous { kind: entry.kind.clone(), run: entry.id.to_string(), waits: None });
                return out;
            }
        };
        let run = run_of(&data, entry.id);
        let mut waits = None;
        match entry.kind.as_str() {
            RUN_STARTED => self.started(cx, &run, &data, &mut out),
            STEP => self.step(cx, entry, &data, &mut out),
            PARKED => {
                let mut value = data;
                self.vocabulary.mask_interrupt(&mut value);
                out.slots.push(Some(custom(INTERRUPT, value.clone())));
                waits = Some(value);
            }
            RUN_FINISHED => self.finished(cx, entry, &run, &data, &mut out),
            other => {
                let mut value = data;
                self.vocabulary.mask_other(&mut value);
                out.slots.push(Some(custom(&format!("agentflow.{other}"), value)));
            }
        }
        self.previous = Some(Previous { kind: entry.kind.clone(), run, waits });
        out
    }

    /// `run.started`: the run before it closed if it never finished, the run started, and the
    /// state and messages it starts from.
    fn started(&mut self, cx: Cx<'_>, run: &str, data: &Value, out: &mut Mapped) {
        let stopped = self.previous.as_ref().filter(|p| p.kind != RUN_FINISHED).map(|p| abandoned(&p.run, run));
        if stopped.is_none()
            && let Some(open) = self.open.take()
        {
            // The log no longer says how the run the client holds went on.
            out.before.push(lost(&open));
        }
        out.slots.push(stopped);
        out.slots.push(Some(self.vocabulary.run_started(run)));
        self.open = Some(run.to_string());
        let (state, messages) = match data.get("checkpoint").and_then(Value::as_u64) {
            Some(seq) => self.snapshot_events(cx, Some(seq), &mut out.shows_personal),
            // Written before run starts named their checkpoint.
            None => (None, None),
        };
        out.snapshots = state.is_some() || messages.is_some();
        out.slots.push(state);
        out.slots.push(messages);
    }

    /// A super-step: each node's update as a step of its own.
    fn step(&mut self, cx: Cx<'_>, entry: &StoredEvent, data: &Value, out: &mut Mapped) {
        let checkpoint = data.get("checkpoint").and_then(Value::as_u64);
        let updates = data.get("updates").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        // Whether a messages snapshot at the step's checkpoint was sent: the client then holds
        // the step's messages.
        let mut resent = false;
        for (n, item) in updates.iter().enumerate() {
            let node = item.get("node").and_then(Value::as_str).unwrap_or("?");
            out.slots.push(Some(json!({ "type": "STEP_STARTED", "stepName": node })));
            let raw = item.get("update").cloned().unwrap_or(Value::Null);
            let mut masked = raw.clone();
            out.shows_personal |= self.vocabulary.mask(&mut masked);
            if let Value::Object(fields) = &raw {
                for (field, value) in fields {
                    if self.vocabulary.reducer(field) != "messages" {
                        continue;
                    }
                    let Value::Array(items) = value else { continue };
                    let hidden = masked.get(field) != Some(value);
                    for (i, message) in items.iter().enumerate() {
                        let Some(message) = message_item(message, &format!("{}-{n}-{i}", entry.id)) else { continue };
                        let places = message.events.len();
                        let verdict = if hidden || resent { Verdict::Repeat } else { self.known.verdict(&message) };
                        match verdict {
                            Verdict::New => {
                                self.known.hold(&message);
                                out.slots.extend(message.events.into_iter().map(Some));
                            }
                            Verdict::Repeat => out.slots.extend(std::iter::repeat_n(None, places)),
                            Verdict::Replaced if places == 0 => self.known.hold(&message),
                            Verdict::Replaced => {
                                let (_, snapshot) = self.snapshot_events(cx, checkpoint, &mut out.shows_personal);
                                match snapshot {
                                    Some(snapshot) => {
                                        resent = true;
                                        out.snapshots = true;
                                        out.slots.push(Some(snapshot));
                                    }
                                    None => {
                                        self.known.hold(&message);
                                        out.slots.push(None);
                                    }
                                }
                                out.slots.extend(std::iter::repeat_n(None, places - 1));
                            }
                        }
                    }
                }
            }
            // Whether the update has a delta is the stored update's: masking keeps its place.
            if let (Value::Object(stored), Value::Object(shown)) = (&raw, &masked)
                && self.has_delta(stored)
            {
                out.slots.push(Some(json!({ "type": "STATE_DELTA", "delta": self.vocabulary.patch(shown) })));
            }
            out.slots.push(Some(json!({ "type": "STEP_FINISHED", "stepName": node })));
        }
    }

    /// Whether an update's `STATE_DELTA` has an operation.
    fn has_delta(&self, update: &Map<String, Value>) -> bool {
        update.iter().any(|(field, value)| match self.vocabulary.reducer(field) {
            "overwrite" => true,
            "append" => !matches!(value, Value::Array(items) if items.is_empty()),
            _ => false,
        })
    }

    /// `run.finished`: the state at its checkpoint when it is the log's newest entry (a later
    /// run's start shows the state again), and how the run ended.
    fn finished(&mut self, cx: Cx<'_>, entry: &StoredEvent, run: &str, data: &Value, out: &mut Mapped) {
        let state = if cx.newest == Some(entry.id) {
            let at = data.get("checkpoint").and_then(Value::as_u64);
            self.snapshots.at(cx.store, self.vocabulary.thread(), at).map(|state| {
                let mut state = (*state).clone();
                out.shows_personal |= self.vocabulary.mask(&mut state);
                json!({ "type": "STATE_SNAPSHOT", "snapshot": state })
            })
        } else {
            None
        };
        out.snapshots = state.is_some();
        out.slots.push(state);
        let status = data.get("status").and_then(Value::as_str).unwrap_or("finished");
        let detail = data.get("detail").and_then(Value::as_str).unwrap_or("");
        let waits = self.previous.as_ref().filter(|p| p.kind == PARKED && p.run == run).and_then(|p| p.waits.as_ref());
        out.slots.push(Some(self.vocabulary.run_finished(run, status, detail, waits)));
        self.open = None;
    }

    /// The `STATE_SNAPSHOT` and `MESSAGES_SNAPSHOT` of the state at checkpoint `at` (`None`:
    /// the latest), masked for the reader; each `None` when it cannot be shown (the state
    /// cannot be read, the state has no messages field, or it is masked). The client holds the
    /// messages sent from then on.
    fn snapshot_events(&mut self, cx: Cx<'_>, at: Option<u64>, shows: &mut bool) -> (Option<Value>, Option<Value>) {
        let Some(stored) = self.snapshots.at(cx.store, self.vocabulary.thread(), at) else { return (None, None) };
        let mut state = (*stored).clone();
        *shows |= self.vocabulary.mask(&mut state);
        let mut held: Vec<Value> = Vec::new();
        let mut any = false;
        let mut all_shown = true;
        for field in self.vocabulary.message_fields() {
            match (stored.get(field), state.get(field)) {
                (Some(Value::Array(items)), Some(Value::Array(_))) => {
                    any = true;
                    held.extend(items.iter().cloned());
                }
                (Some(_), _) => all_shown = false,
                (None, _) => {}
            }
        }
        let messages = (any && all_shown).then(|| {
            self.known.reset(&held);
            let list: Vec<Value> =
                held.iter().enumerate().filter_map(|(i, m)| ag_ui_message(m, &format!("snapshot-{i}"))).collect();
            json!({ "type": "MESSAGES_SNAPSHOT", "messages": list })
        });
        (Some(json!({ "type": "STATE_SNAPSHOT", "snapshot": state })), messages)
    }
}

/// The run an entry's data names, else the entry's id.
fn run_of(data: &Value, id: EventId) -> String {
    data.get("run").and_then(Value::as_str).map_or_else(|| id.to_string(), str::to_string)
}
