//! A thread's trace context (the `traceparent` of its root span): the first one stored wins, a
//! write without one never clears it, a dump carries it and a purge clears it.

use serde_json::json;

use crate::conformance::fixtures::{root, step, thread};
use crate::{NewAuditEntry, StepCommit, Store, ThreadDump, ThreadStatus};

/// The trace contexts of the cases: what the runtime writes, `00-{trace}-{span}-{flags}`.
const FIRST: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const SECOND: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// A thread created without a trace context has none and gains the first one a commit brings;
/// from then on later commits, with none or another one, with or without a checkpoint, leave
/// it as it was while the rest of the record changes. [`Store::thread`],
/// [`Store::list_threads`] and [`Store::scan_threads`] answer it, a dump carries it and a
/// restore writes it (and keeps it). A purge clears it on the thread and on its subgraph
/// children, and the tombstone's dump has none.
pub fn thread_trace_first_one_wins(store: &dyn Store) {
    let trace_of = |id: &str| store.thread(id).unwrap().expect("thread").trace;
    // Created before the process had OpenTelemetry: no trace, and a commit without one adds none.
    store.commit_step(StepCommit::new(thread("t")).with_checkpoint(root("t", 0, b"s"))).unwrap();
    assert_eq!(trace_of("t"), None);
    store.commit_step(StepCommit::new(thread("t")).with_checkpoint(step("t", 1, 0, &[b"a"]))).unwrap();
    assert_eq!(trace_of("t"), None);

    // The first commit that brings one stores it.
    store
        .commit_step(StepCommit::new(thread("t").with_trace(FIRST)).with_checkpoint(step("t", 2, 1, &[b"b"])))
        .unwrap();
    assert_eq!(trace_of("t").as_deref(), Some(FIRST));
    // A commit without one (a process without OpenTelemetry) never clears it.
    let mut later = thread("t");
    later.detail = "waiting".into();
    later.status = ThreadStatus::Interrupted;
    store.commit_step(StepCommit::new(later).with_checkpoint(step("t", 3, 2, &[b"c"]))).unwrap();
    let stored = store.thread("t").unwrap().expect("thread");
    assert_eq!(
        (stored.trace.as_deref(), stored.detail.as_str(), stored.status),
        (Some(FIRST), "waiting", ThreadStatus::Interrupted)
    );
    // Another one, with a checkpoint and without (the record alone): the first stays.
    store
        .commit_step(StepCommit::new(thread("t").with_trace(SECOND)).with_checkpoint(step("t", 4, 3, &[b"d"])))
        .unwrap();
    assert_eq!(trace_of("t").as_deref(), Some(FIRST));
    let mut moved = thread("t").with_trace(SECOND);
    moved.detail = "moved on".into();
    store.commit_step(StepCommit::new(moved)).unwrap();
    let stored = store.thread("t").unwrap().expect("thread");
    assert_eq!((stored.trace.as_deref(), stored.detail.as_str()), (Some(FIRST), "moved on"));

    // A thread created with one keeps it; its subgraph child, created without, has none.
    store.commit_step(StepCommit::new(thread("n").with_trace(SECOND)).with_checkpoint(root("n", 0, b"n"))).unwrap();
    store.commit_step(StepCommit::new(thread("n"))).unwrap();
    store.commit_step(StepCommit::new(thread("n").with_trace(FIRST))).unwrap();
    assert_eq!(trace_of("n").as_deref(), Some(SECOND));
    store.commit_step(StepCommit::new(thread("n/c").child_of("n")).with_checkpoint(root("n/c", 0, b"c"))).unwrap();
    assert_eq!(trace_of("n/c"), None);

    let listed: Vec<(String, Option<String>)> =
        store.list_threads().unwrap().into_iter().map(|t| (t.id, t.trace)).collect();
    let expected = [
        ("n".to_string(), Some(SECOND.to_string())),
        ("n/c".to_string(), None),
        ("t".to_string(), Some(FIRST.to_string())),
    ];
    assert_eq!(listed, expected, "listed");
    let scanned: Vec<(String, Option<String>)> =
        store.scan_threads().unwrap().items.into_iter().map(|t| (t.id, t.trace)).collect();
    assert_eq!(scanned, expected, "scanned");

    // A dump carries it, and a restore writes it; the restored thread keeps it.
    let dump = store.dump_thread("t").unwrap().expect("dump");
    assert_eq!(dump.thread.trace.as_deref(), Some(FIRST));
    let mut restored = ThreadDump::new(thread("r").with_trace(SECOND));
    restored.checkpoints.push(root("r", 0, b"r"));
    store.restore_thread(restored).unwrap();
    assert_eq!(trace_of("r").as_deref(), Some(SECOND));
    store
        .commit_step(StepCommit::new(thread("r").with_trace(FIRST)).with_checkpoint(step("r", 1, 0, &[b"x"])))
        .unwrap();
    assert_eq!(trace_of("r").as_deref(), Some(SECOND));
    // A thread restored without one gains the first one a commit brings.
    let mut bare = ThreadDump::new(thread("b"));
    bare.checkpoints.push(root("b", 0, b"b"));
    store.restore_thread(bare).unwrap();
    assert_eq!(trace_of("b"), None);
    store
        .commit_step(StepCommit::new(thread("b").with_trace(FIRST)).with_checkpoint(step("b", 1, 0, &[b"y"])))
        .unwrap();
    assert_eq!(trace_of("b").as_deref(), Some(FIRST));

    // A purge clears it on the thread and its children; the others keep theirs.
    store.commit_step(StepCommit::new(thread("n/c").child_of("n").with_trace(FIRST))).unwrap();
    assert_eq!(trace_of("n/c").as_deref(), Some(FIRST), "a child that brings one stores it too");
    let entry = NewAuditEntry::new(crate::conformance::NOW + 10, "dpo", crate::PURGED_KIND, json!({}));
    store.purge_thread("n", entry).unwrap();
    for id in ["n", "n/c"] {
        let tombstone = store.thread(id).unwrap().expect("the record stays as a tombstone");
        assert_eq!((tombstone.status, tombstone.trace), (ThreadStatus::Purged, None), "{id}");
        assert_eq!(store.dump_thread(id).unwrap().expect("dump").thread.trace, None, "{id}");
    }
    assert_eq!(trace_of("t").as_deref(), Some(FIRST));
}
