//! Reads of a [`PostgresStore`](super::PostgresStore). Each is one statement, so it sees one
//! consistent snapshot of the database, also while other processes write.

use std::path::Path;

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::dump::ThreadDump;
use crate::error::{ReadError, StorageError};
use crate::postgres::error::decode_error;
use crate::postgres::pool::PgPool;
use crate::postgres::sql::{self, col, uint};
use crate::record::{
    ApprovalRecord, AuditEntry, ChainStep, Checkpoint, CheckpointSummary, EffectKey, Lease, PendingWrite, StateChain,
    ThreadRecord, ThreadStatus, Timer,
};
use crate::store::Listing;

/// What a listing does with a row that does not decode.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scan {
    /// Fail the listing (`list_*`).
    Strict,
    /// Skip the row and report it in [`Listing::skipped`] (`scan_*`).
    Skip,
}

/// A listing's rows, decoded in order: a row that does not decode ([`StorageError::Decode`])
/// fails the listing or is skipped and reported, as `scan` says; any other failure fails it.
fn collect<T>(scan: Scan, rows: impl IntoIterator<Item = Result<T, StorageError>>) -> Result<Listing<T>, StorageError> {
    let (mut items, mut skipped) = (Vec::new(), Vec::new());
    for row in rows {
        match row {
            Ok(item) => items.push(item),
            Err(e @ StorageError::Decode { .. }) if scan == Scan::Skip => skipped.push(e),
            Err(e) => return Err(e),
        }
    }
    Ok(Listing::new(items, skipped))
}

const THREAD_COLUMNS: &str = "SELECT t.id, t.owner, t.graph_fingerprint, t.schema_version, t.status, t.detail, \
     t.created_at, t.updated_at, l.holder, l.expires_at, t.parent, t.tenant, t.trace \
     FROM threads t LEFT JOIN leases l ON l.thread = t.id AND l.holder IS NOT NULL";

/// A row of [`THREAD_COLUMNS`] as a record, with its lease.
fn thread_from_row(path: &Path, row: &Row) -> Result<ThreadRecord, StorageError> {
    let id: String = row.try_get(0).map_err(|e| decode_error(path, "threads", "?".to_string(), e.to_string()))?;
    let key = || format!("{id:?}");
    let bad = |reason: String| decode_error(path, "threads", key(), reason);
    let get_err = |e: tokio_postgres::Error| bad(e.to_string());
    let status: String = row.try_get(4).map_err(get_err)?;
    let status = ThreadStatus::ALL
        .into_iter()
        .find(|s| s.as_str() == status)
        .ok_or_else(|| bad(format!("unknown thread status {status:?}")))?;
    let schema_version: i64 = row.try_get(3).map_err(get_err)?;
    let holder: Option<String> = row.try_get(8).map_err(get_err)?;
    let lease = match holder {
        Some(holder) => {
            let expires_at: i64 = row.try_get(9).map_err(get_err)?;
            Some(Lease { holder, expires_at: uint(path, "leases", key, expires_at)? })
        }
        None => None,
    };
    Ok(ThreadRecord {
        owner: row.try_get(1).map_err(get_err)?,
        graph_fingerprint: row.try_get(2).map_err(get_err)?,
        schema_version: u32::try_from(schema_version).map_err(|_| bad(format!("schema version {schema_version}")))?,
        status,
        detail: row.try_get(5).map_err(get_err)?,
        created_at: uint(path, "threads", key, row.try_get(6).map_err(get_err)?)?,
        updated_at: uint(path, "threads", key, row.try_get(7).map_err(get_err)?)?,
        lease,
        parent: row.try_get(10).map_err(get_err)?,
        tenant: row.try_get(11).map_err(get_err)?,
        trace: row.try_get(12).map_err(get_err)?,
        id: id.clone(),
    })
}

pub(crate) async fn thread(ctx: &PgPool, id: &str) -> Result<Option<ThreadRecord>, StorageError> {
    thread_on(ctx, &ctx.client().await?, id).await
}

