//! The event log: each step commit's events are one commit of its thread's log, numbered
//! without a gap; a refused commit writes none; a reader pages through it after an id; the
//! oldest commits go past the kept bound; a purge empties it; and the store's wakes are told.

use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::conformance::fixtures::{NOW, root, step, thread};
use crate::{
    CommitError, EventId, EventPage, IdempotencyKey, NewAuditEntry, NewEvent, NewRun, StepCommit, Store, StoredEvent,
};

/// An event of `kind` whose JSON document holds `n`.
fn event(kind: &str, n: u64) -> NewEvent {
    NewEvent::new(kind, json!({ "n": n }).to_string().into_bytes())
}

/// A commit of `id`'s record made at `now`, carrying `events`.
fn logged(id: &str, now: u64, events: Vec<NewEvent>) -> StepCommit {
    let mut c = StepCommit::new(thread(id)).with_events(events);
    c.now = now;
    c
}

/// The ids of a page's events, as (seq, idx).
fn ids(page: &EventPage) -> Vec<(u64, u32)> {
    page.events.iter().map(|e| (e.id.seq, e.id.idx)).collect()
}

/// The whole log of `id`.
fn whole(store: &dyn Store, id: &str) -> EventPage {
    store.read_events(id, None, usize::MAX).unwrap()
}

/// Commits `c` through [`Store::commit_step_then`] and waits for its answer.
fn commit_then(store: &dyn Store, c: StepCommit) -> Result<(), CommitError> {
    let (tx, rx) = channel();
    store.commit_step_then(c, Box::new(move |answer| drop(tx.send(answer.map(drop)))));
    rx.recv_timeout(Duration::from_secs(60)).expect("commit_step_then answers")
}

/// Each commit with events is the next seq of its thread's log (from 1), its events numbered
/// from 0 in order, stamped with the commit's `now`; a commit without events takes no seq, and
/// each thread has its own numbering. Every way to commit writes them: `commit_step`,
/// `commit_step_then`, eventual commits, with or without a checkpoint.
pub fn event_log_numbers_each_commit(store: &dyn Store) {
    assert_eq!(store.read_events("t", None, 10).unwrap(), EventPage::default(), "no log yet");
    store.commit_step(logged("t", NOW + 1, vec![event("run.started", 0), event("step", 1)])).unwrap();
    store.commit_step(StepCommit::new(thread("t")).with_checkpoint(root("t", 0, b"s"))).unwrap();
    let eventual = logged("t", NOW + 2, vec![event("step", 2)])
        .with_checkpoint(step("t", 1, 0, &[b"a"]))
        .with_durability(crate::Durability::Eventual);
    store.commit_step(eventual).unwrap();
    store.commit_step(logged("u", NOW + 3, vec![event("run.started", 9)])).unwrap();
    let three = vec![event("step", 3), event("interrupt", 4), event("run.finished", 5)];
    commit_then(store, logged("t", NOW + 4, three)).unwrap();
    store.flush().unwrap();

    let page = whole(store, "t");
    assert_eq!(ids(&page), [(1, 0), (1, 1), (2, 0), (3, 0), (3, 1), (3, 2)]);
    assert_eq!((page.oldest, page.newest), (Some(EventId::new(1, 0)), Some(EventId::new(3, 2))));
    let want = [
        ("run.started", 0, NOW + 1),
        ("step", 1, NOW + 1),
        ("step", 2, NOW + 2),
        ("step", 3, NOW + 4),
        ("interrupt", 4, NOW + 4),
        ("run.finished", 5, NOW + 4),
    ];
    for (e, (kind, n, at)) in page.events.iter().zip(want) {
        assert_eq!((e.kind.as_str(), e.at), (kind, at), "{e:?}");
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&e.data).unwrap(), json!({ "n": n }));
    }
    let u = whole(store, "u");
    assert_eq!(u.events, [StoredEvent::new(EventId::new(1, 0), "run.started", event("x", 9).data, NOW + 3)]);
    assert_eq!(store.read_events("t/none", None, 10).unwrap(), EventPage::default(), "another id, no log");
}

