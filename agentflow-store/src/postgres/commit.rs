//! [`Store::commit_step`](crate::Store::commit_step) on PostgreSQL: one transaction per
//! super-step.
//!
//! A fenced commit first locks the thread's lease row (`SELECT .. FOR UPDATE`) and checks that
//! its holder still holds an unexpired lease; the lock is kept until the commit ends, so no
//! takeover can slip in between the check and the writes. A holder whose lease expired, or was
//! taken over by another process, is refused and nothing is written. Any refusal rolls the whole
//! transaction back.
//!
//! Every statement of a step is pipelined (sent together on the connection, answered in
//! order): `BEGIN`, the lease lock, the history check and the writes of the thread,
//! checkpoint, pending writes and effects. Their answers are then read in that order: a check
//! that refuses the commit rolls the transaction back (the writes made in it with it), so no
//! write outlives a failed check; otherwise `COMMIT` follows. A plain step costs two round
//! trips (the statements, `COMMIT`) whatever it carries; a step with audit entries or approval
//! changes one more per entry.

use std::future::Future;
use std::pin::Pin;

use deadpool_postgres::GenericClient;
use futures_util::future::{join3, try_join, try_join_all};

use crate::error::{CommitError, StorageError};
use crate::postgres::error::{Fail, is_unique_violation};
use crate::postgres::sql::{self, Params, time, uint};
use crate::postgres::{Ctx, approvals};
use crate::record::{Lease, StepCommit, ThreadStatus};

/// What a staged commit wrote.
pub(crate) struct CommitOut {
    pub(crate) checkpoint: Option<u64>,
    pub(crate) audit_seqs: Vec<u64>,
}

const UPSERT_THREAD: &str = "INSERT INTO threads AS t \
       (id, owner, graph_fingerprint, schema_version, status, detail, created_at, updated_at, wake_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
     ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, graph_fingerprint = EXCLUDED.graph_fingerprint, \
       schema_version = EXCLUDED.schema_version, status = EXCLUDED.status, detail = EXCLUDED.detail, \
       created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at, wake_at = EXCLUDED.wake_at \
     WHERE (t.owner, t.graph_fingerprint, t.schema_version, t.status, t.detail, t.created_at, t.updated_at, \
         t.wake_at) \
       IS DISTINCT FROM (EXCLUDED.owner, EXCLUDED.graph_fingerprint, EXCLUDED.schema_version, \
         EXCLUDED.status, EXCLUDED.detail, EXCLUDED.created_at, EXCLUDED.updated_at, EXCLUDED.wake_at)";

fn invalid(tid: &str, reason: String) -> Fail<CommitError> {
    Fail::Refused(CommitError::Invalid { thread: tid.to_string(), reason })
}

/// A statement of the write phase, sent with the others of the step.
type Write<'a> = Pin<Box<dyn Future<Output = Result<(), Fail<CommitError>>> + Send + 'a>>;

