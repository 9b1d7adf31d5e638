//! The run queue of a [`PostgresStore`](super::PostgresStore): table `run_queue`, claimed with
//! `FOR UPDATE SKIP LOCKED` so concurrent workers in any number of processes each take
//! different rows, and the claimed threads' leases taken in the same transaction.

use std::path::Path;

use deadpool_postgres::GenericClient;
use futures_util::future::{join, join3};
use tokio_postgres::Row;

use crate::error::StorageError;
use crate::listing::Listing;
use crate::postgres::error::{Fail, decode_error};
use crate::postgres::pool::PgPool;
use crate::postgres::sql::{self, time, uint};
use crate::postgres::transaction::retrying;
use crate::queue::{NewRun, QueueError, QueuedRun, RunControl, RunWait, Settle};
use crate::record::Lease;

const COLUMNS: &str = "q.thread, q.graph, q.input, q.owner, q.enqueued_at, q.wait, q.control, q.holder, \
     q.heartbeat_at, q.claims, l.holder, l.expires_at, q.tenant, q.follow_up, q.fork_from, q.webhook";

/// Claims, in one statement: picks the claimable rows of graph `$1` at `$2`, oldest first, at
/// most `$3`, locked (rows another claimer has locked are skipped, and so are the threads `$6`,
/// whose rows do not decode). A row is claimable when no
/// unexpired lease holds its thread, not even the claimer's, and it is ready, or has a control
/// request, or is parked for approvals (those its row `awaits`, or if it names none, those of
/// the thread and of its subgraph children at every level: threads under `{thread}/` whose
/// parents lead to it) none of which waits any more or whose thread's timer (the first expiry)
/// is not later than `$2`, or is parked for a timer not later than `$2`, or is parked for an
/// answer and its thread is neither `interrupted` nor `failed` any more, or is held
/// (`HELD`) and its thread is neither `interrupted`, `paused`, `compensating`, nor `sleeping` on a timer later
/// than `$2` (or on none). Takes their threads'
/// leases for holder `$4` until `$5` (as `acquire_lease` does at `$2`: a new holder
/// increments the fencing token), marks the queue rows of the threads won and answers them
/// with their leases, and last whether each was held when picked ([`QueuedRun::held`]).
const CLAIM: &str = "WITH picked AS (SELECT q.thread, q.enqueued_at, q.wait FROM run_queue q \
       WHERE q.graph = $1 AND q.thread <> ALL($6::text[]) \
         AND (q.wait = 'READY' OR q.control IS NOT NULL \
           OR (q.wait = 'APPROVAL' AND cardinality(q.awaits) > 0 AND NOT EXISTS (SELECT 1 FROM approvals a \
                 WHERE a.id = ANY(q.awaits) AND a.status IN ('PENDING', 'OUTCOME_UNKNOWN'))) \
           OR (q.wait = 'APPROVAL' AND cardinality(q.awaits) = 0 AND NOT EXISTS (SELECT 1 FROM approvals a \
                 WHERE (a.thread = q.thread OR (starts_with(a.thread, q.thread || '/') \
                   AND EXISTS (WITH RECURSIVE up(id) AS (SELECT c.parent FROM threads c WHERE c.id = a.thread \
                         UNION SELECT c.parent FROM threads c JOIN up ON c.id = up.id) \
                       SELECT 1 FROM up WHERE up.id = q.thread))) \
                   AND a.status IN ('PENDING', 'OUTCOME_UNKNOWN'))) \
           OR (q.wait = 'APPROVAL' AND EXISTS (SELECT 1 FROM threads t \
                 WHERE t.id = q.thread AND t.wake_at <= $2)) \
           OR (q.wait = 'TIMER' AND NOT EXISTS (SELECT 1 FROM threads t \
                 WHERE t.id = q.thread AND t.wake_at > $2)) \
           OR (q.wait = 'ANSWER' AND NOT EXISTS (SELECT 1 FROM threads t \
                 WHERE t.id = q.thread AND t.status IN ('interrupted', 'failed'))) \
           OR (q.wait = 'HELD' AND NOT EXISTS (SELECT 1 FROM threads t \
                 WHERE t.id = q.thread AND (t.status IN ('interrupted', 'paused', 'compensating') \
                   OR (t.status = 'sleeping' AND (t.wake_at IS NULL OR t.wake_at > $2)))))) \
         AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.thread = q.thread AND l.holder IS NOT NULL \
               AND l.expires_at > $2) \
       ORDER BY q.enqueued_at, q.thread LIMIT $3 \
       FOR UPDATE OF q SKIP LOCKED), \
     won AS (INSERT INTO leases AS l (thread, holder, expires_at, token) \
       SELECT thread, $4, $5, 1 FROM picked \
       ON CONFLICT (thread) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at, \
         token = CASE WHEN l.holder = EXCLUDED.holder THEN l.token ELSE l.token + 1 END \
       WHERE l.holder IS NULL OR l.holder = EXCLUDED.holder OR l.expires_at <= $2 \
       RETURNING l.thread, l.holder, l.expires_at) \
     UPDATE run_queue q SET wait = 'READY', awaits = '{}', holder = $4, heartbeat_at = $2, claims = q.claims + 1 \
     FROM won JOIN picked p ON p.thread = won.thread WHERE q.thread = won.thread \
     RETURNING q.thread, q.graph, q.input, q.owner, q.enqueued_at, q.wait, q.control, q.holder, \
       q.heartbeat_at, q.claims, won.holder, won.expires_at, q.tenant, q.follow_up, q.fork_from, q.webhook, \
       p.wait = 'HELD'";

