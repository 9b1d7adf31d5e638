//! A bit flipped in a stored value is a typed decode error even when the file
//! is opened without `verify_on_open`: every record and every payload carries
//! a checksum. Each case flips one bit of the file inside a value (located by
//! a marker only that value holds) and reads it back: the read must give the
//! value as written (the flip hit a stale copy) or `StorageError::Decode`,
//! never other data.

use crate::common;

use std::path::Path;

use agentflow_store::conformance::{self, approval, root, step, thread};
use agentflow_store::{EffectKey, NewAuditEntry, PendingWrite, ReadError, RedbStore, StepCommit, StorageError, Store};
use common::TempDir;
use serde_json::json;

const SNAPSHOT: &[u8] = b"SNAPSHOT-marker-0123456789";
const DELTA: &[u8] = b"DELTA-marker-0123456789";
const WRITE: &[u8] = b"WRITE-marker-0123456789";
const EFFECT: &[u8] = b"EFFECT-marker-0123456789";
const AUDIT: &str = "AUDIT-marker-0123456789";
const REASON: &str = "REASON-marker-0123456789";
const CURSOR: &str = "CURSOR-marker-0123456789";

fn populated(path: &Path) {
    let store = RedbStore::open(path).unwrap();
    conformance::commit(&store, root("t", 0, SNAPSHOT));
    let mut cp = step("t", 1, 0, &[DELTA]);
    cp.cursor = vec![CURSOR.to_string()];
    let mut commit = StepCommit::new(thread("t")).with_checkpoint(cp);
    commit.pending_writes.push(PendingWrite { seq: 1, node: "n".into(), idx: 0, value: WRITE.to_vec() });
    commit.effects.push((EffectKey::new("t", 1, "n", "k"), EFFECT.to_vec()));
    commit.audit.push(NewAuditEntry::new(5, "ops", "note", json!({ "text": AUDIT })));
    let mut a = approval("a1", "t");
    a.reason = REASON.to_string();
    commit.new_approvals.push(a);
    store.commit_step(commit).unwrap();
    store.close().unwrap();
}

/// What each marker's value reads back as: `Ok(true)` unchanged, `Ok(false)`
/// changed, `Err` a decode error.
fn read_back(store: &RedbStore, marker: &[u8]) -> Result<bool, StorageError> {
    let storage = |e: ReadError| match e {
        ReadError::Storage(s) => s,
        other => panic!("unexpected error {other:?}"),
    };
    Ok(match marker {
        m if m == SNAPSHOT => store.checkpoint("t", 0).map_err(storage)?.unwrap().snapshot.as_deref() == Some(SNAPSHOT),
        m if m == DELTA => store.checkpoint("t", 1).map_err(storage)?.unwrap().delta == [DELTA.to_vec()],
        m if m == CURSOR.as_bytes() => {
            store.list_checkpoints("t").map_err(storage)?.last().unwrap().cursor == [CURSOR.to_string()]
        }
        m if m == WRITE => {
            store.pending_writes("t", 1).map_err(storage)?.first().map(|w| w.value.as_slice()) == Some(WRITE)
        }
        m if m == EFFECT => {
            store.effect(&EffectKey::new("t", 1, "n", "k")).map_err(storage)?.as_deref() == Some(EFFECT)
        }
        m if m == AUDIT.as_bytes() => {
            store.list_audit("t").map_err(storage)?.iter().any(|e| e.detail == json!({ "text": AUDIT }))
        }
        m if m == REASON.as_bytes() => store.approval("a1").map_err(storage)?.unwrap().reason == REASON,
        _ => unreachable!(),
    })
}

fn positions(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    haystack.windows(needle.len()).enumerate().filter(|(_, w)| *w == needle).map(|(i, _)| i).collect()
}

#[test]
fn a_flipped_bit_in_any_stored_value_is_a_decode_error_without_verify_on_open() {
    let dir = TempDir::new("bitflip");
    let original = dir.file("original.redb");
    populated(&original);
    let bytes = std::fs::read(&original).unwrap();
    let markers: [&[u8]; 7] = [SNAPSHOT, DELTA, CURSOR.as_bytes(), WRITE, EFFECT, AUDIT.as_bytes(), REASON.as_bytes()];
    let mut case = 0;
    for marker in markers {
        let found = positions(&bytes, marker);
        assert!(!found.is_empty(), "marker {} not in the file", String::from_utf8_lossy(marker));
        let mut detected = 0;
        for &at in &found {
            for (offset, bit) in [(0usize, 0u8), (7, 3), (marker.len() - 1, 6)] {
                case += 1;
                let mut damaged = bytes.clone();
                damaged[at + offset] ^= 1 << bit;
                let path = dir.file(&format!("flip-{case}.redb"));
                std::fs::write(&path, &damaged).unwrap();
                let store = RedbStore::builder().verify_on_open(false).open(&path).unwrap();
                match read_back(&store, marker) {
                    Ok(true) => {}
                    Ok(false) => {
                        panic!("case {case}: a flip in {} read back as other data", String::from_utf8_lossy(marker))
                    }
                    Err(e) => {
                        assert!(matches!(e, StorageError::Decode { .. }), "case {case}: {e:?}");
                        assert!(e.to_string().contains("checksum"), "case {case}: {e}");
                        detected += 1;
                    }
                }
            }
        }
        assert!(detected > 0, "no flip of {} was detected", String::from_utf8_lossy(marker));
    }
}

