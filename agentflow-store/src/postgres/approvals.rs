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

use crate::audit_chain;
use crate::checks::check_conditions;
use crate::checks::check_detail;
use crate::error::{ApprovalError, AuditError};
use crate::postgres::error::Fail;
use crate::postgres::pool::PgPool;
use crate::postgres::reads::approval_from;
use crate::postgres::sql::{self, time};
use crate::record::{ApprovalPatch, ApprovalRecord, ApprovalStatus, NewAuditEntry};

/// Takes the thread's next audit seq (the `audit_heads` row lock orders concurrent appends, and
/// holds it until the transaction ends) and answers the link of the entry before it.
const NEXT_AUDIT_SEQ: &str = "INSERT INTO audit_heads AS h (thread, last) VALUES ($1, 1) \
       ON CONFLICT (thread) DO UPDATE SET last = h.last + 1 RETURNING last, link";

/// Writes the entry at the seq [`NEXT_AUDIT_SEQ`] took, and its link beside the thread's seq.
const INSERT_AUDIT: &str = "WITH head AS (UPDATE audit_heads SET link = $8 WHERE thread = $1) \
     INSERT INTO audit (thread, seq, at, actor, kind, detail, detail_hash, link) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

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
    // The upsert always answers its row; none would read as seq 0, refused below.
    let row = sql::query_opt(c, NEXT_AUDIT_SEQ, &[&thread]).await?;
    let seq: i64 = row.as_ref().map(|r| sql::col(&ctx.path, "audit_heads", r, 0)).transpose()?.unwrap_or(0);
    let prev: String = row.as_ref().map(|r| sql::col(&ctx.path, "audit_heads", r, 1)).transpose()?.unwrap_or_default();
    if seq < 1 {
        let reason = format!("the next audit seq of the thread is {seq}: the audit_heads row is damaged");
        return Err(Fail::Storage(crate::postgres::error::decode_error(
            &ctx.path,
            "audit_heads",
            format!("{thread:?}"),
            reason,
        )));
    }
    let seq_u = sql::uint(&ctx.path, "audit_heads", || format!("{thread:?}"), seq)?;
    let hash = audit_chain::detail_hash(&entry.detail);
    let link = audit_chain::link(&prev, thread, seq_u, entry.at, &entry.actor, &entry.kind, &hash);
    let params: &sql::Params<'_> =
        &[&thread, &seq, &time(entry.at), &entry.actor, &entry.kind, &entry.detail.to_string(), &hash, &link];
    sql::execute(c, INSERT_AUDIT, params).await?;
    Ok(seq_u)
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
