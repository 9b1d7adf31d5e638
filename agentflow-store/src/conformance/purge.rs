//! Purge and legal hold: a thread and its subgraph children lose their data in one go, keep
//! tombstones and a verifying audit log, and a hold refuses it.

use serde_json::json;

use crate::conformance::fixtures::{NOW, approval, concat, root, step, thread};
use crate::{
    ApprovalStatus, BoxError, CompactError, EffectKey, LegalHold, NewAuditEntry, NewRun, PendingWrite, PurgeError,
    StateChain, StepCommit, Store, ThreadStatus,
};

/// The canary each planted payload holds.
const CANARY: &str = "canary-7f3a";

fn purge_entry(at: u64) -> NewAuditEntry {
    NewAuditEntry::new(at, "dpo", crate::PURGED_KIND, json!({ "request": "ticket-1" }))
}

/// Plants a payload with the canary in every kind of record of `id` (a child of `parent` if
/// given): checkpoints with a snapshot and a delta, a pending write, an effect, an approval
/// with arguments and conditions, an audit entry, a timer.
fn plant(store: &dyn Store, id: &str, parent: Option<&str>) {
    let record = || {
        let t = thread(id);
        match parent {
            Some(p) => t.child_of(p),
            None => t,
        }
    };
    let canary = format!("{CANARY}-{id}");
    store.commit_step(StepCommit::new(record()).with_checkpoint(root(id, 0, canary.as_bytes()))).unwrap();
    store.commit_step(StepCommit::new(record()).with_checkpoint(step(id, 1, 0, &[canary.as_bytes()]))).unwrap();
    let mut c = StepCommit::new(record());
    c.pending_writes.push(PendingWrite { seq: 1, node: "n".into(), idx: 0, value: canary.clone().into_bytes() });
    c.audit.push(NewAuditEntry::new(NOW + 1, "agent", "update_state", json!({ "value": canary })));
    let mut a = approval(&format!("{id}-ap"), id);
    a.args = format!(r#"{{"note":"{canary}"}}"#);
    a.conditions = Some(json!({ "max": canary }));
    c.new_approvals.push(a);
    store.commit_step(c).unwrap();
    store.record_effect(&EffectKey::new(id, 1, "n", "k"), canary.as_bytes()).unwrap();
    let mut sleeping = record();
    sleeping.status = ThreadStatus::Sleeping;
    sleeping.detail = canary.clone();
    store.commit_step(StepCommit::new(sleeping).with_wake_at(NOW + 1_000)).unwrap();
}

/// Every payload of `id` reads back empty through the store's API, its record is a tombstone
/// and its audit log verifies without a canary.
fn assert_purged(store: &dyn Store, id: &str) {
    let record = store.thread(id).unwrap().expect("the record stays as a tombstone");
    assert_eq!(record.status, ThreadStatus::Purged, "{id}");
    assert!(!record.detail.contains(CANARY), "{id}: {}", record.detail);
    assert!(store.list_checkpoints(id).unwrap().is_empty(), "{id}");
    assert!(store.latest_checkpoint(id).unwrap().is_none(), "{id}");
    assert!(store.pending_writes(id, 1).unwrap().is_empty(), "{id}");
    assert!(store.thread_effects(id).unwrap().is_empty(), "{id}");
    assert_eq!(store.effect(&EffectKey::new(id, 1, "n", "k")).unwrap(), None, "{id}");
    assert_eq!(store.thread_timer(id).unwrap(), None, "{id}");
    for a in store.list_approvals(id).unwrap() {
        assert!(a.args.is_empty() && a.conditions.is_none(), "{id}: {a:?}");
        assert_eq!(a.status, ApprovalStatus::Cancelled, "a pending approval of a purged thread is cancelled");
        assert_eq!(a.decided_by.as_deref(), Some("dpo"));
    }
    assert!(store.list_pending_approvals().unwrap().iter().all(|a| a.thread != id), "{id}");
    let audit = store.list_audit(id).unwrap();
    assert!(!audit.is_empty(), "{id}: who did what stays");
    for e in &audit {
        assert!(!e.detail.to_string().contains(CANARY), "{id}: {e:?}");
    }
    let report = store.verify_audit(id).unwrap().expect("the purged log still verifies");
    assert!(report.purged >= 1, "{id}: {report:?}");
    let dump = store.dump_thread(id).unwrap().expect("dump");
    assert!(!format!("{dump:?}").contains(CANARY), "{id}: the dump holds a canary");
}

/// `purge_thread` removes the data of a thread and of its subgraph children (every level),
/// leaves the other threads alone, keeps tombstones and audit logs that verify, appends the
/// `thread.purged` entry with the counts to the thread's log, and purging again succeeds
/// and removes nothing more.
pub fn purge_removes_a_thread_and_its_children(store: &dyn Store) {
    plant(store, "acct", None);
    plant(store, "acct/a.0.0.sub", Some("acct"));
    plant(store, "acct/a.0.0.sub/b.0.0.deep", Some("acct/a.0.0.sub"));
    plant(store, "acct-2", None);
    plant(store, "acct/own", None);
    store.enqueue_run(NewRun::new("acct", "g", Some(CANARY.as_bytes().to_vec()), "o", NOW)).unwrap();

    let report = store.purge_thread("acct", purge_entry(NOW + 5_000)).unwrap();
    assert_eq!(report.threads, ["acct", "acct/a.0.0.sub", "acct/a.0.0.sub/b.0.0.deep"]);
    assert_eq!((report.checkpoints, report.pending_writes, report.effects), (6, 3, 3), "{report:?}");
    assert_eq!((report.approvals, report.timers, report.queued_runs), (3, 3, 1), "{report:?}");
    assert!(report.audit_details >= 6, "{report:?}");
    for id in ["acct", "acct/a.0.0.sub", "acct/a.0.0.sub/b.0.0.deep"] {
        assert_purged(store, id);
    }
    assert!(store.list_runs().unwrap().iter().all(|r| r.thread != "acct"), "the queued run went");
    // The tombstone: who, when, the counts and the caller's detail; its detail is kept.
    let last = store.list_audit("acct").unwrap().pop().unwrap();
    assert_eq!((last.kind.as_str(), last.actor.as_str(), last.at), (crate::PURGED_KIND, "dpo", NOW + 5_000));
    assert_eq!(last.detail["checkpoints"], json!(6));
    assert_eq!(last.detail["request"], json!("ticket-1"));

    // Other threads, one whose id only looks like a child's included, keep everything.
    for id in ["acct-2", "acct/own"] {
        let t = store.thread(id).unwrap().unwrap();
        assert_eq!(t.status, ThreadStatus::Sleeping, "{id}");
        assert_eq!(store.list_checkpoints(id).unwrap().len(), 2, "{id}");
        assert_eq!(store.pending_writes(id, 1).unwrap().len(), 1, "{id}");
        assert!(store.effect(&EffectKey::new(id, 1, "n", "k")).unwrap().is_some(), "{id}");
        assert!(!store.list_approvals(id).unwrap()[0].args.is_empty(), "{id}");
        assert_eq!(store.verify_audit(id).unwrap().unwrap().purged, 0, "{id}");
    }

    // Again: nothing more to remove, one more tombstone entry, the log verifies.
    let again = store.purge_thread("acct", purge_entry(NOW + 6_000)).unwrap();
    assert_eq!(again.threads.len(), 3);
    assert_eq!(
        (again.checkpoints, again.pending_writes, again.effects, again.approvals, again.audit_details),
        (0, 0, 0, 0, 0),
        "{again:?}"
    );
    let kinds: Vec<String> = store.list_audit("acct").unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds.iter().filter(|k| k.as_str() == crate::PURGED_KIND).count(), 2);
    assert_eq!(store.list_audit("acct").unwrap()[kinds.len() - 2].detail["checkpoints"], json!(6));
    store.verify_audit("acct").unwrap().expect("verifies after two purges");

    let unknown = store.purge_thread("nobody", purge_entry(NOW));
    assert!(matches!(unknown, Err(PurgeError::UnknownThread { .. })), "{unknown:?}");
}