fn run_from_row(path: &Path, row: &Row) -> Result<QueuedRun, StorageError> {
    let thread: String = row.try_get(0).map_err(|e| decode_error(path, "run_queue", "?".into(), e.to_string()))?;
    let key = || format!("{thread:?}");
    let bad = |reason: String| decode_error(path, "run_queue", key(), reason);
    let get = |e: tokio_postgres::Error| bad(e.to_string());
    let wait: String = row.try_get(5).map_err(get)?;
    let wait = RunWait::parse(&wait).ok_or_else(|| bad(format!("unknown wait {wait:?}")))?;
    let control: Option<String> = row.try_get(6).map_err(get)?;
    let control = match control {
        Some(c) => Some(RunControl::parse(&c).ok_or_else(|| bad(format!("unknown control {c:?}")))?),
        None => None,
    };
    let heartbeat_at: Option<i64> = row.try_get(8).map_err(get)?;
    let claims: i32 = row.try_get(9).map_err(get)?;
    let lease_holder: Option<String> = row.try_get(10).map_err(get)?;
    let lease = match lease_holder {
        Some(holder) => {
            let expires_at: i64 = row.try_get(11).map_err(get)?;
            Some(Lease { holder, expires_at: uint(path, "leases", key, expires_at)? })
        }
        None => None,
    };
    Ok(QueuedRun {
        graph: row.try_get(1).map_err(get)?,
        input: row.try_get(2).map_err(get)?,
        owner: row.try_get(3).map_err(get)?,
        enqueued_at: uint(path, "run_queue", key, row.try_get(4).map_err(get)?)?,
        wait,
        control,
        holder: row.try_get(7).map_err(get)?,
        heartbeat_at: match heartbeat_at {
            Some(h) => Some(uint(path, "run_queue", key, h)?),
            None => None,
        },
        claims: u32::try_from(claims).unwrap_or(0),
        lease,
        tenant: row.try_get(12).map_err(get)?,
        follow_up: row.try_get(13).map_err(get)?,
        fork_from: match row.try_get::<_, Option<i64>>(14).map_err(get)? {
            Some(seq) => Some(uint(path, "run_queue", key, seq)?),
            None => None,
        },
        webhook: row.try_get(15).map_err(get)?,
        held: false,
        thread,
    })
}

pub(crate) async fn enqueue<C: GenericClient>(ctx: &PgPool, c: &C, run: &NewRun) -> Result<(), Fail<QueueError>> {
    let at = sql::int(&ctx.path, "enqueued_at", run.at)?;
    let fork_from = run.fork_from.map(|seq| sql::int(&ctx.path, "fork_from", seq)).transpose()?;
    let inserted = sql::execute(
        c,
        "INSERT INTO run_queue (thread, graph, input, owner, enqueued_at, wait, claims, tenant, follow_up, fork_from, \
           webhook) \
         VALUES ($1, $2, $3, $4, $5, 'READY', 0, $6, $7, $8, $9) ON CONFLICT (thread) DO NOTHING",
        &[&run.thread, &run.graph, &run.input, &run.owner, &at, &run.tenant, &run.follow_up, &fork_from, &run.webhook],
    )
    .await?;
    if inserted == 0 {
        return Err(Fail::Refused(QueueError::AlreadyQueued { thread: run.thread.clone() }));
    }
    Ok(())
}

