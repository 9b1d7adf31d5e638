//! [`Store::commit_step`](crate::Store::commit_step) on PostgreSQL: one transaction per
//! super-step.
//!
//! A fenced commit first locks the thread's lease row (`SELECT .. FOR UPDATE`) and checks that
//! its holder still holds an unexpired lease; the lock is kept until the commit ends, so no
//! takeover can slip in between the check and the writes. A holder whose lease expired, or was
//! taken over by another process, is refused and nothing is written. Any refusal rolls the whole
//! transaction back.

use deadpool_postgres::GenericClient;

use crate::error::CommitError;
use crate::postgres::error::{Fail, is_unique_violation};
use crate::postgres::sql::{self, time, uint};
use crate::postgres::{Ctx, approvals};
use crate::record::{Lease, StepCommit};

/// What a staged commit wrote.
pub(crate) struct CommitOut {
    pub(crate) checkpoint: Option<u64>,
    pub(crate) audit_seqs: Vec<u64>,
}

const UPSERT_THREAD: &str = "INSERT INTO threads AS t \
       (id, owner, graph_fingerprint, schema_version, status, detail, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
     ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, graph_fingerprint = EXCLUDED.graph_fingerprint, \
       schema_version = EXCLUDED.schema_version, status = EXCLUDED.status, detail = EXCLUDED.detail, \
       created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at \
     WHERE (t.owner, t.graph_fingerprint, t.schema_version, t.status, t.detail, t.created_at, t.updated_at) \
       IS DISTINCT FROM (EXCLUDED.owner, EXCLUDED.graph_fingerprint, EXCLUDED.schema_version, \
         EXCLUDED.status, EXCLUDED.detail, EXCLUDED.created_at, EXCLUDED.updated_at)";

fn invalid(tid: &str, reason: String) -> Fail<CommitError> {
    Fail::Refused(CommitError::Invalid { thread: tid.to_string(), reason })
}

