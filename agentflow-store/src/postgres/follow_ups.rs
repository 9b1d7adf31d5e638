//! The follow-up runs waiting behind a thread's queued run on PostgreSQL (see
//! [`Store::enqueue_follow_up`](crate::Store::enqueue_follow_up)): table `follow_ups`, by
//! (thread, place), the first to run at the lowest place. Each one is added under the lock of
//! its thread's `run_queue` row, whose `follow_ups` count it raises: a settle that removes the
//! row reads the count from the row it locks, so it never removes a row a follow-up waits
//! behind (the settle's statement puts the first follow-up in the row instead).

use std::path::Path;

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::error::StorageError;
use crate::postgres::error::{Fail, decode_error};
use crate::postgres::pool::PgPool;
use crate::postgres::sql::{self, uint};
use crate::postgres::transaction::in_transaction;
use crate::postgres::{approvals, idempotency, queue};
use crate::queue::{FollowUpPlace, FollowUpQueued, FollowUpRule, NewRun, QueueError, QueuedRun, RunWait};
use crate::record::{Durability, NewAuditEntry, ThreadStatus};

/// Raises the follow-up count of thread `$1`'s queued run, locking its row; the new count, or no
/// row when the thread has no queued run.
const COUNT: &str = "UPDATE run_queue SET follow_ups = follow_ups + 1 WHERE thread = $1 RETURNING follow_ups";

/// Adds follow-up (`$1`, graph `$2`, input `$3`, owner `$4`, at `$5`, tenant `$6`, fork `$7`,
/// webhook `$8`) after thread `$1`'s others, at a place that is never negative.
const BACK: &str = "INSERT INTO follow_ups (thread, pos, graph, input, owner, enqueued_at, tenant, fork_from, webhook) \
     SELECT $1, GREATEST(COALESCE(max(pos) + 1, 0), 0), $2, $3, $4, $5, $6, $7, $8 FROM follow_ups WHERE thread = $1";

/// [`BACK`], before the ones put at the back: after the last negative place (those put at the
/// front run in the order they were put there), the first at -2^62. A schema of version 12 may
/// have put one at -1 (just before the first): then before the first.
const FRONT: &str = "INSERT INTO follow_ups (thread, pos, graph, input, owner, enqueued_at, tenant, fork_from, webhook) \
     SELECT $1, CASE WHEN max(pos) FILTER (WHERE pos < 0) IS NULL THEN -4611686018427387904 \
       WHEN max(pos) FILTER (WHERE pos < 0) < -1 THEN max(pos) FILTER (WHERE pos < 0) + 1 \
       ELSE min(pos) - 1 END, $2, $3, $4, $5, $6, $7, $8 FROM follow_ups WHERE thread = $1";

/// How many of thread `$1`'s follow-ups were put at the front.
const FRONTS: &str = "SELECT count(*) FROM follow_ups WHERE thread = $1 AND pos < 0";

/// Thread `$1`'s follow-ups, first first.
const LIST: &str = "SELECT thread, graph, input, owner, enqueued_at, tenant, fork_from, webhook FROM follow_ups \
     WHERE thread = $1 ORDER BY pos";

/// How many times [`enqueue`] looks again when the thread's queued run came or went meanwhile.
const ATTEMPTS: usize = 3;

