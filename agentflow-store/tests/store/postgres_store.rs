//! What a server store adds to the conformance suite: processes sharing leases and fencing,
//! migrations, typed connection errors, conflict retries, and calls from inside a runtime.
//! Each "process" is a store with a pool of its own on the same schema.

#![cfg(feature = "postgres")]

use crate::pg_common;

use std::sync::Barrier;
use std::time::Duration;

use agentflow_store::conformance::{NOW, root, thread};
use agentflow_store::{
    CommitError, EffectKey, LeaseError, NewAuditEntry, OpenError, POSTGRES_SCHEMA_VERSION, PendingWrite, PostgresStore,
    StepCommit, StorageError, Store, ThreadStatus,
};
use pg_common::Schema;

#[test]
fn two_stores_race_for_one_lease_and_exactly_one_wins() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "race");
    let stores = [schema.open(), schema.open()];
    let barrier = Barrier::new(16);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let (store, barrier) = (&stores[i % 2], &barrier);
                s.spawn(move || {
                    barrier.wait();
                    store.acquire_lease("t", &format!("p{}-w{i}", i % 2), 30_000, NOW)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let winner = winners[0].holder.clone();
    let busy =
        results.iter().filter(|r| matches!(r, Err(LeaseError::ThreadBusy { holder, .. }) if *holder == winner)).count();
    assert_eq!(busy, 15, "every loser is told who holds the thread: {results:?}");
    // Both processes see the same lease, with the first fencing token.
    stores[0].commit_step(StepCommit::new(thread("t"))).unwrap();
    for store in &stores {
        assert_eq!(store.thread("t").unwrap().unwrap().lease.map(|l| l.holder), Some(winner.clone()));
        assert_eq!(store.lease_token("t").unwrap(), Some(1));
    }
}

#[test]
fn a_commit_fenced_by_a_holder_whose_lease_was_taken_over_in_another_process_is_refused() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "fence");
    let (a, b) = (schema.open(), schema.open());
    a.acquire_lease("t", "worker-a", 1_000, NOW).unwrap();
    a.commit_step(StepCommit::new(thread("t")).with_checkpoint(root("t", 0, b"S")).fenced_by("worker-a", NOW)).unwrap();

    // worker-a is paused past its lease; worker-b, in another process, takes the thread over.
    let lease = b.acquire_lease("t", "worker-b", 30_000, NOW + 1_000).unwrap();
    assert_eq!(lease.holder, "worker-b");
    assert_eq!(b.lease_token("t").unwrap(), Some(2));

    // worker-a wakes up with a clock that says its lease is still good: the database refuses.
    let step = agentflow_store::conformance::step("t", 1, 0, &[b"a"]);
    let err =
        a.commit_step(StepCommit::new(thread("t")).with_checkpoint(step).fenced_by("worker-a", NOW + 500)).unwrap_err();
    assert!(
        matches!(&err, CommitError::LeaseLost { holder, current: Some(l), .. } if holder == "worker-a" && l.holder == "worker-b"),
        "{err}"
    );
    assert_eq!(b.latest_checkpoint("t").unwrap().unwrap().seq, 0, "nothing of the refused commit was written");

    // The new owner's commit goes through.
    let step = agentflow_store::conformance::step("t", 1, 0, &[b"b"]);
    b.commit_step(StepCommit::new(thread("t")).with_checkpoint(step).fenced_by("worker-b", NOW + 1_001)).unwrap();
    assert_eq!(a.latest_checkpoint("t").unwrap().unwrap().delta, vec![b"b".to_vec()]);
}

