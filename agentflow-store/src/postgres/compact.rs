//! [`Store::compact`](crate::Store::compact) on PostgreSQL.
//!
//! The caller's fold callback can neither travel to the I/O thread nor wait inside an open
//! transaction, so compaction is optimistic: a [`Plan`] is read first, the folds run on the
//! calling thread, and one transaction then locks the thread, checks that its history is still
//! the one planned for and writes the folded snapshots and the deletions. If the history
//! changed in between, the caller plans again.

use std::collections::{BTreeMap, BTreeSet};

use deadpool_postgres::GenericClient;

use crate::error::{CompactError, ReadError};
use crate::postgres::error::Fail;
use crate::postgres::pool::PgPool;
use crate::postgres::purge;
use crate::postgres::reads;
use crate::postgres::sql;
use crate::record::{CheckpointSummary, StateChain, ThreadStatus};

/// What a compaction will do, read before any write.
pub(crate) struct Plan {
    /// (seq, has_snapshot) of every checkpoint when planned.
    pub(crate) seen: Vec<(i64, bool)>,
    /// Checkpoints to drop.
    pub(crate) dropped: Vec<i64>,
    /// Retained checkpoints that need a snapshot (their summary as stored), with the chain to
    /// fold; the target's own delta is the chain's last step.
    pub(crate) folds: Vec<(CheckpointSummary, StateChain)>,
}

/// One fold's result: the checkpoint, its new row and its snapshot.
pub(crate) struct Folded {
    pub(crate) seq: i64,
    pub(crate) row: Vec<u8>,
    pub(crate) snapshot: Vec<u8>,
}

/// The thread's status, or the compaction error for a thread that is absent, unfinished or
/// under legal hold (itself or a thread above it: see [`purge::hold_above`], which locks
/// those threads, before this one, as a purge does).
async fn finished<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
    lock: bool,
) -> Result<ThreadStatus, Fail<CompactError>> {
    let above = purge::hold_above(ctx, c, thread).await?;
    let status = status_of(ctx, c, thread, lock).await?;
    if let Some((held, hold)) = purge::hold_on(ctx, c, thread).await?.or(above) {
        return Err(Fail::Refused(CompactError::Held { thread: thread.to_string(), held, hold }));
    }
    Ok(status)
}

/// The thread's status, or the compaction error for a thread that is absent or unfinished.
async fn status_of<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
    lock: bool,
) -> Result<ThreadStatus, Fail<CompactError>> {
    let sql = if lock {
        "SELECT status FROM threads WHERE id = $1 FOR UPDATE"
    } else {
        "SELECT status FROM threads WHERE id = $1"
    };
    let Some(row) = sql::query_opt(c, sql, &[&thread]).await? else {
        return Err(Fail::Refused(CompactError::UnknownThread { thread: thread.to_string() }));
    };
    let status: String = sql::col(&ctx.path, "threads", &row, 0)?;
    match ThreadStatus::ALL.into_iter().find(|s| s.as_str() == status) {
        Some(status) if !status.is_finished() => {
            Err(Fail::Refused(CompactError::NotFinished { thread: thread.to_string(), status }))
        }
        Some(status) => Ok(status),
        None => Err(Fail::Storage(crate::postgres::error::decode_error(
            &ctx.path,
            "threads",
            format!("{thread:?}"),
            format!("unknown thread status {status:?}"),
        ))),
    }
}