/// Queues follow-up `run` in the caller's transaction: behind the thread's queued run at `place`
/// when it has one, else as its queued run.
pub(crate) async fn enqueue<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    run: &NewRun,
    place: FollowUpPlace,
) -> Result<FollowUpQueued, Fail<QueueError>> {
    let at = sql::int(&ctx.path, "enqueued_at", run.at)?;
    let fork_from = run.fork_from.map(|seq| sql::int(&ctx.path, "fork_from", seq)).transpose()?;
    for _ in 0..ATTEMPTS {
        if let Some(row) = sql::query_opt(c, COUNT, &[&run.thread]).await? {
            let count: i32 = sql::col(&ctx.path, "run_queue", &row, 0)?;
            let insert = if place == FollowUpPlace::Front { FRONT } else { BACK };
            let ahead = if place == FollowUpPlace::Front {
                let fronts = sql::query_opt(c, FRONTS, &[&run.thread]).await?;
                let fronts: i64 = match fronts {
                    Some(row) => sql::col(&ctx.path, "follow_ups", &row, 0)?,
                    None => 0,
                };
                usize::try_from(fronts).unwrap_or(0)
            } else {
                usize::try_from(count - 1).unwrap_or(0)
            };
            let params: &sql::Params<'_> =
                &[&run.thread, &run.graph, &run.input, &run.owner, &at, &run.tenant, &fork_from, &run.webhook];
            sql::execute(c, insert, params).await?;
            return Ok(FollowUpQueued::Behind { ahead });
        }
        // No queued run: the follow-up is the thread's, unless one was queued meanwhile.
        match queue::enqueue(ctx, c, run).await {
            Ok(()) => return Ok(FollowUpQueued::Now),
            Err(Fail::Refused(QueueError::AlreadyQueued { .. })) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Fail::Storage(ctx.conflict("the thread's queued run came and went each time a follow-up was queued")))
}

/// Queues follow-up `run` with `entry` in its thread's audit log and its idempotency key, in one
/// transaction: at place `how` ([`Store::enqueue_follow_up`](crate::Store::enqueue_follow_up)),
/// or as rule `how` decides about the thread's run ([`enqueue_as`]), with the rule's cancel
/// entry when it asked a run to stop.
pub(crate) async fn submit(
    ctx: &PgPool,
    run: NewRun,
    entry: NewAuditEntry,
    how: Result<FollowUpRule, FollowUpPlace>,
) -> Result<FollowUpQueued, QueueError> {
    let run = NewRun { follow_up: true, ..run };
    in_transaction!(ctx, Durability::Immediate, |tx| async {
        crate::checks::check_detail(&run.thread, &entry).map_err(|e| Fail::Refused(e.into()))?;
        if let Ok(FollowUpRule::Interrupt { cancel }) = &how {
            crate::checks::check_detail(&run.thread, cancel).map_err(|e| Fail::Refused(e.into()))?;
        }
        idempotency::keep(ctx, &tx, &run).await?;
        let queued = match &how {
            Err(place) => enqueue(ctx, &tx, &run, *place).await?,
            Ok(rule) => {
                let (queued, cancelled) = enqueue_as(ctx, &tx, &run, rule).await?;
                if let (true, FollowUpRule::Interrupt { cancel }) = (cancelled, rule) {
                    approvals::append_audit::<_, QueueError>(ctx, &tx, &run.thread, cancel).await?;
                }
                queued
            }
        };
        approvals::append_audit::<_, QueueError>(ctx, &tx, &run.thread, &entry).await?;
        Ok::<_, Fail<QueueError>>(queued)
    }
    .await)
}

/// Thread `$1`'s queued run, locked, and what it waits for; no row when it has none.
const LOCK_ROW: &str = "SELECT wait FROM run_queue WHERE thread = $1 FOR UPDATE";

/// Thread `$1`'s status, owner and tenant.
const THREAD: &str = "SELECT status, owner, tenant FROM threads WHERE id = $1";

/// Queues follow-up `run` in the caller's transaction as `rule` decides about the thread's run
/// (see [`Store::enqueue_follow_up_as`](crate::Store::enqueue_follow_up_as)): the thread's queued
/// run is read under its row lock, so a settle or another submission waits for this one.
pub(crate) async fn enqueue_as<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    run: &NewRun,
    rule: &FollowUpRule,
) -> Result<(FollowUpQueued, bool), Fail<QueueError>> {
    let path = &ctx.path;
    for _ in 0..ATTEMPTS {
        let wait = match sql::query_opt(c, LOCK_ROW, &[&run.thread]).await? {
            Some(row) => {
                let wait: String = sql::col(path, "run_queue", &row, 0)?;
                let bad =
                    || decode_error(path, "run_queue", format!("{:?}", run.thread), format!("unknown wait {wait:?}"));
                Some(RunWait::parse(&wait).ok_or_else(bad)?)
            }
            None => None,
        };
        let thread = sql::query_opt(c, THREAD, &[&run.thread]).await?;
        let (status, owner, tenant) = match thread {
            Some(row) => {
                let status: String = sql::col(path, "threads", &row, 0)?;
                let owner: String = sql::col(path, "threads", &row, 1)?;
                let tenant: Option<String> = sql::col(path, "threads", &row, 2)?;
                (ThreadStatus::ALL.into_iter().find(|s| s.as_str() == status), owner, tenant)
            }
            None => (None, String::new(), None),
        };
        match rule {
            FollowUpRule::Reject => {
                if let Some(status) = crate::queue::active_as(status, wait) {
                    return Err(Fail::Refused(QueueError::Active { thread: run.thread.clone(), status }));
                }
                match queue::enqueue(ctx, c, run).await {
                    Ok(()) => return Ok((FollowUpQueued::Now, false)),
                    // Queued meanwhile: looked at again (and refused).
                    Err(Fail::Refused(QueueError::AlreadyQueued { .. })) => continue,
                    Err(e) => return Err(e),
                }
            }
            FollowUpRule::Interrupt { .. } => {
                let queued = enqueue(ctx, c, run, FollowUpPlace::Front).await?;
                // Behind a run (the one looked at, or one queued since, now locked): it stops.
                let cancels = matches!(queued, FollowUpQueued::Behind { .. });
                if cancels {
                    sql::execute(c, "UPDATE run_queue SET control = 'CANCEL' WHERE thread = $1", &[&run.thread])
                        .await?;
                }
                return Ok((queued, cancels));
            }
            _ => {
                let waits = status.is_some_and(crate::queue::waits_outside_the_queue);
                if wait.is_none() && waits {
                    let mut held = NewRun::new(&run.thread, &run.graph, None, &owner, run.at);
                    held.tenant = tenant;
                    match queue::enqueue(ctx, c, &held).await {
                        Ok(()) => {}
                        // Queued meanwhile: looked at again.
                        Err(Fail::Refused(QueueError::AlreadyQueued { .. })) => continue,
                        Err(e) => return Err(e),
                    }
                    sql::execute(c, "UPDATE run_queue SET wait = 'HELD' WHERE thread = $1", &[&run.thread]).await?;
                }
                return Ok((enqueue(ctx, c, run, FollowUpPlace::Back).await?, false));
            }
        }
    }
    Err(Fail::Storage(ctx.conflict("the thread's queued run came and went each time a follow-up was queued")))
}

