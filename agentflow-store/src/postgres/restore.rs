//! `Store::restore_thread` on PostgreSQL: every row of a [`ThreadDump`] in one transaction.

use deadpool_postgres::GenericClient;

use crate::dump::{ThreadDump, chained_audit, check_dump, left_over, parent_in_dump};
use crate::error::CommitError;
use crate::postgres::error::Fail;
use crate::postgres::pool::PgPool;
use crate::postgres::sql::{self, time};
use crate::record::Checkpoint;

/// What of thread `$1` is stored without its thread record, named for people; no row if nothing.
const LEFT_OVER: &str = "SELECT what FROM ( \
       SELECT 1 AS n, 'audit entries' AS what WHERE EXISTS (SELECT 1 FROM audit WHERE thread = $1) \
       UNION ALL SELECT 2, 'a queued run' WHERE EXISTS (SELECT 1 FROM run_queue WHERE thread = $1) \
       UNION ALL SELECT 3, 'checkpoints' WHERE EXISTS (SELECT 1 FROM checkpoints WHERE thread = $1) \
       UNION ALL SELECT 4, 'journaled results or pending writes' WHERE EXISTS (SELECT 1 FROM effects WHERE thread = $1) \
         OR EXISTS (SELECT 1 FROM pending_writes WHERE thread = $1) \
       UNION ALL SELECT 5, 'an event log' WHERE EXISTS (SELECT 1 FROM events WHERE thread = $1) \
     ) found ORDER BY n LIMIT 1";

/// Writes the dump; refused if the thread or one of its approvals exists already, or if records
/// of the thread are there without it.
pub(crate) async fn stage<C: GenericClient>(ctx: &PgPool, tx: &C, d: &ThreadDump) -> Result<(), Fail<CommitError>> {
    check_dump(d).map_err(Fail::Refused)?;
    let tid = d.thread.id.as_str();
    let refused = |reason: String| Fail::Refused(CommitError::Invalid { thread: tid.to_string(), reason });
    let t = &d.thread;
    let wake_at = d.wake_at.map(time);
    let inserted = sql::execute(
        tx,
        "INSERT INTO threads (id, owner, graph_fingerprint, schema_version, status, detail, created_at, updated_at, \
           wake_at, parent, tenant, trace) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (id) DO NOTHING",
        &[
            &tid,
            &t.owner,
            &t.graph_fingerprint,
            &i64::from(t.schema_version),
            &t.status.as_str(),
            &t.detail,
            &time(t.created_at),
            &time(t.updated_at),
            &wake_at,
            &t.parent,
            &t.tenant,
            &t.trace,
        ],
    )
    .await?;
    if inserted == 0 {
        return Err(refused("the thread exists already in this store".to_string()));
    }
    // Records of the thread without its record (a submitted run's audit entry and queue row):
    // the dump would be merged into them.
    let found = sql::query_opt(tx, LEFT_OVER, &[&tid]).await?;
    if let Some(row) = found {
        let what: String = sql::col(&ctx.path, "threads", &row, 0)?;
        return Err(Fail::Refused(left_over(tid, &what)));
    }
    for cp in &d.checkpoints {
        let cp = Checkpoint { parent: parent_in_dump(d, cp), ..cp.clone() };
        let seq = sql::int(&ctx.path, "checkpoint seq", cp.seq)?;
        let parent = cp.parent.map(|p| sql::int(&ctx.path, "checkpoint parent", p)).transpose()?;
        let row = cp.encode_row();
        sql::execute(
            tx,
            "INSERT INTO checkpoints (thread, seq, parent, has_snapshot, row, snapshot) VALUES ($1, $2, $3, $4, $5, $6)",
            &[&tid, &seq, &parent, &cp.snapshot.is_some(), &row, &cp.snapshot],
        )
        .await?;
    }
    for w in &d.pending_writes {
        let seq = sql::int(&ctx.path, "pending write seq", w.seq)?;
        sql::execute(
            tx,
            "INSERT INTO pending_writes (thread, seq, node, idx, value) VALUES ($1, $2, $3, $4, $5)",
            &[&tid, &seq, &w.node, &i64::from(w.idx), &w.value],
        )
        .await?;
    }
    for (k, result) in &d.effects {
        let seq = sql::int(&ctx.path, "effect seq", k.seq)?;
        sql::execute(
            tx,
            "INSERT INTO effects (thread, seq, node, key, result) VALUES ($1, $2, $3, $4, $5)",
            &[&tid, &seq, &k.node, &k.key, result],
        )
        .await?;
    }
    let mut last = 0i64;
    let mut head = String::new();
    for e in &chained_audit(d) {
        let seq = sql::int(&ctx.path, "audit seq", e.seq)?;
        last = last.max(seq);
        sql::execute(
            tx,
            "INSERT INTO audit (thread, seq, at, actor, kind, detail, detail_hash, link) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[&tid, &seq, &time(e.at), &e.actor, &e.kind, &e.detail.to_string(), &e.detail_hash, &e.link],
        )
        .await?;
        head.clone_from(&e.link);
    }
    if last > 0 {
        sql::execute(
            tx,
            "INSERT INTO audit_heads (thread, last, link) VALUES ($1, $2, $3) \
             ON CONFLICT (thread) DO UPDATE SET last = EXCLUDED.last, link = EXCLUDED.link",
            &[&tid, &last, &head],
        )
        .await?;
    }
    crate::postgres::event_log::restore(ctx, tx, tid, &d.events).await?;
    for a in &d.approvals {
        let inserted = sql::execute(
            tx,
            "INSERT INTO approvals (id, thread, status, record) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
            &[&a.id, &a.thread, &a.status.as_str(), &a.encode()],
        )
        .await?;
        if inserted == 0 {
            return Err(refused(format!("approval `{}` exists already in this store", a.id)));
        }
    }
    Ok(())
}
