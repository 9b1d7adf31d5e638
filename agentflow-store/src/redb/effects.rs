//! The effect journal: recording an effect's result once per key, and dropping a finished
//! thread's old effects on compaction.

use std::path::Path;

use redb::{ReadableTable, Table};

use crate::checks::check_conditions;
use crate::codec::MAX_DOCUMENT_DEPTH;
use crate::error::{CommitError, JsonTooDeep, StorageError};
use crate::record::{EffectBatch, EffectKey, EffectOutcome, Payload};
use crate::redb::approvals::{ApprovalTables, check_new_approval, check_transition};
use crate::redb::audit::append_audit;
use crate::redb::error::WithPath;
use crate::redb::reads::decode;
use crate::redb::tables;
use crate::redb::writer::Tx;

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

/// Stages an [`EffectBatch`]: validates every part (thread, depth, each compare-and-set against
/// the stored status and the batch's earlier transitions), then journals the effects, applies the
/// transitions and appends the audit entries.
pub(crate) fn stage_effect_batch(tx: &Tx<'_>, batch: &EffectBatch) -> Result<Vec<EffectOutcome>, CommitError> {
    let path = tx.path;
    let tid = batch.thread.as_str();
    let invalid = |reason: String| CommitError::Invalid { thread: tid.to_string(), reason };
    if tid.is_empty() {
        return Err(invalid("the thread id is empty".to_string()));
    }
    if let Some(holder) = &batch.lease_holder
        && !tx.leases.is_held_by(tid, holder, batch.now)
    {
        let current = tx.leases.get(tid);
        return Err(CommitError::LeaseLost { thread: tid.to_string(), holder: holder.clone(), current });
    }
    if let Some((thread, holder)) = batch.parent_leases.iter().find(|(t, h)| !tx.leases.is_held_by(t, h, batch.now)) {
        let current = tx.leases.get(thread);
        return Err(CommitError::LeaseLost { thread: thread.clone(), holder: holder.clone(), current });
    }
    if let Some((key, _)) = batch.effects.iter().find(|(k, _)| k.thread != tid) {
        return Err(invalid(format!("effect `{}` belongs to thread `{}`", key.key, key.thread)));
    }
    for entry in &batch.audit {
        JsonTooDeep::check(&entry.detail, MAX_DOCUMENT_DEPTH, "detail")
            .map_err(|source| CommitError::TooDeep { thread: tid.to_string(), source })?;
    }
    if let Some(a) = batch.new_approvals.iter().find(|a| a.thread != tid) {
        return Err(invalid(format!("approval `{}` belongs to thread `{}`", a.id, a.thread)));
    }
    let touches_approvals = !batch.approval_transitions.is_empty() || !batch.new_approvals.is_empty();
    let mut approvals = if touches_approvals { Some(ApprovalTables::open(tx)?) } else { None };
    let mut audit = if batch.audit.is_empty() && approvals.is_none() {
        None
    } else {
        Some(tx.txn.open_table(tables::AUDIT).ctx(path)?)
    };
    let mut effects = if batch.effects.is_empty() { None } else { Some(tx.txn.open_table(tables::EFFECTS).ctx(path)?) };
    let mut pending =
        if batch.pending_writes.is_empty() { None } else { Some(tx.txn.open_table(tables::PENDING_WRITES).ctx(path)?) };

    // Validate everything before the first write.
    let mut planned = Vec::with_capacity(batch.approval_transitions.len());
    if let Some(approvals) = approvals.as_ref() {
        let mut statuses = std::collections::HashMap::new();
        for a in &batch.new_approvals {
            check_new_approval(path, &approvals.approvals, a)?;
            if statuses.insert(a.id.as_str(), a.status).is_some() {
                return Err(crate::error::ApprovalError::AlreadyExists { id: a.id.clone() }.into());
            }
        }
        for t in &batch.approval_transitions {
            let record = match batch.new_approvals.iter().find(|a| a.id == t.id) {
                Some(created) => created.clone(),
                None => approvals.get(path, &t.id)?,
            };
            if record.thread != tid {
                return Err(invalid(format!("approval `{}` belongs to thread `{}`", t.id, record.thread)));
            }
            let current = statuses.get(t.id.as_str()).copied().unwrap_or(record.status);
            check_transition(&t.id, current, t.from, t.to)?;
            check_conditions(&t.id, t.patch.conditions.as_ref())?;
            statuses.insert(t.id.as_str(), t.to);
            planned.push(t);
        }
    }
    let mut outcomes = Vec::with_capacity(batch.effects.len());
    let mut fresh = Vec::new();
    if let Some(effects) = effects.as_ref() {
        for (key, result) in &batch.effects {
            let k = (key.thread.as_str(), key.seq, key.node.as_str(), key.key.as_str());
            // An earlier effect of this batch under the same key counts as recorded first.
            let earlier = fresh.iter().position(|(f, _): &(&EffectKey, &Vec<u8>)| *f == key);
            match (earlier, effects.get(k).ctx(path)?) {
                (Some(i), _) => outcomes.push(EffectOutcome::AlreadyRecorded(fresh[i].1.clone())),
                (None, Some(existing)) => {
                    let existing =
                        decode(path, tables::EFFECTS, || effect_key(key), existing.value(), Payload::decode)?;
                    outcomes.push(EffectOutcome::AlreadyRecorded(existing));
                }
                (None, None) => {
                    fresh.push((key, result));
                    outcomes.push(EffectOutcome::Recorded);
                }
            }
        }
    }

    tx.wrote();
    if let Some(effects) = effects.as_mut() {
        for (key, result) in fresh {
            let k = (key.thread.as_str(), key.seq, key.node.as_str(), key.key.as_str());
            effects.insert(k, Payload::encode(result).as_slice()).ctx(path)?;
        }
    }
    if let (Some(approvals), Some(audit)) = (approvals.as_mut(), audit.as_mut()) {
        for a in &batch.new_approvals {
            approvals.insert(path, audit, a, &a.requester)?;
        }
        for t in planned {
            let record = approvals.get(path, &t.id)?;
            approvals.apply(path, audit, record, t.to, &t.patch)?;
        }
    }
    if let Some(audit) = audit.as_mut() {
        for entry in &batch.audit {
            append_audit(path, audit, tid, entry.clone())?;
        }
    }
    if let Some(pending) = pending.as_mut() {
        for w in &batch.pending_writes {
            pending.insert((tid, w.seq, w.node.as_str(), w.idx), Payload::encode(&w.value).as_slice()).ctx(path)?;
        }
    }
    Ok(outcomes)
}

/// Removes every effect of `thread` keyed by a seq below `seq`.
pub(crate) fn remove_effects_below(
    path: &Path,
    effects: &mut Table<'_, (&'static str, u64, &'static str, &'static str), &'static [u8]>,
    thread: &str,
    seq: u64,
) -> Result<(), StorageError> {
    let mut keys = Vec::new();
    for entry in effects.range((thread, 0, "", "")..(thread, seq, "", "")).ctx(path)? {
        let (k, _) = entry.ctx(path)?;
        let (_, s, node, key) = k.value();
        keys.push((s, node.to_string(), key.to_string()));
    }
    for (s, node, key) in keys {
        effects.remove((thread, s, node.as_str(), key.as_str())).ctx(path)?;
    }
    Ok(())
}
