//! A reader of a stored log: every event with its id, a reader coming back within an entry or
//! after one, where a reader starts, the gap notice on any page, a position past the log's end,
//! bounded pages that read each state once, and the audit of a personal-data read.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentflow_store::{EVENT_LOG_KEEP_COMMITS, EventId, NewEvent, StepCommit, Store, ThreadRecord};
use serde_json::json;

use super::{append_log, ids, masked_reader, read_all, reader, store_with_log};
use crate::access::personal::{MASK, PERSONAL_DATA_READ};
use crate::access::{Access, Actor, AllowAll};
use crate::server::stream::ag_ui::GAP;
use crate::server::stream::cursor::Cursor;
use crate::server::stream::error::StreamError;
use crate::server::stream::reader::{Item, LogReader};

fn types(items: &[Item]) -> Vec<&str> {
    items.iter().map(|i| i.event["type"].as_str().unwrap()).collect()
}

#[test]
fn a_reader_gets_every_event_with_its_id_and_comes_back_within_an_entry() {
    let store = store_with_log(3);
    let bob = masked_reader();
    let mut all = reader(&store, &bob, None);
    let items = read_all(&mut all, 1);
    assert_eq!(
        ids(&items),
        ["1-0-1", "1-1-0", "1-1-1", "1-1-2", "2-0-0", "2-0-1", "2-0-2", "3-0-0", "3-0-1", "3-0-2", "3-1-1"],
        "a run's start keeps the place of the error that closes a run before it that never finished, and of \
         its snapshots (the log names no checkpoint)"
    );
    assert_eq!(items[0].event["type"], "RUN_STARTED");
    assert_eq!(items[10].kind, "run.finished");
    assert_eq!(items[2].event["delta"][0], json!({ "op": "add", "path": "/email", "value": MASK }));
    assert_eq!(all.cursor(), Some(Cursor::after(EventId::new(3, 1))));
    assert!(store.list_audit("t-1").unwrap().is_empty(), "nothing personal was shown");

    // Back after event 1 of entry 2-0: in step first (the run, without an id), the entry's
    // events it got again without ids, then the rest with theirs.
    let mut back = reader(&store, &bob, Some("2-0-1".parse().unwrap()));
    let again = read_all(&mut back, 10);
    assert_eq!(ids(&again)[..3], ["-", "-", "-"]);
    assert_eq!(types(&again)[..3], ["RUN_STARTED", "STEP_STARTED", "STATE_DELTA"]);
    assert_eq!((again[0].kind.as_str(), again[0].event["runId"].as_str()), ("sync", Some("r-1")));
    assert_eq!(again[1].event, items[4].event);
    assert_eq!(again[3..], items[6..]);
    // Back after a whole entry: in step, then the entries after it.
    let mut after = reader(&store, &bob, Some("3-0".parse().unwrap()));
    let rest = read_all(&mut after, 10);
    assert_eq!(types(&rest), ["RUN_STARTED", "RUN_FINISHED"]);
    assert_eq!(rest[1..], items[10..]);
    // Caught up: nothing more, and caught up still.
    let page = after.next_page(10).unwrap();
    assert!(page.items.is_empty() && page.caught_up);
    // Past the last event of an entry, or the entry: nothing.
    let mut past = reader(&store, &bob, Some("3-1-1".parse().unwrap()));
    assert!(read_all(&mut past, 10).is_empty());
    let mut done = reader(&store, &bob, Some("3-1".parse().unwrap()));
    assert!(read_all(&mut done, 10).is_empty());
    // At the last event of an entry in the middle: as after the entry.
    let mut at_end = reader(&store, &bob, Some("2-0-2".parse().unwrap()));
    let mut after_entry = reader(&store, &bob, Some("2-0".parse().unwrap()));
    assert_eq!(read_all(&mut at_end, 10), read_all(&mut after_entry, 10));
    // Within a run's start: nothing to bring in step, its own events start the run.
    let mut start = reader(&store, &bob, Some("1-0-1".parse().unwrap()));
    let from_start = read_all(&mut start, 10);
    assert_eq!(ids(&from_start)[..2], ["-", "1-1-0"]);
    assert_eq!(from_start[0].event, items[0].event);
}

