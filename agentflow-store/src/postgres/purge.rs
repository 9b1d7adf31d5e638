//! Purging a thread of a [`PostgresStore`](super::PostgresStore) and its legal holds, each in
//! one transaction.

use deadpool_postgres::GenericClient;

use crate::audit_chain::PURGED_DETAIL;
use crate::error::PurgeError;
use crate::postgres::approvals::append_audit;
use crate::postgres::error::Fail;
use crate::postgres::pool::PgPool;
use crate::postgres::reads::approval_from;
use crate::postgres::sql::{self, time};
use crate::record::{HELD_KINDS, LegalHold, NewAuditEntry, PURGED_KIND, PurgeReport, ThreadStatus, purge_approval};

/// `$1` and its subgraph children at every level, locked, by id (a parent's id is a prefix of
/// its children's, so each comes after its parent).
const FAMILY: &str = "WITH RECURSIVE fam(id) AS (SELECT id FROM threads WHERE id = $1 \
     UNION SELECT t.id FROM threads t JOIN fam f ON t.parent = f.id) \
     SELECT t.id FROM threads t JOIN fam f ON f.id = t.id ORDER BY t.id FOR UPDATE OF t";

/// The threads above `$1` (its parent, the parent's parent, up to a root), locked for share
/// so that no hold is set on them until the transaction ends, shortest id first (the order
/// [`FAMILY`] locks in, so two purges lock in one order).
const ANCESTORS: &str = "WITH RECURSIVE up(id, parent) AS (SELECT id, parent FROM threads WHERE id = $1 \
     UNION SELECT t.id, t.parent FROM threads t JOIN up u ON t.id = u.parent) \
     SELECT t.id FROM threads t JOIN up u ON u.id = t.id WHERE t.id <> $1 ORDER BY t.id FOR SHARE OF t";

/// The first legal hold on one of `ids` (by id), with the held thread.
async fn first_hold<C: GenericClient, E>(
    ctx: &PgPool,
    c: &C,
    ids: &[String],
) -> Result<Option<(String, LegalHold)>, Fail<E>> {
    let held = sql::query_opt(
        c,
        "SELECT thread, held_by, reason, at FROM holds WHERE thread = ANY($1) ORDER BY thread LIMIT 1",
        &[&ids],
    )
    .await?;
    Ok(held.map(|row| hold_from(ctx, &row)).transpose()?)
}

/// The first legal hold on a thread above `thread` (see [`ANCESTORS`]), those threads locked
/// for share until the caller's transaction ends.
pub(crate) async fn hold_above<C: GenericClient, E>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
) -> Result<Option<(String, LegalHold)>, Fail<E>> {
    let rows = sql::query(c, ANCESTORS, &[&thread]).await?;
    let ids = rows.iter().map(|r| sql::col(&ctx.path, "threads", r, 0)).collect::<Result<Vec<String>, _>>()?;
    if ids.is_empty() {
        return Ok(None);
    }
    first_hold(ctx, c, &ids).await
}

/// The hold of `thread` itself, if any, in the caller's transaction.
pub(crate) async fn hold_on<C: GenericClient, E>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
) -> Result<Option<(String, LegalHold)>, Fail<E>> {
    first_hold(ctx, c, &[thread.to_string()]).await
}