/// Opens a transaction on `tx` with `begin` (`BEGIN`, and any `SET LOCAL`), checks and writes
/// `c` in it, all pipelined; the caller commits, or rolls back on an error.
pub(crate) async fn stage<C: GenericClient>(
    ctx: &Ctx,
    tx: &C,
    c: &StepCommit,
    begin: &str,
) -> Result<CommitOut, Fail<CommitError>> {
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
    let checkpoint_seq = match &c.checkpoint {
        None => None,
        Some(cp) => {
            let seq =
                i64::try_from(cp.seq).map_err(|_| invalid(tid, format!("checkpoint seq {} is too large", cp.seq)))?;
            let parent = match cp.parent {
                Some(p) => Some(i64::try_from(p).map_err(|_| invalid(tid, format!("parent {p} is too large")))?),
                None => None,
            };
            Some((seq, parent))
        }
    };

    // Writes, sent together; the first failure (in statement order) is the answer. Everything
    // the statements borrow is made before the list of writes.
    let t = &c.thread;
    let (schema_version, status, created_at, updated_at) =
        (i64::from(t.schema_version), t.status.as_str(), time(t.created_at), time(t.updated_at));
    let row = c.checkpoint.as_ref().map(|cp| cp.summary().encode_row(&cp.delta));
    let pending_keys = c
        .pending_writes
        .iter()
        .map(|w| Ok((sql::int(&ctx.path, "pending write seq", w.seq)?, i64::from(w.idx))))
        .collect::<Result<Vec<_>, StorageError>>()?;
    let effect_seqs =
        c.effects.iter().map(|(k, _)| sql::int(&ctx.path, "effect seq", k.seq)).collect::<Result<Vec<_>, _>>()?;
    let wake_at = match (t.status, c.wake_at) {
        (_, Some(at)) => Some(sql::int(&ctx.path, "wake_at", at)?),
        (ThreadStatus::Sleeping, None) => {
            return Err(invalid(tid, "a sleeping thread needs a wake time (`StepCommit::wake_at`)".to_string()));
        }
        _ => None,
    };
    let mut writes: Vec<Write<'_>> = Vec::new();
    writes.push(Box::pin(async move {
        // The thread's timer is replaced by this commit's (none clears it).
        let params: &Params<'_> = &[
            &tid,
            &t.owner,
            &t.graph_fingerprint,
            &schema_version,
            &status,
            &t.detail,
            &created_at,
            &updated_at,
            &wake_at,
        ];
        sql::execute(tx, UPSERT_THREAD, params).await?;
        Ok(())
    }));
    if let (Some(cp), Some((seq, parent)), Some(row)) = (&c.checkpoint, checkpoint_seq, &row) {
        if let Some(parent) = parent {
            writes.push(Box::pin(async move {
                sql::execute(tx, "DELETE FROM pending_writes WHERE thread = $1 AND seq = $2", &[&tid, &parent]).await?;
                Ok(())
            }));
        }
        writes.push(Box::pin(async move {
            let has_snapshot = cp.snapshot.is_some();
            let inserted = sql::execute(
                tx,
                "INSERT INTO checkpoints (thread, seq, parent, has_snapshot, row, snapshot) VALUES ($1, $2, $3, $4, $5, $6)",
                &[&tid, &seq, &parent, &has_snapshot, row, &cp.snapshot],
            )
            .await;
            match inserted {
                // A concurrent unfenced commit of the same seq won.
                Err(e) if is_unique_violation(&e) => Err(Fail::Refused(CommitError::SeqNotIncreasing {
                    thread: tid.to_string(),
                    seq: cp.seq,
                    latest: cp.seq,
                })),
                other => other.map(drop).map_err(Fail::Db),
            }
        }));
    }
    for (w, (seq, idx)) in c.pending_writes.iter().zip(&pending_keys) {
        writes.push(Box::pin(async move {
            sql::execute(
                tx,
                "INSERT INTO pending_writes (thread, seq, node, idx, value) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (thread, seq, node, idx) DO UPDATE SET value = EXCLUDED.value",
                &[&tid, seq, &w.node, idx, &w.value],
            )
            .await?;
            Ok(())
        }));
    }
    for ((key, result), seq) in c.effects.iter().zip(&effect_seqs) {
        writes.push(Box::pin(async move {
            sql::execute(
                tx,
                "INSERT INTO effects (thread, seq, node, key, result) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (thread, seq, node, key) DO NOTHING",
                &[&tid, seq, &key.node, &key.key, result],
            )
            .await?;
            Ok(())
        }));
    }
    // Checks: the lease row (locked until the commit ends) and the thread's history, together.
    let lease_check = async {
        if c.lease_holder.is_none() {
            return Ok(None);
        }
        sql::query_opt(tx, "SELECT holder, expires_at FROM leases WHERE thread = $1 FOR UPDATE", &[&tid]).await
    };
    let history_check = async {
        let Some((_, parent)) = checkpoint_seq else { return Ok(None) };
        // Two primary-key lookups (the latest seq, the parent), not a scan of the thread's
        // history: a step costs the same on a long thread as on a short one.
        sql::query_opt(
            tx,
            "SELECT (SELECT max(seq) FROM checkpoints WHERE thread = $1), \
               (SELECT count(*) FROM checkpoints WHERE thread = $1 AND seq = $2)",
            &[&tid, &parent.unwrap_or(-1)],
        )
        .await
    };

    // Everything goes out at once; the answers come back in statement order.
    let (begun, checks, written) =
        join3(tx.batch_execute(begin), try_join(lease_check, history_check), try_join_all(writes)).await;
    begun?;
    let (lease_row, history_row) = checks?;
    if let Some(holder) = &c.lease_holder {
        let current = match lease_row {
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
    if let (Some(cp), Some((seq, _))) = (&c.checkpoint, checkpoint_seq) {
        let (latest, parent_found) =
            history_row.map_or((None, 0), |r| (r.get::<_, Option<i64>>(0), r.get::<_, i64>(1)));
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
    }

    written?;

    // Audit seqs depend on each other: these go one by one (most steps have none).
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