#[test]
fn a_position_past_the_logs_newest_entry_is_refused() {
    let store = store_with_log(3);
    let bob = masked_reader();
    for past in ["4-0", "3-2-0", "9-9-9"] {
        let mut late = reader(&store, &bob, Some(past.parse().unwrap()));
        match late.next_page(10) {
            Err(e @ StreamError::PastNewest { .. }) => {
                let text = e.to_string();
                assert!(text.contains(past) && text.contains("its newest entry is 3-1"), "{text}");
            }
            other => panic!("{past}: {other:?}"),
        }
    }
    // At the newest entry, even past its events: nothing more yet, not refused.
    let mut last = reader(&store, &bob, Some("3-1-7".parse().unwrap()));
    assert!(last.next_page(10).unwrap().caught_up);
    // A thread whose log is empty has no position at all.
    store.commit_step(StepCommit::new(ThreadRecord::new("t-1", "alice", "fp-1", 1, 9_999))).unwrap();
    let empty: Arc<dyn Store> = Arc::new(agentflow_store::RedbStore::in_memory().unwrap());
    empty.commit_step(StepCommit::new(ThreadRecord::new("t-1", "alice", "fp-1", 1, 1))).unwrap();
    let mut none = reader(&empty, &bob, Some("1-0".parse().unwrap()));
    assert!(matches!(none.next_page(1), Err(StreamError::PastNewest { newest: None, .. })));
    assert!(reader(&empty, &bob, None).next_page(1).unwrap().caught_up);
}

#[test]
fn a_reader_shown_personal_data_is_recorded_once() {
    let store = store_with_log(3);
    let mut alice = reader(&store, &Access::new(AllowAll, Actor::new("alice", ["ops"])), None);
    let items = read_all(&mut alice, 1);
    assert_eq!(items[2].event["delta"][0]["value"], "ada@example.com");
    let reads: Vec<_> = store.list_audit("t-1").unwrap().into_iter().filter(|e| e.kind == PERSONAL_DATA_READ).collect();
    assert_eq!(reads.len(), 1, "one entry for the reader, however many pages");
    assert_eq!(reads[0].actor, "alice");
    assert_eq!(reads[0].detail["surface"], "test");
    // The reader's permission may change while it reads: from then on, masked.
    let mut changing = reader(&store, &Access::new(AllowAll, Actor::new("alice", ["ops"])), None);
    changing.next_page(2).unwrap();
    changing.set_access(&masked_reader());
    let rest = read_all(&mut changing, 10);
    assert!(rest.iter().all(|i| !i.event.to_string().contains("ada@")), "{rest:?}");
}

#[test]
fn a_position_older_than_the_log_keeps_gets_the_gap_on_whichever_page_it_falls() {
    let store = store_with_log(EVENT_LOG_KEEP_COMMITS);
    let bob = masked_reader();
    // A reader that read one entry, then fell behind while retention removed commits 1 to 20.
    let mut slow = reader(&store, &bob, None);
    let first = slow.next_page(1).unwrap();
    assert_eq!(ids(&first.items), ["1-0-1"]);
    append_log(&store, EVENT_LOG_KEEP_COMMITS + 1..=EVENT_LOG_KEEP_COMMITS + 20, EVENT_LOG_KEEP_COMMITS + 20);
    let page = store.read_events("t-1", None, 1).unwrap();
    assert_eq!(page.oldest, Some(EventId::new(21, 0)), "the twenty oldest commits were removed");
    let mut items = Vec::new();
    while !items.iter().any(|i: &Item| i.kind == "gap") {
        let page = slow.next_page(1).unwrap();
        assert!(!page.caught_up, "the gap was never told");
        items.extend(page.items);
    }
    let told = items.iter().position(|i| i.kind == "gap").unwrap();
    let from = items[told - 1].entry.expect("an entry before the gap").to_string();
    assert_eq!(items[told].event, json!({ "type": "CUSTOM", "name": GAP, "value": { "from": from, "to": "21-0" } }));
    // The run its client holds goes on: no new start (the log names no checkpoint: no state).
    assert_eq!(ids(&items[told + 1..])[0], "21-0-0");

    // A reader whose position is gone: its client holds nothing, so the run starts first, the
    // gap after it.
    let mut behind = reader(&store, &bob, Some("1-0-2".parse().unwrap()));
    let page = behind.next_page(1).unwrap();
    assert_eq!(types(&page.items)[..3], ["RUN_STARTED", "CUSTOM", "STEP_STARTED"]);
    assert_eq!(ids(&page.items)[..3], ["-", "-", "21-0-0"]);
    assert_eq!(page.items[1].event["value"], json!({ "from": "1-0-2", "to": "21-0" }));
    // A reader from the oldest entry kept, or within the kept log: no gap, in step all the same.
    let mut fresh = reader(&store, &bob, None);
    let page = fresh.next_page(1).unwrap();
    assert_eq!(types(&page.items)[..2], ["RUN_STARTED", "STEP_STARTED"]);
    assert_eq!(ids(&page.items)[..2], ["-", "21-0-0"]);
    let mut kept = reader(&store, &bob, Some("21-0".parse().unwrap()));
    assert_eq!(ids(&kept.next_page(1).unwrap().items)[..2], ["-", "22-0-0"]);
}

