//! [`Store::commit_step`](crate::Store::commit_step) on PostgreSQL: one transaction per
//! super-step.
//!
//! A fenced commit first locks the thread's lease row (`SELECT .. FOR UPDATE`) and checks that
//! its holder still holds an unexpired lease; the lock is kept until the commit ends, so no
//! takeover can slip in between the check and the writes. A holder whose lease expired, or was
//! taken over by another process, is refused and nothing is written. Any refusal rolls the whole
//! transaction back.
//!
//! A plain step (no audit entries or approval changes) is one round trip: `BEGIN`, a guard
//! statement (it locks the lease row and divides by zero unless the holder's lease is held and
//! the history accepts the checkpoint), the writes of the thread, checkpoint, pending writes,
//! effects and events (one statement that appends them to the thread's log, trims it and
//! notifies the schema's channel), and `COMMIT` are sent together on the connection. A failed guard aborts the
//! transaction, so the writes after it fail and the `COMMIT` rolls back: nothing is written. The
//! commit is then made again through the checked path, which reads the lease row and the
//! history before deciding, and so names the refusal (or commits, if the state changed
//! meanwhile). The checked path, also used for steps with audit entries or approval changes,
//! sends `BEGIN`, the checks and the writes together, reads the checks' answers (a refusal rolls
//! the writes back with the transaction), then the dependent statements one by one and `COMMIT`:
//! two round trips and one per entry.
//!
//! JSON nested deeper than the store reads back (checkpoint metadata, audit details, approval
//! conditions) is refused by the caller before any of this
//! ([`check_depths`](crate::checks::check_depths)).

use std::future::Future;
use std::pin::Pin;

use deadpool_postgres::GenericClient;
use futures_util::future::{join3, join5, try_join_all, try_join3};

use crate::error::{CommitError, StorageError};
use crate::postgres::approvals;
use crate::postgres::error::{Fail, is_unique_violation};
use crate::postgres::event_log;
use crate::postgres::pool::PgPool;
use crate::postgres::sql::{self, Params, time, uint};
use crate::postgres::transaction::{OpenTx, released, retrying};
use crate::record::{CommitReceipt, Durability};
use crate::record::{StepCommit, ThreadStatus, seq_too_large};

/// A step commit: one transaction whose `BEGIN` is pipelined with its statements, run again on
/// a serialization failure or deadlock like [`in_transaction`](crate::postgres::transaction::in_transaction). A plain step (see
/// [`guardable`]) goes in one round trip with its `COMMIT` ([`stage_guarded`]);
/// when that guard refuses, or for other steps, the checks are read before `COMMIT`
/// ([`stage`]), which names the refusal.
pub(super) async fn commit(ctx: &PgPool, c: StepCommit) -> Result<CommitReceipt, CommitError> {
    // JSON the reads would refuse is refused before anything is sent, as on redb.
    crate::checks::check_depths(&c)?;
    let durability = c.durability;
    let begin = match durability {
        Durability::Eventual => "BEGIN; SET LOCAL synchronous_commit = off",
        _ => "BEGIN",
    };
    let mut guarded = guardable(&c);
    let out = retrying!(ctx, {
        if guarded {
            let mut open = OpenTx { client: Some(ctx.client().await?) };
            let staged = match &open.client {
                Some(client) => stage_guarded(ctx, client, &c, begin).await,
                None => Err(Fail::Storage(released(ctx))),
            };
            match staged {
                Ok(out) => {
                    // Committed in the pipeline: the connection goes back to the pool.
                    open.client.take();
                    return Ok(out);
                }
                Err(e) => {
                    // The pipeline's `COMMIT` ended the transaction; this makes sure of it.
                    let _ = open.end("ROLLBACK").await;
                    if !is_guard_refusal(&e) {
                        return Err(e);
                    }
                    // Refused: the checked path below names why (from now on, also on retries).
                    guarded = false;
                }
            }
        }
        // Held by the guard from before `BEGIN` is sent: a commit dropped half-way closes the
        // connection rather than pooling it inside a transaction.
        let mut open = OpenTx { client: Some(ctx.client().await?) };
        let staged = match &open.client {
            Some(client) => stage(ctx, client, &c, begin).await,
            None => Err(Fail::Storage(released(ctx))),
        };
        match staged {
            Ok(out) => open.end("COMMIT").await.map(|()| out).map_err(Fail::Db),
            Err(e) => {
                // The statements' failure is the answer, whatever the rollback does.
                let _ = open.end("ROLLBACK").await;
                Err(e)
            }
        }
    })?;
    Ok(CommitReceipt::new(out.checkpoint, out.audit_seqs, durability == Durability::Immediate, 1))
}

