//! SIGKILL while a thread is purged: a child process opens a copy of a redb file holding a
//! thread with a subgraph child (checkpoints, pending writes, effects, approvals, audit
//! entries), says on stderr when it starts the purge, purges the thread (one write
//! transaction, then a compaction of the file) and says when it returned. The parent kills it
//! a random 0-N ms after it started, N being about twice what the purge takes here. After every
//! kill the file opens and both threads are either untouched (every record as before) or
//! purged (no payload left, tombstones and a verifying audit log), never in between.
//!
//! Trials default to 20 (`AGENTFLOW_CRASH_TRIALS`); the seed is printed and can be replayed
//! with `AGENTFLOW_CRASH_SEED`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::kill::{next, seed, trials};
use crate::support::process::own_test;
use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;
use agentflow::Store;
use agentflow::persist::ThreadStatus;
use agentflow_store::{
    ApprovalRecord, ApprovalStatus, Checkpoint, CheckpointMetadata, CheckpointSource, EffectKey, NewAuditEntry,
    PendingWrite, StepCommit, ThreadRecord,
};
use serde_json::json;

const PARENT: &str = "p";
const CHILD: &str = "p/work.0.0.sub";
/// Checkpoints (each with an effect and an audit entry) per thread.
const STEPS: u64 = 300;

/// The child: open the file, purge the thread, then wait to be killed.
#[test]
#[ignore = "child process of `sigkill_while_a_thread_is_purged`"]
fn crash_purge_child() {
    let Ok(path) = std::env::var("AGENTFLOW_CRASH_PURGE_CHILD") else { return };
    let store = open_redb(&path).expect("open the store");
    eprintln!("purging");
    store.purge_thread(PARENT, NewAuditEntry::new(2, "dpo", "thread.purged", json!({}))).expect("purge");
    eprintln!("purged");
    store.close().expect("close the store");
    std::thread::sleep(Duration::from_secs(60));
}

fn child(path: &Path) -> Command {
    let mut cmd = own_test(module_path!(), "crash_purge_child");
    cmd.env("AGENTFLOW_CRASH_PURGE_CHILD", path).stdout(Stdio::null()).stderr(Stdio::piped());
    cmd
}

fn checkpoint(thread: &str, seq: u64) -> Checkpoint {
    let payload = format!("{{\"step\":{seq},\"note\":\"{}\"}}", "x".repeat(200)).into_bytes();
    Checkpoint {
        thread: thread.to_string(),
        seq,
        parent: seq.checked_sub(1),
        cursor: vec!["n".to_string()],
        snapshot: Some(payload),
        delta: Vec::new(),
        metadata: CheckpointMetadata::new(seq, CheckpointSource::Loop, Vec::new()),
        created_at: 1,
    }
}

/// A file with [`PARENT`] and its child [`CHILD`], each of [`STEPS`] checkpoints, effects and
/// audit entries, a pending write and a pending approval.
fn filled(path: &Path) {
    let store = open_redb(path).expect("create the store");
    for (id, parent) in [(PARENT, None), (CHILD, Some(PARENT))] {
        let record = || {
            let t = ThreadRecord::new(id, "ops", "fp", 1, 1);
            if let Some(p) = parent { t.child_of(p) } else { t }
        };
        for seq in 0..STEPS {
            let mut c = StepCommit::new(record()).with_checkpoint(checkpoint(id, seq));
            c.audit.push(NewAuditEntry::new(1, "ops", "note", json!({ "seq": seq, "secret": "payload" })));
            store.commit_step(c).expect("commit");
            store.record_effect(&EffectKey::new(id, seq, "n", "k"), b"result").expect("effect");
        }
        let mut c = StepCommit::new(record());
        c.pending_writes.push(PendingWrite { seq: STEPS - 1, node: "n".into(), idx: 0, value: b"w".to_vec() });
        c.new_approvals.push(ApprovalRecord {
            id: format!("{id}-ap"),
            thread: id.to_string(),
            node: "n".into(),
            tool: "t".into(),
            args: "{\"a\":1}".into(),
            args_hash: "h".into(),
            risk: "irreversible".into(),
            requester: "agent".into(),
            reason: "r".into(),
            created_at: 1,
            expires_at: u64::MAX / 2,
            status: ApprovalStatus::Pending,
            decided_by: None,
            decision_note: None,
            conditions: Some(json!({ "max": 1 })),
            updated_at: 1,
        });
        store.commit_step(c).expect("commit");
    }
    store.close().expect("close the store");
}