/// A queued run's owner and input, and a circuit breaker's holder: a flipped bit in any is a
/// decode error (or reads as written, from a stale copy), never another owner, input or probe.
#[test]
fn a_flipped_bit_in_a_queue_row_or_a_breaker_is_a_decode_error() {
    use agentflow_store::{BreakerOp, BreakerRule, BreakerUpdate, NewRun, QueueError};
    const OWNER: &str = "OWNER-marker-0123456789";
    const INPUT: &[u8] = br#"{"input":"INPUT-marker-0123456789"}"#;
    const PROBE: &str = "PROBE-marker-0123456789";
    let dir = TempDir::new("queue-flips");
    let original = dir.file("original.redb");
    {
        let store = RedbStore::open(&original).unwrap();
        store.enqueue_run(NewRun::new("q", "graph", Some(INPUT.to_vec()), OWNER, 1)).unwrap();
        let rule = BreakerRule::new(1, 10, 1_000_000);
        store.update_breaker(BreakerUpdate::new("tool", BreakerOp::Failed, "c1", rule, 1, "q", "x")).unwrap();
        let probe =
            store.update_breaker(BreakerUpdate::new("tool", BreakerOp::Admit, PROBE, rule, 100, "q", "x")).unwrap();
        assert_eq!(probe.record.probe.as_deref(), Some(PROBE));
        store.close().unwrap();
    }
    let bytes = std::fs::read(&original).unwrap();
    let positions = |needle: &[u8]| -> Vec<usize> {
        bytes.windows(needle.len()).enumerate().filter(|(_, w)| *w == needle).map(|(i, _)| i).collect()
    };
    let mut cases = 0;
    for (what, marker) in [("owner", OWNER.as_bytes()), ("probe", PROBE.as_bytes())] {
        let found = positions(marker);
        assert!(!found.is_empty(), "the {what} is in the file");
        for at in found {
            cases += 1;
            let mut damaged = bytes.clone();
            damaged[at + 3] ^= 1;
            let path = dir.file(&format!("flip-{cases}.redb"));
            std::fs::write(&path, &damaged).unwrap();
            let store = RedbStore::builder().verify_on_open(false).open(&path).unwrap();
            match what {
                "probe" => match store.breaker("tool") {
                    Ok(b) => assert_eq!(b.and_then(|b| b.probe).as_deref(), Some(PROBE), "case {cases}"),
                    Err(ReadError::Storage(StorageError::Decode { .. })) => {}
                    Err(e) => panic!("case {cases}: {e:?}"),
                },
                _ => match store.list_runs() {
                    Ok(runs) => {
                        let run = &runs[0];
                        assert_eq!((run.owner.as_str(), run.input.as_deref()), (OWNER, Some(INPUT)), "case {cases}");
                    }
                    Err(QueueError::Storage(StorageError::Decode { .. })) => {}
                    Err(e) => panic!("case {cases}: {e:?}"),
                },
            }
        }
    }
    assert!(cases >= 2, "every value was hit at least once");
}