/// Checks and writes `c` inside `tx`.
pub(crate) async fn stage<C: GenericClient>(ctx: &Ctx, tx: &C, c: &StepCommit) -> Result<CommitOut, Fail<CommitError>> {
    let tid = c.thread.id.as_str();
    if tid.is_empty() {
        return Err(invalid(tid, "the thread id is empty".to_string()));
    }
    if let Some(cp) = &c.checkpoint
        && cp.thread != tid
    {
        return Err(invalid(tid, format!("the checkpoint belongs to thread `{}`", cp.thread)));
    }
    if let Some((key, _)) = c.effects.iter().find(|(k, _)| k.thread != tid) {
        return Err(invalid(tid, format!("effect `{}` belongs to thread `{}`", key.key, key.thread)));
    }
    if let Some(a) = c.new_approvals.iter().find(|a| a.thread != tid) {
        return Err(invalid(tid, format!("approval `{}` belongs to thread `{}`", a.id, a.thread)));
    }

    if let Some(holder) = &c.lease_holder {
        let row =
            sql::query_opt(tx, "SELECT holder, expires_at FROM leases WHERE thread = $1 FOR UPDATE", &[&tid]).await?;
        let current = match row {
            Some(row) => match row.get::<_, Option<String>>(0) {
                Some(h) => {
                    Some(Lease { holder: h, expires_at: uint(&ctx.path, "leases", || format!("{tid:?}"), row.get(1))? })
                }
                None => None,
            },
            None => None,
        };
        let held = current.as_ref().is_some_and(|l| l.holder == *holder && l.expires_at > c.now);
        if !held {
            return Err(Fail::Refused(CommitError::LeaseLost {
                thread: tid.to_string(),
                holder: holder.clone(),
                current,
            }));
        }
    }

    let mut checkpoint_seq = None;
    if let Some(cp) = &c.checkpoint {
        let seq = i64::try_from(cp.seq).map_err(|_| invalid(tid, format!("checkpoint seq {} is too large", cp.seq)))?;
        let parent = match cp.parent {
            Some(p) => Some(i64::try_from(p).map_err(|_| invalid(tid, format!("parent {p} is too large")))?),
            None => None,
        };
        let row = sql::query_opt(
            tx,
            "SELECT max(seq), count(*) FILTER (WHERE seq = $2) FROM checkpoints WHERE thread = $1",
            &[&tid, &parent.unwrap_or(-1)],
        )
        .await?;
        let (latest, parent_found) = row.map_or((None, 0), |r| (r.get::<_, Option<i64>>(0), r.get::<_, i64>(1)));
        if let Some(latest) = latest
            && latest >= seq
        {
            let latest = uint(&ctx.path, "checkpoints", || format!("{tid:?}"), latest)?;
            return Err(Fail::Refused(CommitError::SeqNotIncreasing { thread: tid.to_string(), seq: cp.seq, latest }));
        }
        if let Some(p) = cp.parent
            && (p >= cp.seq || parent_found == 0)
        {
            return Err(Fail::Refused(CommitError::ParentMissing { thread: tid.to_string(), seq: cp.seq, parent: p }));
        }
        if cp.parent.is_none() && cp.snapshot.is_none() {
            return Err(invalid(tid, format!("checkpoint {} has no parent, so it must carry a snapshot", cp.seq)));
        }
        checkpoint_seq = Some((seq, parent));
    }

    let t = &c.thread;
    sql::execute(
        tx,
        UPSERT_THREAD,
        &[
            &tid,
            &t.owner,
            &t.graph_fingerprint,
            &i64::from(t.schema_version),
            &t.status.as_str(),
            &t.detail,
            &time(t.created_at),
            &time(t.updated_at),
        ],
    )
    .await?;

    if let (Some(cp), Some((seq, parent))) = (&c.checkpoint, checkpoint_seq) {
        if let Some(parent) = parent {
            sql::execute(tx, "DELETE FROM pending_writes WHERE thread = $1 AND seq = $2", &[&tid, &parent]).await?;
        }
        let inserted = sql::execute(
            tx,
            "INSERT INTO checkpoints (thread, seq, parent, has_snapshot, row, snapshot) VALUES ($1, $2, $3, $4, $5, $6)",
            &[&tid, &seq, &parent, &cp.snapshot.is_some(), &cp.summary().encode_row(&cp.delta), &cp.snapshot],
        )
        .await;
        match inserted {
            // A concurrent unfenced commit of the same seq won.
            Err(e) if is_unique_violation(&e) => {
                return Err(Fail::Refused(CommitError::SeqNotIncreasing {
                    thread: tid.to_string(),
                    seq: cp.seq,
                    latest: cp.seq,
                }));
            }
            other => {
                other?;
            }
        }
    }

    for w in &c.pending_writes {
        let seq = sql::int(&ctx.path, "pending write seq", w.seq)?;
        sql::execute(
            tx,
            "INSERT INTO pending_writes (thread, seq, node, idx, value) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (thread, seq, node, idx) DO UPDATE SET value = EXCLUDED.value",
            &[&tid, &seq, &w.node, &i64::from(w.idx), &w.value],
        )
        .await?;
    }
    for (key, result) in &c.effects {
        let seq = sql::int(&ctx.path, "effect seq", key.seq)?;
        sql::execute(
            tx,
            "INSERT INTO effects (thread, seq, node, key, result) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (thread, seq, node, key) DO NOTHING",
            &[&tid, &seq, &key.node, &key.key, result],
        )
        .await?;
    }
    let mut audit_seqs = Vec::new();
    for entry in &c.audit {
        audit_seqs.push(approvals::append_audit(ctx, tx, tid, entry).await?);
    }
    for approval in &c.new_approvals {
        audit_seqs.push(approvals::insert(ctx, tx, approval, &approval.requester).await?);
    }
    for t in &c.approval_transitions {
        let (_, seq) = approvals::transition(ctx, tx, &t.id, t.from, t.to, &t.patch).await?;
        audit_seqs.push(seq);
    }
    Ok(CommitOut { checkpoint: c.checkpoint.as_ref().map(|cp| cp.seq), audit_seqs })
}