async fn thread_on<C: GenericClient>(ctx: &PgPool, c: &C, id: &str) -> Result<Option<ThreadRecord>, StorageError> {
    let sql = format!("{THREAD_COLUMNS} WHERE t.id = $1");
    let row = sql::query_opt(c, &sql, &[&id]).await.map_err(|e| ctx.db(&e))?;
    row.map(|row| thread_from_row(&ctx.path, &row)).transpose()
}

/// Every thread, by id.
pub(crate) async fn threads(ctx: &PgPool, scan: Scan) -> Result<Listing<ThreadRecord>, StorageError> {
    let client = ctx.client().await?;
    let sql = format!("{THREAD_COLUMNS} ORDER BY t.id");
    let rows = sql::query(&client, &sql, &[]).await.map_err(|e| ctx.db(&e))?;
    collect(scan, rows.iter().map(|row| thread_from_row(&ctx.path, row)))
}

/// The threads whose record names `parent` as theirs, ordered by id, undecodable ones skipped.
pub(crate) async fn child_threads(ctx: &PgPool, parent: &str) -> Result<Listing<ThreadRecord>, StorageError> {
    let client = ctx.client().await?;
    let sql = format!("{THREAD_COLUMNS} WHERE t.parent = $1 ORDER BY t.id");
    let rows = sql::query(&client, &sql, &[&parent]).await.map_err(|e| ctx.db(&e))?;
    collect(Scan::Skip, rows.iter().map(|row| thread_from_row(&ctx.path, row)))
}

/// A checkpoint from its stored `row` and `snapshot` columns.
fn checkpoint_from(
    path: &Path,
    thread: &str,
    seq: i64,
    row: &[u8],
    snapshot: Option<Vec<u8>>,
) -> Result<Checkpoint, StorageError> {
    let key = || format!("({thread:?}, {seq})");
    let (summary, delta) =
        CheckpointSummary::decode_row(row).map_err(|r| decode_error(path, "checkpoints", key(), r))?;
    if summary.has_snapshot != snapshot.is_some() {
        return Err(decode_error(
            path,
            "checkpoints",
            key(),
            "the row and the snapshot column disagree on whether there is a snapshot",
        ));
    }
    Ok(Checkpoint::from_parts(summary, snapshot, delta))
}

pub(crate) async fn checkpoint(ctx: &PgPool, thread: &str, seq: u64) -> Result<Option<Checkpoint>, StorageError> {
    let Ok(seq) = i64::try_from(seq) else { return Ok(None) };
    let client = ctx.client().await?;
    let row = sql::query_opt(
        &client,
        "SELECT row, snapshot FROM checkpoints WHERE thread = $1 AND seq = $2",
        &[&thread, &seq],
    )
    .await
    .map_err(|e| ctx.db(&e))?;
    row.map(|r| {
        checkpoint_from(
            &ctx.path,
            thread,
            seq,
            col(&ctx.path, "checkpoints", &r, 0)?,
            col(&ctx.path, "checkpoints", &r, 1)?,
        )
    })
    .transpose()
}

pub(crate) async fn latest_checkpoint(ctx: &PgPool, thread: &str) -> Result<Option<Checkpoint>, StorageError> {
    let client = ctx.client().await?;
    let row = sql::query_opt(
        &client,
        "SELECT seq, row, snapshot FROM checkpoints WHERE thread = $1 ORDER BY seq DESC LIMIT 1",
        &[&thread],
    )
    .await
    .map_err(|e| ctx.db(&e))?;
    row.map(|r| {
        checkpoint_from(
            &ctx.path,
            thread,
            col(&ctx.path, "checkpoints", &r, 0)?,
            col(&ctx.path, "checkpoints", &r, 1)?,
            col(&ctx.path, "checkpoints", &r, 2)?,
        )
    })
    .transpose()
}

pub(crate) async fn list_checkpoints(ctx: &PgPool, thread: &str) -> Result<Vec<CheckpointSummary>, StorageError> {
    let client = ctx.client().await?;
    summaries(ctx, &client, thread).await
}

