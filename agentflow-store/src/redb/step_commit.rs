//! Staging a [`StepCommit`]: validate every part, then write the thread record, the
//! checkpoint, pending writes, effects, audit entries, approvals and events in one transaction.
//!
//! Validation comes first and [`Tx::wrote`] is called just before the first write, so a
//! refused commit never leaves half a job in a group transaction.
//!
//! What the commit needs to know about the thread (its stored record, latest checkpoint,
//! timer and pending writes) comes from the facts the previous step left (see
//! [`crate::redb::step_facts`]), or is read from the tables when there are none. A plain
//! super-step on top of the thread's latest checkpoint then opens and writes one table.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use redb::{ReadableTable, Table};

use crate::checks::check_depths;
use crate::error::{ApprovalError, CommitError, StorageError};
use crate::record::{
    ApprovalRecord, MAX_CHECKPOINT_SEQ, Payload, Snapshot, StepCommit, ThreadRecord, ThreadStatus, WakeAt,
    seq_too_large,
};
use crate::redb::approvals::{ApprovalTables, check_new_approval, check_transition};
use crate::redb::audit::append_audit;
use crate::redb::error::WithPath;
use crate::redb::event_log;
use crate::redb::reads::latest_checkpoint_seq;
use crate::redb::step_facts::{Kept, ThreadFacts};
use crate::redb::tables;
use crate::redb::thread_numbers::{Numbered, has_rows, number_for, number_of};
use crate::redb::writer::Tx;

/// Output of a staged step commit.
pub(crate) struct CommitOut {
    pub(crate) checkpoint: Option<u64>,
    pub(crate) audit_seqs: Vec<u64>,
}

