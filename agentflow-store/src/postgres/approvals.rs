//! Writes of approvals and audit entries inside a transaction of a
//! [`PostgresStore`](super::PostgresStore), shared by the standalone methods and
//! `commit_step`.
//!
//! A transition is a compare-and-set: the row is locked (`SELECT .. FOR UPDATE`), its status
//! compared with the expected one, and the update made `WHERE status = $expected`, with the
//! `approval.<status>` audit entry in the same transaction. Of concurrent callers in any number
//! of processes, the first to lock the row wins; the others then find the new status.

use deadpool_postgres::GenericClient;
use serde_json::json;

use crate::checks::check_conditions;
use crate::checks::check_detail;
use crate::error::{ApprovalError, AuditError};
use crate::postgres::error::Fail;
use crate::postgres::pool::PgPool;
use crate::postgres::reads::approval_from;
use crate::postgres::sql::{self, time};
use crate::record::{ApprovalPatch, ApprovalRecord, ApprovalStatus, NewAuditEntry};

/// Takes the thread's next audit seq (the `audit_heads` row lock orders concurrent appends) and
/// writes the entry, in one statement.
const APPEND_AUDIT: &str = "WITH head AS ( \
       INSERT INTO audit_heads AS h (thread, last) VALUES ($1, 1) \
       ON CONFLICT (thread) DO UPDATE SET last = h.last + 1 RETURNING last \
     ) INSERT INTO audit (thread, seq, at, actor, kind, detail) \
       SELECT $1, last, $2, $3, $4, $5 FROM head RETURNING seq";

/// Appends one audit entry; returns its seq. Refuses, before writing, a detail nested deeper
/// than the store reads back ([`AuditError::TooDeep`]).
pub(crate) async fn append_audit<C: GenericClient, E: From<AuditError>>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
    entry: &NewAuditEntry,
) -> Result<u64, Fail<E>> {
    check_detail(thread, entry).map_err(|e| Fail::Refused(e.into()))?;
    append_entry(ctx, c, thread, entry).await
}

/// [`append_audit`] without the depth check, for an entry whose detail fits: one the store
/// builds around checked conditions, or one of a step commit checked as a whole
/// ([`check_depths`](crate::checks::check_depths)).
pub(crate) async fn append_entry<C: GenericClient, E>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
    entry: &NewAuditEntry,
) -> Result<u64, Fail<E>> {
    let detail = entry.detail.to_string();
    let row = sql::query_opt(c, APPEND_AUDIT, &[&thread, &time(entry.at), &entry.actor, &entry.kind, &detail]).await?;
    let seq: i64 = row.map(|r| sql::col(&ctx.path, "audit", &r, 0)).transpose()?.unwrap_or(0);
    Ok(sql::uint(&ctx.path, "audit", || format!("{thread:?}"), seq)?)
}

/// Inserts a new `PENDING` approval and its `approval.requested` entry by `actor`; returns the
/// entry's seq.
pub(crate) async fn insert<C: GenericClient, E: From<ApprovalError>>(
    ctx: &PgPool,
    c: &C,
    approval: &ApprovalRecord,
    actor: &str,
) -> Result<u64, Fail<E>> {
    if !approval.status.is_waiting() {
        let err = ApprovalError::NotPending { id: approval.id.clone(), status: approval.status };
        return Err(Fail::Refused(err.into()));
    }
    check_conditions(&approval.id, approval.conditions.as_ref()).map_err(|e| Fail::Refused(e.into()))?;
    let inserted = sql::execute(
        c,
        "INSERT INTO approvals (id, thread, status, record) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
        &[&approval.id, &approval.thread, &approval.status.as_str(), &approval.encode()],
    )
    .await?;
    if inserted == 0 {
        return Err(Fail::Refused(ApprovalError::AlreadyExists { id: approval.id.clone() }.into()));
    }
    let detail = json!({
        "approval": approval.id,
        "node": approval.node,
        "tool": approval.tool,
        "args_hash": approval.args_hash,
        "risk": approval.risk,
        "reason": approval.reason,
        "expires_at": approval.expires_at,
    });
    let entry = NewAuditEntry::new(approval.created_at, actor, "approval.requested", detail);
    append_entry(ctx, c, &approval.thread, &entry).await
}

/// Compare-and-set of an approval's status with its audit entry; returns the new record and
/// the entry's seq.
pub(crate) async fn transition<C: GenericClient, E: From<ApprovalError>>(
    ctx: &PgPool,
    c: &C,
    id: &str,
    expected: ApprovalStatus,
    to: ApprovalStatus,
    patch: &ApprovalPatch,
) -> Result<(ApprovalRecord, u64), Fail<E>> {
    let refuse = |e: ApprovalError| Fail::Refused(e.into());
    let row = sql::query_opt(c, "SELECT record FROM approvals WHERE id = $1 FOR UPDATE", &[&id]).await?;
    let Some(row) = row else { return Err(refuse(ApprovalError::NotFound { id: id.to_string() })) };
    let mut record = approval_from(&ctx.path, id, sql::col(&ctx.path, "approvals", &row, 0)?)?;
    if !expected.can_move_to(to) {
        return Err(refuse(ApprovalError::IllegalTransition { id: id.to_string(), from: expected, to }));
    }
    if record.status != expected {
        return Err(refuse(ApprovalError::AlreadyDecided { id: id.to_string(), expected, current: record.status }));
    }
    // Before any write: the audit entry below holds the conditions one level down.
    check_conditions(id, patch.conditions.as_ref()).map_err(refuse)?;
    let from = record.status;
    record.apply_patch(to, patch);
    let updated = sql::execute(
        c,
        "UPDATE approvals SET status = $2, record = $3 WHERE id = $1 AND status = $4",
        &[&id, &to.as_str(), &record.encode(), &expected.as_str()],
    )
    .await?;
    if updated != 1 {
        // Unreachable while the row is locked; refuse rather than write a second decision.
        return Err(refuse(ApprovalError::AlreadyDecided { id: id.to_string(), expected, current: from }));
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
    let entry = NewAuditEntry::new(patch.at, patch.actor.clone(), kind, detail);
    let seq = append_entry(ctx, c, &record.thread, &entry).await?;
    Ok((record, seq))
}