/// What a staged commit wrote.
pub(crate) struct CommitOut {
    pub(crate) checkpoint: Option<u64>,
    pub(crate) audit_seqs: Vec<u64>,
}

/// Writes the thread row. The tenant is written when the row is created and never updated: it is
/// fixed when the thread is created, whatever a later commit's record says. The trace context
/// is written while the row has none: the first one stored wins, and a commit without one
/// leaves it.
const UPSERT_THREAD: &str = "INSERT INTO threads AS t \
       (id, owner, graph_fingerprint, schema_version, status, detail, created_at, updated_at, wake_at, parent, \
        tenant, trace) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
     ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, graph_fingerprint = EXCLUDED.graph_fingerprint, \
       schema_version = EXCLUDED.schema_version, status = EXCLUDED.status, detail = EXCLUDED.detail, \
       created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at, wake_at = EXCLUDED.wake_at, \
       parent = EXCLUDED.parent, trace = COALESCE(t.trace, EXCLUDED.trace) \
     WHERE (t.owner, t.graph_fingerprint, t.schema_version, t.status, t.detail, t.created_at, t.updated_at, \
         t.wake_at, t.parent, t.trace) \
       IS DISTINCT FROM (EXCLUDED.owner, EXCLUDED.graph_fingerprint, EXCLUDED.schema_version, \
         EXCLUDED.status, EXCLUDED.detail, EXCLUDED.created_at, EXCLUDED.updated_at, EXCLUDED.wake_at, \
         EXCLUDED.parent, COALESCE(t.trace, EXCLUDED.trace))";

fn invalid(tid: &str, reason: String) -> Fail<CommitError> {
    Fail::Refused(CommitError::Invalid { thread: tid.to_string(), reason })
}

/// A statement of the write phase, sent with the others of the step.
type Write<'a> = Pin<Box<dyn Future<Output = Result<(), Fail<CommitError>>> + Send + 'a>>;

/// Opens a transaction on `tx` with `begin` (`BEGIN`, and any `SET LOCAL`), checks and writes
/// `c` in it, all pipelined; the caller commits, or rolls back on an error.
pub(crate) async fn stage<C: GenericClient>(
    ctx: &PgPool,
    tx: &C,
    c: &StepCommit,
    begin: &str,
) -> Result<CommitOut, Fail<CommitError>> {
    stage_as(ctx, tx, c, begin, false).await
}

/// Whether `c` can be committed in one round trip by [`stage_guarded`]: it has no audit
/// entries or approval changes (their statements depend on each other's answers), and nothing
/// in it is refused before the server is asked.
pub(crate) fn guardable(c: &StepCommit) -> bool {
    c.audit.is_empty()
        && c.new_approvals.is_empty()
        && c.approval_transitions.is_empty()
        && !c.thread.id.is_empty()
        && c.checkpoint.as_ref().is_none_or(|cp| {
            cp.thread == c.thread.id
                && cp.parent.is_none_or(|p| p < cp.seq)
                && (cp.parent.is_some() || cp.snapshot.is_some())
        })
}