#[test]
fn a_refused_commit_writes_none_of_the_statements_sent_with_its_checks() {
    // A step's writes are pipelined with its lease check, so they run before the refusal is
    // known: the refusal must roll every one of them back.
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "fence_all");
    let (a, b) = (schema.open(), schema.open());
    a.acquire_lease("t", "worker-a", 1_000, NOW).unwrap();
    a.commit_step(StepCommit::new(thread("t")).with_checkpoint(root("t", 0, b"S")).fenced_by("worker-a", NOW)).unwrap();
    b.acquire_lease("t", "worker-b", 30_000, NOW + 1_000).unwrap();

    let mut stale = thread("t");
    stale.status = ThreadStatus::Failed;
    stale.detail = "written by a stale holder".into();
    stale.updated_at = NOW + 500;
    let mut commit = StepCommit::new(stale)
        .with_checkpoint(agentflow_store::conformance::step("t", 1, 0, &[b"a"]))
        .fenced_by("worker-a", NOW + 500);
    commit.pending_writes = vec![PendingWrite { seq: 0, node: "n".into(), idx: 0, value: b"w".to_vec() }];
    commit.effects = vec![(EffectKey::new("t", 0, "n", "k"), b"r".to_vec())];
    let before = b.thread("t").unwrap().unwrap();
    let err = a.commit_step(commit).unwrap_err();
    assert!(matches!(err, CommitError::LeaseLost { .. }), "{err}");

    let after = b.thread("t").unwrap().unwrap();
    assert_eq!((after.status, &after.detail, after.updated_at), (before.status, &before.detail, before.updated_at));
    assert_eq!(b.latest_checkpoint("t").unwrap().unwrap().seq, 0);
    assert!(b.pending_writes("t", 0).unwrap().is_empty());
    assert_eq!(b.effect(&EffectKey::new("t", 0, "n", "k")).unwrap(), None);
    // The connection that carried the refused commit is usable: the next commit goes through.
    b.commit_step(StepCommit::new(thread("t")).fenced_by("worker-b", NOW + 1_001)).unwrap();
    a.commit_step(StepCommit::new(thread("u"))).unwrap();
}

#[test]
fn the_fencing_token_grows_on_every_takeover_and_only_then() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "token");
    let (a, b) = (schema.open(), schema.open());
    assert_eq!(a.lease_token("t").unwrap(), None);
    a.acquire_lease("t", "w1", 1_000, NOW).unwrap();
    a.acquire_lease("t", "w1", 1_000, NOW + 10).unwrap();
    a.renew_lease("t", "w1", 1_000, NOW + 20).unwrap();
    assert_eq!(b.lease_token("t").unwrap(), Some(1), "re-acquire and renew keep the token");
    a.release_lease("t", "w1").unwrap();
    b.acquire_lease("t", "w2", 1_000, NOW + 30).unwrap();
    assert_eq!(a.lease_token("t").unwrap(), Some(2), "a new holder after a release");
    a.acquire_lease("t", "w3", 1_000, NOW + 5_000).unwrap();
    assert_eq!(b.lease_token("t").unwrap(), Some(3), "a new holder after an expiry");
    b.release_lease("t", "w2").unwrap_err();
    a.release_lease("t", "w3").unwrap();
    assert_eq!(b.lease_token("t").unwrap(), Some(3), "a release keeps the token");
}

#[test]
fn processes_that_open_a_new_schema_at_once_migrate_it_once() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "migrate");
    let barrier = Barrier::new(6);
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| {
                barrier.wait();
                let store = schema.open();
                store.commit_step(StepCommit::new(thread("t"))).unwrap();
            });
        }
    });
    let versions =
        pg_common::sql(&url, &format!("SELECT version FROM \"{}\".schema_version ORDER BY version", schema.name));
    let expected: Vec<Option<String>> = (1..=POSTGRES_SCHEMA_VERSION).map(|v| Some(v.to_string())).collect();
    assert_eq!(versions, expected);
    // Reopening applies nothing and keeps the data.
    assert_eq!(schema.open().list_threads().unwrap().len(), 1);
}