/// Stages `c` in `tx`; its events go to the thread's log, which keeps `event_keep` commits.
pub(crate) fn stage_commit(tx: &Tx<'_>, c: &StepCommit, event_keep: u64) -> Result<CommitOut, CommitError> {
    let path = tx.path;
    let tid = c.thread.id.as_str();
    let invalid = |reason: String| CommitError::Invalid { thread: tid.to_string(), reason };
    let mut checkpoints = tx.txn.open_table(tables::CHECKPOINTS).ctx(path)?;
    // Taken out until the commit succeeds: a refused or failed commit leaves none behind.
    let (mut threads, mut pending, mut facts) = match tx.take_facts(tid) {
        Some(facts) => {
            let pending = if c.pending_writes.is_empty() {
                None
            } else {
                Some(tx.txn.open_table(tables::PENDING_WRITES).ctx(path)?)
            };
            (None, pending, facts)
        }
        None => {
            let threads = tx.txn.open_table(tables::THREADS).ctx(path)?;
            let pending = tx.txn.open_table(tables::PENDING_WRITES).ctx(path)?;
            let facts = read_facts(tx, tid, &threads, &checkpoints, &pending)?;
            (Some(threads), Some(pending), facts)
        }
    };
    // A plain super-step writes only the checkpoints table; open the others only
    // when the commit carries something for them (opening costs per commit).
    let touches_approvals = !c.new_approvals.is_empty() || !c.approval_transitions.is_empty();
    let with_snapshot = c.checkpoint.as_ref().is_some_and(|cp| cp.snapshot.is_some());
    let mut snapshots = if with_snapshot { Some(tx.txn.open_table(tables::SNAPSHOTS).ctx(path)?) } else { None };
    let mut effects = if c.effects.is_empty() { None } else { Some(tx.txn.open_table(tables::EFFECTS).ctx(path)?) };
    let mut audit =
        if c.audit.is_empty() && !touches_approvals { None } else { Some(tx.txn.open_table(tables::AUDIT).ctx(path)?) };
    let mut approvals = if touches_approvals { Some(ApprovalTables::open(tx)?) } else { None };

    // Validate everything before the first write.
    if tid.is_empty() {
        return Err(invalid("the thread id is empty".to_string()));
    }
    if let Some(reason) = c.thread.parent_problem() {
        return Err(invalid(reason));
    }
    if let Some(holder) = &c.lease_holder
        && !tx.leases.is_held_by(tid, holder, c.now)
    {
        let current = tx.leases.get(tid);
        return Err(CommitError::LeaseLost { thread: tid.to_string(), holder: holder.clone(), current });
    }
    if let Some((thread, holder)) = c.parent_leases.iter().find(|(t, h)| !tx.leases.is_held_by(t, h, c.now)) {
        let current = tx.leases.get(thread);
        return Err(CommitError::LeaseLost { thread: thread.clone(), holder: holder.clone(), current });
    }
    if let Some(cp) = &c.checkpoint {
        if cp.thread != tid {
            return Err(invalid(format!("the checkpoint belongs to thread `{}`", cp.thread)));
        }
        if cp.seq > MAX_CHECKPOINT_SEQ {
            return Err(invalid(seq_too_large(cp.seq)));
        }
        let latest = facts.latest;
        if let Some(latest) = latest
            && latest >= cp.seq
        {
            return Err(CommitError::SeqNotIncreasing { thread: tid.to_string(), seq: cp.seq, latest });
        }
        // The usual case, a step on top of the latest checkpoint, needs no second lookup.
        if let Some(parent) = cp.parent
            && (parent >= cp.seq || (latest != Some(parent) && !has_checkpoint(path, &checkpoints, &facts, parent)?))
        {
            return Err(CommitError::ParentMissing { thread: tid.to_string(), seq: cp.seq, parent });
        }
        if cp.parent.is_none() && cp.snapshot.is_none() {
            return Err(invalid(format!("checkpoint {} has no parent, so it must carry a snapshot", cp.seq)));
        }
    }
    check_depths(c)?;
    if let Some((key, _)) = c.effects.iter().find(|(k, _)| k.thread != tid) {
        return Err(invalid(format!("effect `{}` belongs to thread `{}`", key.key, key.thread)));
    }
    if c.thread.status == ThreadStatus::Sleeping && c.wake_at.is_none() {
        return Err(invalid("a sleeping thread needs a wake time (`StepCommit::wake_at`)".to_string()));
    }
    let mut statuses: HashMap<&str, ApprovalRecord> = HashMap::new();
    let mut new_ids = HashSet::new();
    for approval in &c.new_approvals {
        if approval.thread != tid {
            return Err(invalid(format!("approval `{}` belongs to thread `{}`", approval.id, approval.thread)));
        }
        let Some(approvals) = approvals.as_ref() else { break };
        check_new_approval(path, &approvals.approvals, approval)?;
        if !new_ids.insert(approval.id.as_str()) {
            return Err(ApprovalError::AlreadyExists { id: approval.id.clone() }.into());
        }
        statuses.insert(approval.id.as_str(), approval.clone());
    }
    for t in &c.approval_transitions {
        let current = match (statuses.get(t.id.as_str()), approvals.as_ref()) {
            (Some(record), _) => record.clone(),
            (None, Some(approvals)) => approvals.get(path, &t.id)?,
            (None, None) => break,
        };
        check_transition(&t.id, current.status, t.from, t.to)?;
        let mut next = current;
        next.status = t.to;
        statuses.insert(t.id.as_str(), next);
    }

    // The tenant is fixed when the thread is created: a thread the store holds keeps its own.
    // So is its trace context once it has one; a thread without one takes the commit's.
    let kept = match (&facts.record, facts.kept.take()) {
        (None, _) => Kept { tenant: c.thread.tenant.clone(), trace: None },
        (Some(_), Some(known)) => known,
        (Some(stored), None) => {
            let stored =
                crate::redb::reads::decode(path, tables::THREADS, || format!("{tid:?}"), stored, ThreadRecord::decode)?;
            Kept { tenant: stored.tenant, trace: stored.trace }
        }
    };
    let kept = match kept.trace {
        Some(_) => kept,
        None => Kept { trace: c.thread.trace.clone(), ..kept },
    };

    tx.wrote();
    // Most steps leave the thread record as it was: skip the write (and the
    // page it would dirty) when the bytes are the same.
    let record = c.thread.encode_kept(kept.tenant.as_deref(), kept.trace.as_deref());
    facts.kept = Some(kept);
    if facts.record.as_deref() != Some(record.as_slice()) {
        let threads = match threads.as_mut() {
            Some(threads) => threads,
            None => threads.insert(tx.txn.open_table(tables::THREADS).ctx(path)?),
        };
        threads.insert(tid, record.as_slice()).ctx(path)?;
    }
    facts.record = Some(record);
    if c.wake_at != facts.timer {
        set_timer(tx, tid, c.wake_at)?;
        facts.timer = c.wake_at;
    }
    if let Some(cp) = &c.checkpoint {
        if let Some(parent) = cp.parent
            && facts.has_pending(parent)
        {
            let pending = match pending.as_mut() {
                Some(pending) => pending,
                None => pending.insert(tx.txn.open_table(tables::PENDING_WRITES).ctx(path)?),
            };
            remove_pending(path, pending, tid, parent)?;
            facts.clear_pending(parent);
        }
        let number = match facts.number {
            Some(number) => number,
            None => *facts.number.insert(number_for(tx.txn, path, tid, &|n| has_rows(path, &checkpoints, n))?),
        };
        checkpoints.insert((number, cp.seq), cp.encode_row().as_slice()).ctx(path)?;
        if let (Some(state), Some(snapshots)) = (&cp.snapshot, snapshots.as_mut()) {
            snapshots.insert((number, cp.seq), Snapshot::encode(state).as_slice()).ctx(path)?;
        }
        facts.latest = Some(cp.seq);
    }
    if let Some(pending) = pending.as_mut() {
        for w in &c.pending_writes {
            pending.insert((tid, w.seq, w.node.as_str(), w.idx), Payload::encode(&w.value).as_slice()).ctx(path)?;
            facts.add_pending(w.seq);
        }
    }
    if let Some(effects) = effects.as_mut() {
        for (key, result) in &c.effects {
            let k = (tid, key.seq, key.node.as_str(), key.key.as_str());
            if effects.get(k).ctx(path)?.is_none() {
                effects.insert(k, Payload::encode(result).as_slice()).ctx(path)?;
            }
        }
    }
    let mut audit_seqs = Vec::new();
    if let Some(audit) = audit.as_mut() {
        for entry in &c.audit {
            audit_seqs.push(append_audit(path, audit, tid, entry.clone())?);
        }
        if let Some(approvals) = approvals.as_mut() {
            for approval in &c.new_approvals {
                audit_seqs.push(approvals.insert(path, audit, approval, &approval.requester)?);
            }
            for t in &c.approval_transitions {
                let record = approvals.get(path, &t.id)?;
                let (_, seq) = approvals.apply(path, audit, record, t.to, &t.patch)?;
                audit_seqs.push(seq);
            }
        }
    }
    if !c.events.is_empty() {
        event_log::append(tx, tid, &c.events, c.now, event_keep)?;
    }
    tx.learn_facts(tid, facts);
    Ok(CommitOut { checkpoint: c.checkpoint.as_ref().map(|cp| cp.seq), audit_seqs })
}