/// Claims runs in a transaction of its own on `c`, opened and committed here (without waiting
/// for the disk, see [`BEGIN_EVENTUAL`]), in two round trips: `BEGIN` with the claim (one
/// statement, [`CLAIM`]), then, once every claimed row decoded, `COMMIT`.
///
/// A claimed row that does not decode (written by another version, or altered by hand) is not
/// claimed, as on redb: the transaction is rolled back, nothing of it kept, and the claim made
/// again without that row (`list_runs` reports it). Each round leaves out at least one more row,
/// so the rounds end. Any other failure before `COMMIT` leaves the transaction to the caller to
/// roll back: nothing of the claim is kept, no lease taken.
pub(crate) async fn claim<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    graph: &str,
    holder: &str,
    ttl_ms: u64,
    now: u64,
    max: usize,
) -> Result<Vec<QueuedRun>, Fail<QueueError>> {
    let (at, until) = (time(now), time(now.saturating_add(ttl_ms)));
    let limit = i64::try_from(max).unwrap_or(i64::MAX);
    // Prepared first (once per connection), so that the pipelined statements go out in order.
    let claim = c.prepare_cached(CLAIM).await?;
    let mut damaged: Vec<String> = Vec::new();
    loop {
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [&graph, &at, &limit, &holder, &until, &damaged];
        let (begun, rows) = join(c.batch_execute(BEGIN_EVENTUAL), c.query(&claim, &params)).await;
        begun?;
        let (mut runs, found) = readable_runs(&ctx.path, &rows?)?;
        if found.is_empty() {
            c.batch_execute("COMMIT").await?;
            runs.sort_by(|a, b| (a.enqueued_at, &a.thread).cmp(&(b.enqueued_at, &b.thread)));
            return Ok(runs);
        }
        c.batch_execute("ROLLBACK").await?;
        damaged.extend(found);
    }
}

