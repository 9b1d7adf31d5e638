//! Idempotent starts: a run queued under an idempotency key refuses every other start with
//! that key until the key expires, naming the thread the first one started, and of concurrent
//! starts with one key exactly one queues.

use std::sync::Barrier;

use serde_json::json;

use crate::conformance::fixtures::NOW;
use crate::{IDEMPOTENCY_KEY_TTL_MS, IdempotencyKey, NewAuditEntry, NewRun, QueueError, Store};

/// A start of `thread` at `at` under `alice`'s key `key`, sent with request `request`.
fn start(thread: &str, at: u64, key: &str, request: &str) -> NewRun {
    NewRun::new(thread, "g", None, "alice", at).with_idempotency(IdempotencyKey::new("alice", key, request))
}

/// The threads in the queue.
fn queued(store: &dyn Store) -> Vec<String> {
    store.list_runs().unwrap().into_iter().map(|r| r.thread).collect()
}

/// Asserts `result` is [`QueueError::KeyUsed`] naming `key`, `thread` and `same_request`.
fn assert_used(result: Result<(), QueueError>, key: &str, thread: &str, same_request: bool) {
    match result {
        Err(QueueError::KeyUsed { key: k, thread: t, same_request: same }) => {
            assert_eq!((k.as_str(), t.as_str(), same), (key, thread, same_request));
        }
        other => panic!("expected the key `{key}` to be used for `{thread}`, got {other:?}"),
    }
}

/// A retry with the same key attaches to the first start (same request or not, told apart),
/// writing nothing, through both ways to enqueue; another caller's equal key is another key; a
/// refused start keeps no key; a key expires [`IDEMPOTENCY_KEY_TTL_MS`] after its start, and
/// the start that replaces it is kept in its place.
pub fn idempotency_key_attaches_a_retry(store: &dyn Store) {
    store.enqueue_run(start("t1", NOW, "k", "r1")).unwrap();
    assert_used(store.enqueue_run(start("t2", NOW + 1, "k", "r1")), "k", "t1", true);
    assert_used(store.enqueue_run(start("t2", NOW + 1, "k", "r2")), "k", "t1", false);
    let entry = || NewAuditEntry::new(NOW + 2, "alice", "run.submitted", json!({}));
    assert_used(store.enqueue_run_audited(start("t3", NOW + 2, "k", "r1"), entry()), "k", "t1", true);
    assert!(store.list_audit("t3").unwrap().is_empty(), "a refused start writes no audit entry");
    assert_eq!(queued(store), ["t1"]);

    let bobs = NewRun::new("t4", "g", None, "bob", NOW).with_idempotency(IdempotencyKey::new("bob", "k", "r1"));
    store.enqueue_run(bobs).unwrap();
    // A start refused for another reason keeps no key.
    let err = store.enqueue_run(start("t1", NOW + 3, "k2", "r")).unwrap_err();
    assert!(matches!(err, QueueError::AlreadyQueued { .. }), "{err}");
    store.enqueue_run_audited(start("t5", NOW + 4, "k2", "r"), entry()).unwrap();
    assert_eq!(store.list_audit("t5").unwrap().len(), 1);
    assert_eq!(queued(store), ["t1", "t4", "t5"]);

    // Kept until its time is up, then replaced.
    let expiry = NOW + IDEMPOTENCY_KEY_TTL_MS;
    assert_used(store.enqueue_run(start("t6", expiry - 1, "k", "r2")), "k", "t1", false);
    store.enqueue_run(start("t6", expiry, "k", "r2")).unwrap();
    assert_used(store.enqueue_run(start("t7", expiry + 1, "k", "r2")), "k", "t6", true);
    // The keys that expired meanwhile are gone: `k2` (kept since NOW + 4) starts again later.
    store.enqueue_run(start("t8", NOW + 4 + IDEMPOTENCY_KEY_TTL_MS, "k2", "r")).unwrap();
    assert_eq!(queued(store), ["t1", "t4", "t5", "t6", "t8"]);
}

/// Twenty concurrent starts with one key: exactly one queues, and each of the others is told
/// the thread it started.
pub fn idempotency_key_race(store: &dyn Store) {
    let barrier = Barrier::new(20);
    let results: Vec<(String, Result<(), QueueError>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || {
                    let thread = format!("r{i:02}");
                    barrier.wait();
                    let result = store.enqueue_run(start(&thread, NOW, "same", "req"));
                    (thread, result)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<&String> = results.iter().filter(|(_, r)| r.is_ok()).map(|(t, _)| t).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let winner = winners[0].clone();
    for (_, result) in results.into_iter().filter(|(t, _)| *t != winner) {
        assert_used(result, "same", &winner, true);
    }
    assert_eq!(queued(store), [winner]);
}