/// A legal hold on a thread, or on one of its subgraph children, refuses the purge and
/// changes nothing; setting and releasing a hold are audited; a released hold lets the purge
/// through.
pub fn legal_hold_refuses_purge(store: &dyn Store) {
    plant(store, "case", None);
    plant(store, "case/a.0.0.sub", Some("case"));
    assert_eq!(store.legal_hold("case").unwrap(), None);
    let hold = LegalHold::new("counsel", "matter 42", NOW + 10);
    let entry = |kind: &str| NewAuditEntry::new(NOW + 10, "counsel", kind, json!({ "reason": "matter 42" }));
    store.set_legal_hold("case/a.0.0.sub", Some(hold.clone()), entry("thread.held")).unwrap();
    assert_eq!(store.legal_hold("case/a.0.0.sub").unwrap(), Some(hold.clone()));
    assert_eq!(store.legal_hold("case").unwrap(), None, "a hold is per thread");

    for id in ["case", "case/a.0.0.sub"] {
        match store.purge_thread(id, purge_entry(NOW + 20)) {
            Err(PurgeError::Held { thread, hold: h }) => {
                assert_eq!(thread, "case/a.0.0.sub");
                assert_eq!(h, hold);
            }
            other => panic!("{id}: a held thread was purged: {other:?}"),
        }
    }
    // Nothing changed.
    for id in ["case", "case/a.0.0.sub"] {
        assert_eq!(store.list_checkpoints(id).unwrap().len(), 2, "{id}");
        assert_eq!(store.thread(id).unwrap().unwrap().status, ThreadStatus::Sleeping, "{id}");
        assert_eq!(store.verify_audit(id).unwrap().unwrap().purged, 0, "{id}");
    }
    assert!(store.list_audit("case").unwrap().iter().all(|e| e.kind != crate::PURGED_KIND));
    let held = store.list_audit("case/a.0.0.sub").unwrap().pop().unwrap();
    assert_eq!((held.kind.as_str(), held.actor.as_str()), ("thread.held", "counsel"));

    let unknown = store.set_legal_hold("nobody", Some(hold.clone()), entry("thread.held"));
    assert!(matches!(unknown, Err(PurgeError::UnknownThread { .. })), "{unknown:?}");

    store.set_legal_hold("case/a.0.0.sub", None, entry("thread.released")).unwrap();
    assert_eq!(store.legal_hold("case/a.0.0.sub").unwrap(), None);
    store.purge_thread("case", purge_entry(NOW + 30)).unwrap();
    assert_purged(store, "case");
    assert_purged(store, "case/a.0.0.sub");
    // The governance entries keep their details through the purge.
    let kinds: Vec<(String, bool)> = store
        .list_audit("case/a.0.0.sub")
        .unwrap()
        .into_iter()
        .map(|e| (e.kind, crate::audit_chain::is_purged(&e.detail)))
        .collect();
    assert!(kinds.contains(&("thread.held".to_string(), false)), "{kinds:?}");
    assert!(kinds.contains(&("thread.released".to_string(), false)), "{kinds:?}");
}

