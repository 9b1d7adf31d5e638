//! Compaction: what it keeps readable, the effect journal of a resumable thread, and a dump
//! taken while steps commit.

use serde_json::json;

use crate::conformance::fixtures::{NOW, commit, concat, root, state_at, step, thread};
use crate::{
    BoxError, CompactError, EffectKey, EffectOutcome, NewAuditEntry, PendingWrite, StateChain, StepCommit, Store,
    ThreadStatus,
};

/// Compaction keeps the newest checkpoints rebuildable and refuses unfinished threads.
pub fn compaction_keeps_retained_readable(store: &dyn Store) {
    commit(store, root("t", 0, b"S"));
    for seq in 1..10u64 {
        commit(store, step("t", seq, seq - 1, &[format!("{seq}").as_bytes()]));
    }
    // A fork from an old checkpoint is among the newest.
    commit(store, step("t", 10, 2, &[b"f"]));
    let mut pending = StepCommit::new(thread("t"));
    pending.pending_writes.push(PendingWrite { seq: 1, node: "n".to_string(), idx: 0, value: b"w".to_vec() });
    pending.audit.push(NewAuditEntry::new(NOW, "exec", "k", json!(null)));
    store.commit_step(pending).unwrap();
    store.record_effect(&EffectKey::new("t", 1, "n", "k"), b"r").unwrap();
    let before: Vec<Vec<u8>> = (0..=10).map(|s| state_at(store, "t", s)).collect();

    let fold = |chain: &StateChain| Ok::<_, BoxError>(concat(chain));
    let err = store.compact("t", 3, &fold).unwrap_err();
    assert!(matches!(err, CompactError::NotFinished { .. }), "{err}");
    assert!(matches!(store.compact("none", 3, &fold), Err(CompactError::UnknownThread { .. })));

    let mut done = thread("t");
    done.status = ThreadStatus::Completed;
    store.commit_step(StepCommit::new(done)).unwrap();
    let failing = |_: &StateChain| Err::<Vec<u8>, BoxError>("no".into());
    let err = store.compact("t", 3, &failing).unwrap_err();
    assert!(matches!(err, CompactError::Fold { .. }), "{err}");
    assert_eq!(store.list_checkpoints("t").unwrap().len(), 11);

    let report = store.compact("t", 3, &fold).unwrap();
    assert_eq!(report.dropped, 8);
    assert_eq!(report.folded, 2, "seq 8 and the fork 10 need a snapshot; 9 follows 8");
    let kept: Vec<u64> = store.list_checkpoints("t").unwrap().iter().map(|c| c.seq).collect();
    assert_eq!(kept, [8, 9, 10]);
    for seq in [8, 9, 10] {
        assert_eq!(state_at(store, "t", seq), before[seq as usize], "seq {seq}");
    }
    assert_eq!(store.checkpoint("t", 3).unwrap(), None);
    assert!(store.pending_writes("t", 1).unwrap().is_empty());
    assert_eq!(store.effect(&EffectKey::new("t", 1, "n", "k")).unwrap(), None);
    assert_eq!(store.list_audit("t").unwrap().len(), 1, "the audit log is kept");
    let again = store.compact("t", 3, &fold).unwrap();
    assert_eq!((again.dropped, again.folded), (0, 0));
}