/// Reads what compacting `thread` down to `keep` checkpoints needs.
pub(crate) async fn plan<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
    keep: usize,
) -> Result<Plan, Fail<CompactError>> {
    finished(ctx, c, thread, false).await?;
    let all = reads::summaries(ctx, c, thread).await?;
    let seen = all.iter().map(|s| (s.seq as i64, s.has_snapshot)).collect();
    if all.len() <= keep {
        return Ok(Plan { seen, dropped: Vec::new(), folds: Vec::new() });
    }
    let split = all.len() - keep;
    let dropped: BTreeSet<u64> = all[..split].iter().map(|s| s.seq).collect();
    let mut by_seq: BTreeMap<u64, CheckpointSummary> = all.into_iter().map(|s| (s.seq, s)).collect();
    let retained: Vec<u64> = by_seq.keys().copied().skip(split).collect();
    let mut folds = Vec::new();
    // Ascending order: a retained parent gets its snapshot before its children are looked at.
    for seq in retained {
        if !needs_fold(&by_seq, &dropped, seq) {
            continue;
        }
        let chain =
            reads::state_chain(ctx, c, thread, seq).await.map_err(|e| Fail::Refused(e.into()))?.ok_or_else(|| {
                Fail::Refused(CompactError::Read(ReadError::BrokenChain {
                    path: ctx.path.clone(),
                    thread: thread.to_string(),
                    seq,
                    missing: seq,
                }))
            })?;
        if let Some(s) = by_seq.get_mut(&seq) {
            folds.push((s.clone(), chain));
            s.has_snapshot = true;
        }
    }
    Ok(Plan { seen, dropped: dropped.into_iter().map(|s| s as i64).collect(), folds })
}

/// Whether the chain of retained checkpoint `seq` reaches a dropped checkpoint before a
/// snapshot.
fn needs_fold(by_seq: &BTreeMap<u64, CheckpointSummary>, dropped: &BTreeSet<u64>, seq: u64) -> bool {
    let mut cur = seq;
    loop {
        let Some(summary) = by_seq.get(&cur) else { return false };
        if summary.has_snapshot {
            return false;
        }
        match summary.parent {
            Some(parent) if dropped.contains(&parent) => return true,
            Some(parent) if parent < cur => cur = parent,
            _ => return false,
        }
    }
}

/// Applies a plan; `Ok(false)` if the history changed since it was read (nothing written).
/// The effects below the oldest retained checkpoint go only if the thread's status, read
/// under the lock, allows no resume (see [`ThreadStatus::is_resumable`]).
pub(crate) async fn apply<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
    seen: &[(i64, bool)],
    dropped: &[i64],
    folded: &[Folded],
) -> Result<bool, Fail<CompactError>> {
    let status = finished(ctx, c, thread, true).await?;
    let rows = sql::query(
        c,
        "SELECT seq, has_snapshot FROM checkpoints WHERE thread = $1 ORDER BY seq FOR UPDATE",
        &[&thread],
    )
    .await?;
    let now = rows
        .iter()
        .map(|r| Ok((sql::col(&ctx.path, "checkpoints", r, 0)?, sql::col(&ctx.path, "checkpoints", r, 1)?)))
        .collect::<Result<Vec<(i64, bool)>, crate::error::StorageError>>()?;
    if now != seen {
        return Ok(false);
    }
    for f in folded {
        sql::execute(
            c,
            "UPDATE checkpoints SET has_snapshot = true, row = $3, snapshot = $4 WHERE thread = $1 AND seq = $2",
            &[&thread, &f.seq, &f.row, &f.snapshot],
        )
        .await?;
    }
    if !dropped.is_empty() {
        for table in ["checkpoints", "pending_writes"] {
            let sql = format!("DELETE FROM {table} WHERE thread = $1 AND seq = ANY($2)");
            sql::execute(c, &sql, &[&thread, &dropped]).await?;
        }
    }
    // A resume may still look the journal up under a dropped checkpoint's seq. Once none can
    // run, the journal below the oldest retained checkpoint goes: what this compaction drops
    // and what earlier ones kept for a resume that has happened since.
    let oldest = seen.iter().map(|(seq, _)| *seq).find(|seq| !dropped.contains(seq));
    if let (false, Some(oldest)) = (status.is_resumable(), oldest) {
        sql::execute(c, "DELETE FROM effects WHERE thread = $1 AND seq < $2", &[&thread, &oldest]).await?;
    }
    Ok(true)
}