/// A thread's checkpoint summaries, by seq.
pub(crate) async fn summaries<C: GenericClient>(
    ctx: &PgPool,
    client: &C,
    thread: &str,
) -> Result<Vec<CheckpointSummary>, StorageError> {
    let rows = sql::query(client, "SELECT seq, row FROM checkpoints WHERE thread = $1 ORDER BY seq", &[&thread])
        .await
        .map_err(|e| ctx.db(&e))?;
    rows.iter()
        .map(|r| {
            let seq: i64 = col(&ctx.path, "checkpoints", r, 0)?;
            CheckpointSummary::decode(col(&ctx.path, "checkpoints", r, 1)?)
                .map_err(|reason| decode_error(&ctx.path, "checkpoints", format!("({thread:?}, {seq})"), reason))
        })
        .collect()
}

/// The parent walk from `seq` to the nearest snapshot, in one recursive query.
const CHAIN: &str = "WITH RECURSIVE chain(seq, parent, has_snapshot, row, snapshot, depth) AS ( \
       SELECT seq, parent, has_snapshot, row, snapshot, 0 FROM checkpoints WHERE thread = $1 AND seq = $2 \
     UNION ALL \
       SELECT c.seq, c.parent, c.has_snapshot, c.row, c.snapshot, chain.depth + 1 \
       FROM chain JOIN checkpoints c ON c.thread = $1 AND c.seq = chain.parent \
       WHERE NOT chain.has_snapshot AND chain.parent < chain.seq \
     ) SELECT seq, parent, row, snapshot FROM chain ORDER BY depth";

pub(crate) async fn state_chain<C: GenericClient>(
    ctx: &PgPool,
    client: &C,
    thread: &str,
    seq: u64,
) -> Result<Option<StateChain>, ReadError> {
    let Ok(target) = i64::try_from(seq) else { return Ok(None) };
    let rows = sql::query(client, CHAIN, &[&thread, &target]).await.map_err(|e| ctx.db(&e))?;
    let path = ctx.path.as_path();
    let mut steps = Vec::new();
    let mut expected = target;
    for row in &rows {
        let cur: i64 = col(path, "checkpoints", row, 0)?;
        if cur != expected {
            break;
        }
        let checkpoint =
            checkpoint_from(path, thread, cur, col(path, "checkpoints", row, 2)?, col(path, "checkpoints", row, 3)?)?;
        let cur_u = uint(path, "checkpoints", || format!("({thread:?}, {cur})"), cur)?;
        if let Some(snapshot) = checkpoint.snapshot {
            steps.reverse();
            return Ok(Some(StateChain { snapshot_seq: cur_u, snapshot, steps }));
        }
        steps.push(ChainStep { seq: cur_u, delta: checkpoint.delta });
        let corrupt = |reason: &str| decode_error(path, "checkpoints", format!("({thread:?}, {cur})"), reason);
        let parent: Option<i64> = col(path, "checkpoints", row, 1)?;
        match parent {
            None => return Err(corrupt("a root checkpoint without a snapshot").into()),
            Some(p) if p >= cur => return Err(corrupt("its parent link does not go back in history").into()),
            Some(p) => expected = p,
        }
    }
    if rows.is_empty() {
        return Ok(None);
    }
    let missing = u64::try_from(expected).unwrap_or(0);
    Err(ReadError::BrokenChain { path: ctx.path.clone(), thread: thread.to_string(), seq, missing })
}

pub(crate) async fn pending_writes(ctx: &PgPool, thread: &str, seq: u64) -> Result<Vec<PendingWrite>, StorageError> {
    pending_writes_on(ctx, &ctx.client().await?, thread, Some(seq)).await
}

