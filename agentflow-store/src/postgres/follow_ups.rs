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
use crate::postgres::queue;
use crate::postgres::sql::{self, uint};
use crate::queue::{FollowUpPlace, FollowUpQueued, NewRun, QueueError, QueuedRun, RunWait};

/// Raises the follow-up count of thread `$1`'s queued run, locking its row; the new count, or no
/// row when the thread has no queued run.
const COUNT: &str = "UPDATE run_queue SET follow_ups = follow_ups + 1 WHERE thread = $1 RETURNING follow_ups";

/// Adds follow-up (`$1`, graph `$2`, input `$3`, owner `$4`, at `$5`, tenant `$6`, fork `$7`,
/// webhook `$8`) after thread `$1`'s others.
const BACK: &str = "INSERT INTO follow_ups (thread, pos, graph, input, owner, enqueued_at, tenant, fork_from, webhook) \
     SELECT $1, COALESCE(max(pos) + 1, 0), $2, $3, $4, $5, $6, $7, $8 FROM follow_ups WHERE thread = $1";

/// [`BACK`], before thread `$1`'s others.
const FRONT: &str = "INSERT INTO follow_ups (thread, pos, graph, input, owner, enqueued_at, tenant, fork_from, webhook) \
     SELECT $1, COALESCE(min(pos) - 1, 0), $2, $3, $4, $5, $6, $7, $8 FROM follow_ups WHERE thread = $1";

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
            let params: &sql::Params<'_> =
                &[&run.thread, &run.graph, &run.input, &run.owner, &at, &run.tenant, &fork_from, &run.webhook];
            sql::execute(c, insert, params).await?;
            let ahead = if place == FollowUpPlace::Front { 0 } else { usize::try_from(count - 1).unwrap_or(0) };
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
    }
}