/// Commits `c` (see [`guardable`]) in one round trip on `tx`: `begin`, a guard statement that
/// locks the lease row and fails (division by zero) unless the holder's lease is held and the
/// history accepts the checkpoint, one guard per parent lease, the writes and `COMMIT`,
/// pipelined. A failed guard aborts the
/// transaction, so the writes fail and the `COMMIT` rolls back: nothing is written. The guard's
/// failure is answered as the `Fail::Db` error with code `22012`
/// ([`is_guard_refusal`]); the caller then commits through [`stage`], whose checks name the
/// refusal (or pass, if the state changed meanwhile).
pub(crate) async fn stage_guarded<C: GenericClient>(
    ctx: &PgPool,
    tx: &C,
    c: &StepCommit,
    begin: &str,
) -> Result<CommitOut, Fail<CommitError>> {
    stage_as(ctx, tx, c, begin, true).await
}

/// Whether `e` is the guard of [`stage_guarded`] refusing the commit.
pub(crate) fn is_guard_refusal(e: &Fail<CommitError>) -> bool {
    matches!(e, Fail::Db(e) if e.code() == Some(&tokio_postgres::error::SqlState::DIVISION_BY_ZERO))
}

/// `1 / 1` when the lease of thread `$1` is held by `$2` (or `$2` is null: not fenced) past `$3`,
/// its row then locked until the commit ends, and the history accepts checkpoint `$4` with
/// parent `$5` (or `$4` is null); `1 / 0` otherwise.
const GUARD: &str = "SELECT 1 / ( \
       (CASE WHEN $2::text IS NULL THEN 1 ELSE (SELECT count(*) FROM (SELECT 1 FROM leases \
          WHERE thread = $1 AND holder = $2 AND expires_at > $3 FOR UPDATE) held)::int END) \
     * (CASE WHEN $4::bigint IS NULL THEN 1 \
          WHEN COALESCE((SELECT max(seq) FROM checkpoints WHERE thread = $1), -1) >= $4 THEN 0 \
          WHEN $5::bigint IS NOT NULL \
            AND NOT EXISTS (SELECT 1 FROM checkpoints WHERE thread = $1 AND seq = $5) THEN 0 \
          ELSE 1 END))";

/// `1 / 1` when the lease of thread `$1` (a parent of the committing child) is held by `$2` past
/// `$3`, its row then share-locked until the commit ends (two children of one parent do not
/// wait on each other); `1 / 0` otherwise.
const PARENT_GUARD: &str = "SELECT 1 / (SELECT count(*) FROM (SELECT 1 FROM leases \
     WHERE thread = $1 AND holder = $2 AND expires_at > $3 FOR SHARE) held)::int";

/// The lease row of thread `$1`, locked until the commit ends.
const LEASE_CHECK: &str = "SELECT holder, expires_at FROM leases WHERE thread = $1 FOR UPDATE";
/// The lease row of a parent `$1` of the committing child, share-locked until the commit ends.
const PARENT_LEASE_CHECK: &str = "SELECT holder, expires_at FROM leases WHERE thread = $1 FOR SHARE";
/// Two primary-key lookups (the latest seq of thread `$1`, whether parent `$2` exists), not a scan
/// of the thread's history: a step costs the same on a long thread as on a short one.
const HISTORY_CHECK: &str = "SELECT (SELECT max(seq) FROM checkpoints WHERE thread = $1), \
     (SELECT count(*) FROM checkpoints WHERE thread = $1 AND seq = $2)";
const DELETE_PENDING: &str = "DELETE FROM pending_writes WHERE thread = $1 AND seq = $2";
const INSERT_CHECKPOINT: &str =
    "INSERT INTO checkpoints (thread, seq, parent, has_snapshot, row, snapshot) VALUES ($1, $2, $3, $4, $5, $6)";
const UPSERT_PENDING: &str = "INSERT INTO pending_writes (thread, seq, node, idx, value) VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT (thread, seq, node, idx) DO UPDATE SET value = EXCLUDED.value";
const INSERT_EFFECT: &str = "INSERT INTO effects (thread, seq, node, key, result) VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT (thread, seq, node, key) DO NOTHING";

