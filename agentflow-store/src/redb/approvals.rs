//! Approval transitions: creating an approval, the compare-and-set of its status, and the
//! secondary tables (by thread, waiting) and audit entries that go with each.
//!
//! Every staging function validates first and calls [`Tx::wrote`] just before its first write,
//! so a refusal never leaves half a job in a group transaction.

use std::path::Path;

use redb::Table;
use serde_json::json;

use crate::checks::check_conditions;
use crate::error::{ApprovalError, StorageError};
use crate::record::{ApprovalPatch, ApprovalRecord, ApprovalStatus, NewAuditEntry};
use crate::redb::audit::append_audit;
use crate::redb::error::WithPath;
use crate::redb::reads::{ByStr, get_str};
use crate::redb::tables;
use crate::redb::writer::Tx;

pub(crate) fn check_new_approval(
    path: &Path,
    approvals: &impl ByStr,
    approval: &ApprovalRecord,
) -> Result<(), ApprovalError> {
    if !approval.status.is_waiting() {
        return Err(ApprovalError::NotPending { id: approval.id.clone(), status: approval.status });
    }
    check_conditions(&approval.id, approval.conditions.as_ref())?;
    if approvals.get(approval.id.as_str()).ctx(path)?.is_some() {
        return Err(ApprovalError::AlreadyExists { id: approval.id.clone() });
    }
    Ok(())
}

pub(crate) fn check_transition(
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
pub(crate) struct ApprovalTables<'t> {
    pub(crate) approvals: Table<'t, &'static str, &'static [u8]>,
    by_thread: Table<'t, (&'static str, &'static str), ()>,
    pending: Table<'t, &'static str, ()>,
}

impl<'t> ApprovalTables<'t> {
    pub(crate) fn open(tx: &'t Tx<'_>) -> Result<Self, StorageError> {
        Ok(ApprovalTables {
            approvals: tx.txn.open_table(tables::APPROVALS).ctx(tx.path)?,
            by_thread: tx.txn.open_table(tables::APPROVALS_BY_THREAD).ctx(tx.path)?,
            pending: tx.txn.open_table(tables::APPROVALS_PENDING).ctx(tx.path)?,
        })
    }

    pub(crate) fn get(&self, path: &Path, id: &str) -> Result<ApprovalRecord, ApprovalError> {
        get_str(path, &self.approvals, tables::APPROVALS, id, ApprovalRecord::decode)?
            .ok_or_else(|| ApprovalError::NotFound { id: id.to_string() })
    }

    pub(crate) fn insert(
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

    pub(crate) fn apply(
        &mut self,
        path: &Path,
        audit: &mut Table<'_, (&'static str, u64), &'static [u8]>,
        mut record: ApprovalRecord,
        to: ApprovalStatus,
        patch: &ApprovalPatch,
    ) -> Result<(ApprovalRecord, u64), StorageError> {
        let from = record.status;
        record.apply_patch(to, patch);
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
