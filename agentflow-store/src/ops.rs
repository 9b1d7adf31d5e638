//! Record-level reads and the staged writes run by the writer thread.
//!
//! Every write operation reads and validates first and calls [`Tx::wrote`] just before its first
//! insert or remove, so a refusal never leaves half a job in a group transaction.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use redb::{ReadableTable, Table, TableHandle};
use serde_json::json;

use crate::codec::{DecodeResult, MAX_DOCUMENT_DEPTH, MAX_JSON_DEPTH, too_deep};
use crate::error::{ApprovalError, AuditError, CommitError, JsonTooDeep, ReadError, StorageError};
use crate::leases::Leases;
use crate::record::{
    ApprovalPatch, ApprovalRecord, ApprovalStatus, AuditEntry, ChainStep, CheckpointSummary, EffectKey, EffectOutcome,
    NewAuditEntry, Payload, Row, Snapshot, StateChain, StepCommit, ThreadRecord,
};
use crate::redb_store::Ctx;
use crate::tables;
use crate::writer::Tx;

/// A table keyed by a string (threads, leases, approvals).
pub(crate) trait ByStr: ReadableTable<&'static str, &'static [u8]> {}
impl<T: ReadableTable<&'static str, &'static [u8]>> ByStr for T {}

/// A table keyed by (thread, seq) (checkpoints, snapshots, audit).
pub(crate) trait BySeq: ReadableTable<(&'static str, u64), &'static [u8]> {}
impl<T: ReadableTable<(&'static str, u64), &'static [u8]>> BySeq for T {}

/// Decodes a stored value, naming the table and key on failure.
pub(crate) fn decode<T>(
    path: &Path,
    table: impl TableHandle,
    key: impl FnOnce() -> String,
    bytes: &[u8],
    f: fn(&[u8]) -> DecodeResult<T>,
) -> Result<T, StorageError> {
    f(bytes).map_err(|reason| StorageError::Decode {
        path: path.to_path_buf(),
        table: table.name().to_string(),
        key: key(),
        reason,
    })
}

pub(crate) fn get_str<T>(
    path: &Path,
    table: &impl ByStr,
    table_name: impl TableHandle,
    id: &str,
    f: fn(&[u8]) -> DecodeResult<T>,
) -> Result<Option<T>, StorageError> {
    match table.get(id).ctx(path)? {
        None => Ok(None),
        Some(v) => decode(path, table_name, || format!("{id:?}"), v.value(), f).map(Some),
    }
}

pub(crate) fn thread_record(
    path: &Path,
    threads: &impl ByStr,
    leases: &Leases,
    id: &str,
) -> Result<Option<ThreadRecord>, StorageError> {
    let Some(mut record) = get_str(path, threads, tables::THREADS, id, ThreadRecord::decode)? else {
        return Ok(None);
    };
    record.lease = leases.get(id);
    Ok(Some(record))
}

/// A checkpoint's row: its summary and delta blobs.
pub(crate) fn row(path: &Path, checkpoints: &impl BySeq, thread: &str, seq: u64) -> Result<Option<Row>, StorageError> {
    match checkpoints.get((thread, seq)).ctx(path)? {
        None => Ok(None),
        Some(v) => decode(
            path,
            tables::CHECKPOINTS,
            || format!("({thread:?}, {seq})"),
            v.value(),
            CheckpointSummary::decode_row,
        )
        .map(Some),
    }
}

/// The snapshot of a checkpoint whose summary says it has one; its absence is corruption.
pub(crate) fn snapshot(path: &Path, snapshots: &impl BySeq, thread: &str, seq: u64) -> Result<Vec<u8>, StorageError> {
    let key = || format!("({thread:?}, {seq})");
    match snapshots.get((thread, seq)).ctx(path)? {
        Some(v) => decode(path, tables::SNAPSHOTS, key, v.value(), Snapshot::decode),
        None => Err(StorageError::Decode {
            path: path.to_path_buf(),
            table: tables::SNAPSHOTS.name().to_string(),
            key: key(),
            reason: "the checkpoint says it carries a snapshot, but the snapshot is missing".to_string(),
        }),
    }
}

/// Every (seq, encoded value) of a (thread, seq) table for one thread, in seq order.
pub(crate) fn thread_range(
    path: &Path,
    table: &impl BySeq,
    thread: &str,
    mut each: impl FnMut(u64, &[u8]) -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    for entry in table.range((thread, 0u64)..=(thread, u64::MAX)).ctx(path)? {
        let (k, v) = entry.ctx(path)?;
        each(k.value().1, v.value())?;
    }
    Ok(())
}

pub(crate) fn summaries(
    path: &Path,
    checkpoints: &impl BySeq,
    thread: &str,
) -> Result<Vec<CheckpointSummary>, StorageError> {
    let mut out = Vec::new();
    thread_range(path, checkpoints, thread, |seq, bytes| {
        out.push(decode(
            path,
            tables::CHECKPOINTS,
            || format!("({thread:?}, {seq})"),
            bytes,
            CheckpointSummary::decode,
        )?);
        Ok(())
    })?;
    Ok(out)
}

pub(crate) fn latest_seq(path: &Path, table: &impl BySeq, thread: &str) -> Result<Option<u64>, StorageError> {
    let mut range = table.range((thread, 0u64)..=(thread, u64::MAX)).ctx(path)?;
    match range.next_back() {
        None => Ok(None),
        Some(entry) => Ok(Some(entry.ctx(path)?.0.value().1)),
    }
}

/// Walks parent links from `seq` back to the nearest snapshot.
pub(crate) fn state_chain(
    path: &Path,
    checkpoints: &impl BySeq,
    snapshots: &impl BySeq,
    thread: &str,
    seq: u64,
) -> Result<Option<StateChain>, ReadError> {
    let mut steps = Vec::new();
    let mut cur = seq;
    loop {
        let broken =
            || ReadError::BrokenChain { path: path.to_path_buf(), thread: thread.to_string(), seq, missing: cur };
        let Some((header, delta)) = row(path, checkpoints, thread, cur)? else {
            return if cur == seq { Ok(None) } else { Err(broken()) };
        };
        if header.has_snapshot {
            let snapshot = snapshot(path, snapshots, thread, cur)?;
            steps.reverse();
            return Ok(Some(StateChain { snapshot_seq: cur, snapshot, steps }));
        }
        steps.push(ChainStep { seq: cur, delta });
        let corrupt = |reason: &str| StorageError::Decode {
            path: path.to_path_buf(),
            table: tables::CHECKPOINTS.name().to_string(),
            key: format!("({thread:?}, {cur})"),
            reason: reason.to_string(),
        };
        match header.parent {
            None => return Err(corrupt("a root checkpoint without a snapshot").into()),
            Some(parent) if parent >= cur => {
                return Err(corrupt("its parent link does not go back in history").into());
            }
            Some(parent) => cur = parent,
        }
    }
}

/// Appends one audit entry; returns its seq.
pub(crate) fn append_audit(
    path: &Path,
    audit: &mut Table<'_, (&'static str, u64), &'static [u8]>,
    thread: &str,
    entry: NewAuditEntry,
) -> Result<u64, StorageError> {
    let seq = latest_seq(path, audit, thread)?.map_or(1, |s| s.saturating_add(1));
    let entry = AuditEntry {
        thread: thread.to_string(),
        seq,
        at: entry.at,
        actor: entry.actor,
        kind: entry.kind,
        detail: entry.detail,
    };
    audit.insert((thread, seq), entry.encode().as_slice()).ctx(path)?;
    Ok(seq)
}

/// Refuses JSON nested deeper than `limit`: the store writes only what it reads back.
fn check_depth(value: &serde_json::Value, limit: usize, root: &str) -> Result<(), JsonTooDeep> {
    match too_deep(value, limit, root) {
        None => Ok(()),
        Some(path) => Err(JsonTooDeep { path, limit }),
    }
}

fn check_conditions(id: &str, conditions: Option<&serde_json::Value>) -> Result<(), ApprovalError> {
    match conditions {
        Some(c) => check_depth(c, MAX_JSON_DEPTH, "conditions")
            .map_err(|source| ApprovalError::TooDeep { id: id.to_string(), source }),
        None => Ok(()),
    }
}

fn check_new_approval(path: &Path, approvals: &impl ByStr, approval: &ApprovalRecord) -> Result<(), ApprovalError> {
    if !approval.status.is_waiting() {
        return Err(ApprovalError::NotPending { id: approval.id.clone(), status: approval.status });
    }
    check_conditions(&approval.id, approval.conditions.as_ref())?;
    if approvals.get(approval.id.as_str()).ctx(path)?.is_some() {
        return Err(ApprovalError::AlreadyExists { id: approval.id.clone() });
    }
    Ok(())
}

fn check_transition(
    id: &str,
    current: ApprovalStatus,
    expected: ApprovalStatus,
    to: ApprovalStatus,
) -> Result<(), ApprovalError> {
    if !expected.can_move_to(to) {
        return Err(ApprovalError::IllegalTransition { id: id.to_string(), from: expected, to });
    }
    if current != expected {
        return Err(ApprovalError::AlreadyDecided { id: id.to_string(), expected, current });
    }
    Ok(())
}

/// The approval tables of one write transaction.
struct ApprovalTables<'t> {
    approvals: Table<'t, &'static str, &'static [u8]>,
    by_thread: Table<'t, (&'static str, &'static str), ()>,
    pending: Table<'t, &'static str, ()>,
}

