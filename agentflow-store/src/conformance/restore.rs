//! Dump and restore: a restored thread reads back as it was dumped, what would not read back is
//! refused, and several threads are restored all or none.

use serde_json::json;

use crate::conformance::fixtures::{NOW, approval, commit, root, state_at, step, thread};
use crate::{
    ApprovalError, ApprovalPatch, ApprovalStatus, CommitError, EffectKey, NewAuditEntry, NewRun, PendingWrite,
    StepCommit, Store, ThreadStatus,
};

/// A thread's dump (checkpoints with a fork, a pending write, an effect, audit entries, a
/// decided and a waiting approval, a timer) restored under another id reads back as the same
/// dump; restoring over an existing thread, or an approval id already present, is refused and
/// writes nothing.
pub fn restore_thread_writes_a_dump_as_it_was(store: &dyn Store) {
    let mut t = thread("t");
    store.commit_step(StepCommit::new(t.clone()).with_checkpoint(root("t", 0, b"s"))).unwrap();
    commit(store, step("t", 1, 0, &[b"a"]));
    commit(store, step("t", 2, 1, &[b"b", b"c"]));
    commit(store, step("t", 3, 1, &[b"d"]));
    store.record_effect(&EffectKey::new("t", 3, "n", "k1"), b"result").unwrap();
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    let patch = ApprovalPatch { decided_by: Some("alice".into()), ..ApprovalPatch::by("alice", NOW + 1) };
    store.transition_approval("a1", ApprovalStatus::Pending, ApprovalStatus::Approved, patch).unwrap();
    store.put_approval(approval("a2", "t"), "agent").unwrap();
    store.append_audit("t", NewAuditEntry::new(NOW + 2, "bob", "note", json!({"x": [1, 2]}))).unwrap();
    t.status = ThreadStatus::Sleeping;
    t.detail = "asleep".into();
    let mut last = StepCommit::new(t).with_wake_at(NOW + 500);
    last.pending_writes.push(PendingWrite { seq: 3, node: "__interrupts__".into(), idx: 0, value: b"[1]".to_vec() });
    store.commit_step(last).unwrap();

    let dump = store.dump_thread("t").unwrap().expect("dump");
    assert_eq!(dump.checkpoints.len(), 4);
    assert_eq!(dump.pending_writes.len(), 1);
    assert_eq!(dump.effects.len(), 1);
    assert_eq!(dump.approvals.len(), 2);
    assert_eq!(dump.audit.len(), 4);
    assert_eq!(dump.wake_at, Some(NOW + 500));

    // Over itself: refused, nothing changes.
    assert!(matches!(store.restore_thread(dump.clone()), Err(CommitError::Invalid { .. })));
    // A checkpoint seq past `i64::MAX` (from an edited export file, say): refused, nothing written.
    let mut huge = dump.clone();
    huge.thread.id = "h".into();
    for cp in &mut huge.checkpoints {
        cp.thread = "h".into();
    }
    huge.checkpoints.last_mut().expect("checkpoints").seq = u64::MAX;
    huge.pending_writes.clear();
    huge.effects.clear();
    huge.audit.clear();
    huge.approvals.clear();
    let err = store.restore_thread(huge).unwrap_err();
    assert!(matches!(&err, CommitError::Invalid { reason, .. } if reason.contains("too large")), "{err}");
    assert!(store.thread("h").unwrap().is_none());
    assert_eq!(store.dump_thread("t").unwrap().as_ref(), Some(&dump));

    // JSON the store reads back itself, nested deeper than a commit accepts (an edited export
    // file): refused, nothing written, the thread could not have been read.
    let nested = |depth: usize| (0..depth).fold(json!(0), |inner, _| json!([inner]));
    let deep = |edit: &dyn Fn(&mut crate::ThreadDump)| {
        let mut d = dump.clone();
        d.thread.id = "deep".into();
        for cp in &mut d.checkpoints {
            cp.thread = "deep".into();
        }
        d.pending_writes.clear();
        d.effects.clear();
        d.approvals.clear();
        for e in &mut d.audit {
            e.thread = "deep".into();
        }
        edit(&mut d);
        d
    };
    let err = store
        .restore_thread(deep(&|d| d.checkpoints[1].metadata.extra = json!({ "x": nested(crate::MAX_DOCUMENT_DEPTH) })))
        .unwrap_err();
    assert!(
        matches!(&err, CommitError::TooDeep { source, .. } if source.path.starts_with("checkpoint 1: metadata.extra.x")),
        "{err}"
    );
    let err = store.restore_thread(deep(&|d| d.audit[0].detail = nested(crate::MAX_DOCUMENT_DEPTH + 1))).unwrap_err();
    assert!(
        matches!(&err, CommitError::TooDeep { source, .. } if source.path.starts_with("audit entry 1: detail")),
        "{err}"
    );
    let mut approval = dump.approvals[0].clone();
    approval.thread = "deep".into();
    approval.id = "deep-approval".into();
    approval.conditions = Some(nested(crate::MAX_JSON_DEPTH + 1));
    let err = store.restore_thread(deep(&|d| d.approvals = vec![approval.clone()])).unwrap_err();
    assert!(matches!(&err, CommitError::Approval(ApprovalError::TooDeep { id, .. }) if id == "deep-approval"), "{err}");
    assert!(store.thread("deep").unwrap().is_none());
    assert!(store.approval("deep-approval").unwrap().is_none());
    // At the limits, the same dump is restored and reads back.
    let fits = deep(&|d| {
        d.checkpoints[1].metadata.extra = json!({ "x": nested(crate::MAX_DOCUMENT_DEPTH - 1) });
        d.audit[0].detail = nested(crate::MAX_DOCUMENT_DEPTH);
    });
    store.restore_thread(fits.clone()).unwrap();
    assert_eq!(store.dump_thread("deep").unwrap(), Some(fits));

    // Under another id (approval ids too): the same dump reads back.
    let renamed = |id: &str| format!("{id}-copy");
    let mut copy = dump.clone();
    copy.thread.id = "u".into();
    for cp in &mut copy.checkpoints {
        cp.thread = "u".into();
    }
    for (k, _) in &mut copy.effects {
        k.thread = "u".into();
    }
    for e in &mut copy.audit {
        e.thread = "u".into();
    }
    for a in &mut copy.approvals {
        a.thread = "u".into();
        a.id = renamed(&a.id);
    }
    // One approval id already present: refused as a whole.
    let mut clash = copy.clone();
    clash.approvals[0].id = "a1".into();
    assert!(matches!(store.restore_thread(clash), Err(CommitError::Invalid { .. })));
    assert!(store.thread("u").unwrap().is_none());

    store.restore_thread(copy.clone()).unwrap();
    let back = store.dump_thread("u").unwrap().expect("restored");
    assert_eq!(back, copy);
    assert_eq!(state_at(store, "u", 2), b"sabc".to_vec());
    assert_eq!(state_at(store, "u", 3), b"sad".to_vec());
    let waiting: Vec<String> = store.list_pending_approvals().unwrap().into_iter().map(|a| a.id).collect();
    assert!(waiting.contains(&"a2-copy".to_string()) && !waiting.contains(&"a1-copy".to_string()));
    assert!(store.due_timers(NOW + 500, 10).unwrap().iter().any(|t| t.thread == "u"));
    // The audit log goes on after the restored entries.
    assert_eq!(store.append_audit("u", NewAuditEntry::new(NOW + 3, "bob", "after", json!(null))).unwrap(), 5);

    // A subgraph child comes back with its parent; a parent its id does not extend is refused.
    let child_dump = |id: &str, parent: &str| {
        let mut d = crate::ThreadDump::new(thread(id).child_of(parent));
        d.checkpoints.push(root(id, 0, b"c"));
        d
    };
    for (id, parent) in [("v", "u"), ("uu/settle.0.0.pay", "u"), ("u/settle.0.0.pay", "")] {
        let err = store.restore_thread(child_dump(id, parent)).unwrap_err();
        assert!(
            matches!(&err, CommitError::Invalid { reason, .. } if reason.contains("not a prefix of its id")),
            "{err}"
        );
        assert!(store.thread(id).unwrap().is_none());
    }
    store.restore_thread(child_dump("u/settle.0.0.pay", "u")).unwrap();
    assert_eq!(store.thread("u/settle.0.0.pay").unwrap().unwrap().parent.as_deref(), Some("u"));
}