/// A hold on a thread keeps its subgraph children at every level: none of them is purged on
/// its own (the purge names the held ancestor), and neither the held thread nor any of them is
/// compacted; nothing changes. Threads outside the held family are compacted as usual, and a
/// released hold lets a child's purge through.
pub fn a_hold_keeps_the_subgraph_children_of_the_held_thread(store: &dyn Store) {
    let family = [
        ("matter", None),
        ("matter/a.0.0.sub", Some("matter")),
        ("matter/a.0.0.sub/b.1.0.deep", Some("matter/a.0.0.sub")),
    ];
    for (id, parent) in family.into_iter().chain([("other", None)]) {
        plant(store, id, parent);
        let mut record = thread(id);
        record.parent = parent.map(str::to_string);
        record.status = ThreadStatus::Completed;
        store.commit_step(StepCommit::new(record)).unwrap();
    }
    let hold = LegalHold::new("counsel", "matter 43", NOW + 10);
    let entry = |kind: &str| NewAuditEntry::new(NOW + 10, "counsel", kind, json!({ "reason": "matter 43" }));
    store.set_legal_hold("matter", Some(hold.clone()), entry("thread.held")).unwrap();

    for id in ["matter/a.0.0.sub", "matter/a.0.0.sub/b.1.0.deep"] {
        match store.purge_thread(id, purge_entry(NOW + 20)) {
            Err(PurgeError::Held { thread, hold: h }) => assert_eq!((thread.as_str(), h), ("matter", hold.clone())),
            other => panic!("{id}: the child of a held thread was purged: {other:?}"),
        }
    }
    let fold = |chain: &StateChain| Ok::<_, BoxError>(concat(chain));
    for (id, _) in family {
        match store.compact(id, 1, &fold) {
            Err(CompactError::Held { thread, held, hold: h }) => {
                assert_eq!((thread.as_str(), held.as_str(), h), (id, "matter", hold.clone()));
            }
            other => panic!("{id}: a held thread or its child was compacted: {other:?}"),
        }
    }
    // Nothing changed.
    for (id, _) in family {
        assert_eq!(store.list_checkpoints(id).unwrap().len(), 2, "{id}");
        assert_eq!(store.thread(id).unwrap().unwrap().status, ThreadStatus::Completed, "{id}");
        assert_eq!(store.verify_audit(id).unwrap().unwrap().purged, 0, "{id}");
        assert!(store.list_audit(id).unwrap().iter().all(|e| e.kind != crate::PURGED_KIND), "{id}");
    }
    assert_eq!(store.compact("other", 1, &fold).unwrap().dropped, 1);

    store.set_legal_hold("matter", None, entry("thread.released")).unwrap();
    store.purge_thread("matter/a.0.0.sub", purge_entry(NOW + 30)).unwrap();
    assert_purged(store, "matter/a.0.0.sub");
    assert_purged(store, "matter/a.0.0.sub/b.1.0.deep");
    assert_eq!(store.list_checkpoints("matter").unwrap().len(), 2);
}