impl<'t> ApprovalTables<'t> {
    fn open(tx: &'t Tx<'_>) -> Result<Self, StorageError> {
        Ok(ApprovalTables {
            approvals: tx.txn.open_table(tables::APPROVALS).ctx(tx.path)?,
            by_thread: tx.txn.open_table(tables::APPROVALS_BY_THREAD).ctx(tx.path)?,
            pending: tx.txn.open_table(tables::APPROVALS_PENDING).ctx(tx.path)?,
        })
    }

    fn get(&self, path: &Path, id: &str) -> Result<ApprovalRecord, ApprovalError> {
        get_str(path, &self.approvals, tables::APPROVALS, id, ApprovalRecord::decode)?
            .ok_or_else(|| ApprovalError::NotFound { id: id.to_string() })
    }

    fn insert(
        &mut self,
        path: &Path,
        audit: &mut Table<'_, (&'static str, u64), &'static [u8]>,
        approval: &ApprovalRecord,
        actor: &str,
    ) -> Result<u64, StorageError> {
        let id = approval.id.as_str();
        self.approvals.insert(id, approval.encode().as_slice()).ctx(path)?;
        self.by_thread.insert((approval.thread.as_str(), id), ()).ctx(path)?;
        self.pending.insert(id, ()).ctx(path)?;
        let detail = json!({
            "approval": id,
            "node": approval.node,
            "tool": approval.tool,
            "args_hash": approval.args_hash,
            "risk": approval.risk,
            "reason": approval.reason,
            "expires_at": approval.expires_at,
        });
        append_audit(
            path,
            audit,
            &approval.thread,
            NewAuditEntry::new(approval.created_at, actor, "approval.requested", detail),
        )
    }

    fn apply(
        &mut self,
        path: &Path,
        audit: &mut Table<'_, (&'static str, u64), &'static [u8]>,
        mut record: ApprovalRecord,
        to: ApprovalStatus,
        patch: &ApprovalPatch,
    ) -> Result<(ApprovalRecord, u64), StorageError> {
        let from = record.status;
        record.status = to;
        record.updated_at = patch.at;
        if let Some(by) = &patch.decided_by {
            record.decided_by = Some(by.clone());
        }
        if let Some(note) = &patch.note {
            record.decision_note = Some(note.clone());
        }
        if let Some(conditions) = &patch.conditions {
            record.conditions = Some(conditions.clone());
        }
        if let Some(args) = &patch.args {
            record.args.clone_from(&args.canonical);
            record.args_hash.clone_from(&args.hash);
        }
        let id = record.id.as_str();
        self.approvals.insert(id, record.encode().as_slice()).ctx(path)?;
        if to.is_waiting() {
            self.pending.insert(id, ()).ctx(path)?;
        } else {
            self.pending.remove(id).ctx(path)?;
        }
        let detail = json!({
            "approval": id,
            "from": from.as_str(),
            "to": to.as_str(),
            "decided_by": patch.decided_by,
            "note": patch.note,
            "conditions": patch.conditions,
            "args_hash": record.args_hash,
            "args_edited": patch.args.is_some(),
        });
        let kind = format!("approval.{}", to.as_str().to_ascii_lowercase());
        let seq =
            append_audit(path, audit, &record.thread, NewAuditEntry::new(patch.at, patch.actor.clone(), kind, detail))?;
        Ok((record, seq))
    }
}