/// A dump to restore as thread `id`: a root checkpoint, a step, one pending write of the step,
/// one effect, two audit entries and one pending approval.
pub(crate) fn dump_of(id: &str) -> crate::ThreadDump {
    let mut d = crate::ThreadDump::new(thread(id));
    d.checkpoints.push(root(id, 0, b"s"));
    d.checkpoints.push(step(id, 1, 0, &[b"a"]));
    d.pending_writes.push(PendingWrite { seq: 1, node: "n".into(), idx: 0, value: b"w".to_vec() });
    d.effects.push((EffectKey::new(id, 1, "n", "k"), b"r".to_vec()));
    let mut prev = String::new();
    for (seq, kind) in [(1, "one"), (2, "two")] {
        let mut e = crate::AuditEntry {
            thread: id.into(),
            seq,
            at: NOW,
            actor: "bob".into(),
            kind: kind.into(),
            detail: json!(null),
            detail_hash: String::new(),
            link: String::new(),
        };
        crate::audit_chain::seal(&mut e, &prev);
        prev.clone_from(&e.link);
        d.audit.push(e);
    }
    d.approvals.push(approval(&format!("{id}-a"), id));
    d
}

/// What an edited or hostile dump could hold that would not read back as it was, or read
/// back differently on another backend, or leave a thread no commit could go on from: each
/// refused with [`CommitError::Invalid`] saying why, nothing written.
pub fn restore_refuses_what_would_not_read_back(store: &dyn Store) {
    type Edit = fn(&mut crate::ThreadDump);
    let cases: [(&str, Edit, &str); 13] = [
        ("an audit seq past the last", |d| d.audit[1].seq = u64::MAX, "without gaps"),
        ("a gap in the audit seqs", |d| d.audit[1].seq = 3, "without gaps"),
        ("an audit log not from 1", |d| d.audit.remove(0).seq = 0, "without gaps"),
        ("an approval twice", |d| d.approvals.push(d.approvals[0].clone()), "comes twice"),
        ("a pending write twice", |d| d.pending_writes.push(d.pending_writes[0].clone()), "comes twice"),
        ("an effect twice", |d| d.effects.push(d.effects[0].clone()), "comes twice"),
        ("a pending write of no checkpoint", |d| d.pending_writes[0].seq = 7, "not in the dump"),
        ("a NUL byte in the owner", |d| d.thread.owner = "o\0wner".into(), "NUL"),
        ("a NUL byte in an effect key", |d| d.effects[0].0.key = "k\0".into(), "NUL"),
        ("a NUL byte in an audit actor", |d| d.audit[0].actor = "b\0b".into(), "NUL"),
        ("a time past i64::MAX", |d| d.thread.updated_at = u64::MAX, "largest time"),
        ("a parent that is no earlier checkpoint", |d| d.checkpoints[1].parent = Some(1), "not an earlier one"),
        ("a sleeping thread without its timer", |d| d.thread.status = ThreadStatus::Sleeping, "no timer"),
    ];
    for (what, edit, says) in cases {
        let mut d = dump_of("r");
        edit(&mut d);
        let err = store.restore_thread(d).unwrap_err();
        assert!(matches!(&err, CommitError::Invalid { reason, .. } if reason.contains(says)), "{what}: {err}");
        assert!(store.thread("r").unwrap().is_none(), "{what}: written");
        assert!(store.approval("r-a").unwrap().is_none(), "{what}: its approval written");
    }
    // The dump itself is restored, and its log goes on after its last entry.
    let d = dump_of("r");
    store.restore_thread(d.clone()).unwrap();
    assert_eq!(store.dump_thread("r").unwrap(), Some(d));
    assert_eq!(store.append_audit("r", NewAuditEntry::new(NOW + 1, "bob", "after", json!(null))).unwrap(), 3);
}