/// Compaction of a thread that a resume may still run (`failed`, `cancelled`,
/// `budget_exhausted`) keeps the effects of the checkpoints it drops: the next step of such a
/// thread can look its journal up under an older checkpoint's seq (after an update of its
/// state). Pending writes of dropped checkpoints go as usual, and a `completed` or
/// `compensated` thread loses the effects of its dropped checkpoints too.
pub fn compaction_keeps_the_journal_of_a_resumable_thread(store: &dyn Store) {
    let fold = |chain: &StateChain| Ok::<_, BoxError>(concat(chain));
    let cases = [
        ("failed", ThreadStatus::Failed, true),
        ("cancelled", ThreadStatus::Cancelled, true),
        ("budget", ThreadStatus::BudgetExhausted, true),
        ("completed", ThreadStatus::Completed, false),
        ("compensated", ThreadStatus::Compensated, false),
    ];
    for (id, status, resumable) in cases {
        commit(store, root(id, 0, b"S"));
        for seq in 1..4u64 {
            commit(store, step(id, seq, seq - 1, &[format!("{seq}").as_bytes()]));
        }
        let mut pending = StepCommit::new(thread(id));
        pending.pending_writes.push(PendingWrite { seq: 1, node: "n".to_string(), idx: 0, value: b"w".to_vec() });
        store.commit_step(pending).unwrap();
        // Seq 3's step journaled under seq 1, and an effect of seq 2's own step.
        let (old, mid, head) =
            (EffectKey::new(id, 1, "n", "k"), EffectKey::new(id, 2, "n", "k"), EffectKey::new(id, 3, "m", "k"));
        for (key, result) in [(&old, b"r1"), (&mid, b"r2"), (&head, b"r3")] {
            assert_eq!(store.record_effect(key, result).unwrap(), EffectOutcome::Recorded);
        }
        let mut ended = thread(id);
        ended.status = status;
        store.commit_step(StepCommit::new(ended)).unwrap();
        assert_eq!(status.is_resumable(), resumable, "{status}");

        let report = store.compact(id, 1, &fold).unwrap();
        assert_eq!((report.dropped, report.folded), (3, 1), "{status}");
        let kept: Vec<u64> = store.list_checkpoints(id).unwrap().iter().map(|c| c.seq).collect();
        assert_eq!(kept, [3], "{status}");
        assert_eq!(state_at(store, id, 3), b"S123", "{status}");
        assert!(store.pending_writes(id, 1).unwrap().is_empty(), "{status}: pending writes of dropped checkpoints go");
        assert_eq!(store.effect(&head).unwrap(), Some(b"r3".to_vec()), "{status}");
        let journal = |key: &EffectKey| store.effect(key).unwrap();
        if resumable {
            assert_eq!(journal(&old), Some(b"r1".to_vec()), "{status}: the journal of a resumable thread is kept");
            assert_eq!(journal(&mid), Some(b"r2".to_vec()), "{status}");
            assert_eq!(store.effect_keys(id, 1).unwrap(), vec![old.clone()], "{status}");
            // An export carries the kept journal, and a compensation's (the last seq).
            let saga = EffectKey::new(id, crate::record::MAX_CHECKPOINT_SEQ, "saga", "k");
            assert_eq!(store.record_effect(&saga, b"undone").unwrap(), EffectOutcome::Recorded);
            let dump = store.dump_thread(id).unwrap().expect("the thread");
            let dumped: Vec<&EffectKey> = dump.effects.iter().map(|(k, _)| k).collect();
            assert_eq!(dumped, [&old, &mid, &head, &saga], "{status}: the export carries the whole journal");
            // Still journaled once: recording again keeps the first result.
            assert_eq!(store.record_effect(&old, b"again").unwrap(), EffectOutcome::AlreadyRecorded(b"r1".to_vec()));
        } else {
            assert_eq!(journal(&old), None, "{status}: a finished thread's dropped journal goes");
            assert_eq!(journal(&mid), None, "{status}");
            assert!(store.effect_keys(id, 1).unwrap().is_empty(), "{status}");
        }
        let again = store.compact(id, 1, &fold).unwrap();
        assert_eq!((again.dropped, again.folded), (0, 0), "{status}");
    }
}

