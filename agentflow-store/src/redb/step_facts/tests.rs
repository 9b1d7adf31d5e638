//! The facts a step commit keeps must change nothing a caller can see: the same requests give
//! the same answers and leave the same rows whether a commit finds its thread's facts or reads
//! them from the tables, and whatever else writes to the store makes the next commit read.

use serde_json::json;

use crate::record::{
    Checkpoint, CheckpointMetadata, CheckpointSource, EffectKey, NewAuditEntry, PendingWrite, StepCommit, ThreadRecord,
    ThreadStatus,
};
use crate::{RedbStore, Store};

const NOW: u64 = 1_700_000_000_000;
const THREADS: [&str; 3] = ["a", "b", "c"];

/// xorshift64*: a small deterministic generator, so a failing case can be replayed from its starting number.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One request against a store; the same value is sent to both stores.
#[derive(Debug, Clone)]
enum Op {
    Commit(Box<StepCommit>),
    Effect(EffectKey),
    Audit(String),
    Compact(String),
}

fn checkpoint(thread: &str, seq: u64, parent: Option<u64>, snapshot: bool) -> Checkpoint {
    Checkpoint {
        thread: thread.to_string(),
        seq,
        parent,
        cursor: vec!["n".to_string()],
        snapshot: snapshot.then(|| format!("{{\"at\":{seq}}}").into_bytes()),
        delta: vec![format!("{{\"seq\":{seq}}}").into_bytes()],
        metadata: CheckpointMetadata {
            extra: json!({ "seq": seq }),
            ..CheckpointMetadata::new(seq, CheckpointSource::Loop, vec![])
        },
        created_at: NOW + seq,
    }
}

/// A random request, mostly valid steps on top of `latest` (the thread's latest checkpoint as
/// the store answered so far), with refused ones and other writes mixed in.
fn op(rng: &mut Rng, latest: &[Option<u64>; 3]) -> (usize, Op) {
    let t = rng.below(3) as usize;
    let thread = THREADS[t];
    let kind = rng.below(100);
    if kind < 8 {
        let key = EffectKey::new(thread, latest[t].unwrap_or(0), "n", format!("k{}", rng.below(3)));
        return (t, Op::Effect(key));
    }
    if kind < 12 {
        return (t, Op::Audit(thread.to_string()));
    }
    if kind < 15 {
        return (t, Op::Compact(thread.to_string()));
    }
    let status = match rng.below(10) {
        0 => ThreadStatus::Interrupted,
        1 => ThreadStatus::Sleeping,
        2 => ThreadStatus::Completed,
        _ => ThreadStatus::Running,
    };
    let mut record = ThreadRecord::new(thread, "owner", "fp", 1, NOW);
    record.status = status;
    record.detail = if rng.chance(20) { "changed".to_string() } else { String::new() };
    let mut commit = StepCommit::new(record);
    commit.lease_holder = Some(if rng.chance(4) { "intruder" } else { "holder" }.to_string());
    commit.now = NOW;
    commit.wake_at = match status {
        ThreadStatus::Sleeping | ThreadStatus::Interrupted if rng.chance(85) => Some(NOW + rng.below(4)),
        _ if rng.chance(8) => Some(NOW + rng.below(4)),
        _ => None,
    };
    if kind >= 27 {
        commit.checkpoint = Some(match latest[t] {
            None if rng.chance(90) => checkpoint(thread, 0, None, true),
            None => checkpoint(thread, 1, None, false),
            Some(l) => match rng.below(100) {
                0..70 => checkpoint(thread, l + 1, Some(l), rng.chance(15)),
                70..78 => checkpoint(thread, l, Some(l.saturating_sub(1)), false),
                78..85 => checkpoint(thread, l + 3, Some(l), false),
                85..92 => checkpoint(thread, l + 1, Some(l.saturating_sub(1)), false),
                92..96 => checkpoint(thread, l + 2, Some(l + 1), false),
                _ => checkpoint(thread, l + 1, None, false),
            },
        });
    }
    if kind < 27 || rng.chance(10) {
        let at = latest[t].unwrap_or(0) + rng.below(2);
        for idx in 0..=rng.below(2) as u32 {
            commit.pending_writes.push(PendingWrite { seq: at, node: "n".to_string(), idx, value: vec![idx as u8] });
        }
    }
    (t, Op::Commit(Box::new(commit)))
}