/// A commit the store refuses (a lost lease, a seq that does not increase, a bad event, through
/// either way to commit) writes none of its events and takes no seq: the next commit's events
/// follow the last ones written without a gap.
pub fn event_log_refused_commit_writes_none(store: &dyn Store) {
    let first = logged("t", NOW, vec![event("run.started", 0)]).with_checkpoint(root("t", 0, b"s"));
    store.commit_step(first).unwrap();
    let fenced = logged("t", NOW, vec![event("lost", 1)]).fenced_by("nobody", NOW);
    assert!(matches!(store.commit_step(fenced.clone()), Err(CommitError::LeaseLost { .. })));
    assert!(matches!(commit_then(store, fenced), Err(CommitError::LeaseLost { .. })));
    let stale = logged("t", NOW, vec![event("stale", 2)]).with_checkpoint(root("t", 0, b"s"));
    assert!(matches!(store.commit_step(stale), Err(CommitError::SeqNotIncreasing { .. })));
    let bad = logged("t", NOW, vec![event("fine", 3), NewEvent::new("bad\0kind", b"{}".to_vec())]);
    let err = store.commit_step(bad).unwrap_err();
    assert!(matches!(&err, CommitError::Invalid { reason, .. } if reason.contains("NUL")), "{err}");
    assert_eq!(ids(&whole(store, "t")), [(1, 0)], "refused commits wrote nothing");

    store.acquire_lease("t", "w", 60_000, NOW).unwrap();
    let held =
        logged("t", NOW + 1, vec![event("step", 4)]).fenced_by("w", NOW + 1).with_checkpoint(step("t", 1, 0, &[b"a"]));
    store.commit_step(held).unwrap();
    let page = whole(store, "t");
    assert_eq!(ids(&page), [(1, 0), (2, 0)]);
    assert_eq!(page.events[1].kind, "step");
}

/// A reader pages through the log after an id: `after` excludes that id, `limit` bounds the
/// page, and every page tells the oldest and newest events the log keeps, also an empty one.
pub fn event_log_reads_after_an_id(store: &dyn Store) {
    store.commit_step(logged("t", NOW, vec![event("a", 0), event("a", 1)])).unwrap();
    store.commit_step(logged("t", NOW + 1, vec![event("b", 2)])).unwrap();
    store.commit_step(logged("t", NOW + 2, vec![event("c", 3), event("c", 4), event("c", 5)])).unwrap();
    let (oldest, newest) = (Some(EventId::new(1, 0)), Some(EventId::new(3, 2)));
    let read = |after: Option<(u64, u32)>, limit: usize| {
        let page = store.read_events("t", after.map(|(s, i)| EventId::new(s, i)), limit).unwrap();
        assert_eq!((page.oldest, page.newest), (oldest, newest), "after {after:?}, limit {limit}");
        ids(&page)
    };
    assert_eq!(read(None, 2), [(1, 0), (1, 1)]);
    assert_eq!(read(Some((1, 1)), 2), [(2, 0), (3, 0)]);
    assert_eq!(read(Some((2, 0)), 100), [(3, 0), (3, 1), (3, 2)]);
    assert_eq!(read(Some((1, 0)), 1), [(1, 1)]);
    assert_eq!(read(Some((1, 7)), 1), [(2, 0)], "an id the log never had");
    assert_eq!(read(Some((0, 0)), 1), [(1, 0)]);
    assert!(read(Some((3, 2)), 10).is_empty(), "nothing after the newest");
    assert!(read(Some((9, 0)), 10).is_empty());
    assert!(read(Some((u64::MAX, u32::MAX)), 10).is_empty());
    assert!(read(Some((3, u32::MAX)), 10).is_empty());
    assert!(read(None, 0).is_empty(), "a limit of 0 reads no event, but the ends");
    // Paging by two reads the whole log, in order.
    let (mut paged, mut after) = (Vec::new(), None);
    loop {
        let got = read(after, 2);
        let Some(&last) = got.last() else { break };
        paged.extend(got);
        after = Some(last);
    }
    assert_eq!(paged, read(None, 100));
}

/// A thread's log keeps its newest `keep` commits: a commit past them removes the oldest in
/// the same transaction; a reader that asks for events after an id the log no longer keeps
/// gets the oldest kept (and tells the gap by [`EventPage::oldest`]); the seqs go on.
///
/// Not in [`CASES`](crate::conformance::CASES): it needs a store whose log keeps `keep`
/// commits ([`EVENT_LOG_KEEP_COMMITS`](crate::EVENT_LOG_KEEP_COMMITS) unless it was built
/// with a smaller bound).
pub fn event_log_keeps_the_newest_commits(store: &dyn Store, keep: u64) {
    for seq in 1..=keep + 2 {
        let c = logged("t", NOW + seq, vec![event("step", seq), event("step", seq)]);
        store.commit_step(c.with_durability(crate::Durability::Eventual)).unwrap();
        let page = store.read_events("t", None, 1).unwrap();
        let first = seq.saturating_sub(keep) + 1;
        assert_eq!(page.oldest, Some(EventId::new(first, 0)), "after commit {seq}");
        assert_eq!(page.newest, Some(EventId::new(seq, 1)), "after commit {seq}");
    }
    store.flush().unwrap();
    let page = whole(store, "t");
    let want: Vec<(u64, u32)> = (3..=keep + 2).flat_map(|seq| [(seq, 0), (seq, 1)]).collect();
    assert_eq!(ids(&page), want);
    let gap = store.read_events("t", Some(EventId::new(1, 1)), 1).unwrap();
    assert_eq!(ids(&gap), [(3, 0)]);
    assert!(gap.oldest > Some(EventId::new(1, 1)), "the page tells the reader it missed events");
    store.commit_step(logged("t", NOW, vec![event("step", 0)])).unwrap();
    let page = store.read_events("t", Some(EventId::new(keep + 2, 1)), 10).unwrap();
    assert_eq!((ids(&page), page.oldest), (vec![(keep + 3, 0)], Some(EventId::new(4, 0))));
    // Another thread's log is its own.
    store.commit_step(logged("u", NOW, vec![event("step", 0)])).unwrap();
    assert_eq!(ids(&whole(store, "u")), [(1, 0)]);
}