#[test]
fn a_schema_of_version_5_moves_on_and_its_threads_get_the_parents_their_ids_gave_them() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "v5");
    let ids =
        ["acct", "acct/write.0.0.review", "acct/write.0.0.review/check.2.1.0.vet", "acct/2", "a/b/r#type.0.1.r#match"];
    {
        let store = schema.open();
        for id in ids {
            store.commit_step(StepCommit::new(thread(id))).unwrap();
        }
    }
    // Back to version 5, which had no parent column.
    let s = &schema.name;
    pg_common::sql(
        &url,
        &format!(
            "ALTER TABLE \"{s}\".threads DROP COLUMN parent; \
             ALTER TABLE \"{s}\".run_queue DROP COLUMN awaits; \
             DELETE FROM \"{s}\".schema_version WHERE version > 5"
        ),
    );
    let store = schema.open();
    let parent = |id: &str| store.thread(id).unwrap().unwrap().parent;
    assert_eq!(parent("acct"), None);
    assert_eq!(parent("acct/write.0.0.review").as_deref(), Some("acct"));
    assert_eq!(parent("acct/write.0.0.review/check.2.1.0.vet").as_deref(), Some("acct/write.0.0.review"));
    assert_eq!(parent("acct/2"), None, "not the shape of a child");
    assert_eq!(parent("a/b/r#type.0.1.r#match").as_deref(), Some("a/b"), "raw identifiers");
    // Those and only those, as this build tells a legacy child.
    for id in ids {
        assert_eq!(parent(id).as_deref(), agentflow_store::ThreadRecord::legacy_parent(id), "{id}");
    }
    let versions = pg_common::sql(&url, &format!("SELECT max(version) FROM \"{s}\".schema_version"));
    assert_eq!(versions, [Some(POSTGRES_SCHEMA_VERSION.to_string())]);
}

/// A schema of version 10 (threads without a trace context) moves on: its threads have none,
/// and gain the first one a commit brings, which stays.
#[test]
fn a_schema_of_version_10_moves_on_and_its_threads_gain_the_first_trace_committed() {
    const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "v10");
    schema.open().commit_step(StepCommit::new(thread("t").with_tenant("acme"))).unwrap();
    let s = &schema.name;
    pg_common::sql(
        &url,
        &format!(
            "ALTER TABLE \"{s}\".threads DROP COLUMN trace; \
             DELETE FROM \"{s}\".schema_version WHERE version > 10"
        ),
    );
    let store = schema.open();
    let t = store.thread("t").unwrap().unwrap();
    assert_eq!((t.tenant.as_deref(), t.trace.as_deref()), (Some("acme"), None));
    store.commit_step(StepCommit::new(thread("t"))).unwrap();
    assert_eq!(store.thread("t").unwrap().unwrap().trace, None);
    store.commit_step(StepCommit::new(thread("t").with_trace(TRACE))).unwrap();
    store.commit_step(StepCommit::new(thread("t"))).unwrap();
    assert_eq!(store.thread("t").unwrap().unwrap().trace.as_deref(), Some(TRACE));
    let versions = pg_common::sql(&url, &format!("SELECT max(version) FROM \"{s}\".schema_version"));
    assert_eq!(versions, [Some(POSTGRES_SCHEMA_VERSION.to_string())]);
}