/// Applies `op`; the answer as text (receipts and errors compared as a caller sees them).
fn apply(store: &RedbStore, op: &Op) -> String {
    match op {
        Op::Commit(c) => format!("{:?}", store.commit_step((**c).clone()).map(|r| (r.checkpoint, r.audit_seqs))),
        Op::Effect(key) => format!("{:?}", store.record_effect(key, b"done")),
        Op::Audit(thread) => {
            format!("{:?}", store.append_audit(thread, NewAuditEntry::new(NOW, "actor", "note", json!({}))))
        }
        Op::Compact(thread) => format!("{:?}", store.compact(thread, 2, &|chain| Ok(chain.snapshot.clone()))),
    }
}

/// Everything stored for the threads, as the `Store` methods return it.
fn contents(store: &RedbStore) -> String {
    let mut out = String::new();
    for thread in THREADS {
        out.push_str(&format!("{:?}\n", store.dump_thread(thread).unwrap()));
        let top = store.list_checkpoints(thread).unwrap().last().map_or(0, |c| c.seq);
        for seq in 0..=top + 2 {
            out.push_str(&format!("{seq}: {:?}\n", store.pending_writes(thread, seq).unwrap()));
        }
    }
    out.push_str(&format!("{:?}", store.due_timers(u64::MAX, 100).unwrap()));
    out
}

fn leased(store: &RedbStore) {
    for thread in THREADS {
        store.acquire_lease(thread, "holder", 60_000, NOW - 1).unwrap();
    }
}

#[test]
fn commits_that_find_their_facts_answer_and_store_exactly_what_commits_reading_the_tables_do() {
    for seed in 1..=20u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let (warm, cold) = (RedbStore::in_memory().unwrap(), RedbStore::in_memory().unwrap());
        leased(&warm);
        leased(&cold);
        let mut latest = [None; 3];
        let mut hits = 0;
        for i in 0..200 {
            let (t, op) = op(&mut rng, &latest);
            // The cold store never keeps facts: each of its commits reads the tables.
            cold.forget_facts();
            let known_before = warm.facts_len();
            let answer = apply(&warm, &op);
            assert_eq!(answer, apply(&cold, &op), "seed {seed}, request {i}: {op:?}");
            if matches!(op, Op::Commit(_)) && known_before > 0 {
                hits += 1;
            }
            if let Op::Commit(c) = &op
                && answer.starts_with("Ok")
                && let Some(cp) = &c.checkpoint
            {
                latest[t] = Some(cp.seq);
            }
        }
        assert_eq!(contents(&warm), contents(&cold), "seed {seed}");
        assert!(hits > 80, "seed {seed}: only {hits} commits found facts");
    }
}

#[test]
fn a_step_leaves_its_facts_and_any_other_write_clears_them() {
    let store = RedbStore::in_memory().unwrap();
    leased(&store);
    let commit = |seq, parent| {
        let c = StepCommit::new(ThreadRecord::new("a", "owner", "fp", 1, NOW))
            .with_checkpoint(checkpoint("a", seq, parent, parent.is_none()))
            .fenced_by("holder", NOW);
        store.commit_step(c)
    };
    commit(0, None).unwrap();
    assert_eq!(store.facts_len(), 1, "the committed step left its thread's facts");
    let refused = commit(0, None).unwrap_err();
    assert!(matches!(refused, crate::CommitError::SeqNotIncreasing { .. }), "{refused}");
    assert_eq!(store.facts_len(), 0, "a refused step leaves none");
    commit(1, Some(0)).unwrap();
    assert_eq!(store.facts_len(), 1);
    store.append_audit("a", NewAuditEntry::new(NOW, "actor", "note", json!({}))).unwrap();
    assert_eq!(store.facts_len(), 0, "a write that is not a step clears them");
    commit(2, Some(1)).unwrap();
    assert_eq!(store.facts_len(), 1);
}