/// The pending writes table, as opened in a write transaction.
type PendingTable<'t> = Table<'t, (&'static str, u64, &'static str, u32), &'static [u8]>;

/// The checkpoints table, as opened in a write transaction.
type CheckpointTable<'t> = Table<'t, (u64, u64), &'static [u8]>;

/// Whether the thread has checkpoint `seq` (none without a thread number).
fn has_checkpoint(
    path: &Path,
    checkpoints: &CheckpointTable<'_>,
    facts: &ThreadFacts,
    seq: u64,
) -> Result<bool, StorageError> {
    match facts.number {
        None => Ok(false),
        Some(number) => Ok(checkpoints.get((number, seq)).ctx(path)?.is_some()),
    }
}

/// Reads what a step commit needs to know about the thread from its tables (when the store
/// holds no facts about it, e.g. on the first commit of a run).
fn read_facts(
    tx: &Tx<'_>,
    thread: &str,
    threads: &Table<'_, &'static str, &'static [u8]>,
    checkpoints: &CheckpointTable<'_>,
    pending: &PendingTable<'_>,
) -> Result<ThreadFacts, StorageError> {
    let path = tx.path;
    let record = threads.get(thread).ctx(path)?.map(|v| v.value().to_vec());
    let timer = timer_of(path, &tx.txn.open_table(tables::TIMER_OF).ctx(path)?, thread)?;
    let number = number_of(path, &tx.txn.open_table(tables::THREAD_NUMBERS).ctx(path)?, thread)?;
    let latest = latest_checkpoint_seq(path, checkpoints, number.map(|number| Numbered { id: thread, number }))?;
    let mut facts = ThreadFacts { record, number, latest, timer, pending: Vec::new(), kept: None };
    for entry in pending.range((thread, 0u64, "", 0u32)..).ctx(path)? {
        let (k, _) = entry.ctx(path)?;
        let (t, seq, _, _) = k.value();
        if t != thread {
            break;
        }
        facts.add_pending(seq);
    }
    Ok(facts)
}