/// Not in [`CASES`](super::CASES): for a backend that reads [`Store::dump_thread`] in one snapshot (the
/// default reads part by part, and fails this). While another thread commits `steps` steps,
/// each with an effect of its own in the same commit, dumps of the thread taken meanwhile are
/// each the thread at one moment: the effects are those of its checkpoints, its record's
/// `updated_at` is its latest checkpoint's, and its pending writes are its latest
/// checkpoint's. Answers how many dumps were read while the steps were committed.
pub fn dump_is_one_moment(store: &dyn Store, steps: u64) -> usize {
    let id = "moment";
    let at = |seq: u64| {
        let mut t = thread(id);
        t.updated_at = NOW + seq;
        let mut c = StepCommit::new(t);
        c.pending_writes.push(PendingWrite { seq, node: "n".into(), idx: 0, value: seq.to_string().into_bytes() });
        c.effects.push((EffectKey::new(id, seq, "n", "k"), b"r".to_vec()));
        c
    };
    store.commit_step(at(0).with_checkpoint(root(id, 0, b"S"))).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for seq in 1..=steps {
                store.commit_step(at(seq).with_checkpoint(step(id, seq, seq - 1, &[b"x"]))).unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let mut dumps = 0;
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            let dump = store.dump_thread(id).unwrap().expect("the thread");
            let seqs: Vec<u64> = dump.checkpoints.iter().map(|c| c.seq).collect();
            let effects: Vec<u64> = dump.effects.iter().map(|(k, _)| k.seq).collect();
            assert_eq!(effects, seqs, "the effects are those of the checkpoints");
            let latest = *seqs.last().expect("checkpoint 0");
            assert_eq!(dump.thread.updated_at, NOW + latest, "the record is that of the latest checkpoint");
            let writes: Vec<u64> = dump.pending_writes.iter().map(|w| w.seq).collect();
            assert_eq!(writes, [latest], "the pending writes are those of the latest checkpoint");
            dumps += 1;
        }
        dumps
    })
}

/// A thread compacted while it could still be resumed keeps its whole journal. Once it was
/// resumed and completed, the next compaction drops the journal below its oldest retained
/// checkpoint, even when it drops no checkpoint itself; a compensation's effects (the last
/// seq) stay.
pub fn compaction_after_a_resume_drops_the_journal_kept_for_it(store: &dyn Store) {
    let fold = |chain: &StateChain| Ok::<_, BoxError>(concat(chain));
    let id = "r";
    commit(store, root(id, 0, b"S"));
    for seq in 1..4u64 {
        commit(store, step(id, seq, seq - 1, &[format!("{seq}").as_bytes()]));
    }
    let early = EffectKey::new(id, 1, "n", "k");
    assert_eq!(store.record_effect(&early, b"r1").unwrap(), EffectOutcome::Recorded);
    let mut failed = thread(id);
    failed.status = ThreadStatus::Failed;
    store.commit_step(StepCommit::new(failed)).unwrap();
    assert_eq!(store.compact(id, 2, &fold).unwrap().dropped, 2);
    assert_eq!(store.effect(&early).unwrap(), Some(b"r1".to_vec()), "kept for a resume");

    // Resumed: one more step with an effect of its own, and a compensation's; then completed.
    commit(store, step(id, 4, 3, &[b"4"]));
    let late = EffectKey::new(id, 4, "n", "k");
    let saga = EffectKey::new(id, crate::record::MAX_CHECKPOINT_SEQ, "saga", "k");
    for (key, result) in [(&late, b"r4".as_slice()), (&saga, b"undone".as_slice())] {
        assert_eq!(store.record_effect(key, result).unwrap(), EffectOutcome::Recorded);
    }
    let mut done = thread(id);
    done.status = ThreadStatus::Completed;
    store.commit_step(StepCommit::new(done)).unwrap();
    // Checkpoints 2, 3 and 4, all three kept: nothing to drop, the kept journal goes all the same.
    let report = store.compact(id, 3, &fold).unwrap();
    assert_eq!((report.dropped, report.folded), (0, 0));
    assert_eq!(store.effect(&early).unwrap(), None, "the journal kept for the resume went");
    assert_eq!(store.effect(&late).unwrap(), Some(b"r4".to_vec()));
    assert_eq!(store.effect(&saga).unwrap(), Some(b"undone".to_vec()));
    let keys: Vec<EffectKey> = store.thread_effects(id).unwrap().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, [late.clone(), saga.clone()]);
    // Down to the last checkpoint: its own journal stays.
    assert_eq!(store.compact(id, 1, &fold).unwrap().dropped, 2);
    assert_eq!(store.effect(&late).unwrap(), Some(b"r4".to_vec()), "seq 4 is retained");
    assert_eq!(state_at(store, id, 4), b"S1234");
}