/// A purge removes the logs of the thread and of its subgraph children, and the idempotency
/// keys of their starts; a commit made after goes on after the last seq the log had.
pub fn event_log_purge_removes_it(store: &dyn Store) {
    let child = || thread("p/c").child_of("p");
    store.commit_step(logged("p", NOW, vec![event("run.started", 0)]).with_checkpoint(root("p", 0, b"s"))).unwrap();
    store.commit_step(logged("p", NOW, vec![event("step", 1), event("step", 2)])).unwrap();
    store.commit_step(StepCommit::new(child()).with_events(vec![event("step", 3)])).unwrap();
    let key = || IdempotencyKey::new("alice", "start-1", "digest");
    store.enqueue_run(NewRun::new("p", "g", None, "alice", NOW).with_idempotency(key())).unwrap();
    assert!(matches!(
        store.enqueue_run(NewRun::new("other", "g", None, "alice", NOW).with_idempotency(key())),
        Err(crate::QueueError::KeyUsed { .. })
    ));

    let report = store.purge_thread("p", NewAuditEntry::new(NOW + 5, "dpo", crate::PURGED_KIND, json!({}))).unwrap();
    assert_eq!(report.events, 4, "{report:?}");
    assert_eq!(store.read_events("p", None, 10).unwrap(), EventPage::default());
    assert_eq!(store.read_events("p/c", None, 10).unwrap(), EventPage::default());
    // The key went with the thread: it starts another run now.
    store.enqueue_run(NewRun::new("other", "g", None, "alice", NOW + 6).with_idempotency(key())).unwrap();

    store.commit_step(logged("p", NOW + 7, vec![event("after", 4)])).unwrap();
    assert_eq!(ids(&whole(store, "p")), [(3, 0)], "the seqs do not start again");
    // Purging again removes what came since.
    let again = store.purge_thread("p", NewAuditEntry::new(NOW + 8, "dpo", crate::PURGED_KIND, json!({}))).unwrap();
    assert_eq!(again.events, 1);
}

/// The next thread a wake reports, waiting up to a minute (a store may report from another
/// thread, or another process's commit).
fn next_woken(woken: &Receiver<String>) -> String {
    woken.recv_timeout(Duration::from_secs(60)).expect("the store calls the wake")
}

/// A store that says it wakes readers ([`Store::on_events`] answers `true`) calls each wake
/// with the thread after every commit that added events, whichever way it was made, and never
/// for a commit without events or a refused one.
pub fn event_log_wakes_readers(store: &dyn Store) {
    let (tx, woken) = channel::<String>();
    let tx = Mutex::new(tx);
    let wake: crate::EventWake = Arc::new(move |thread: &str| {
        let _ = tx.lock().unwrap_or_else(std::sync::PoisonError::into_inner).send(thread.to_string());
    });
    if !store.on_events(wake) {
        return;
    }
    store.commit_step(StepCommit::new(thread("quiet"))).unwrap();
    store.commit_step(logged("w1", NOW, vec![event("step", 1)])).unwrap();
    assert_eq!(next_woken(&woken), "w1", "told of the commit with events, not of the one without");
    let refused = logged("lost", NOW, vec![event("step", 2)]).fenced_by("nobody", NOW);
    assert!(store.commit_step(refused).is_err());
    let eventual = logged("w2", NOW, vec![event("step", 3)]).with_durability(crate::Durability::Eventual);
    commit_then(store, eventual).unwrap();
    assert_eq!(next_woken(&woken), "w2", "told of the eventual commit, not of the refused one");
    // A second wake is told too.
    let (tx2, woken2) = channel::<String>();
    let tx2 = Mutex::new(tx2);
    assert!(store.on_events(Arc::new(move |thread: &str| {
        let _ = tx2.lock().unwrap_or_else(std::sync::PoisonError::into_inner).send(thread.to_string());
    })));
    store.commit_step(logged("w3", NOW, vec![event("step", 4)])).unwrap();
    assert_eq!((next_woken(&woken), next_woken(&woken2)), ("w3".to_string(), "w3".to_string()));
}