/// The purge of `thread` and its subgraph children, in the caller's transaction (see
/// [`Store::purge_thread`](crate::Store::purge_thread)).
pub(crate) async fn purge<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
    entry: &NewAuditEntry,
) -> Result<PurgeReport, Fail<PurgeError>> {
    let refuse = |e: PurgeError| Fail::Refused(e);
    crate::checks::check_detail(thread, entry).map_err(|e| refuse(e.into()))?;
    // A hold on a thread keeps its subgraph children too: none of them is purged on its own.
    // The threads above are locked first (shorter ids), as a purge of one of them locks.
    let above = hold_above(ctx, c, thread).await?;
    let rows = sql::query(c, FAMILY, &[&thread]).await?;
    let ids = rows.iter().map(|r| sql::col(&ctx.path, "threads", r, 0)).collect::<Result<Vec<String>, _>>()?;
    if ids.is_empty() {
        return Err(refuse(PurgeError::UnknownThread { thread: thread.to_string() }));
    }
    if let Some((held, hold)) = first_hold(ctx, c, &ids).await?.or(above) {
        return Err(refuse(PurgeError::Held { thread: held, hold }));
    }
    let mut report = PurgeReport::new();
    report.threads.clone_from(&ids);
    report.checkpoints = sql::execute(c, "DELETE FROM checkpoints WHERE thread = ANY($1)", &[&ids]).await?;
    report.pending_writes = sql::execute(c, "DELETE FROM pending_writes WHERE thread = ANY($1)", &[&ids]).await?;
    report.effects = sql::execute(c, "DELETE FROM effects WHERE thread = ANY($1)", &[&ids]).await?;
    report.queued_runs = sql::execute(c, "DELETE FROM run_queue WHERE thread = ANY($1)", &[&ids]).await?;
    report.queued_runs += sql::execute(c, "DELETE FROM follow_ups WHERE thread = ANY($1)", &[&ids]).await?;
    report.webhooks = sql::execute(c, "DELETE FROM webhooks WHERE thread = ANY($1)", &[&ids]).await?;
    // The log goes; its `event_heads` row stays, so its seqs never start again.
    report.events = sql::execute(c, "DELETE FROM events WHERE thread = ANY($1)", &[&ids]).await?;
    sql::execute(c, "DELETE FROM idempotency_keys WHERE thread = ANY($1)", &[&ids]).await?;
    report.timers =
        sql::execute(c, "UPDATE threads SET wake_at = NULL WHERE id = ANY($1) AND wake_at IS NOT NULL", &[&ids])
            .await?;
    let approvals =
        sql::query(c, "SELECT id, record FROM approvals WHERE thread = ANY($1) ORDER BY id FOR UPDATE", &[&ids])
            .await?;
    for row in &approvals {
        let id: String = sql::col(&ctx.path, "approvals", row, 0)?;
        let mut record = approval_from(&ctx.path, &id, sql::col(&ctx.path, "approvals", row, 1)?)?;
        if purge_approval(&mut record, &entry.actor, entry.at) {
            sql::execute(
                c,
                "UPDATE approvals SET status = $2, record = $3 WHERE id = $1",
                &[&id, &record.status.as_str(), &record.encode()],
            )
            .await?;
            report.approvals += 1;
        }
    }
    let kept: Vec<&str> = std::iter::once(PURGED_KIND).chain(HELD_KINDS).collect();
    report.audit_details = sql::execute(
        c,
        "UPDATE audit SET detail = $2 WHERE thread = ANY($1) AND detail <> $2 AND NOT (kind = ANY($3))",
        &[&ids, &PURGED_DETAIL, &kept],
    )
    .await?;
    sql::execute(
        c,
        "UPDATE threads SET status = $2, detail = '', trace = NULL, updated_at = $3 \
         WHERE id = ANY($1) AND (status <> $2 OR detail <> '' OR trace IS NOT NULL)",
        &[&ids, &ThreadStatus::Purged.as_str(), &time(entry.at)],
    )
    .await?;
    // Each purged log records its purge, which is what lets its emptied details verify.
    for child in ids.iter().filter(|id| id.as_str() != thread) {
        let detail = serde_json::json!({ "purged_with": thread });
        let marker = NewAuditEntry::new(entry.at, entry.actor.clone(), PURGED_KIND, detail);
        append_audit::<_, PurgeError>(ctx, c, child, &marker).await?;
    }
    let detail = report.tombstone_detail(entry.detail.clone());
    let tombstone = NewAuditEntry::new(entry.at, entry.actor.clone(), PURGED_KIND, detail);
    append_audit::<_, PurgeError>(ctx, c, thread, &tombstone).await?;
    Ok(report)
}

/// Sets or releases the hold of `thread`, with its audit entry, in the caller's transaction.
pub(crate) async fn set_hold<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
    hold: Option<&LegalHold>,
    entry: &NewAuditEntry,
) -> Result<(), Fail<PurgeError>> {
    crate::checks::check_detail(thread, entry).map_err(|e| Fail::Refused(e.into()))?;
    if sql::query_opt(c, "SELECT id FROM threads WHERE id = $1 FOR UPDATE", &[&thread]).await?.is_none() {
        return Err(Fail::Refused(PurgeError::UnknownThread { thread: thread.to_string() }));
    }
    match hold {
        Some(h) => {
            sql::execute(
                c,
                "INSERT INTO holds (thread, held_by, reason, at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (thread) DO UPDATE SET held_by = $2, reason = $3, at = $4",
                &[&thread, &h.by, &h.reason, &time(h.at)],
            )
            .await?
        }
        None => sql::execute(c, "DELETE FROM holds WHERE thread = $1", &[&thread]).await?,
    };
    append_audit::<_, PurgeError>(ctx, c, thread, entry).await?;
    Ok(())
}

/// The hold of `thread`, if any.
pub(crate) async fn hold(ctx: &PgPool, thread: &str) -> Result<Option<LegalHold>, crate::error::StorageError> {
    let client = ctx.client().await?;
    let row = sql::query_opt(&client, "SELECT thread, held_by, reason, at FROM holds WHERE thread = $1", &[&thread])
        .await
        .map_err(|e| ctx.db(&e))?;
    Ok(row.map(|row| hold_from(ctx, &row)).transpose()?.map(|(_, hold)| hold))
}

fn hold_from(ctx: &PgPool, row: &tokio_postgres::Row) -> Result<(String, LegalHold), crate::error::StorageError> {
    let thread: String = sql::col(&ctx.path, "holds", row, 0)?;
    let at: i64 = sql::col(&ctx.path, "holds", row, 3)?;
    let hold = LegalHold::new(
        sql::col::<String>(&ctx.path, "holds", row, 1)?,
        sql::col::<String>(&ctx.path, "holds", row, 2)?,
        sql::uint(&ctx.path, "holds", || format!("{thread:?}"), at)?,
    );
    Ok((thread, hold))
}