/// The runs of `rows` (as [`CLAIM`] answers them) that decode, and the threads of those that
/// do not (a row whose thread itself cannot be read is an error: it could not be left out by
/// name).
fn readable_runs(path: &Path, rows: &[Row]) -> Result<(Vec<QueuedRun>, Vec<String>), StorageError> {
    let (mut runs, mut damaged) = (Vec::with_capacity(rows.len()), Vec::new());
    for row in rows {
        let held = |run: QueuedRun| -> Result<QueuedRun, StorageError> {
            let held = row
                .try_get::<_, bool>(16)
                .map_err(|e| decode_error(path, "run_queue", format!("{:?}", run.thread), e.to_string()))?;
            Ok(QueuedRun { held, ..run })
        };
        match run_from_row(path, row).and_then(held) {
            Ok(run) => runs.push(run),
            Err(e @ StorageError::Decode { .. }) => match row.try_get::<_, String>(0) {
                Ok(thread) => damaged.push(thread),
                Err(_) => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
    Ok((runs, damaged))
}

/// Sets the heartbeat of holder `$1`'s runs to `$2` and answers their control requests.
const HEARTBEAT: &str = "UPDATE run_queue q SET heartbeat_at = $2 FROM leases l \
     WHERE q.holder = $1 AND l.thread = q.thread AND l.holder = $1 AND l.expires_at > $2 \
     RETURNING q.thread, q.control";

/// Opens a transaction that commits without waiting for the disk. For claims and heartbeats:
/// a claim lost in a server crash leaves the run queued and its lease with the previous holder,
/// so the worker's fenced commits are refused and another claim takes the run; a lost heartbeat
/// is a timestamp. The first step commit of a claimed run (synchronous) makes its claim durable
/// too, as the server's log is flushed in order.
const BEGIN_EVENTUAL: &str = "BEGIN; SET LOCAL synchronous_commit = off";

/// A worker's heartbeat in a transaction of its own on `c`, opened and committed here in one
/// round trip, without waiting for the disk (see [`BEGIN_EVENTUAL`]).
pub(crate) async fn heartbeat<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    holder: &str,
    now: u64,
) -> Result<Vec<(String, RunControl)>, Fail<QueueError>> {
    let at = time(now);
    let beat = c.prepare_cached(HEARTBEAT).await?;
    let (begun, rows, committed) =
        join3(c.batch_execute(BEGIN_EVENTUAL), c.query(&beat, &[&holder, &at]), c.batch_execute("COMMIT")).await;
    begun?;
    let rows = rows?;
    committed?;
    let mut controls = Vec::new();
    for row in rows {
        let thread: String = sql::col(&ctx.path, "run_queue", &row, 0)?;
        // A control this version does not know is left out, as redb leaves out a row that does
        // not decode: it stops no other run's heartbeat (`list_runs` reports it).
        let control = sql::col::<Option<String>>(&ctx.path, "run_queue", &row, 1).ok().flatten();
        if let Some(control) = control.as_deref().and_then(RunControl::parse) {
            controls.push((thread, control));
        }
    }
    Ok(controls)
}

/// The control requests on holder `$1`'s runs whose lease it holds past `$2`.
const CONTROLS: &str = "SELECT q.thread, q.control FROM run_queue q JOIN leases l ON l.thread = q.thread \
     WHERE q.holder = $1 AND q.control IS NOT NULL AND l.holder = $1 AND l.expires_at > $2";

/// [`CONTROLS`], read-only (its own implicit transaction, nothing to commit).
pub(crate) async fn controls<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    holder: &str,
    now: u64,
) -> Result<Vec<(String, RunControl)>, Fail<QueueError>> {
    let statement = c.prepare_cached(CONTROLS).await?;
    let rows = c.query(&statement, &[&holder, &time(now)]).await?;
    let mut controls = Vec::new();
    for row in rows {
        let thread: String = sql::col(&ctx.path, "run_queue", &row, 0)?;
        // Left out when this version does not know it, as in `heartbeat`.
        let control = sql::col::<String>(&ctx.path, "run_queue", &row, 1).ok();
        if let Some(control) = control.as_deref().and_then(RunControl::parse) {
            controls.push((thread, control));
        }
    }
    Ok(controls)
}

/// The settle of holder `$2`'s claim of thread `$1` (see [`Settle`]), as common table
/// expressions: a cancel request `$5` (what the worker acted on) does not name keeps the row,
/// claimable at once (`kept`); otherwise, with a wait `$3` the row is parked waiting on the
/// approvals `$4`, its request cleared (`parked`; held, `HELD`, only while follow-ups wait
/// behind it), and without one (or held with none behind it) it is removed (`removed`),
/// or, when follow-up runs wait behind it (its `follow_ups` count, kept under the row's lock),
/// it becomes the first of them, ready (`replaced`, which `popped` takes from `follow_ups`), only
/// while the row's count is still the one read with that first (`before`): a follow-up queued
/// after the statement's snapshot (an `interrupt` one at the front, say) fails it, so the
/// statement runs again and reads the new first, never taking a follow-up that is no longer the
/// first. The four are exclusive. With a delivery (URL `$6`, payload `$7`, made at `$8`) and a row that has
/// a webhook, the delivery is written (`told`) and the row's webhook cleared. A change a
/// concurrent statement made to the row after this one's snapshot (a cancel, a follow-up) fails
/// the re-check under the row lock: the row is then left as it is, and [`settle`] runs the
/// statement again, in a transaction that locked the row first.
macro_rules! settle_ctes {
    () => {
        "WITH before AS (SELECT webhook, follow_ups FROM run_queue WHERE thread = $1 AND holder = $2), \
         next AS (SELECT pos, graph, input, owner, enqueued_at, tenant, fork_from, webhook FROM follow_ups \
           WHERE thread = $1 ORDER BY pos LIMIT 1), \
         kept AS (UPDATE run_queue SET wait = 'READY', awaits = '{}', \
             webhook = CASE WHEN $6::text IS NULL THEN webhook END \
           WHERE thread = $1 AND holder = $2 AND control = 'CANCEL' AND COALESCE($5::text, '') <> 'CANCEL' \
           RETURNING thread), \
         parked AS (UPDATE run_queue SET wait = $3, awaits = $4, control = NULL, \
             webhook = CASE WHEN $6::text IS NULL THEN webhook END \
           WHERE thread = $1 AND holder = $2 AND $3::text IS NOT NULL AND ($3::text <> 'HELD' OR follow_ups > 0) \
           AND (control IS DISTINCT FROM 'CANCEL' OR COALESCE($5::text, '') = 'CANCEL') RETURNING thread), \
         removed AS (DELETE FROM run_queue WHERE thread = $1 AND holder = $2 \
           AND ($3::text IS NULL OR $3::text = 'HELD') AND follow_ups = 0 \
           AND (control IS DISTINCT FROM 'CANCEL' OR COALESCE($5::text, '') = 'CANCEL') RETURNING thread), \
         replaced AS (UPDATE run_queue q SET graph = n.graph, input = n.input, owner = n.owner, \
             enqueued_at = n.enqueued_at, tenant = n.tenant, follow_up = true, fork_from = n.fork_from, \
             webhook = n.webhook, wait = 'READY', awaits = '{}', control = NULL, holder = NULL, \
             heartbeat_at = NULL, claims = 0, follow_ups = q.follow_ups - 1 \
           FROM next n WHERE q.thread = $1 AND q.holder = $2 AND $3::text IS NULL AND q.follow_ups > 0 \
           AND q.follow_ups = (SELECT follow_ups FROM before) \
           AND (q.control IS DISTINCT FROM 'CANCEL' OR COALESCE($5::text, '') = 'CANCEL') RETURNING q.thread), \
         popped AS (DELETE FROM follow_ups f USING next n WHERE f.thread = $1 AND f.pos = n.pos \
           AND EXISTS (SELECT 1 FROM replaced)), \
         settled AS (SELECT thread FROM kept UNION ALL SELECT thread FROM parked \
           UNION ALL SELECT thread FROM removed UNION ALL SELECT thread FROM replaced), \
         told AS (INSERT INTO webhooks (thread, url, payload, created_at, attempts, next_at, status, held_until) \
           SELECT $1, $6::text, $7::bytea, $8::bigint, 0, $8::bigint, 'PENDING', 0 FROM before \
           WHERE before.webhook IS NOT NULL AND $6::text IS NOT NULL AND EXISTS (SELECT 1 FROM settled))"
    };
}

/// [`settle_ctes`] alone: answers whether the row was `$2`'s.
const SETTLE: &str = concat!(settle_ctes!(), " SELECT count(*) FROM settled");

/// [`settle_ctes`], and the lease released if `$2` holds it, in one statement. Answers whether
/// the row was `$2`'s.
const SETTLE_AND_RELEASE: &str = concat!(
    settle_ctes!(),
    ", released AS (UPDATE leases SET holder = NULL, expires_at = 0 WHERE thread = $1 AND holder = $2 \
       AND EXISTS (SELECT 1 FROM settled) RETURNING thread) \
     SELECT count(*) FROM settled"
);

/// [`settle`] on a client of the pool, again on a conflict.
pub(crate) async fn settle_on(
    ctx: &PgPool,
    thread: &str,
    holder: &str,
    how: &Settle,
    release: bool,
) -> Result<bool, QueueError> {
    retrying!(ctx, {
        let mut c = ctx.client().await?;
        settle(ctx, &mut c, thread, holder, how, release).await
    })
}

/// Settles `holder`'s claim of `thread` as `settle` says, one statement on `c`; with
/// `release`, releases its lease in the same statement. When the statement changed nothing
/// though the row is still `holder`'s (a concurrent change to it, a cancel or a follow-up, came
/// after its snapshot), it is run again in a transaction that locks the row first: its snapshot
/// then holds every change to the row, and none comes before it commits.
pub(crate) async fn settle<C: GenericClient>(
    ctx: &PgPool,
    c: &mut C,
    thread: &str,
    holder: &str,
    settle: &Settle,
    release: bool,
) -> Result<bool, Fail<QueueError>> {
    let wait = settle.park.map(RunWait::as_str);
    let no_awaits = Vec::new();
    let awaits = if settle.park == Some(RunWait::Approval) { &settle.awaits } else { &no_awaits };
    let handled = settle.handled.map(RunControl::as_str);
    let url = settle.webhook.as_ref().map(|w| w.url.as_str());
    let payload = settle.webhook.as_ref().map(|w| w.payload.as_slice());
    let made = settle.webhook.as_ref().map(|w| time(w.at));
    let text = if release { SETTLE_AND_RELEASE } else { SETTLE };
    let params: &sql::Params<'_> = &[&thread, &holder, &wait, awaits, &handled, &url, &payload, &made];
    let statement = c.prepare_cached(text).await?;
    let row = c.query_one(&statement, params).await?;
    if sql::col::<i64>(&ctx.path, "run_queue", &row, 0)? > 0 {
        return Ok(true);
    }
    // On the same connection: a pool of one has no other.
    let tx = c.transaction().await?;
    let mine = "SELECT 1 FROM run_queue WHERE thread = $1 AND holder = $2 FOR UPDATE";
    let settled = if sql::query_opt(&tx, mine, &[&thread, &holder]).await?.is_some() {
        let row = tx.query_one(text, params).await?;
        sql::col::<i64>(&ctx.path, "run_queue", &row, 0)? > 0
    } else {
        if release {
            let free = "UPDATE leases SET holder = NULL, expires_at = 0 WHERE thread = $1 AND holder = $2";
            sql::execute(&tx, free, &[&thread, &holder]).await?;
        }
        false
    };
    tx.commit().await?;
    Ok(settled)
}

pub(crate) async fn wake<C: GenericClient>(c: &C, thread: &str, wait: RunWait) -> Result<bool, Fail<QueueError>> {
    let woken = sql::execute(
        c,
        "UPDATE run_queue SET wait = 'READY', awaits = '{}' WHERE thread = $1 AND wait = $2",
        &[&thread, &wait.as_str()],
    )
    .await?;
    Ok(woken > 0)
}

pub(crate) async fn control<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
    control: RunControl,
) -> Result<bool, Fail<QueueError>> {
    // A pause does not take the place of a cancel: the stronger request stands. A pause is
    // not set on a parked row (see the redb store's `stage_control`); if a settle parks the row
    // meanwhile, the condition is checked again on its latest version.
    for _ in 0..3 {
        let set = sql::execute(
            c,
            "UPDATE run_queue SET control = CASE WHEN control = 'CANCEL' THEN control ELSE $2 END \
             WHERE thread = $1 AND ($2 <> 'PAUSE' OR wait = 'READY')",
            &[&thread, &control.as_str()],
        )
        .await?;
        if set > 0 || control != RunControl::Pause {
            return Ok(set > 0);
        }
        // Not set: no row, or a parked one; one woken since is asked again.
        let Some(row) = sql::query_opt(c, "SELECT wait FROM run_queue WHERE thread = $1", &[&thread]).await? else {
            return Ok(false);
        };
        let wait: String = sql::col(&ctx.path, "run_queue", &row, 0)?;
        match RunWait::parse(&wait) {
            Some(RunWait::Ready) => continue,
            Some(wait) => return Err(Fail::Refused(QueueError::Waiting { thread: thread.to_string(), wait })),
            None => {
                return Err(Fail::Storage(decode_error(
                    &ctx.path,
                    "run_queue",
                    format!("{thread:?}"),
                    format!("unknown wait {wait:?}"),
                )));
            }
        }
    }
    Err(Fail::Storage(StorageError::Backend {
        path: ctx.path.clone(),
        detail: format!(
            "the queued run of thread `{thread}` was parked and woken three times while a pause was asked; ask again"
        ),
    }))
}

/// Every queued run with its lease, by thread.
fn list_sql() -> String {
    format!(
        "SELECT {COLUMNS} FROM run_queue q LEFT JOIN leases l ON l.thread = q.thread AND l.holder IS NOT NULL \
         ORDER BY q.thread"
    )
}

pub(crate) async fn list<C: GenericClient>(ctx: &PgPool, c: &C) -> Result<Vec<QueuedRun>, Fail<QueueError>> {
    let rows = sql::query(c, &list_sql(), &[]).await?;
    Ok(rows.iter().map(|r| run_from_row(&ctx.path, r)).collect::<Result<_, _>>()?)
}

/// [`list`], but a row that does not decode is skipped and reported.
pub(crate) async fn scan<C: GenericClient>(ctx: &PgPool, c: &C) -> Result<Listing<QueuedRun>, Fail<QueueError>> {
    let rows = sql::query(c, &list_sql(), &[]).await?;
    Ok(sql::lenient(rows.iter().map(|r| run_from_row(&ctx.path, r)))?)
}