/// One queued run whose row does not decode (a flipped bit) is not claimed, and reported by
/// `list_runs`; the other runs are still claimed, their heartbeats written and their control
/// requests read. One damaged row used to stop every claim, heartbeat and control request of
/// every worker on the store.
#[test]
fn a_damaged_queue_row_stops_no_other_run() {
    use agentflow_store::{NewRun, QueueError, RunControl};
    const OWNER: &str = "OWNER-marker-0123456789";
    let dir = TempDir::new("queue-row-flip");
    let original = dir.file("original.redb");
    {
        let store = RedbStore::open(&original).unwrap();
        store.enqueue_run(NewRun::new("bad", "graph", None, OWNER, 1)).unwrap();
        store.enqueue_run(NewRun::new("good", "graph", None, "", 2)).unwrap();
        store.close().unwrap();
    }
    let bytes = std::fs::read(&original).unwrap();
    let found: Vec<usize> =
        bytes.windows(OWNER.len()).enumerate().filter(|(_, w)| *w == OWNER.as_bytes()).map(|(i, _)| i).collect();
    assert!(!found.is_empty(), "the owner is in the file");
    let mut damaged_cases = 0;
    for (case, at) in found.into_iter().enumerate() {
        let mut damaged = bytes.clone();
        damaged[at + 3] ^= 1;
        let path = dir.file(&format!("flip-{case}.redb"));
        std::fs::write(&path, &damaged).unwrap();
        let store = RedbStore::builder().verify_on_open(false).open(&path).unwrap();
        match store.list_runs() {
            // The flip hit a copy of the row no longer in use.
            Ok(runs) => {
                assert_eq!(runs.len(), 2, "case {case}");
                continue;
            }
            Err(QueueError::Storage(StorageError::Decode { .. })) => damaged_cases += 1,
            Err(e) => panic!("case {case}: {e:?}"),
        }
        let claimed = store.claim_runs("graph", "w", 60_000, 10, 10).unwrap();
        let threads: Vec<&str> = claimed.iter().map(|r| r.thread.as_str()).collect();
        assert_eq!(threads, ["good"], "case {case}");
        assert!(store.control_run("good", RunControl::Cancel).unwrap());
        assert_eq!(store.run_controls("w", 20).unwrap(), [("good".to_string(), RunControl::Cancel)], "case {case}");
        assert_eq!(store.heartbeat_runs("w", 30).unwrap(), [("good".to_string(), RunControl::Cancel)], "case {case}");
    }
    assert!(damaged_cases >= 1, "the row in use was damaged at least once");
}

/// A sleeping thread's wake time, in its timer record and in the key of the timer index: a
/// flipped bit in the record is a decode error when the timer is read, one in the index key is
/// read at the record's time; never another wake time, and the other thread's timer is still
/// listed.
#[test]
fn a_flipped_bit_in_a_durable_timer_is_a_decode_error() {
    use agentflow_store::ThreadStatus;
    const WAKE_AT: u64 = 0x0000_01BC_DEF0_1234;
    let dir = TempDir::new("timer-flips");
    let original = dir.file("original.redb");
    {
        let store = RedbStore::open(&original).unwrap();
        for (id, at) in [("s", WAKE_AT), ("t", WAKE_AT + 1)] {
            let mut sleeping = thread(id);
            sleeping.status = ThreadStatus::Sleeping;
            store.commit_step(StepCommit::new(sleeping).with_wake_at(at)).unwrap();
        }
        store.close().unwrap();
    }
    let bytes = std::fs::read(&original).unwrap();
    let positions = |needle: &[u8]| -> Vec<usize> {
        bytes.windows(needle.len()).enumerate().filter(|(_, w)| *w == needle).map(|(i, _)| i).collect()
    };
    // The record holds it as a varint; the index key as 8 little-endian bytes.
    let mut varint = Vec::new();
    let mut v = WAKE_AT;
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            varint.push(byte);
            break;
        }
        varint.push(byte | 0x80);
    }
    let mut cases = 0;
    for (what, marker) in [("record", varint), ("index key", WAKE_AT.to_le_bytes().to_vec())] {
        let found = positions(&marker);
        assert!(!found.is_empty(), "the timer's {what} is in the file");
        for at in found {
            cases += 1;
            let mut damaged = bytes.clone();
            damaged[at + 2] ^= 1;
            let path = dir.file(&format!("flip-{cases}.redb"));
            std::fs::write(&path, &damaged).unwrap();
            let store = RedbStore::builder().verify_on_open(false).open(&path).unwrap();
            match store.thread_timer("s") {
                Ok(at) => assert_eq!(at, Some(WAKE_AT), "case {cases} ({what})"),
                Err(ReadError::Storage(StorageError::Decode { .. })) => {}
                Err(e) => panic!("case {cases}: {e:?}"),
            }
            // A damaged index key is read at the record's time, a damaged record at the key's
            // (waking it fails on the record): every timer is still listed, at its own time,
            // and one damaged entry does not stop the other.
            let due = store.due_timers(u64::MAX, 10).unwrap_or_else(|e| panic!("case {cases} ({what}): {e:?}"));
            assert_eq!(
                due.iter().map(|t| (t.thread.as_str(), t.wake_at)).collect::<Vec<_>>(),
                [("s", WAKE_AT), ("t", WAKE_AT + 1)],
                "case {cases} ({what})"
            );
        }
    }
    assert!(cases >= 2);
}
