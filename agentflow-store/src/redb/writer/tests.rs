//! The writer thread: a refusal or a failure inside a group, the thread facts a transaction
//! learns, commits made inline on the caller's thread, and the timed flush.

use std::sync::mpsc::{Receiver, sync_channel};

use redb::backends::InMemoryBackend;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::*;

const T: TableDefinition<&str, u64> = TableDefinition::new("t");

type Reply = Receiver<Result<((), Committed), StorageError>>;

fn shared() -> Shared {
    let db = Database::builder().create_with_backend(InMemoryBackend::new()).unwrap();
    Shared::new(db, "<test>".into())
}

/// A job that writes `key`, then fails if `fail` says so (before or after writing).
fn job(key: &'static str, fail: Option<bool>) -> (Box<dyn Job>, Reply) {
    let (reply, answer) = sync_channel(1);
    let op = move |tx: &Tx<'_>| {
        let refuse = || StorageError::Backend { path: tx.path.to_path_buf(), detail: format!("{key} refused") };
        if fail == Some(false) {
            return Err(refuse());
        }
        let mut table = tx.txn.open_table(T).ctx(tx.path)?;
        tx.wrote();
        table.insert(key, 1).ctx(tx.path)?;
        if fail == Some(true) {
            return Err(refuse());
        }
        Ok(())
    };
    (Box::new(OpJob::new(Durability::Eventual, op, reply)), answer)
}

fn keys(shared: &Shared) -> Vec<String> {
    let db = shared.db();
    let txn = db.begin_read().unwrap();
    let table = txn.open_table(T).unwrap();
    table.iter().unwrap().map(|e| e.unwrap().0.value().to_string()).collect()
}

#[test]
fn a_refusal_before_writing_leaves_the_group_intact() {
    let shared = shared();
    let (a, ra) = job("a", None);
    let (b, rb) = job("b", Some(false));
    let (c, rc) = job("c", None);
    assert_eq!(run_group(&shared, vec![a, b, c], false), Some(false));
    assert_eq!(ra.recv().unwrap().unwrap().1.group_size, 2);
    assert!(rb.recv().unwrap().is_err());
    assert_eq!(rc.recv().unwrap().unwrap().1.group_size, 2);
    assert_eq!(keys(&shared), ["a", "c"]);
}

#[test]
fn a_failure_after_writing_reruns_the_group_one_by_one() {
    let shared = shared();
    let (a, ra) = job("a", None);
    let (b, rb) = job("b", Some(true));
    let (c, rc) = job("c", None);
    assert_eq!(run_group(&shared, vec![a, b, c], true), Some(false));
    assert_eq!(ra.recv().unwrap().unwrap().1.group_size, 1);
    assert!(rb.recv().unwrap().is_err());
    assert_eq!(rc.recv().unwrap().unwrap().1.group_size, 1);
    assert_eq!(keys(&shared), ["a", "c"], "b's partial write is rolled back");
}

/// A job that keeps thread facts: it learns facts for `"try-N"` on its N-th staging.
fn learning_job() -> (Box<dyn Job>, Reply) {
    let (reply, answer) = sync_channel(1);
    let mut tries = 0;
    let op = move |tx: &Tx<'_>| {
        tries += 1;
        let mut table = tx.txn.open_table(T).ctx(tx.path)?;
        tx.wrote();
        table.insert("learner", tries).ctx(tx.path)?;
        let facts = ThreadFacts {
            record: None,
            number: None,
            latest: Some(tries),
            timer: None,
            pending: Vec::new(),
            kept: None,
        };
        tx.learn_facts(&format!("try-{tries}"), facts);
        Ok(())
    };
    (Box::new(OpJob::new(Durability::Eventual, op, reply).keeping_facts()), answer)
}

fn known(shared: &Shared, thread: &str) -> Option<ThreadFacts> {
    Learned::default().take(&shared.facts, thread)
}

#[test]
fn facts_learned_in_a_transaction_that_did_not_commit_are_dropped() {
    let shared = shared();
    let (learner, rl) = learning_job();
    // A step that fails after writing (keeping facts, so it clears none itself).
    let (reply, rb) = sync_channel(1);
    let op = |tx: &Tx<'_>| {
        let mut table = tx.txn.open_table(T).ctx(tx.path)?;
        tx.wrote();
        table.insert("bad", 1).ctx(tx.path)?;
        Err::<(), _>(StorageError::Backend { path: tx.path.to_path_buf(), detail: "failed mid-way".to_string() })
    };
    let bad: Box<dyn Job> = Box::new(OpJob::new(Durability::Eventual, op, reply).keeping_facts());
    assert_eq!(run_group(&shared, vec![learner, bad], false), Some(false));
    assert!(rl.recv().unwrap().is_ok());
    assert!(rb.recv().unwrap().is_err());
    assert_eq!(known(&shared, "try-1"), None, "learned in the group transaction, which was rolled back");
    assert_eq!(known(&shared, "try-2").and_then(|f| f.latest), Some(2), "learned when it committed alone");
}

#[test]
fn a_job_that_keeps_no_facts_clears_them_before_it_stages() {
    let shared = shared();
    let (learner, rl) = learning_job();
    assert_eq!(run_group(&shared, vec![learner], false), Some(false));
    assert!(rl.recv().unwrap().is_ok());
    assert_eq!(shared.facts.len(), 1);
    let (plain, rp) = job("plain", None);
    assert_eq!(run_group(&shared, vec![plain], false), Some(false));
    assert!(rp.recv().unwrap().is_ok());
    assert_eq!(shared.facts.len(), 0);
}