async fn stage_as<C: GenericClient>(
    ctx: &PgPool,
    tx: &C,
    c: &StepCommit,
    begin: &str,
    guarded: bool,
) -> Result<CommitOut, Fail<CommitError>> {
    let tid = c.thread.id.as_str();
    if tid.is_empty() {
        return Err(invalid(tid, "the thread id is empty".to_string()));
    }
    if let Some(reason) = c.thread.parent_problem() {
        return Err(invalid(tid, reason));
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
            let seq = i64::try_from(cp.seq).map_err(|_| invalid(tid, seq_too_large(cp.seq)))?;
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
    let row = c.checkpoint.as_ref().map(|cp| cp.encode_row());
    let pending_keys = c
        .pending_writes
        .iter()
        .map(|w| Ok((sql::int(&ctx.path, "pending write seq", w.seq)?, i64::from(w.idx))))
        .collect::<Result<Vec<_>, StorageError>>()?;
    let effect_seqs =
        c.effects.iter().map(|(k, _)| sql::int(&ctx.path, "effect seq", k.seq)).collect::<Result<Vec<_>, _>>()?;
    let wake_at = match (t.status, c.wake_at) {
        // Past `i64::MAX` is never: kept as `i64::MAX`, as on redb.
        (_, Some(at)) => Some(time(at)),
        (ThreadStatus::Sleeping, None) => {
            return Err(invalid(tid, "a sleeping thread needs a wake time (`StepCommit::wake_at`)".to_string()));
        }
        _ => None,
    };
    let event_kinds: Vec<&str> = c.events.iter().map(|e| e.kind.as_str()).collect();
    let event_data: Vec<&[u8]> = c.events.iter().map(|e| e.data.as_slice()).collect();
    let event_at = time(c.now);
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
            &t.parent,
            &t.tenant,
            &t.trace,
        ];
        sql::execute(tx, UPSERT_THREAD, params).await?;
        Ok(())
    }));
    if let (Some(cp), Some((seq, parent)), Some(row)) = (&c.checkpoint, checkpoint_seq, &row) {
        if let Some(parent) = parent {
            writes.push(Box::pin(async move {
                sql::execute(tx, DELETE_PENDING, &[&tid, &parent]).await?;
                Ok(())
            }));
        }
        writes.push(Box::pin(async move {
            let has_snapshot = cp.snapshot.is_some();
            let inserted =
                sql::execute(tx, INSERT_CHECKPOINT, &[&tid, &seq, &parent, &has_snapshot, row, &cp.snapshot]).await;
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
            sql::execute(tx, UPSERT_PENDING, &[&tid, seq, &w.node, idx, &w.value]).await?;
            Ok(())
        }));
    }
    for ((key, result), seq) in c.effects.iter().zip(&effect_seqs) {
        writes.push(Box::pin(async move {
            sql::execute(tx, INSERT_EFFECT, &[&tid, seq, &key.node, &key.key, result]).await?;
            Ok(())
        }));
    }
    if !c.events.is_empty() {
        let (kinds, data, at) = (&event_kinds, &event_data, &event_at);
        writes.push(Box::pin(async move {
            let params: &Params<'_> = &[&tid, kinds, data, at, &ctx.event_keep, &ctx.events_channel];
            sql::execute(tx, event_log::APPEND, params).await?;
            Ok(())
        }));
    }
    // Every statement is prepared first (once per connection), so that the pipeline goes out in
    // statement order: a statement still being prepared would be sent after the ones behind it.
    try_join_all(
        [
            GUARD,
            PARENT_GUARD,
            LEASE_CHECK,
            PARENT_LEASE_CHECK,
            HISTORY_CHECK,
            UPSERT_THREAD,
            DELETE_PENDING,
            INSERT_CHECKPOINT,
            UPSERT_PENDING,
            INSERT_EFFECT,
            event_log::APPEND,
        ]
        .map(|sql| tx.prepare_cached(sql)),
    )
    .await?;
    if guarded {
        let (seq, parent) = match checkpoint_seq {
            Some((seq, parent)) => (Some(seq), parent),
            None => (None, None),
        };
        let now = time(c.now);
        let guard = async {
            if c.lease_holder.is_none() && seq.is_none() {
                return Ok(());
            }
            sql::query(tx, GUARD, &[&tid, &c.lease_holder, &now, &seq, &parent]).await.map(drop)
        };
        let parent_guards = try_join_all(c.parent_leases.iter().map(|(parent, holder)| async move {
            sql::query(tx, PARENT_GUARD, &[parent, holder, &now]).await.map(drop)
        }));
        let (begun, checked, parents_held, written, committed) =
            join5(tx.batch_execute(begin), guard, parent_guards, try_join_all(writes), tx.batch_execute("COMMIT"))
                .await;
        // In statement order: the first failure aborted the transaction and the `COMMIT` rolled
        // it back.
        begun?;
        checked?;
        parents_held?;
        written?;
        committed?;
        return Ok(CommitOut { checkpoint: c.checkpoint.as_ref().map(|cp| cp.seq), audit_seqs: Vec::new() });
    }
    // Checks: the lease row (locked until the commit ends) and the thread's history, together.
    let lease_check = async {
        if c.lease_holder.is_none() {
            return Ok(None);
        }
        sql::query_opt(tx, LEASE_CHECK, &[&tid]).await
    };
    let history_check = async {
        let Some((_, parent)) = checkpoint_seq else { return Ok(None) };
        sql::query_opt(tx, HISTORY_CHECK, &[&tid, &parent.unwrap_or(-1)]).await
    };
    // Sent before the writes too: a write that fails aborts the transaction, and a check sent
    // after it would answer that instead of the write's own error.
    let parent_checks = try_join_all(
        c.parent_leases
            .iter()
            .map(|(parent, _)| async move { sql::query_opt(tx, PARENT_LEASE_CHECK, &[parent]).await }),
    );

    // Everything goes out at once; the answers come back in statement order.
    let (begun, checks, written) =
        join3(tx.batch_execute(begin), try_join3(lease_check, history_check, parent_checks), try_join_all(writes))
            .await;
    begun?;
    let (lease_row, history_row, parent_rows) = checks?;
    if let Some(holder) = &c.lease_holder {
        let current = super::leases::lease_in(&ctx.path, tid, lease_row.as_ref())?;
        let held = current.as_ref().is_some_and(|l| l.holder == *holder && l.expires_at > c.now);
        if !held {
            return Err(Fail::Refused(CommitError::LeaseLost {
                thread: tid.to_string(),
                holder: holder.clone(),
                current,
            }));
        }
    }
    for ((parent, holder), row) in c.parent_leases.iter().zip(&parent_rows) {
        let current = super::leases::lease_in(&ctx.path, parent, row.as_ref())?;
        if !current.as_ref().is_some_and(|l| l.holder == *holder && l.expires_at > c.now) {
            return Err(Fail::Refused(CommitError::LeaseLost {
                thread: parent.clone(),
                holder: holder.clone(),
                current,
            }));
        }
    }
    if let (Some(cp), Some((seq, _))) = (&c.checkpoint, checkpoint_seq) {
        let (latest, parent_found) = match &history_row {
            Some(r) => (
                sql::col::<Option<i64>>(&ctx.path, "checkpoints", r, 0)?,
                sql::col::<i64>(&ctx.path, "checkpoints", r, 1)?,
            ),
            None => (None, 0),
        };
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
        // Their details were checked with the rest of the commit (`check_depths`, in `commit`).
        audit_seqs.push(approvals::append_entry(ctx, tx, tid, entry).await?);
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
