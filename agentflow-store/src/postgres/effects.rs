//! The effect journal of a [`PostgresStore`](super::PostgresStore): a result recorded once per
//! key, alone ([`Store::record_effect`](crate::Store::record_effect)) or in an [`EffectBatch`]
//! ([`Store::commit_effects`](crate::Store::commit_effects)) with approval compare-and-sets and
//! audit entries.
//!
//! A batch is one transaction: its effects, then its transitions (each the compare-and-set of
//! [`approvals::transition`], under the row's lock, with its audit entry), then its audit
//! entries. A refused part rolls back everything before it, so the runtime's claim of an
//! approval (`APPROVED -> EXECUTING`) and its journal's *started* marker are written together or
//! not at all, as on redb.

use deadpool_postgres::GenericClient;

use crate::codec::MAX_DOCUMENT_DEPTH;
use crate::error::{CommitError, JsonTooDeep};
use crate::postgres::approvals;
use crate::postgres::error::Fail;
use crate::postgres::pool::PgPool;
use crate::postgres::sql;
use crate::record::{EffectBatch, EffectKey, EffectOutcome};

/// Inserts `result` under `key` unless a result is there already; answers
/// [`EffectOutcome::AlreadyRecorded`] with the kept one. Inside a transaction, an earlier insert
/// of the same transaction counts as there.
pub(crate) async fn record<C: GenericClient, E>(
    ctx: &PgPool,
    c: &C,
    key: &EffectKey,
    result: &[u8],
) -> Result<EffectOutcome, Fail<E>> {
    let seq = sql::int(&ctx.path, "effect seq", key.seq)?;
    // Insert or keep; a concurrent insert of the same key waits for the first to commit, which
    // the read then returns.
    let inserted = sql::execute(
        c,
        "INSERT INTO effects (thread, seq, node, key, result) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (thread, seq, node, key) DO NOTHING",
        &[&key.thread, &seq, &key.node, &key.key, &result],
    )
    .await?;
    if inserted == 1 {
        return Ok(EffectOutcome::Recorded);
    }
    let row = sql::query_opt(
        c,
        "SELECT result FROM effects WHERE thread = $1 AND seq = $2 AND node = $3 AND key = $4",
        &[&key.thread, &seq, &key.node, &key.key],
    )
    .await?;
    let result = row.map(|r| sql::col(&ctx.path, "effects", &r, 0)).transpose()?;
    Ok(EffectOutcome::AlreadyRecorded(result.unwrap_or_default()))
}

/// The checks of a batch made before anything is sent, as the trait's default makes them: every
/// effect belongs to the batch's thread, and no audit detail or transition's conditions nests
/// deeper than the store reads back.
pub(crate) fn check_batch(batch: &EffectBatch) -> Result<(), CommitError> {
    let thread = batch.thread.as_str();
    if let Some((key, _)) = batch.effects.iter().find(|(k, _)| k.thread != thread) {
        return Err(CommitError::Invalid {
            thread: thread.to_string(),
            reason: format!("effect `{}` belongs to thread `{}`", key.key, key.thread),
        });
    }
    for entry in &batch.audit {
        JsonTooDeep::check(&entry.detail, MAX_DOCUMENT_DEPTH, "detail")
            .map_err(|source| CommitError::TooDeep { thread: thread.to_string(), source })?;
    }
    for t in &batch.approval_transitions {
        crate::checks::check_conditions(&t.id, t.patch.conditions.as_ref())?;
    }
    for a in &batch.new_approvals {
        if a.thread != thread {
            return Err(CommitError::Invalid {
                thread: thread.to_string(),
                reason: format!("approval `{}` belongs to thread `{}`", a.id, a.thread),
            });
        }
        if !a.status.is_waiting() {
            return Err(crate::error::ApprovalError::NotPending { id: a.id.clone(), status: a.status }.into());
        }
        crate::checks::check_conditions(&a.id, a.conditions.as_ref())?;
    }
    Ok(())
}

/// Refuses the batch unless `holder` has an unexpired lease on `thread` at `now`. The lease row
/// is locked (`lock`: `FOR UPDATE` or `FOR SHARE`) until the transaction ends, so the lease
/// cannot move before the batch commits.
pub(crate) async fn check_lease<C: GenericClient>(
    ctx: &PgPool,
    tx: &C,
    thread: &str,
    holder: &str,
    now: u64,
    lock: &str,
) -> Result<(), Fail<CommitError>> {
    let sql = format!("SELECT holder, expires_at FROM leases WHERE thread = $1 {lock}");
    let row = sql::query_opt(tx, &sql, &[&thread]).await?;
    let current = super::leases::lease_in(&ctx.path, thread, row.as_ref())?;
    if !current.as_ref().is_some_and(|l| l.holder == holder && l.expires_at > now) {
        return Err(Fail::Refused(CommitError::LeaseLost {
            thread: thread.to_string(),
            holder: holder.to_string(),
            current,
        }));
    }
    Ok(())
}

/// Writes a checked batch ([`check_batch`]) in the transaction `tx`; answers one outcome per
/// effect, in order. A refusal (an approval of another thread, a lost compare-and-set, an
/// illegal move, an unknown approval) is a [`Fail::Refused`]: the caller rolls `tx` back.
pub(crate) async fn stage_batch<C: GenericClient>(
    ctx: &PgPool,
    tx: &C,
    batch: &EffectBatch,
) -> Result<Vec<EffectOutcome>, Fail<CommitError>> {
    let thread = batch.thread.as_str();
    if let Some(holder) = &batch.lease_holder {
        check_lease(ctx, tx, thread, holder, batch.now, "FOR UPDATE").await?;
    }
    for (parent, holder) in &batch.parent_leases {
        // Shared: two children of one parent do not wait on each other.
        check_lease(ctx, tx, parent, holder, batch.now, "FOR SHARE").await?;
    }
    let mut outcomes = Vec::with_capacity(batch.effects.len());
    for (key, result) in &batch.effects {
        outcomes.push(record(ctx, tx, key, result).await?);
    }
    for a in &batch.new_approvals {
        approvals::insert::<_, CommitError>(ctx, tx, a, &a.requester).await?;
    }
    for t in &batch.approval_transitions {
        // Locked here and kept until the end of the transaction, so the owner cannot change
        // before the compare-and-set below (which reads the row again under the same lock).
        let owner = sql::query_opt(tx, "SELECT thread FROM approvals WHERE id = $1 FOR UPDATE", &[&t.id]).await?;
        if let Some(owner) = owner.map(|r| sql::col::<String>(&ctx.path, "approvals", &r, 0)).transpose()?
            && owner != thread
        {
            return Err(Fail::Refused(CommitError::Invalid {
                thread: thread.to_string(),
                reason: format!("approval `{}` belongs to thread `{owner}`", t.id),
            }));
        }
        approvals::transition::<_, CommitError>(ctx, tx, &t.id, t.from, t.to, &t.patch).await?;
    }
    for entry in &batch.audit {
        // Their details were checked by `check_batch`.
        approvals::append_entry::<_, CommitError>(ctx, tx, thread, entry).await?;
    }
    for w in &batch.pending_writes {
        let (seq, idx) = (sql::int(&ctx.path, "pending write seq", w.seq)?, i64::from(w.idx));
        sql::execute(
            tx,
            "INSERT INTO pending_writes (thread, seq, node, idx, value) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (thread, seq, node, idx) DO UPDATE SET value = EXCLUDED.value",
            &[&thread, &seq, &w.node, &idx, &w.value],
        )
        .await?;
    }
    Ok(outcomes)
}