/// A schema of version 11 (no event logs, idempotency keys, follow-ups, schedules or webhook
/// deliveries) moves on: its threads' logs start at seq 1, keyed starts are kept, its queued
/// runs read as no follow-ups, and the new tables work.
#[test]
fn a_schema_of_version_11_moves_on_and_gains_the_event_log_and_idempotency_keys() {
    use agentflow_store::{EventId, IdempotencyKey, NewEvent, NewRun, QueueError};

    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "v11");
    {
        let store = schema.open();
        store.commit_step(StepCommit::new(thread("t"))).unwrap();
        store.enqueue_run(NewRun::new("q0", "g", Some(b"{}".to_vec()), "alice", 1)).unwrap();
    }
    let s = &schema.name;
    pg_common::sql(
        &url,
        &format!(
            "DROP TABLE \"{s}\".events; DROP TABLE \"{s}\".event_heads; DROP TABLE \"{s}\".idempotency_keys; \
             DROP TABLE \"{s}\".follow_ups; DROP TABLE \"{s}\".schedules; DROP TABLE \"{s}\".webhooks; \
             ALTER TABLE \"{s}\".run_queue DROP COLUMN follow_up, DROP COLUMN fork_from, DROP COLUMN webhook, \
               DROP COLUMN follow_ups; \
             DELETE FROM \"{s}\".schema_version WHERE version > 11"
        ),
    );
    let store = schema.open();
    assert_eq!(store.read_events("t", None, 10).unwrap().newest, None);
    store.commit_step(StepCommit::new(thread("t")).with_events(vec![NewEvent::new("step", b"{}".to_vec())])).unwrap();
    assert_eq!(store.read_events("t", None, 10).unwrap().newest, Some(EventId::new(1, 0)));
    let start =
        |id: &str| NewRun::new(id, "g", None, "alice", 1).with_idempotency(IdempotencyKey::new("alice", "k", "r"));
    store.enqueue_run(start("q1")).unwrap();
    assert!(matches!(store.enqueue_run(start("q2")), Err(QueueError::KeyUsed { .. })));
    // A run queued before is no follow-up and has no webhook; follow-ups and schedules work.
    let q0 = store.list_runs().unwrap().into_iter().find(|r| r.thread == "q0").unwrap();
    assert_eq!((q0.follow_up, q0.fork_from, q0.webhook), (false, None, None));
    let follow_up = NewRun::new("q0", "g", None, "alice", 2).as_follow_up(Some(3));
    let entry = agentflow_store::NewAuditEntry::new(2, "alice", "run.submitted", serde_json::json!({}));
    let queued = store.enqueue_follow_up(follow_up, entry, agentflow_store::FollowUpPlace::Back).unwrap();
    assert_eq!(queued, agentflow_store::FollowUpQueued::Behind { ahead: 0 });
    assert_eq!(store.list_follow_ups("q0").unwrap()[0].fork_from, Some(3));
    let schedule = agentflow_store::ScheduleRecord::new("s", "g", "0 * * * *", b"{}".to_vec(), "alice", 5, 1);
    store.put_schedule(schedule.clone()).unwrap();
    assert_eq!(store.scan_schedules().unwrap().items, [schedule]);
    assert!(store.due_webhooks(u64::MAX, 10).unwrap().items.is_empty());
    let versions = pg_common::sql(&url, &format!("SELECT max(version) FROM \"{s}\".schema_version"));
    assert_eq!(versions, [Some(POSTGRES_SCHEMA_VERSION.to_string())]);
    assert_eq!(POSTGRES_SCHEMA_VERSION, 13);
}

/// A dump read while another process commits steps is the thread at one moment (one
/// `REPEATABLE READ` snapshot), not parts read at different times.
#[test]
fn a_dump_taken_while_another_process_commits_is_the_thread_at_one_moment() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "dump_moment");
    let dumps = agentflow_store::conformance::dump_is_one_moment(&schema.open(), 150);
    assert!(dumps > 0);
}

#[test]
fn a_schema_written_by_a_newer_version_is_refused() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "newer");
    drop(schema.open());
    let newer = POSTGRES_SCHEMA_VERSION + 1;
    pg_common::sql(&url, &format!("INSERT INTO \"{}\".schema_version (version) VALUES ({newer})", schema.name));
    let err = PostgresStore::builder().schema(&schema.name).open(&url).unwrap_err();
    assert!(
        matches!(&err, OpenError::UnsupportedFormat { found, supported, .. }
            if *found == newer.to_string() && *supported == POSTGRES_SCHEMA_VERSION.to_string()),
        "{err}"
    );
    assert!(err.to_string().contains("upgrade agentflow-store"), "{err}");
}