/// Thread `thread`'s follow-ups, first first, as queued runs (ready, never claimed).
pub(crate) async fn list<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
) -> Result<Vec<QueuedRun>, Fail<QueueError>> {
    let rows = sql::query(c, LIST, &[&thread]).await?;
    Ok(rows.iter().map(|r| follow_up_from(&ctx.path, r)).collect::<Result<_, _>>()?)
}

fn follow_up_from(path: &Path, row: &Row) -> Result<QueuedRun, StorageError> {
    let thread: String = row.try_get(0).map_err(|e| decode_error(path, "follow_ups", "?".into(), e.to_string()))?;
    let key = || format!("{thread:?}");
    let get = |e: tokio_postgres::Error| decode_error(path, "follow_ups", key(), e.to_string());
    let mut run = NewRun::new(
        &thread,
        &row.try_get::<_, String>(1).map_err(get)?,
        row.try_get(2).map_err(get)?,
        &row.try_get::<_, String>(3).map_err(get)?,
        uint(path, "follow_ups", key, row.try_get(4).map_err(get)?)?,
    );
    run.tenant = row.try_get(5).map_err(get)?;
    run.fork_from = match row.try_get::<_, Option<i64>>(6).map_err(get)? {
        Some(seq) => Some(uint(path, "follow_ups", key, seq)?),
        None => None,
    };
    run.webhook = row.try_get(7).map_err(get)?;
    Ok(queued(run))
}

/// A follow-up as the queued run it becomes.
fn queued(run: NewRun) -> QueuedRun {
    QueuedRun {
        thread: run.thread,
        graph: run.graph,
        input: run.input,
        owner: run.owner,
        enqueued_at: run.at,
        wait: RunWait::Ready,
        control: None,
        holder: None,
        heartbeat_at: None,
        claims: 0,
        lease: None,
        tenant: run.tenant,
        follow_up: true,
        fork_from: run.fork_from,
        webhook: run.webhook,
        held: false,
    }
}