/// [`Store::restore_threads`] writes a parent and its children as one: a refusal of any of
/// them (here a child whose id exists already) writes none of them.
pub fn restore_threads_writes_all_or_none(store: &dyn Store) {
    let child = |id: &str, parent: &str| {
        let mut d = crate::ThreadDump::new(thread(id).child_of(parent));
        d.checkpoints.push(root(id, 0, b"c"));
        d
    };
    store
        .commit_step(StepCommit::new(thread("p/n.0.0.g").child_of("p")).with_checkpoint(root("p/n.0.0.g", 0, b"x")))
        .unwrap();
    let family = vec![dump_of("p"), child("p/n.0.0.g", "p")];
    let err = store.restore_threads(family).unwrap_err();
    assert!(matches!(&err, CommitError::Invalid { reason, .. } if reason.contains("exists already")), "{err}");
    assert!(store.thread("p").unwrap().is_none(), "the parent was written without its child");
    assert!(store.approval("p-a").unwrap().is_none());
    let family = vec![dump_of("q"), child("q/n.0.0.g", "q"), child("q/n.0.0.g/m.0.0.h", "q/n.0.0.g")];
    store.restore_threads(family.clone()).unwrap();
    for d in family {
        assert_eq!(store.dump_thread(&d.thread.id).unwrap(), Some(d));
    }

    // A thread named twice is refused as such, and nothing is written.
    let err = store.restore_threads(vec![dump_of("w"), dump_of("w")]).unwrap_err();
    assert!(matches!(&err, CommitError::Invalid { reason, .. } if reason.contains("twice")), "{err}");
    assert!(store.thread("w").unwrap().is_none());

    // Records of the thread stored without its record (a run submitted to a worker writes its
    // audit entry and queue row first): the dump is refused, not merged into them.
    let submitted = NewRun::new("s", "graph", Some(b"{}".to_vec()), "owner", NOW);
    store.enqueue_run_audited(submitted, NewAuditEntry::new(NOW, "owner", "run.submitted", json!({}))).unwrap();
    let err = store.restore_threads(vec![dump_of("s")]).unwrap_err();
    assert!(matches!(&err, CommitError::Invalid { reason, .. } if reason.contains("holds audit entries")), "{err}");
    assert!(store.thread("s").unwrap().is_none());
    assert_eq!(store.list_audit("s").unwrap().len(), 1, "the submitted run's entry is as it was");
    let mut journaled = crate::ThreadDump::new(thread("j"));
    journaled.checkpoints.push(root("j", 0, b"j"));
    store.record_effect(&EffectKey::new("j", 0, "node", "key"), b"done").unwrap();
    let err = store.restore_thread(journaled).unwrap_err();
    assert!(matches!(&err, CommitError::Invalid { reason, .. } if reason.contains("journaled results")), "{err}");
}