#[test]
fn an_idle_store_commits_a_job_on_the_callers_thread() {
    let shared = shared();
    let caller = std::thread::current().id();
    let mut op = move |tx: &Tx<'_>| {
        assert_eq!(std::thread::current().id(), caller, "staged on the calling thread");
        let mut table = tx.txn.open_table(T).ctx(tx.path)?;
        tx.wrote();
        table.insert("inline", 1).ctx(tx.path)?;
        Ok::<_, StorageError>(())
    };
    let answer = commit_inline(&shared, false, &mut op).expect("nobody held the turn");
    let ((), committed) = answer.unwrap();
    assert!(committed.durable);
    assert_eq!(shared.durable_commits(), 1);
    assert_eq!(keys(&shared), ["inline"]);
}

#[test]
fn an_inline_commit_that_fails_leaves_nothing_and_is_retried_only_if_it_wrote() {
    let shared = shared();
    // Refused before writing: answered with its error, run once.
    let runs = Cell::new(0);
    let mut refused = |tx: &Tx<'_>| {
        runs.set(runs.get() + 1);
        Err::<(), _>(StorageError::Backend { path: tx.path.to_path_buf(), detail: "refused".into() })
    };
    let answer = commit_inline(&shared, false, &mut refused).expect("nobody held the turn");
    assert!(matches!(answer, Err(StorageError::Backend { detail, .. }) if detail == "refused"));
    assert_eq!(runs.get(), 1);
    // Failing after it wrote: run once more in a fresh transaction, whose answer counts.
    let runs = Cell::new(0);
    let mut flaky = |tx: &Tx<'_>| {
        runs.set(runs.get() + 1);
        let mut table = tx.txn.open_table(T).ctx(tx.path)?;
        tx.wrote();
        table.insert(if runs.get() == 1 { "half" } else { "whole" }, 1).ctx(tx.path)?;
        if runs.get() == 1 {
            return Err(StorageError::Backend { path: tx.path.to_path_buf(), detail: "mid-way".into() });
        }
        Ok(())
    };
    let ((), committed) = commit_inline(&shared, false, &mut flaky).expect("nobody held the turn").unwrap();
    assert_eq!((runs.get(), committed.group_size), (2, 1));
    assert_eq!(keys(&shared), ["whole"], "the failed attempt's write was rolled back");
    assert_eq!(shared.durable_commits(), 1, "only the commit that happened is counted");
}

/// Polls `cond` every millisecond for up to five seconds.
fn eventually(cond: impl Fn() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cond()
}

#[test]
fn the_timed_flush_is_skipped_when_a_durable_commit_already_covered_it() {
    let shared = Arc::new(shared());
    let (tx, rx) = std::sync::mpsc::sync_channel::<Box<dyn Job>>(8);
    // The interval is long enough that `c` below commits well inside it (within a second of
    // `b`), even on a loaded machine.
    let interval = Duration::from_secs(1);
    let config = WriterConfig { max_group: 8, flush_interval: Some(interval), linger: Duration::ZERO };
    let writer = {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || run(&shared, &rx, config))
    };
    // A non-durable commit and nothing after it: the writer flushes it once the interval passed.
    let (a, ra) = job("a", None);
    tx.send(a).unwrap();
    assert!(!ra.recv().unwrap().unwrap().1.durable);
    assert!(eventually(|| shared.durable_commits() == 1), "the timed flush made `a` durable");
    // A non-durable commit followed by a durable one made inline: that one flushed it.
    let (b, rb) = job("b", None);
    tx.send(b).unwrap();
    assert!(!rb.recv().unwrap().unwrap().1.durable);
    let mut op = |tx: &Tx<'_>| {
        let mut table = tx.txn.open_table(T).ctx(tx.path)?;
        tx.wrote();
        table.insert("c", 1).ctx(tx.path)?;
        Ok::<_, StorageError>(())
    };
    // The writer may still hold the turn right after answering `b`.
    let answer = loop {
        match commit_inline(&shared, false, &mut op) {
            Some(answer) => break answer,
            None => std::thread::yield_now(),
        }
    };
    assert!(answer.unwrap().1.durable);
    assert_eq!(shared.durable_commits(), 2);
    // Past the moment the writer would flush `b` (one interval after it), with half a
    // second more for a slow writer thread.
    std::thread::sleep(interval + Duration::from_millis(500));
    assert_eq!(shared.durable_commits(), 2, "no second flush for what `c` made durable");
    drop(tx);
    writer.join().unwrap();
    assert_eq!(shared.durable_commits(), 2, "nothing left to flush when the writer stops");
    assert_eq!(keys(&shared), ["a", "b", "c"]);
}

#[test]
fn an_inline_commit_while_the_turn_is_taken_commits_nothing_and_leaves_it_to_the_writer() {
    let shared = shared();
    let turn = shared.turn();
    let staged = Cell::new(false);
    let mut op = |_: &Tx<'_>| {
        staged.set(true);
        Ok::<_, StorageError>(())
    };
    assert!(commit_inline(&shared, false, &mut op).is_none(), "the turn is taken: nothing is committed");
    assert!(!staged.get(), "nothing was staged");
    drop(turn);
    let (job, _answer) = job("queued", None);
    assert_eq!(run_group(&shared, vec![job], true), Some(true));
    assert_eq!(keys(&shared), ["queued"]);
}
