//! Unit tests of the sealing store: every payload kind sealed and opened, tampering, rotation,
//! crypto-erasure by purge, key stores and providers.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::conformance::{NOW, approval, concat, root, step, thread};
use crate::{
    ApprovalPatch, ApprovalStatus, EffectKey, LegalHold, NewAuditEntry, PendingWrite, PurgeError, RedbStore,
    StepCommit, StorageError, Store, ThreadDump,
};

fn kek(byte: u8) -> Kek {
    Kek::new([byte; KEY_LEN])
}

fn provider(byte: u8) -> StaticKeyProvider {
    StaticKeyProvider::new(kek(byte), vec![])
}

fn sealed(keys: Arc<MemoryKeyStore>, p: StaticKeyProvider) -> SealedStore<RedbStore> {
    SealedStore::new(RedbStore::in_memory().unwrap(), keys, p)
}

/// Writes one of each payload kind of thread `t`, each holding `canary`.
fn write_all(store: &dyn Store, t: &str, canary: &str) {
    let mut cp = root(t, 0, format!("state {canary}-snapshot").as_bytes());
    cp.metadata.extra = json!({ "payloads": [format!("{canary}-extra")] });
    let mut a = approval(&format!("{t}-a1"), t);
    a.args = format!(r#"{{"to":"{canary}-args"}}"#);
    a.conditions = Some(json!({ "max": format!("{canary}-conditions") }));
    let mut commit = StepCommit::new(thread(t)).with_checkpoint(cp);
    commit.effects.push((EffectKey::new(t, 0, "n", "call-1"), format!("{canary}-effect").into_bytes()));
    commit.audit.push(NewAuditEntry::new(NOW, "alice", "update_state", json!({ "value": format!("{canary}-audit") })));
    commit.new_approvals.push(a);
    store.commit_step(commit).unwrap();
    store
        .commit_step(StepCommit::new(thread(t)).with_checkpoint(step(t, 1, 0, &[format!("{canary}-delta").as_bytes()])))
        .unwrap();
    let mut pending = StepCommit::new(thread(t));
    pending.pending_writes.push(PendingWrite {
        seq: 1,
        node: "n".into(),
        idx: 3,
        value: format!("{canary}-pending").into_bytes(),
    });
    store.commit_step(pending).unwrap();
    let mut patch = ApprovalPatch::by("bob", NOW + 1);
    patch.note = Some(format!("{canary}-note"));
    store.transition_approval(&format!("{t}-a1"), ApprovalStatus::Pending, ApprovalStatus::Approved, patch).unwrap();
}

/// Every stored form of `t` in `store`, as text.
fn raw_text(store: &dyn Store, t: &str) -> String {
    let d = store.dump_thread(t).unwrap().expect("thread");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut out = format!("{:?} {:?} ", d.audit, d.approvals);
    for cp in &d.checkpoints {
        out += &format!("{} {} ", cp.snapshot.as_deref().map(text).unwrap_or_default(), cp.metadata.extra);
        out += &cp.delta.iter().map(|b| text(b)).collect::<Vec<_>>().join(" ");
    }
    for w in &d.pending_writes {
        out += &format!(" {}", text(&w.value));
    }
    for (_, v) in &d.effects {
        out += &format!(" {}", text(v));
    }
    out
}

#[test]
fn every_payload_kind_is_sealed_in_the_wrapped_store_and_opens_through_the_wrapper() {
    let store = sealed(Arc::new(MemoryKeyStore::new()), provider(1));
    write_all(&store, "t1", "CANARY");
    let raw = raw_text(store.inner(), "t1");
    assert!(!raw.contains("CANARY"), "{raw}");
    let opened = raw_text(&store, "t1");
    for part in ["snapshot", "extra", "pending", "effect", "audit", "args", "conditions", "note", "delta"] {
        assert!(opened.contains(&format!("CANARY-{part}")), "{part} missing from {opened}");
    }
    let a = store.approval("t1-a1").unwrap().unwrap();
    assert_eq!(a.args, r#"{"to":"CANARY-args"}"#);
    assert_eq!(a.decision_note.as_deref(), Some("CANARY-note"));
    assert_eq!(store.inner().thread("t1").unwrap().unwrap().id, "t1");
    assert!(store.verify_audit("t1").unwrap().is_ok());
    let audit = store.list_audit("t1").unwrap();
    let approved = audit.iter().find(|e| e.kind == "approval.approved").expect("approved entry");
    assert_eq!(approved.detail["note"], "CANARY-note");
    assert!(store.seals_payloads());
    assert!(!store.inner().seals_payloads());
}

#[test]
fn a_sealed_value_moved_to_another_thread_does_not_open() {
    let store = sealed(Arc::new(MemoryKeyStore::new()), provider(1));
    write_all(&store, "a", "X");
    write_all(&store, "b", "Y");
    let sealed_a = store.inner().effect(&EffectKey::new("a", 0, "n", "call-1")).unwrap().unwrap();
    store.inner().record_effect(&EffectKey::new("b", 0, "n", "moved"), &sealed_a).unwrap();
    let err = store.effect(&EffectKey::new("b", 0, "n", "moved")).unwrap_err();
    assert!(matches!(&err, crate::ReadError::Storage(StorageError::Sealed { thread, .. }) if thread == "b"), "{err}");
    // Moved to another field of the same thread: a pending write read as an effect result.
    let pending = store.inner().pending_writes("a", 1).unwrap().remove(0).value;
    store.inner().record_effect(&EffectKey::new("a", 0, "n", "moved"), &pending).unwrap();
    assert!(store.effect(&EffectKey::new("a", 0, "n", "moved")).is_err());
}

#[test]
fn rotation_rewraps_every_key_and_payloads_open_with_only_the_new_kek() {
    let keys = Arc::new(MemoryKeyStore::new());
    let before = sealed(keys.clone(), provider(1));
    write_all(&before, "t1", "OLD");
    let raw_before = raw_text(before.inner(), "t1");
    let report = rotate_keys(keys.as_ref(), &provider(1), &provider(2)).unwrap();
    assert_eq!(report.rewrapped, 1);
    assert_eq!(keys.get("t1").unwrap().unwrap().kek_id, kek(2).id());
    // The payloads were not touched.
    assert_eq!(raw_text(before.inner(), "t1"), raw_before);
    let dump = before.inner().dump_thread("t1").unwrap().unwrap();
    let after = sealed(keys.clone(), provider(2));
    after.inner().restore_thread(dump).unwrap();
    assert!(raw_text(&after, "t1").contains("OLD-snapshot"));
    // The old key alone no longer opens the thread.
    let old_only = sealed(keys.clone(), provider(1));
    old_only.inner().restore_thread(before.inner().dump_thread("t1").unwrap().unwrap()).unwrap();
    assert!(old_only.latest_checkpoint("t1").is_err());
    // Running it again moves nothing.
    assert_eq!(rotate_keys(keys.as_ref(), &provider(1), &provider(2)).unwrap().current, 1);
}

#[test]
fn purge_destroys_the_keys_so_a_copy_taken_before_no_longer_opens_that_thread() {
    let keys = Arc::new(MemoryKeyStore::new());
    let store = sealed(keys.clone(), provider(1));
    write_all(&store, "gone", "GONE");
    write_all(&store, "kept", "KEPT");
    let mut child = thread("gone/child");
    child.parent = Some("gone".into());
    store.commit_step(StepCommit::new(child).with_checkpoint(root("gone/child", 0, b"child state"))).unwrap();
    let copy: Vec<ThreadDump> =
        ["gone", "gone/child", "kept"].iter().map(|t| store.inner().dump_thread(t).unwrap().unwrap()).collect();
    let report = store.purge_thread("gone", NewAuditEntry::new(NOW + 5, "dpo", "thread.purged", json!({}))).unwrap();
    assert!(report.threads.contains(&"gone/child".to_string()), "{report:?}");
    assert!(keys.get("gone").unwrap().unwrap().is_destroyed());
    assert!(keys.get("gone/child").unwrap().unwrap().is_destroyed());
    // The copy, opened with the key store as it is now.
    let restored = sealed(keys.clone(), provider(1));
    restored.inner().restore_threads(copy).unwrap();
    for t in ["gone", "gone/child"] {
        let err = restored.latest_checkpoint(t).unwrap_err();
        assert!(matches!(&err, crate::ReadError::Storage(StorageError::Sealed { thread, .. }) if thread == t), "{err}");
    }
    assert!(restored.dump_thread("gone").is_err());
    assert!(raw_text(&restored, "kept").contains("KEPT-snapshot"));
    // Purging again succeeds (and purges nothing more).
    store.purge_thread("gone", NewAuditEntry::new(NOW + 6, "dpo", "thread.purged", json!({}))).unwrap();
    // The thread's tombstone and its audit log stay readable.
    assert!(store.list_audit("gone").unwrap().iter().any(|e| e.kind == "thread.purged"));
}

#[test]
fn purging_again_destroys_a_key_a_crash_left_live_after_the_wrapped_store_purged() {
    let keys = Arc::new(MemoryKeyStore::new());
    let store = sealed(keys.clone(), provider(1));
    write_all(&store, "cut", "CUT");
    // The wrapped store's purge committed, then the process stopped before the keys went.
    store.inner().purge_thread("cut", NewAuditEntry::new(NOW + 5, "dpo", "thread.purged", json!({}))).unwrap();
    assert!(!keys.get("cut").unwrap().unwrap().is_destroyed());
    let report = store.purge_thread("cut", NewAuditEntry::new(NOW + 6, "dpo", "thread.purged", json!({}))).unwrap();
    assert_eq!(report.threads, ["cut"]);
    assert_eq!(report.checkpoints, 0);
    assert!(keys.get("cut").unwrap().unwrap().is_destroyed());
}

#[test]
fn a_hold_on_a_parent_refuses_the_purge_of_its_child_before_any_key_is_destroyed() {
    let keys = Arc::new(MemoryKeyStore::new());
    let store = sealed(keys.clone(), provider(1));
    write_all(&store, "case", "CASE");
    store
        .commit_step(StepCommit::new(thread("case/review").child_of("case")).with_checkpoint(root(
            "case/review",
            0,
            b"child state",
        )))
        .unwrap();
    store
        .set_legal_hold(
            "case",
            Some(LegalHold::new("legal", "case 7", NOW)),
            NewAuditEntry::new(NOW, "legal", "thread.held", json!({})),
        )
        .unwrap();
    let err =
        store.purge_thread("case/review", NewAuditEntry::new(NOW, "dpo", "thread.purged", json!({}))).unwrap_err();
    assert!(matches!(&err, PurgeError::Held { thread, .. } if thread == "case"), "{err}");
    assert!(!keys.get("case/review").unwrap().unwrap().is_destroyed());
    assert_eq!(store.latest_checkpoint("case/review").unwrap().unwrap().seq, 0);
}

#[test]
fn a_legal_hold_refuses_the_purge_before_any_key_is_destroyed() {
    let keys = Arc::new(MemoryKeyStore::new());
    let store = sealed(keys.clone(), provider(1));
    write_all(&store, "held", "H");
    store
        .set_legal_hold(
            "held",
            Some(LegalHold::new("legal", "case 7", NOW)),
            NewAuditEntry::new(NOW, "legal", "thread.held", json!({})),
        )
        .unwrap();
    let err = store.purge_thread("held", NewAuditEntry::new(NOW, "dpo", "thread.purged", json!({}))).unwrap_err();
    assert!(matches!(err, PurgeError::Held { .. }), "{err}");
    assert!(!keys.get("held").unwrap().unwrap().is_destroyed());
    assert!(raw_text(&store, "held").contains("H-snapshot"));
    let err = store.purge_thread("nobody", NewAuditEntry::new(NOW, "dpo", "thread.purged", json!({}))).unwrap_err();
    assert!(matches!(err, PurgeError::UnknownThread { .. }), "{err}");
}

#[test]
fn a_thread_written_again_after_its_key_was_destroyed_gets_the_next_generation() {
    let keys = Arc::new(MemoryKeyStore::new());
    let store = sealed(keys.clone(), provider(1));
    store.append_audit("t", NewAuditEntry::new(NOW, "a", "note", json!({"x": 1}))).unwrap();
    assert_eq!(keys.get("t").unwrap().unwrap().generation, 1);
    store.ring.destroy("t").unwrap();
    assert!(store.list_audit("t").is_err());
    store.append_audit("t", NewAuditEntry::new(NOW, "a", "note", json!({"x": 2}))).unwrap();
    assert_eq!(keys.get("t").unwrap().unwrap().generation, 2);
    let listing = store.scan_audit("t").unwrap();
    assert_eq!(listing.items.len(), 1);
    assert_eq!(listing.items[0].detail, json!({"x": 2}));
    assert_eq!(listing.skipped.len(), 1);
}

#[test]
fn a_bounded_cache_still_opens_every_thread_and_a_missing_kek_is_named() {
    let keys = Arc::new(MemoryKeyStore::new());
    let store = sealed(keys.clone(), provider(1)).with_key_cache(1);
    for t in ["a", "b", "c"] {
        write_all(&store, t, t);
    }
    for t in ["a", "b", "c"] {
        assert!(raw_text(&store, t).contains(&format!("{t}-snapshot")));
    }
    let other = sealed(keys, provider(9));
    other.inner().restore_thread(store.inner().dump_thread("a").unwrap().unwrap()).unwrap();
    let err = other.latest_checkpoint("a").unwrap_err().to_string();
    assert!(err.contains(kek(1).id()) && err.contains("does not hold"), "{err}");
}

#[test]
fn keks_parse_from_hex_and_base64_and_bad_ones_are_refused() {
    let hex = "00".repeat(31) + "ff";
    let k = Kek::parse(&hex, "test").unwrap();
    assert_eq!(
        k.id(),
        Kek::new({
            let mut b = [0u8; 32];
            b[31] = 0xff;
            b
        })
        .id()
    );
    let b64 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    assert!(Kek::parse(b64, "test").is_ok());
    assert!(matches!(Kek::parse("AAEC", "test"), Err(SealError::BadKey { .. })));
    assert!(matches!(Kek::parse("not a key!", "test"), Err(SealError::BadKey { .. })));
    assert!(!format!("{k:?}").contains("ff"), "Debug shows only the id");
}

#[test]
fn env_and_file_providers_read_a_current_and_older_keys() {
    let dir = std::env::temp_dir().join(format!("agentflow-sealed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("kek");
    let (a, b) = ("11".repeat(32), "22".repeat(32));
    std::fs::write(&file, format!("# current first\n{a}\n{b}\n")).unwrap();
    let p = FileKeyProvider::open(&file).unwrap();
    assert_eq!(p.current().id(), Kek::new([0x11; 32]).id());
    assert!(p.key(Kek::new([0x22; 32]).id()).is_some());
    assert!(FileKeyProvider::open(dir.join("missing")).is_err());
    // A variable nothing sets.
    let var = format!("AGENTFLOW_TEST_KEK_{}", std::process::id());
    assert!(EnvKeyProvider::from_env(&var).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_redb_key_store_keeps_keys_across_reopens_and_destroys_them() {
    let dir = std::env::temp_dir().join(format!("agentflow-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("keys.redb");
    let record = KeyRecord::new(1, "kek", vec![7; 56]);
    {
        let ks = RedbKeyStore::open(&path).unwrap();
        assert_eq!(ks.create("t", record.clone()).unwrap(), record);
        // A second create keeps the first key.
        assert_eq!(ks.create("t", KeyRecord::new(1, "other", vec![8; 56])).unwrap(), record);
    }
    let ks = RedbKeyStore::open(&path).unwrap();
    assert_eq!(ks.get("t").unwrap(), Some(record.clone()));
    assert!(ks.replace("t", &record, KeyRecord::new(1, "kek2", vec![9; 56])).unwrap());
    assert!(!ks.replace("t", &record, KeyRecord::new(1, "kek3", vec![9; 56])).unwrap());
    assert!(ks.destroy("t").unwrap());
    assert!(!ks.destroy("t").unwrap());
    let destroyed = ks.get("t").unwrap().unwrap();
    assert!(destroyed.is_destroyed() && destroyed.generation == 1);
    assert_eq!(ks.threads().unwrap(), vec!["t".to_string()]);
    drop(ks);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn compaction_folds_the_opened_chain_and_seals_the_new_snapshot() {
    let store = sealed(Arc::new(MemoryKeyStore::new()), provider(1));
    write_all(&store, "t", "C");
    let mut done = thread("t");
    done.status = crate::ThreadStatus::Completed;
    store.commit_step(StepCommit::new(done)).unwrap();
    store.compact("t", 1, &|chain| Ok(concat(chain))).unwrap();
    let cp = store.latest_checkpoint("t").unwrap().unwrap();
    assert_eq!(cp.snapshot.as_deref(), Some(b"state C-snapshotC-delta".as_slice()));
    assert!(!raw_text(store.inner(), "t").contains("C-snapshot"));
}

/// A data key is durable before the first payload sealed with it is committed: a commit that
/// fails after the key was made (here refused for a lease not held; a crash at the same point
/// is alike) leaves a key and no data, and the next commit uses that key.
#[test]
fn a_key_made_for_a_commit_that_did_not_happen_is_used_by_the_next_one() {
    let keys = Arc::new(MemoryKeyStore::new());
    let store = sealed(keys.clone(), provider(1));
    let refused = StepCommit::new(thread("t")).with_checkpoint(root("t", 0, b"first")).fenced_by("nobody", NOW);
    assert!(store.commit_step(refused).is_err());
    let made = keys.get("t").unwrap().expect("the key was kept before the commit");
    assert!(store.latest_checkpoint("t").unwrap().is_none());
    // A new process (an empty cache) on the same key store.
    let again = sealed(keys.clone(), provider(1));
    let dump = store.inner().dump_thread("t").unwrap();
    assert!(dump.is_none());
    again.commit_step(StepCommit::new(thread("t")).with_checkpoint(root("t", 0, b"second"))).unwrap();
    assert_eq!(keys.get("t").unwrap(), Some(made));
    assert_eq!(again.latest_checkpoint("t").unwrap().unwrap().snapshot.as_deref(), Some(b"second".as_slice()));
}

#[test]
fn event_data_is_sealed_on_write_and_opened_on_read_its_kind_left_clear() {
    const CANARY: &str = "canary-event-9c1";
    let store = sealed(Arc::new(MemoryKeyStore::new()), provider(1));
    let data = |n: u32| json!({ "text": format!("{CANARY}-{n}") }).to_string().into_bytes();
    let events = vec![crate::NewEvent::new("step", data(0)), crate::NewEvent::new("run.finished", data(1))];
    store.commit_step(StepCommit::new(thread("t")).with_events(events)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let then = StepCommit::new(thread("t")).with_events(vec![crate::NewEvent::new("step", data(2))]);
    store.commit_step_then(then, Box::new(move |r| tx.send(r.map(drop)).unwrap()));
    rx.recv().unwrap().unwrap();

    let page = store.read_events("t", None, 10).unwrap();
    let opened: Vec<(&str, Vec<u8>)> = page.events.iter().map(|e| (e.kind.as_str(), e.data.clone())).collect();
    assert_eq!(opened, [("step", data(0)), ("run.finished", data(1)), ("step", data(2))]);
    let raw = store.inner().read_events("t", None, 10).unwrap();
    assert_eq!(raw.events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(), ["step", "run.finished", "step"]);
    for e in &raw.events {
        assert!(!String::from_utf8_lossy(&e.data).contains(CANARY), "stored in clear: {e:?}");
    }
    assert_eq!((raw.oldest, raw.newest), (page.oldest, page.newest));

    // Its key destroyed, the log does not open.
    store.ring.destroy("t").unwrap();
    assert!(store.read_events("t", None, 10).is_err());
}

#[test]
fn a_wake_given_to_the_sealed_store_hears_the_wrapped_stores_commits() {
    let store = sealed(Arc::new(MemoryKeyStore::new()), provider(1));
    let woken = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&woken);
    assert!(store.on_events(Arc::new(move |t: &str| seen.lock().unwrap().push(t.to_string()))));
    store
        .commit_step(StepCommit::new(thread("t")).with_events(vec![crate::NewEvent::new("step", b"{}".to_vec())]))
        .unwrap();
    assert_eq!(*woken.lock().unwrap(), ["t"]);
}

#[test]
fn follow_up_inputs_schedule_inputs_webhook_payloads_and_dumped_events_are_sealed() {
    use crate::{FollowUpPlace, NewEvent, NewRun, NewWebhookDelivery, RunWait, ScheduleFire, ScheduleRecord, Settle};
    const CANARY: &str = "canary-admission-4d2";
    let keys = Arc::new(MemoryKeyStore::new());
    let store = sealed(keys.clone(), provider(1));
    let secret = |part: &str| format!("{CANARY}-{part}").into_bytes();
    let entry = || NewAuditEntry::new(NOW, "alice", "run.submitted", json!({ "who": format!("{CANARY}-entry") }));
    let clear = |bytes: &[u8]| String::from_utf8_lossy(bytes).contains(CANARY);

    // A schedule's input, under its own key; its fire's run and entry under the thread's.
    let schedule = ScheduleRecord::new("s", "g", "0 * * * *", secret("schedule"), "alice", NOW, NOW);
    store.put_schedule(schedule.clone()).unwrap();
    assert!(!clear(&store.inner().schedule("s").unwrap().unwrap().input));
    assert_eq!(store.schedule("s").unwrap().unwrap().input, secret("schedule"));
    assert_eq!(store.scan_schedules().unwrap().items, [schedule]);
    let run = NewRun::new("t", "g", Some(secret("fired")), "alice", NOW).with_webhook("https://example.test/t");
    assert!(store.fire_schedule(ScheduleFire::new("s", NOW, NOW + 1, NOW, run, entry())).unwrap());
    assert!(!clear(store.inner().list_runs().unwrap()[0].input.as_deref().unwrap()));
    assert!(!format!("{:?}", store.inner().list_audit("t").unwrap()).contains(CANARY));
    assert_eq!(store.list_audit("t").unwrap()[0].detail["who"], format!("{CANARY}-entry"));

    // A follow-up's input, as a run input.
    let follow_up = NewRun::new("t", "g", Some(secret("follow-up")), "alice", NOW + 1).as_follow_up(None);
    store.enqueue_follow_up(follow_up, entry(), FollowUpPlace::Back).unwrap();
    assert!(!clear(store.inner().list_follow_ups("t").unwrap()[0].input.as_deref().unwrap()));
    assert_eq!(store.list_follow_ups("t").unwrap()[0].input.as_deref(), Some(secret("follow-up").as_slice()));

    // The webhook payload written by the settle; the follow-up claimed after it opens.
    assert_eq!(
        store.claim_runs("g", "w", 1000, NOW + 2, 1).unwrap()[0].input.as_deref(),
        Some(secret("fired").as_slice())
    );
    let hook = NewWebhookDelivery::new("https://example.test/t", secret("payload")).at(NOW + 3);
    assert!(store.settle_run_and_release("t", "w", &Settle::remove().with_webhook(hook)).unwrap());
    assert!(!clear(&store.inner().list_webhooks("t").unwrap()[0].payload));
    assert_eq!(store.list_webhooks("t").unwrap()[0].payload, secret("payload"));
    assert_eq!(store.due_webhooks(NOW + 3, 10).unwrap().items[0].payload, secret("payload"));
    let next = store.claim_runs("g", "w", 1000, NOW + 4, 1).unwrap();
    assert_eq!(next[0].input.as_deref(), Some(secret("follow-up").as_slice()));
    assert!(store.settle_run_and_release("t", "w", &Settle::park(RunWait::Answer)).unwrap());

    // A dump's events open through the wrapper and are sealed again where it is restored.
    let events = vec![NewEvent::new("step", secret("event"))];
    store.commit_step(StepCommit::new(thread("t")).with_events(events)).unwrap();
    let dump = store.dump_thread("t").unwrap().unwrap();
    assert_eq!(dump.events[0].data, secret("event"));
    assert!(!clear(&store.inner().dump_thread("t").unwrap().unwrap().events[0].data));
    let other = sealed(keys.clone(), provider(1));
    other.restore_thread(dump).unwrap();
    assert!(!clear(&other.inner().read_events("t", None, 10).unwrap().events[0].data));
    assert_eq!(other.read_events("t", None, 10).unwrap().events[0].data, secret("event"));

    // Deleting the schedule destroys its key: a copy of its row no longer opens.
    let copy = store.inner().schedule("s").unwrap().unwrap();
    assert!(store.delete_schedule("s").unwrap());
    store.inner().put_schedule(copy).unwrap();
    assert!(store.schedule("s").is_err(), "its key is destroyed");
    // A row that does not open hides no other schedule: it is skipped and reported.
    let kept = ScheduleRecord::new("s-kept", "g", "0 * * * *", secret("kept"), "alice", NOW, NOW);
    store.put_schedule(kept.clone()).unwrap();
    let listing = store.scan_schedules().unwrap();
    assert_eq!(listing.items, [kept]);
    assert_eq!(listing.skipped.len(), 1, "{:?}", listing.skipped);
}