/// The pending writes of `thread` at checkpoint `seq`, or at every checkpoint (`None`), by seq,
/// node and index.
async fn pending_writes_on<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
    seq: Option<u64>,
) -> Result<Vec<PendingWrite>, StorageError> {
    let rows = match seq {
        Some(seq) => {
            let Ok(seq) = i64::try_from(seq) else { return Ok(Vec::new()) };
            let sql = "SELECT seq, node, idx, value FROM pending_writes WHERE thread = $1 AND seq = $2 \
                       ORDER BY node, idx";
            sql::query(c, sql, &[&thread, &seq]).await
        }
        None => {
            let sql = "SELECT seq, node, idx, value FROM pending_writes WHERE thread = $1 ORDER BY seq, node, idx";
            sql::query(c, sql, &[&thread]).await
        }
    }
    .map_err(|e| ctx.db(&e))?;
    rows.iter()
        .map(|r| {
            let (seq, node, idx): (i64, String, i64) = (
                col(&ctx.path, "pending_writes", r, 0)?,
                col(&ctx.path, "pending_writes", r, 1)?,
                col(&ctx.path, "pending_writes", r, 2)?,
            );
            let key = || format!("({thread:?}, {seq}, {node:?})");
            let seq = uint(&ctx.path, "pending_writes", key, seq)?;
            let idx = u32::try_from(idx)
                .map_err(|_| decode_error(&ctx.path, "pending_writes", key(), format!("index {idx}")))?;
            Ok(PendingWrite { seq, node, idx, value: col(&ctx.path, "pending_writes", r, 3)? })
        })
        .collect()
}

pub(crate) async fn effect(ctx: &PgPool, key: &EffectKey) -> Result<Option<Vec<u8>>, StorageError> {
    let Ok(seq) = i64::try_from(key.seq) else { return Ok(None) };
    let client = ctx.client().await?;
    let row = sql::query_opt(
        &client,
        "SELECT result FROM effects WHERE thread = $1 AND seq = $2 AND node = $3 AND key = $4",
        &[&key.thread, &seq, &key.node, &key.key],
    )
    .await
    .map_err(|e| ctx.db(&e))?;
    row.map(|r| col(&ctx.path, "effects", &r, 0)).transpose()
}

pub(crate) async fn effect_keys(ctx: &PgPool, thread: &str, seq: u64) -> Result<Vec<EffectKey>, StorageError> {
    let Ok(stored_seq) = i64::try_from(seq) else { return Ok(Vec::new()) };
    let client = ctx.client().await?;
    let rows = sql::query(
        &client,
        "SELECT node, key FROM effects WHERE thread = $1 AND seq = $2 ORDER BY node COLLATE \"C\", key COLLATE \"C\"",
        &[&thread, &stored_seq],
    )
    .await
    .map_err(|e| ctx.db(&e))?;
    rows.iter()
        .map(|r| {
            Ok(EffectKey::new(
                thread,
                seq,
                col::<String>(&ctx.path, "effects", r, 0)?,
                col::<String>(&ctx.path, "effects", r, 1)?,
            ))
        })
        .collect()
}

/// Every effect of the thread with its result, by seq, node and key (byte order).
pub(crate) async fn thread_effects(ctx: &PgPool, thread: &str) -> Result<Vec<(EffectKey, Vec<u8>)>, StorageError> {
    thread_effects_on(ctx, &ctx.client().await?, thread).await
}

async fn thread_effects_on<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
) -> Result<Vec<(EffectKey, Vec<u8>)>, StorageError> {
    let rows = sql::query(
        c,
        "SELECT seq, node, key, result FROM effects WHERE thread = $1 \
         ORDER BY seq, node COLLATE \"C\", key COLLATE \"C\"",
        &[&thread],
    )
    .await
    .map_err(|e| ctx.db(&e))?;
    rows.iter()
        .map(|r| {
            let (seq, node, key): (i64, String, String) =
                (col(&ctx.path, "effects", r, 0)?, col(&ctx.path, "effects", r, 1)?, col(&ctx.path, "effects", r, 2)?);
            let seq = uint(&ctx.path, "effects", || format!("({thread:?}, {seq}, {node:?}, {key:?})"), seq)?;
            Ok((EffectKey::new(thread, seq, node, key), col(&ctx.path, "effects", r, 3)?))
        })
        .collect()
}