#[test]
fn a_wrong_password_is_an_authentication_error() {
    let Some(url) = pg_common::url() else { return };
    let (head, host) = url.rsplit_once('@').expect("the URL names a user: postgres://user:password@host/db");
    let user = head.trim_start_matches("postgres://").trim_start_matches("postgresql://");
    let user = user.split(':').next().unwrap();
    let bad = format!("postgres://{user}:certainly-not-the-password@{host}");
    let err = PostgresStore::open(&bad).unwrap_err();
    assert!(matches!(&err, OpenError::Storage(StorageError::Authentication { .. })), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("fix the user name and password"), "{message}");
    assert!(!message.contains("certainly-not-the-password"), "the password is not echoed: {message}");
}

/// Needs no server: nothing listens on port 1.
#[test]
fn a_refused_connection_is_an_unreachable_error() {
    let err = PostgresStore::builder()
        .connect_timeout(Duration::from_secs(5))
        .open("postgres://agentflow:secret@127.0.0.1:1/agentflow")
        .unwrap_err();
    assert!(matches!(&err, OpenError::Storage(StorageError::Unreachable { .. })), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("127.0.0.1:1") && message.contains("check that it is running"), "{message}");
    assert!(!message.contains("secret"), "the password is not echoed: {message}");
}

/// Needs no server: both are refused before connecting.
#[test]
fn a_malformed_url_or_schema_name_is_refused_before_connecting() {
    let err = PostgresStore::open("postgres://a:b@127.0.0.1:notaport/db").unwrap_err();
    assert!(err.to_string().contains("does not parse"), "{err}");
    let err = PostgresStore::builder().schema("Robert'); DROP").open("postgres://a@127.0.0.1:1/db").unwrap_err();
    assert!(err.to_string().contains("not a usable schema name"), "{err}");
}

/// With every transaction SERIALIZABLE, concurrent appends to one audit log collide on its
/// head row; the store retries them and every append lands, without a gap.
#[test]
fn serialization_failures_are_retried() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "serial");
    let sep = if url.contains('?') { '&' } else { '?' };
    let serializable = format!("{url}{sep}options=-c%20default_transaction_isolation%3Dserializable");
    let store = PostgresStore::builder().schema(&schema.name).open(&serializable).unwrap();
    let isolation = pg_common::sql(&serializable, "SHOW default_transaction_isolation");
    assert_eq!(isolation, [Some("serializable".to_string())]);
    let barrier = Barrier::new(4);
    let seqs: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let (store, barrier) = (&store, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    (0..8)
                        .map(|j| {
                            let entry = NewAuditEntry::new(NOW, format!("w{i}"), "note", serde_json::json!({ "j": j }));
                            store.append_audit("t", entry).expect("retried until it lands")
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (1..=32).collect::<Vec<u64>>());
    assert_eq!(store.list_audit("t").unwrap().len(), 32);
}

/// The executor releases leases from a `Drop` on an async worker thread and may call the store
/// from inside a runtime: the store must not try to block on a runtime there.
#[test]
fn calls_from_inside_an_async_runtime_and_from_drop_work() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "runtime");
    let store = schema.open();

    struct Guard<'a>(&'a PostgresStore);
    impl Drop for Guard<'_> {
        fn drop(&mut self) {
            self.0.release_lease("t", "w").expect("released from Drop");
        }
    }

    for runtime in [
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap(),
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap(),
    ] {
        runtime.block_on(async {
            store.acquire_lease("t", "w", 30_000, NOW).unwrap();
            let guard = Guard(&store);
            tokio::task::yield_now().await;
            store.commit_step(StepCommit::new(thread("t")).fenced_by("w", NOW + 1)).unwrap();
            drop(guard);
        });
        assert_eq!(store.thread("t").unwrap().unwrap().lease, None);
    }
}

#[test]
fn a_pool_size_past_what_any_server_admits_opens_a_working_store() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "huge_pool");
    // "As many as the server admits", said the only way a `usize` can.
    let store = PostgresStore::builder().schema(&schema.name).max_connections(usize::MAX).open(&url).unwrap();
    store.commit_step(StepCommit::new(thread("t")).with_checkpoint(root("t", 0, b"S"))).unwrap();
    assert_eq!(store.latest_checkpoint("t").unwrap().map(|c| c.seq), Some(0));
}
