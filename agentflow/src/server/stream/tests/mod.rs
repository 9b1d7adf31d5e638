//! The log's entries as AG-UI events, on hand-made entries and logs: each kind's mapping, a
//! reader's client kept in step (runs that never finished, messages it holds, where it starts),
//! masking, the events' ids, a reader coming back, the gap notice, a position past the log's
//! end, entries that cannot be read, bounded pages, the audit of a personal-data read, and the
//! registry and the count of open streams.

mod mapping;
mod messages;
mod reader;
mod registry;

use std::sync::Arc;

use agentflow_store::{EventId, NewEvent, RedbStore, StepCommit, Store, StoredEvent, ThreadRecord};
use serde_json::{Value, json};

use super::ag_ui::Vocabulary;
use super::cursor::Cursor;
use super::mapper::{Cx, Mapped, Mapper};
use super::reader::{Item, LogReader};
use super::snapshot::{SnapshotFn, Snapshots};
use crate::access::{Access, Actor, Operation, RoleAccess};

/// A graph description with a field of each reducer, a personal and a credential one.
pub(super) fn description() -> Value {
    json!({ "name": "chat", "state": { "fields": [
        { "name": "messages", "reducer": "messages", "type": "Vec<Message>" },
        { "name": "email", "reducer": "overwrite", "type": "String", "personal": true },
        { "name": "api_key", "reducer": "overwrite", "type": "String", "credential": true },
        { "name": "log", "reducer": "append", "type": "Vec<String>" },
        { "name": "count", "reducer": "add", "type": "u32" },
        { "name": "a/b~c", "reducer": "overwrite", "type": "u32" },
    ] } })
}

pub(super) fn entry(seq: u64, idx: u32, kind: &str, data: Value) -> StoredEvent {
    StoredEvent::new(EventId::new(seq, idx), kind, serde_json::to_vec(&data).unwrap(), 1_700_000_000_000 + seq)
}

/// The types of the events sent, `-` for a place whose event is not sent.
pub(super) fn types(mapped: &Mapped) -> Vec<&str> {
    mapped.slots.iter().map(|s| s.as_ref().map_or("-", |e| e["type"].as_str().unwrap())).collect()
}

pub(super) fn event(mapped: &Mapped, k: usize) -> &Value {
    mapped.slots[k].as_ref().unwrap_or_else(|| panic!("event {k} is not sent: {:?}", types(mapped)))
}

/// A mapping in the test description, for a reader who may see personal data or not, that
/// reads states with `states`.
pub(super) fn mapper(sees: bool, states: impl Fn(u64) -> Option<Value> + Send + 'static) -> Mapper {
    let read: SnapshotFn = Box::new(move |_: &dyn Store, _: &str, seq: u64| states(seq));
    Mapper::new(Vocabulary::new("t-1", Some(&description()), sees), Snapshots::new(read))
}

/// A store holding nothing, for the mappings that read no state from it.
pub(super) fn no_store() -> RedbStore {
    RedbStore::in_memory().unwrap()
}

pub(super) fn cx(store: &dyn Store, newest: Option<(u64, u32)>) -> Cx<'_> {
    Cx { store, newest: newest.map(|(s, i)| EventId::new(s, i)) }
}

/// A redb store holding thread `t-1` (of the test description's graph), with `commits` commits of
/// events: each a `step` entry of one update, the first also opened by a `run.started` and the
/// last also a `run.finished`.
pub(super) fn store_with_log(commits: u64) -> Arc<dyn Store> {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    store.put_graph_description("fp-1", &description().to_string()).unwrap();
    append_log(&store, 1..=commits, commits);
    store
}

/// Commits `commits` to thread `t-1` of `store` (see [`store_with_log`]); `last`: the one that
/// also ends the run.
pub(super) fn append_log(store: &Arc<dyn Store>, commits: std::ops::RangeInclusive<u64>, last: u64) {
    for n in commits {
        let step = json!({ "run": "r-1", "step": n, "checkpoint": n, "updates": [{ "node": "agent", "update": { "email": "ada@example.com", "log": [n] } }] });
        let mut events = Vec::new();
        if n == 1 {
            events.push(NewEvent::new("run.started", br#"{"run":"r-1","graph":"chat","resumed":false}"#.to_vec()));
        }
        events.push(NewEvent::new("step", serde_json::to_vec(&step).unwrap()));
        if n == last {
            events.push(NewEvent::new("run.finished", br#"{"run":"r-1","status":"completed","detail":""}"#.to_vec()));
        }
        let record = ThreadRecord::new("t-1", "alice", "fp-1", 1, 1_000 + n);
        store.commit_step(StepCommit::new(record).with_events(events)).unwrap();
    }
}

pub(super) fn reader(store: &Arc<dyn Store>, access: &Access, from: Option<Cursor>) -> LogReader {
    let record = store.thread("t-1").unwrap().unwrap();
    LogReader::new(Arc::clone(store), access, &record, from, "test").unwrap()
}

pub(super) fn read_all(reader: &mut LogReader, limit: usize) -> Vec<Item> {
    let mut items = Vec::new();
    loop {
        let page = reader.next_page(limit).unwrap();
        items.extend(page.items);
        if page.caught_up {
            return items;
        }
    }
}

/// The ids of `items`, `-` for an event without one.
pub(super) fn ids(items: &[Item]) -> Vec<&str> {
    items.iter().map(|i| i.id.as_deref().unwrap_or("-")).collect()
}

pub(super) fn masked_reader() -> Access {
    Access::new(RoleAccess::new().allow(Operation::ReadState, "viewer"), Actor::new("bob", ["viewer"]))
}