/// The thread's durable timer, as its `agentflow.timer_of` record says.
pub(crate) fn timer_of(
    path: &Path,
    of: &impl ReadableTable<&'static str, &'static [u8]>,
    thread: &str,
) -> Result<Option<u64>, StorageError> {
    match of.get(thread).ctx(path)? {
        None => Ok(None),
        Some(v) => {
            crate::redb::reads::decode(path, tables::TIMER_OF, || format!("{thread:?}"), v.value(), WakeAt::decode)
                .map(Some)
        }
    }
}

/// Replaces the thread's durable timer with `wake_at` (none: clears it). A time past `i64::MAX`
/// (never) is kept as `i64::MAX`, as PostgreSQL's `bigint` keeps it.
pub(crate) fn set_timer(tx: &Tx<'_>, thread: &str, wake_at: Option<u64>) -> Result<(), StorageError> {
    let wake_at = wake_at.map(|at| at.min(i64::MAX as u64));
    let path = tx.path;
    let mut of = tx.txn.open_table(tables::TIMER_OF).ctx(path)?;
    let old = timer_of(path, &of, thread)?;
    if old == wake_at {
        return Ok(());
    }
    let mut timers = tx.txn.open_table(tables::TIMERS).ctx(path)?;
    if let Some(old) = old {
        timers.remove((old, thread)).ctx(path)?;
    }
    match wake_at {
        Some(at) => {
            timers.insert((at, thread), ()).ctx(path)?;
            of.insert(thread, WakeAt::encode(at).as_slice()).ctx(path)?;
        }
        None => {
            of.remove(thread).ctx(path)?;
        }
    }
    Ok(())
}

/// Removes the pending writes recorded against (thread, seq).
pub(crate) fn remove_pending(
    path: &Path,
    pending: &mut PendingTable<'_>,
    thread: &str,
    seq: u64,
) -> Result<(), StorageError> {
    let mut keys = Vec::new();
    for entry in pending.range((thread, seq, "", 0u32)..).ctx(path)? {
        let (k, _) = entry.ctx(path)?;
        let (t, s, node, idx) = k.value();
        if t != thread || s != seq {
            break;
        }
        keys.push((node.to_string(), idx));
    }
    for (node, idx) in keys {
        pending.remove((thread, seq, node.as_str(), idx)).ctx(path)?;
    }
    Ok(())
}