/// Output of a staged step commit.
pub(crate) struct CommitOut {
    pub(crate) checkpoint: Option<u64>,
    pub(crate) audit_seqs: Vec<u64>,
}

pub(crate) fn stage_commit(tx: &Tx<'_>, c: &StepCommit) -> Result<CommitOut, CommitError> {
    let path = tx.path;
    let tid = c.thread.id.as_str();
    let invalid = |reason: String| CommitError::Invalid { thread: tid.to_string(), reason };
    let mut threads = tx.txn.open_table(tables::THREADS).ctx(path)?;
    let mut checkpoints = tx.txn.open_table(tables::CHECKPOINTS).ctx(path)?;
    let mut pending = tx.txn.open_table(tables::PENDING_WRITES).ctx(path)?;
    // A plain super-step writes only the tables above; open the others only
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
    if let Some(holder) = &c.lease_holder
        && !tx.leases.is_held_by(tid, holder, c.now)
    {
        let current = tx.leases.get(tid);
        return Err(CommitError::LeaseLost { thread: tid.to_string(), holder: holder.clone(), current });
    }
    if let Some(cp) = &c.checkpoint {
        if cp.thread != tid {
            return Err(invalid(format!("the checkpoint belongs to thread `{}`", cp.thread)));
        }
        if let Some(latest) = latest_seq(path, &checkpoints, tid)?
            && latest >= cp.seq
        {
            return Err(CommitError::SeqNotIncreasing { thread: tid.to_string(), seq: cp.seq, latest });
        }
        if let Some(parent) = cp.parent
            && (parent >= cp.seq || checkpoints.get((tid, parent)).ctx(path)?.is_none())
        {
            return Err(CommitError::ParentMissing { thread: tid.to_string(), seq: cp.seq, parent });
        }
        if cp.parent.is_none() && cp.snapshot.is_none() {
            return Err(invalid(format!("checkpoint {} has no parent, so it must carry a snapshot", cp.seq)));
        }
    }
    let too_deep = |source| CommitError::TooDeep { thread: tid.to_string(), source };
    if let Some(cp) = &c.checkpoint {
        check_depth(&cp.metadata.extra, MAX_DOCUMENT_DEPTH, "metadata.extra").map_err(too_deep)?;
    }
    for entry in &c.audit {
        check_depth(&entry.detail, MAX_DOCUMENT_DEPTH, "detail").map_err(too_deep)?;
    }
    for t in &c.approval_transitions {
        check_conditions(&t.id, t.patch.conditions.as_ref())?;
    }
    if let Some((key, _)) = c.effects.iter().find(|(k, _)| k.thread != tid) {
        return Err(invalid(format!("effect `{}` belongs to thread `{}`", key.key, key.thread)));
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

    tx.wrote();
    // Most steps leave the thread record as it was: skip the write (and the
    // page it would dirty) when the bytes are the same.
    let record = c.thread.encode();
    if threads.get(tid).ctx(path)?.is_none_or(|old| old.value() != record.as_slice()) {
        threads.insert(tid, record.as_slice()).ctx(path)?;
    }
    if let Some(cp) = &c.checkpoint {
        if let Some(parent) = cp.parent {
            remove_pending(path, &mut pending, tid, parent)?;
        }
        checkpoints.insert((tid, cp.seq), cp.summary().encode_row(&cp.delta).as_slice()).ctx(path)?;
        if let (Some(state), Some(snapshots)) = (&cp.snapshot, snapshots.as_mut()) {
            snapshots.insert((tid, cp.seq), Snapshot::encode(state).as_slice()).ctx(path)?;
        }
    }
    for w in &c.pending_writes {
        pending.insert((tid, w.seq, w.node.as_str(), w.idx), Payload::encode(&w.value).as_slice()).ctx(path)?;
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
    Ok(CommitOut { checkpoint: c.checkpoint.as_ref().map(|cp| cp.seq), audit_seqs })
}

/// Removes the pending writes recorded against (thread, seq).
pub(crate) fn remove_pending(
    path: &Path,
    pending: &mut Table<'_, (&'static str, u64, &'static str, u32), &'static [u8]>,
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

/// Removes the effects journaled against (thread, seq).
pub(crate) fn remove_effects(
    path: &Path,
    effects: &mut Table<'_, (&'static str, u64, &'static str, &'static str), &'static [u8]>,
    thread: &str,
    seq: u64,
) -> Result<(), StorageError> {
    let mut keys = Vec::new();
    for entry in effects.range((thread, seq, "", "")..).ctx(path)? {
        let (k, _) = entry.ctx(path)?;
        let (t, s, node, key) = k.value();
        if t != thread || s != seq {
            break;
        }
        keys.push((node.to_string(), key.to_string()));
    }
    for (node, key) in keys {
        effects.remove((thread, seq, node.as_str(), key.as_str())).ctx(path)?;
    }
    Ok(())
}

pub(crate) fn stage_record_effect(tx: &Tx<'_>, key: &EffectKey, result: &[u8]) -> Result<EffectOutcome, StorageError> {
    let mut effects = tx.txn.open_table(tables::EFFECTS).ctx(tx.path)?;
    let k = (key.thread.as_str(), key.seq, key.node.as_str(), key.key.as_str());
    if let Some(existing) = effects.get(k).ctx(tx.path)? {
        let existing = decode(tx.path, tables::EFFECTS, || effect_key(key), existing.value(), Payload::decode)?;
        return Ok(EffectOutcome::AlreadyRecorded(existing));
    }
    tx.wrote();
    effects.insert(k, Payload::encode(result).as_slice()).ctx(tx.path)?;
    Ok(EffectOutcome::Recorded)
}

/// An effect's key, rendered for humans.
pub(crate) fn effect_key(key: &EffectKey) -> String {
    format!("({:?}, {}, {:?}, {:?})", key.thread, key.seq, key.node, key.key)
}

pub(crate) fn stage_append_audit(tx: &Tx<'_>, thread: &str, entry: &NewAuditEntry) -> Result<u64, AuditError> {
    check_depth(&entry.detail, MAX_DOCUMENT_DEPTH, "detail").map_err(|source| AuditError::TooDeep {
        thread: thread.to_string(),
        kind: entry.kind.clone(),
        source,
    })?;
    let mut audit = tx.txn.open_table(tables::AUDIT).ctx(tx.path)?;
    tx.wrote();
    Ok(append_audit(tx.path, &mut audit, thread, entry.clone())?)
}

pub(crate) fn stage_put_approval(tx: &Tx<'_>, approval: &ApprovalRecord, actor: &str) -> Result<(), ApprovalError> {
    let mut tables = ApprovalTables::open(tx)?;
    let mut audit = tx.txn.open_table(tables::AUDIT).ctx(tx.path)?;
    check_new_approval(tx.path, &tables.approvals, approval)?;
    tx.wrote();
    tables.insert(tx.path, &mut audit, approval, actor)?;
    Ok(())
}

pub(crate) fn stage_transition(
    tx: &Tx<'_>,
    id: &str,
    expected: ApprovalStatus,
    to: ApprovalStatus,
    patch: &ApprovalPatch,
) -> Result<ApprovalRecord, ApprovalError> {
    let mut tables = ApprovalTables::open(tx)?;
    let mut audit = tx.txn.open_table(tables::AUDIT).ctx(tx.path)?;
    let record = tables.get(tx.path, id)?;
    check_transition(id, record.status, expected, to)?;
    check_conditions(id, patch.conditions.as_ref())?;
    tx.wrote();
    let (record, _) = tables.apply(tx.path, &mut audit, record, to, patch)?;
    Ok(record)
}