/// The thread's audit log, by seq.
pub(crate) async fn audit(ctx: &PgPool, thread: &str, scan: Scan) -> Result<Listing<AuditEntry>, StorageError> {
    audit_on(ctx, &ctx.client().await?, thread, scan).await
}

async fn audit_on<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
    scan: Scan,
) -> Result<Listing<AuditEntry>, StorageError> {
    let rows = sql::query(
        c,
        "SELECT seq, at, actor, kind, detail, detail_hash, link FROM audit WHERE thread = $1 ORDER BY seq",
        &[&thread],
    )
    .await
    .map_err(|e| ctx.db(&e))?;
    let path = ctx.path.as_path();
    let entries = rows.iter().map(|r| {
        let seq: i64 = col(path, "audit", r, 0)?;
        let key = || format!("({thread:?}, {seq})");
        let detail: String = col(path, "audit", r, 4)?;
        Ok(AuditEntry {
            thread: thread.to_string(),
            seq: uint(path, "audit", key, seq)?,
            at: uint(path, "audit", key, col(path, "audit", r, 1)?)?,
            actor: col(path, "audit", r, 2)?,
            kind: col(path, "audit", r, 3)?,
            detail: serde_json::from_str(&detail)
                .map_err(|e| decode_error(path, "audit", key(), format!("detail is not JSON: {e}")))?,
            detail_hash: col(path, "audit", r, 5)?,
            link: col(path, "audit", r, 6)?,
        })
    });
    collect(scan, entries)
}

/// Decodes an approval's `record` column.
pub(crate) fn approval_from(path: &Path, id: &str, record: &[u8]) -> Result<ApprovalRecord, StorageError> {
    ApprovalRecord::decode(record).map_err(|reason| decode_error(path, "approvals", format!("{id:?}"), reason))
}

/// Approvals selected by `filter` (a `WHERE` clause over `$1` when `param` is given), by id.
async fn approvals_where(
    ctx: &PgPool,
    filter: &str,
    param: Option<&str>,
    scan: Scan,
) -> Result<Listing<ApprovalRecord>, StorageError> {
    approvals_where_on(ctx, &ctx.client().await?, filter, param, scan).await
}

async fn approvals_where_on<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    filter: &str,
    param: Option<&str>,
    scan: Scan,
) -> Result<Listing<ApprovalRecord>, StorageError> {
    let sql = format!("SELECT id, record FROM approvals WHERE {filter} ORDER BY id");
    let rows = match param {
        Some(p) => sql::query(c, &sql, &[&p]).await,
        None => sql::query(c, &sql, &[]).await,
    }
    .map_err(|e| ctx.db(&e))?;
    collect(
        scan,
        rows.iter()
            .map(|r| approval_from(&ctx.path, col(&ctx.path, "approvals", r, 0)?, col(&ctx.path, "approvals", r, 1)?)),
    )
}

pub(crate) async fn approval(ctx: &PgPool, id: &str) -> Result<Option<ApprovalRecord>, StorageError> {
    Ok(approvals_where(ctx, "id = $1", Some(id), Scan::Strict).await?.items.pop())
}

/// The thread's approvals, by id.
pub(crate) async fn approvals(ctx: &PgPool, thread: &str, scan: Scan) -> Result<Listing<ApprovalRecord>, StorageError> {
    approvals_where(ctx, "thread = $1", Some(thread), scan).await
}

/// The approvals waiting for a human, by id.
pub(crate) async fn pending_approvals(ctx: &PgPool, scan: Scan) -> Result<Listing<ApprovalRecord>, StorageError> {
    approvals_where(ctx, "status IN ('PENDING', 'OUTCOME_UNKNOWN')", None, scan).await
}

/// The fencing token of the thread's lease row (kept after release), if it ever had one.
pub(crate) async fn lease_token(ctx: &PgPool, thread: &str) -> Result<Option<u64>, StorageError> {
    let client = ctx.client().await?;
    let row = sql::query_opt(&client, "SELECT token FROM leases WHERE thread = $1", &[&thread])
        .await
        .map_err(|e| ctx.db(&e))?;
    row.map(|r| uint(&ctx.path, "leases", || format!("{thread:?}"), col(&ctx.path, "leases", &r, 0)?)).transpose()
}