/// A store of `runs` runs of thread `t-1`, each started from a checkpoint and finished at the
/// next, each entry's data about `pad` bytes.
fn runs_log(runs: u64, pad: usize) -> Arc<dyn Store> {
    let store: Arc<dyn Store> = Arc::new(agentflow_store::RedbStore::in_memory().unwrap());
    store.put_graph_description("fp-1", &super::description().to_string()).unwrap();
    let padding = "x".repeat(pad);
    for n in 0..runs {
        let run = format!("r-{n}");
        let events = vec![
            NewEvent::new("run.started", serde_json::to_vec(&json!({ "run": run, "checkpoint": n })).unwrap()),
            NewEvent::new(
                "step",
                serde_json::to_vec(&json!({ "run": run, "checkpoint": n + 1, "updates": [
                    { "node": "agent", "update": { "count": 1, "log": [padding] } },
                ] }))
                .unwrap(),
            ),
            NewEvent::new(
                "run.finished",
                serde_json::to_vec(&json!({ "run": run, "status": "completed", "checkpoint": n + 1 })).unwrap(),
            ),
        ];
        let record = ThreadRecord::new("t-1", "alice", "fp-1", 1, 1_000 + n);
        store.commit_step(StepCommit::new(record).with_events(events)).unwrap();
    }
    store
}

