//! `Store::restore_thread` on PostgreSQL: every row of a [`ThreadDump`] in one transaction.

use deadpool_postgres::GenericClient;

use crate::dump::{ThreadDump, check_dump, parent_in_dump};
use crate::error::CommitError;
use crate::postgres::Ctx;
use crate::postgres::error::Fail;
use crate::postgres::sql::{self, time};
use crate::record::Checkpoint;

/// Writes the dump; refused if the thread or one of its approvals exists already.
pub(crate) async fn stage<C: GenericClient>(ctx: &Ctx, tx: &C, d: &ThreadDump) -> Result<(), Fail<CommitError>> {
    check_dump(d).map_err(Fail::Refused)?;
    let tid = d.thread.id.as_str();
    let refused = |reason: String| Fail::Refused(CommitError::Invalid { thread: tid.to_string(), reason });
    let t = &d.thread;
    let wake_at = d.wake_at.map(time);
    let inserted = sql::execute(
        tx,
        "INSERT INTO threads (id, owner, graph_fingerprint, schema_version, status, detail, created_at, updated_at, \
           wake_at, parent) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (id) DO NOTHING",
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
        ],
    )
    .await?;
    if inserted == 0 {
        return Err(refused("the thread exists already in this store".to_string()));
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
    for e in &d.audit {
        let seq = sql::int(&ctx.path, "audit seq", e.seq)?;
        last = last.max(seq);
        sql::execute(
            tx,
            "INSERT INTO audit (thread, seq, at, actor, kind, detail) VALUES ($1, $2, $3, $4, $5, $6)",
            &[&tid, &seq, &time(e.at), &e.actor, &e.kind, &e.detail.to_string()],
        )
        .await?;
    }
    if last > 0 {
        sql::execute(
            tx,
            "INSERT INTO audit_heads (thread, last) VALUES ($1, $2) ON CONFLICT (thread) DO UPDATE SET last = EXCLUDED.last",
            &[&tid, &last],
        )
        .await?;
    }
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