/// The timers due at `until`, earliest first.
pub(crate) async fn due_timers(ctx: &PgPool, until: u64, limit: usize) -> Result<Vec<Timer>, StorageError> {
    let client = ctx.client().await?;
    let (until, limit) = (sql::time(until), i64::try_from(limit).unwrap_or(i64::MAX));
    let rows = sql::query(
        &client,
        "SELECT wake_at, id FROM threads WHERE wake_at IS NOT NULL AND wake_at <= $1 ORDER BY wake_at, id LIMIT $2",
        &[&until, &limit],
    )
    .await
    .map_err(|e| ctx.db(&e))?;
    rows.iter()
        .map(|r| {
            let thread: String = col(&ctx.path, "threads", r, 1)?;
            let wake_at = uint(&ctx.path, "threads", || format!("{thread:?}"), col(&ctx.path, "threads", r, 0)?)?;
            Ok(Timer { wake_at, thread })
        })
        .collect()
}

/// The thread's timer, if it sleeps.
pub(crate) async fn thread_timer(ctx: &PgPool, thread: &str) -> Result<Option<u64>, StorageError> {
    thread_timer_on(ctx, &ctx.client().await?, thread).await
}

async fn thread_timer_on<C: GenericClient>(ctx: &PgPool, c: &C, thread: &str) -> Result<Option<u64>, StorageError> {
    let row =
        sql::query_opt(c, "SELECT wake_at FROM threads WHERE id = $1", &[&thread]).await.map_err(|e| ctx.db(&e))?;
    match row.map(|r| col::<Option<i64>>(&ctx.path, "threads", &r, 0)).transpose()?.flatten() {
        Some(at) => Ok(Some(uint(&ctx.path, "threads", || format!("{thread:?}"), at)?)),
        None => Ok(None),
    }
}

/// Everything stored for `thread` (`None`: no such thread), read in one `REPEATABLE READ`
/// snapshot: the thread at one moment, whatever commits meanwhile.
pub(crate) async fn dump(ctx: &PgPool, thread: &str) -> Result<Option<ThreadDump>, StorageError> {
    let db = |e: tokio_postgres::Error| ctx.db(&e);
    let mut client = ctx.client().await?;
    let tx = client.transaction().await.map_err(db)?;
    tx.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY").await.map_err(db)?;
    let Some(record) = thread_on(ctx, &tx, thread).await? else { return Ok(None) };
    let mut dump = ThreadDump::new(record);
    dump.wake_at = thread_timer_on(ctx, &tx, thread).await?;
    let rows = sql::query(&tx, "SELECT seq, row, snapshot FROM checkpoints WHERE thread = $1 ORDER BY seq", &[&thread])
        .await
        .map_err(db)?;
    for r in &rows {
        dump.checkpoints.push(checkpoint_from(
            &ctx.path,
            thread,
            col(&ctx.path, "checkpoints", r, 0)?,
            col(&ctx.path, "checkpoints", r, 1)?,
            col(&ctx.path, "checkpoints", r, 2)?,
        )?);
    }
    // The pending writes of the thread's checkpoints (a store keeps none of others).
    let seqs: std::collections::BTreeSet<u64> = dump.checkpoints.iter().map(|c| c.seq).collect();
    dump.pending_writes = pending_writes_on(ctx, &tx, thread, None).await?;
    dump.pending_writes.retain(|w| seqs.contains(&w.seq));
    dump.effects = thread_effects_on(ctx, &tx, thread).await?;
    dump.audit = audit_on(ctx, &tx, thread, Scan::Strict).await?.items;
    dump.approvals = approvals_where_on(ctx, &tx, "thread = $1", Some(thread), Scan::Strict).await?.items;
    dump.events = crate::postgres::event_log::all_on(ctx, &tx, thread).await?;
    tx.commit().await.map_err(db)?;
    Ok(Some(dump))
}