/// Whether the file holds the threads untouched (`false`) or purged (`true`); panics on
/// anything in between. `what` names the file.
fn purged(path: &Path, what: &str) -> bool {
    let store = open_redb(path).unwrap_or_else(|e| panic!("{what}: the store does not open: {e}"));
    let purged = store.thread(PARENT).unwrap().unwrap().status == ThreadStatus::Purged;
    for id in [PARENT, CHILD] {
        let record = store.thread(id).unwrap().unwrap_or_else(|| panic!("{what}: `{id}` is gone"));
        let checkpoints = store.list_checkpoints(id).unwrap().len() as u64;
        let effects = store.thread_effects(id).unwrap().len() as u64;
        let pending = store.pending_writes(id, STEPS - 1).unwrap().len();
        let approval = store.approval(&format!("{id}-ap")).unwrap().unwrap();
        let log = store.list_audit(id).unwrap();
        let report = store.verify_audit(id).unwrap().unwrap_or_else(|b| panic!("{what}: `{id}`: {b:?}"));
        if purged {
            assert_eq!(record.status, ThreadStatus::Purged, "{what}: `{id}`");
            assert_eq!((checkpoints, effects, pending), (0, 0, 0), "{what}: `{id}` keeps data");
            assert!(approval.args.is_empty() && approval.status == ApprovalStatus::Cancelled, "{what}: {approval:?}");
            assert_eq!(report.purged, STEPS + 1, "{what}: `{id}`: {report:?}");
        } else {
            assert_eq!(record.status, ThreadStatus::Running, "{what}: `{id}`");
            assert_eq!((checkpoints, effects, pending), (STEPS, STEPS, 1), "{what}: `{id}` lost data");
            assert!(!approval.args.is_empty() && approval.status == ApprovalStatus::Pending, "{what}: {approval:?}");
            assert_eq!((report.purged, log.len() as u64), (0, STEPS + 1), "{what}: `{id}`");
        }
    }
    store.close().unwrap();
    purged
}

#[test]
fn sigkill_while_a_thread_is_purged() {
    let trials = trials(20);
    let mut seed = seed();
    println!("crash-purge test: {trials} trials, AGENTFLOW_CRASH_SEED={seed}");
    let root = temp_dir("crash-purge");
    let template = root.join("template.redb");
    filled(&template);
    assert!(!purged(&template, "the template"));

    // The purge left alone, and how long it takes here.
    let reference = root.join("reference.redb");
    std::fs::copy(&template, &reference).unwrap();
    let store = open_redb(&reference).unwrap();
    let started = Instant::now();
    store.purge_thread(PARENT, NewAuditEntry::new(2, "dpo", "thread.purged", json!({}))).unwrap();
    let took = started.elapsed();
    store.close().unwrap();
    assert!(purged(&reference, "the reference copy"));
    let window = (2 * took.as_micros() as u64).max(2_000);
    println!("crash-purge test: the purge takes {took:?}; kills within {window} us of its start");

    let (mut kept, mut gone) = (0, 0);
    for trial in 0..trials {
        let path = root.join(format!("trial-{trial}.redb"));
        std::fs::copy(&template, &path).unwrap();
        let delay = Duration::from_micros(next(&mut seed) % window);
        let mut proc = child(&path).spawn().unwrap();
        let mut stderr = BufReader::new(proc.stderr.take().unwrap()).lines();
        let _ = stderr.by_ref().map_while(Result::ok).find(|line| line == "purging");
        std::thread::sleep(delay);
        let _ = proc.kill(); // SIGKILL on Unix
        let _ = proc.wait();
        let returned = stderr.map_while(Result::ok).any(|line| line == "purged");
        let what = format!("trial {trial} (kill {} us into the purge)", delay.as_micros());
        if purged(&path, &what) {
            gone += 1;
        } else {
            assert!(!returned, "{what}: the purge returned, yet the threads are untouched");
            kept += 1;
        }
        let _ = std::fs::remove_file(&path);
    }
    println!("crash-purge test: {trials} trials, {kept} left the threads untouched, {gone} purged them");
    let _ = std::fs::remove_dir_all(&root);
}