/// A dump carries the thread's event log with its ids; restored, the log reads back as it was,
/// and its next commit goes on after the newest event (also when the oldest kept is not the
/// first). Events out of order refuse the restore, which writes nothing.
pub fn restore_carries_the_event_log(store: &dyn Store) {
    let event = |kind: &str, n: u64| crate::NewEvent::new(kind, json!({ "n": n }).to_string().into_bytes());
    let mut first = StepCommit::new(thread("t")).with_checkpoint(root("t", 0, b"s"));
    first.events = vec![event("run.started", 0), event("step", 1)];
    store.commit_step(first).unwrap();
    store.commit_step(StepCommit::new(thread("t")).with_events(vec![event("run.finished", 2)])).unwrap();
    let dump = store.dump_thread("t").unwrap().unwrap();
    let ids: Vec<(u64, u32)> = dump.events.iter().map(|e| (e.id.seq, e.id.idx)).collect();
    assert_eq!(ids, [(1, 0), (1, 1), (2, 0)]);
    assert_eq!(dump.events, store.read_events("t", None, 10).unwrap().events);

    // Under another id, its oldest commits trimmed away (seqs 5 and 6 kept).
    let mut moved = dump.clone();
    moved.thread.id = "u".into();
    moved.checkpoints.iter_mut().for_each(|cp| cp.thread = "u".into());
    moved.events.remove(0);
    for e in &mut moved.events {
        e.id.seq += 4;
    }
    store.restore_thread(moved.clone()).unwrap();
    assert_eq!(store.read_events("u", None, 10).unwrap().events, moved.events);
    assert_eq!(store.dump_thread("u").unwrap().unwrap().events, moved.events);
    store.commit_step(StepCommit::new(thread("u")).with_events(vec![event("step", 3)])).unwrap();
    let page = store.read_events("u", None, 10).unwrap();
    let ids: Vec<(u64, u32)> = page.events.iter().map(|e| (e.id.seq, e.id.idx)).collect();
    assert_eq!(ids, [(5, 1), (6, 0), (7, 0)], "the log goes on after the newest");

    // Ids out of order (or repeated) are refused.
    for swap in [true, false] {
        let mut bad = dump.clone();
        bad.thread.id = "v".into();
        bad.checkpoints.iter_mut().for_each(|cp| cp.thread = "v".into());
        if swap {
            bad.events.swap(0, 2);
        } else {
            bad.events[1].id = bad.events[0].id;
        }
        let err = store.restore_thread(bad).unwrap_err();
        assert!(matches!(&err, CommitError::Invalid { thread, .. } if thread == "v"), "{err}");
        assert_eq!(store.thread("v").unwrap(), None);
        assert!(store.read_events("v", None, 10).unwrap().events.is_empty());
    }
}