#[test]
fn pages_are_bounded_and_each_state_is_read_once() {
    let store = runs_log(5, 0);
    let record = store.thread("t-1").unwrap().unwrap();
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&reads);
    let states: crate::server::stream::snapshot::SnapshotFn = Box::new(move |_: &dyn Store, _: &str, seq: u64| {
        counted.fetch_add(1, Ordering::Relaxed);
        Some(json!({ "count": seq }))
    });
    let description = super::description();
    let mut replay = LogReader::with_description(
        Arc::clone(&store),
        &masked_reader(),
        &record,
        None,
        "test",
        Some(&description),
        states,
    );
    let mut pages = Vec::new();
    loop {
        let page = replay.next_page(256).unwrap();
        let done = page.caught_up;
        pages.push(page.items);
        if done {
            break;
        }
    }
    // Each run's start shows the state it starts from: a page ends after it.
    assert!(pages.len() >= 5, "{}", pages.len());
    for page in &pages[..pages.len() - 1] {
        let snapshots = page.iter().filter(|i| i.event["type"] == "STATE_SNAPSHOT").count();
        assert_eq!(snapshots, 1, "{:?}", types(page));
    }
    let all: Vec<Item> = pages.into_iter().flatten().collect();
    // Only the newest run's end shows the state: the next run's start shows it for the others.
    let ends: Vec<Option<&str>> =
        all.iter().filter(|i| i.kind == "run.finished").map(|i| i.event["type"].as_str()).collect();
    assert_eq!(
        ends,
        [
            Some("RUN_FINISHED"),
            Some("RUN_FINISHED"),
            Some("RUN_FINISHED"),
            Some("RUN_FINISHED"),
            Some("STATE_SNAPSHOT"),
            Some("RUN_FINISHED")
        ]
    );
    assert_eq!(all.iter().rev().nth(1).unwrap().event["snapshot"], json!({ "count": 5 }));
    assert_eq!(reads.load(Ordering::Relaxed), 6, "each run's start, and the newest end");
    // A run that starts where the reader saw the last one end: that state is read once.
    let next = vec![NewEvent::new("run.started", br#"{"run":"r-5","checkpoint":5}"#.to_vec())];
    store.commit_step(StepCommit::new(ThreadRecord::new("t-1", "alice", "fp-1", 1, 2_000)).with_events(next)).unwrap();
    let page = replay.next_page(256).unwrap();
    assert_eq!(types(&page.items), ["RUN_STARTED", "STATE_SNAPSHOT"]);
    assert_eq!(reads.load(Ordering::Relaxed), 6);

    // Large entries: a page hands out about 1 MiB of them.
    let big = runs_log(6, 400 << 10);
    let mut large = reader(&big, &masked_reader(), None);
    let mut entries_per_page = Vec::new();
    loop {
        let page = large.next_page(256).unwrap();
        let mut entries: Vec<EventId> = page.items.iter().filter_map(|i| i.entry).collect();
        entries.dedup();
        entries_per_page.push(entries.len());
        if page.caught_up {
            break;
        }
    }
    // Each page stops once it holds a third large entry: at most 8 entries of 3 runs.
    assert!(entries_per_page.iter().all(|n| *n <= 8), "{entries_per_page:?}");
    assert!(entries_per_page.len() >= 3, "{entries_per_page:?}");
    assert_eq!(entries_per_page.iter().sum::<usize>(), 18);
}

#[test]
fn an_entry_that_cannot_be_read_is_passed_over_with_a_notice() {
    let dir = std::env::temp_dir().join(format!(
        "agentflow-stream-unreadable-{}-{}",
        std::process::id(),
        crate::server::test_file_number()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("runs.redb");
    {
        let store: Arc<dyn Store> = Arc::new(agentflow_store::RedbStore::open(&path).unwrap());
        store.put_graph_description("fp-1", &super::description().to_string()).unwrap();
        append_log(&store, 1..=4, 4);
    }
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(agentflow_store::tables::EVENTS)
            .unwrap()
            .insert(("t-1", 2_u64, 0_u32), b"\x01\xff\xff".as_slice())
            .unwrap();
        txn.commit().unwrap();
    }
    let store: Arc<dyn Store> = Arc::new(agentflow_store::RedbStore::open(&path).unwrap());
    assert!(store.read_events("t-1", None, 10).is_err(), "a page holding the entry does not read");
    let items = read_all(&mut reader(&store, &masked_reader(), None), 256);
    let notice = items.iter().find(|i| i.kind == "unreadable").expect("the notice");
    assert_eq!(notice.id.as_deref(), Some("2-0-0"));
    assert_eq!(
        (notice.event["type"].as_str(), notice.event["name"].as_str()),
        (Some("CUSTOM"), Some("agentflow.unreadable"))
    );
    assert_eq!(notice.event["value"]["id"], "2-0");
    assert!(notice.event["value"]["error"].as_str().is_some_and(|e| !e.is_empty()));
    // Every other entry is read, in order.
    let mut entries: Vec<String> = items.iter().filter_map(|i| i.entry.map(|e| e.to_string())).collect();
    entries.dedup();
    assert_eq!(entries, ["1-0", "1-1", "2-0", "3-0", "4-0", "4-1"]);
    // A reader coming back after the notice goes on after it.
    let mut back = reader(&store, &masked_reader(), Some("2-0-0".parse().unwrap()));
    let rest = read_all(&mut back, 256);
    assert!(rest.iter().all(|i| i.kind != "unreadable"), "{rest:?}");
    assert_eq!(rest.iter().find_map(|i| i.id.clone()).as_deref(), Some("3-0-0"));
    drop(store);
    std::fs::remove_dir_all(&dir).ok();
}
