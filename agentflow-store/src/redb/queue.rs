//! The run queue of a [`RedbStore`](crate::RedbStore): table `run_queue` in the file, claimed
//! by the store's single writer thread. The queue's types and rules are in [`crate::queue`].

use std::path::Path;

use redb::{ReadableTable, TableHandle};
use serde::{Deserialize, Serialize};

use crate::error::StorageError;
use crate::listing::Listing;
use crate::queue::{
    FollowUpPlace, FollowUpQueued, FollowUpRule, NewRun, QueueError, QueuedRun, RunControl, RunWait, Settle,
};
use crate::record::{ApprovalRecord, Lease, NewAuditEntry, Payload, ThreadRecord, ThreadStatus};
use crate::redb::error::WithPath;
use crate::redb::leases::Leases;
use crate::redb::writer::Tx;
use crate::redb::{follow_ups, idempotency, tables};

/// A queue row as stored in the redb table (JSON, versioned by `v`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Row {
    v: u32,
    graph: String,
    input: Option<Vec<u8>>,
    owner: String,
    enqueued_at: u64,
    wait: RunWait,
    control: Option<RunControl>,
    holder: Option<String>,
    heartbeat_at: Option<u64>,
    claims: u32,
    /// Parked for approvals: the ones it waits on (empty: any of the thread's and its
    /// children's; see [`Settle::awaits`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    awaits: Vec<String>,
    /// The tenant it was submitted for (rows written before tenants have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tenant: Option<String>,
    /// A follow-up run (its input is an update); rows written before follow-ups are not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    follow_up: bool,
    /// For a follow-up: the checkpoint to fork at first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fork_from: Option<u64>,
    /// The URL told when the run first stops, until a settle wrote its delivery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    webhook: Option<String>,
}

const ROW_VERSION: u32 = 1;

/// A row's JSON, in the record encoding every stored value has (a version byte, the bytes, a
/// CRC-32): a flipped bit in a queued run's input or owner is a decode error, not another run.
fn decode(path: &Path, thread: &str, bytes: &[u8]) -> Result<Row, StorageError> {
    let bad = |reason: String| StorageError::Decode {
        path: path.to_path_buf(),
        table: tables::RUN_QUEUE.name().to_string(),
        key: format!("{thread:?}"),
        reason,
    };
    let json = Payload::decode(bytes).map_err(bad)?;
    let row: Row = serde_json::from_slice(&json).map_err(|e| bad(e.to_string()))?;
    if row.v != ROW_VERSION {
        return Err(StorageError::Decode {
            path: path.to_path_buf(),
            table: tables::RUN_QUEUE.name().to_string(),
            key: format!("{thread:?}"),
            reason: format!("queue row version {} is not {ROW_VERSION}", row.v),
        });
    }
    Ok(row)
}

fn encode(row: &Row) -> Vec<u8> {
    // A struct of strings, numbers and byte vectors always serialises.
    Payload::encode(&serde_json::to_vec(row).unwrap_or_default())
}

fn queued(thread: &str, row: Row, lease: Option<Lease>) -> QueuedRun {
    QueuedRun {
        thread: thread.to_string(),
        graph: row.graph,
        input: row.input,
        owner: row.owner,
        enqueued_at: row.enqueued_at,
        wait: row.wait,
        control: row.control,
        holder: row.holder,
        heartbeat_at: row.heartbeat_at,
        claims: row.claims,
        lease,
        tenant: row.tenant,
        follow_up: row.follow_up,
        fork_from: row.fork_from,
        webhook: row.webhook,
        held: false,
    }
}

/// The row of `run` as it is queued: ready, never claimed.
fn row_of(run: NewRun) -> Row {
    Row {
        v: ROW_VERSION,
        graph: run.graph,
        input: run.input,
        owner: run.owner,
        enqueued_at: run.at,
        wait: RunWait::Ready,
        control: None,
        holder: None,
        heartbeat_at: None,
        claims: 0,
        awaits: Vec::new(),
        tenant: run.tenant,
        follow_up: run.follow_up,
        fork_from: run.fork_from,
        webhook: run.webhook,
    }
}

/// Every row of the queue, by thread id; a row whose bytes do not decode is an error.
fn rows(
    path: &Path,
    table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Vec<(String, Row)>, StorageError> {
    scan_rows(path, table, false)
}

/// [`rows`] without the rows whose bytes do not decode (a damaged row stops no one's claims,
/// heartbeat or control requests; [`list`] reports it).
fn readable_rows(
    path: &Path,
    table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Vec<(String, Row)>, StorageError> {
    scan_rows(path, table, true)
}

fn scan_rows(
    path: &Path,
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    skip_damaged: bool,
) -> Result<Vec<(String, Row)>, StorageError> {
    let mut out = Vec::new();
    for entry in table.iter().ctx(path)? {
        let (k, v) = entry.ctx(path)?;
        let thread = k.value().to_string();
        match decode(path, &thread, v.value()) {
            Ok(row) => out.push((thread, row)),
            Err(e) if skip_damaged && damaged(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// The control requests of `holder`'s runs that it holds the lease of at `now` (the rows whose
/// bytes decode; see [`readable_rows`]).
pub(crate) fn controls(
    path: &Path,
    txn: &redb::ReadTransaction,
    leases: &Leases,
    holder: &str,
    now: u64,
) -> Result<Vec<(String, RunControl)>, StorageError> {
    let table = txn.open_table(tables::RUN_QUEUE).ctx(path)?;
    Ok(readable_rows(path, &table)?
        .into_iter()
        .filter(|(t, row)| row.holder.as_deref() == Some(holder) && leases.is_held_by(t, holder, now))
        .filter_map(|(t, row)| row.control.map(|c| (t, c)))
        .collect())
}

pub(crate) fn list(path: &Path, txn: &redb::ReadTransaction, leases: &Leases) -> Result<Vec<QueuedRun>, StorageError> {
    let table = txn.open_table(tables::RUN_QUEUE).ctx(path)?;
    Ok(rows(path, &table)?.into_iter().map(|(t, row)| queued(&t, row, leases.get(&t))).collect())
}

/// [`list`], but a row that does not decode is skipped and reported.
pub(crate) fn scan(
    path: &Path,
    txn: &redb::ReadTransaction,
    leases: &Leases,
) -> Result<Listing<QueuedRun>, StorageError> {
    let table = txn.open_table(tables::RUN_QUEUE).ctx(path)?;
    let (mut items, mut skipped) = (Vec::new(), Vec::new());
    for entry in table.iter().ctx(path)? {
        let (k, v) = entry.ctx(path)?;
        let thread = k.value();
        match decode(path, thread, v.value()) {
            Ok(row) => items.push(queued(thread, row, leases.get(thread))),
            Err(e) if damaged(&e) => skipped.push(e),
            Err(e) => return Err(e),
        }
    }
    Ok(Listing::new(items, skipped))
}

pub(crate) fn stage_enqueue(tx: &Tx<'_>, run: &NewRun) -> Result<(), QueueError> {
    let mut table = tx.txn.open_table(tables::RUN_QUEUE).ctx(tx.path)?;
    if table.get(run.thread.as_str()).ctx(tx.path)?.is_some() {
        return Err(QueueError::AlreadyQueued { thread: run.thread.clone() });
    }
    tx.wrote();
    table.insert(run.thread.as_str(), encode(&row_of(run.clone())).as_slice()).ctx(tx.path)?;
    Ok(())
}

/// Queues follow-up `run` with `entry` in its thread's audit log: the thread's queued run when
/// it has none, else at `place` among the follow-ups behind it (see
/// [`Store::enqueue_follow_up`](crate::Store::enqueue_follow_up)).
pub(crate) fn stage_follow_up(
    tx: &Tx<'_>,
    run: &NewRun,
    entry: &NewAuditEntry,
    place: FollowUpPlace,
) -> Result<FollowUpQueued, QueueError> {
    // Everything that may refuse it is checked before its first write.
    crate::checks::check_detail(&run.thread, entry)?;
    idempotency::refuse_used(tx, run)?;
    let run = NewRun { follow_up: true, ..run.clone() };
    let queued = tx.txn.open_table(tables::RUN_QUEUE).ctx(tx.path)?.get(run.thread.as_str()).ctx(tx.path)?.is_some();
    let answer = if queued {
        tx.wrote();
        FollowUpQueued::Behind { ahead: follow_ups::push(tx, &run, place)? }
    } else {
        stage_enqueue(tx, &run)?;
        FollowUpQueued::Now
    };
    idempotency::keep(tx, &run)?;
    crate::redb::audit::stage_append_audit(tx, &run.thread, entry)?;
    Ok(answer)
}

/// Queues follow-up `run` with `entry` as `rule` decides about the thread's run, all in the
/// caller's transaction (see [`Store::enqueue_follow_up_as`](crate::Store::enqueue_follow_up_as)).
pub(crate) fn stage_follow_up_as(
    tx: &Tx<'_>,
    run: &NewRun,
    entry: &NewAuditEntry,
    rule: &FollowUpRule,
) -> Result<FollowUpQueued, QueueError> {
    let thread = run.thread.as_str();
    crate::checks::check_detail(thread, entry)?;
    if let FollowUpRule::Interrupt { cancel } = rule {
        crate::checks::check_detail(thread, cancel)?;
    }
    let row = {
        let table = tx.txn.open_table(tables::RUN_QUEUE).ctx(tx.path)?;
        let value = table.get(thread).ctx(tx.path)?;
        value.map(|v| decode(tx.path, thread, v.value())).transpose()?
    };
    let record = {
        let threads = tx.txn.open_table(tables::THREADS).ctx(tx.path)?;
        crate::redb::reads::thread_record(tx.path, &threads, tx.leases, thread)?
    };
    let status = record.as_ref().map(|r| r.status);
    match rule {
        FollowUpRule::Reject => {
            if let Some(status) = crate::queue::active_as(status, row.as_ref().map(|r| r.wait)) {
                return Err(QueueError::Active { thread: thread.to_string(), status });
            }
            stage_follow_up(tx, run, entry, FollowUpPlace::Back)
        }
        FollowUpRule::Interrupt { cancel } => {
            if row.is_some() {
                idempotency::refuse_used(tx, run)?;
                stage_control(tx, thread, RunControl::Cancel)?;
                crate::redb::audit::stage_append_audit(tx, thread, cancel)?;
            }
            stage_follow_up(tx, run, entry, FollowUpPlace::Front)
        }
        _ => {
            let waits = status.is_some_and(crate::queue::waits_outside_the_queue);
            if let (None, true, Some(record)) = (&row, waits, &record) {
                // The thread waits outside the queue: a run held for it keeps the follow-up
                // from starting it over where it waits.
                idempotency::refuse_used(tx, run)?;
                let mut held = NewRun::new(thread, &run.graph, None, &record.owner, run.at);
                held.tenant = record.tenant.clone();
                stage_enqueue(tx, &held)?;
                let mut table = tx.txn.open_table(tables::RUN_QUEUE).ctx(tx.path)?;
                let row = Row { wait: RunWait::Held, ..row_of(held) };
                table.insert(thread, encode(&row).as_slice()).ctx(tx.path)?;
            }
            stage_follow_up(tx, run, entry, FollowUpPlace::Back)
        }
    }
}

/// The follow-ups waiting behind `thread`'s queued run, first first, as queued runs (ready,
/// never claimed).
pub(crate) fn follow_ups_of(
    txn: &redb::ReadTransaction,
    path: &Path,
    thread: &str,
) -> Result<Vec<QueuedRun>, StorageError> {
    Ok(follow_ups::list(txn, path, thread)?.into_iter().map(|run| queued(thread, row_of(run), None)).collect())
}

/// Whether an approval of `thread`, or of one of its subgraph children at any level, waits for
/// a human: the parent waits on its children's too.
fn approval_waits(tx: &Tx<'_>, thread: &str) -> Result<bool, StorageError> {
    let by_thread = tx.txn.open_table(tables::APPROVALS_BY_THREAD).ctx(tx.path)?;
    let approvals = tx.txn.open_table(tables::APPROVALS).ctx(tx.path)?;
    let threads = tx.txn.open_table(tables::THREADS).ctx(tx.path)?;
    // Whether an approval of a thread listed from `from` on, while `listed` holds, waits, counting
    // only the threads that `counts`.
    let waits_from = |from: &str,
                      listed: &dyn Fn(&str) -> bool,
                      counts: &dyn Fn(&str) -> Result<bool, StorageError>|
     -> Result<bool, StorageError> {
        for entry in by_thread.range((from, "")..).ctx(tx.path)? {
            let (k, _) = entry.ctx(tx.path)?;
            let (t, id) = k.value();
            if !listed(t) {
                return Ok(false);
            }
            if !counts(t)? {
                continue;
            }
            if let Some(v) = approvals.get(id).ctx(tx.path)? {
                let decode = ApprovalRecord::decode;
                let record =
                    crate::redb::reads::decode(tx.path, tables::APPROVALS, || id.to_string(), v.value(), decode)?;
                if record.status.is_waiting() {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    };
    if waits_from(thread, &|t| t == thread, &|_| Ok(true))? {
        return Ok(true);
    }
    // A child's id starts with `{thread}/` (a second range: threads named `{thread}-x` sort
    // between the two), but so may a thread of its own: a child is one whose parents lead to
    // `thread`.
    let prefix = format!("{thread}/");
    waits_from(&prefix, &|t| t.starts_with(&prefix), &|t| descends_from(tx.path, &threads, t, thread))
}

/// Whether following thread `id`'s parents leads to thread `ancestor`.
fn descends_from(
    path: &Path,
    threads: &impl crate::redb::reads::ByStr,
    id: &str,
    ancestor: &str,
) -> Result<bool, StorageError> {
    let mut at = id.to_string();
    // A child's id extends its parent's: a chain that does not shrink is not one.
    while at.len() > ancestor.len() {
        let parent = match crate::redb::reads::get_str(path, threads, tables::THREADS, &at, ThreadRecord::decode)? {
            Some(record) => record.parent,
            None => None,
        };
        match parent {
            Some(parent) if parent == ancestor => return Ok(true),
            Some(parent) if parent.len() < at.len() => at = parent,
            _ => return Ok(false),
        }
    }
    Ok(false)
}

/// The thread's durable timer, if it has one.
fn timer_of(tx: &Tx<'_>, thread: &str) -> Result<Option<u64>, StorageError> {
    crate::redb::step_commit::timer_of(tx.path, &tx.txn.open_table(tables::TIMER_OF).ctx(tx.path)?, thread)
}

/// Whether one of the approvals `ids` still waits for a human (a record that is gone waits for
/// nobody).
fn awaited_waits(tx: &Tx<'_>, ids: &[String]) -> Result<bool, StorageError> {
    let approvals = tx.txn.open_table(tables::APPROVALS).ctx(tx.path)?;
    for id in ids {
        if let Some(v) = approvals.get(id.as_str()).ctx(tx.path)? {
            let decode = ApprovalRecord::decode;
            let record = crate::redb::reads::decode(tx.path, tables::APPROVALS, || id.clone(), v.value(), decode)?;
            if record.status.is_waiting() {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Whether `thread` may still wait in `cx.interrupt`: its status is `interrupted`, or `failed`
/// (an answer of the wrong shape failed it where it waits).
fn waits_for_answer(tx: &Tx<'_>, thread: &str) -> Result<bool, StorageError> {
    let threads = tx.txn.open_table(tables::THREADS).ctx(tx.path)?;
    let record = crate::redb::reads::thread_record(tx.path, &threads, tx.leases, thread)?;
    Ok(record.is_some_and(|r| {
        matches!(r.status, crate::record::ThreadStatus::Interrupted | crate::record::ThreadStatus::Failed)
    }))
}

/// Whether a run held behind `thread` ([`RunWait::Held`]) still waits at `now`: the thread is
/// `interrupted`, `paused` or `compensating`, or `sleeping` on a timer later than `now`.
fn held_waits(tx: &Tx<'_>, thread: &str, now: u64) -> Result<bool, StorageError> {
    let threads = tx.txn.open_table(tables::THREADS).ctx(tx.path)?;
    let record = crate::redb::reads::thread_record(tx.path, &threads, tx.leases, thread)?;
    Ok(match record.map(|r| r.status) {
        Some(ThreadStatus::Interrupted | ThreadStatus::Paused | ThreadStatus::Compensating) => true,
        Some(ThreadStatus::Sleeping) => timer_of(tx, thread)?.is_none_or(|at| at > now),
        _ => false,
    })
}

pub(crate) fn stage_claim(
    tx: &Tx<'_>,
    graph: &str,
    holder: &str,
    ttl_ms: u64,
    now: u64,
    max: usize,
) -> Result<Vec<QueuedRun>, QueueError> {
    let mut taken: Vec<String> = Vec::new();
    let claimed = claim_candidates(tx, graph, holder, ttl_ms, now, max, &mut taken);
    if claimed.is_err() {
        // The leases live outside the transaction, which the error rolls back: the claims it
        // took are let go with it (held, they would keep every worker from those runs a TTL).
        for thread in &taken {
            let _ = tx.leases.release(thread, holder);
        }
    }
    claimed
}

/// Whether a read that failed on one run's stored bytes (a row, or its thread's timer, approval
/// or record, that does not decode) should skip that run only: a claim goes on with the others
/// rather than stopping every claim of the graph over one damaged record.
fn damaged(e: &StorageError) -> bool {
    matches!(e, StorageError::Decode { .. } | StorageError::Corrupted { .. })
}

/// [`stage_claim`]; `taken` gathers the threads whose lease it took.
fn claim_candidates(
    tx: &Tx<'_>,
    graph: &str,
    holder: &str,
    ttl_ms: u64,
    now: u64,
    max: usize,
    taken: &mut Vec<String>,
) -> Result<Vec<QueuedRun>, QueueError> {
    // A row that does not decode is not claimed (`list_runs` reports it); the others are.
    let mut candidates = {
        let table = tx.txn.open_table(tables::RUN_QUEUE).ctx(tx.path)?;
        readable_rows(tx.path, &table)?
    };
    candidates.retain(|(t, row)| row.graph == graph && tx.leases.get(t).is_none_or(|l| l.expires_at <= now));
    candidates.sort_by(|a, b| (a.1.enqueued_at, &a.0).cmp(&(b.1.enqueued_at, &b.0)));
    let mut claimed = Vec::new();
    for (thread, mut row) in candidates {
        if claimed.len() >= max {
            break;
        }
        let waits = || -> Result<bool, StorageError> {
            if row.control.is_some() {
                return Ok(false);
            }
            Ok(match row.wait {
                RunWait::Approval => {
                    (if row.awaits.is_empty() { approval_waits(tx, &thread)? } else { awaited_waits(tx, &row.awaits)? })
                        && timer_of(tx, &thread)?.is_none_or(|at| at > now)
                }
                RunWait::Timer => timer_of(tx, &thread)?.is_some_and(|at| at > now),
                RunWait::Answer => waits_for_answer(tx, &thread)?,
                RunWait::Held => held_waits(tx, &thread, now)?,
                _ => false,
            })
        };
        match waits() {
            Ok(false) => {}
            Ok(true) => continue,
            // What it waits for cannot be read: not claimed (resuming it would fail on the same
            // bytes); the other runs are.
            Err(e) if damaged(&e) => continue,
            Err(e) => return Err(e.into()),
        }
        let Ok(lease) = tx.leases.acquire(&thread, holder, ttl_ms, now) else { continue };
        taken.push(thread.clone());
        let held = row.wait == RunWait::Held;
        row.wait = RunWait::Ready;
        row.awaits.clear();
        row.holder = Some(holder.to_string());
        row.heartbeat_at = Some(now);
        row.claims = row.claims.saturating_add(1);
        tx.wrote();
        let mut table = tx.txn.open_table(tables::RUN_QUEUE).ctx(tx.path)?;
        table.insert(thread.as_str(), encode(&row).as_slice()).ctx(tx.path)?;
        claimed.push(QueuedRun { held, ..queued(&thread, row, Some(lease)) });
    }
    Ok(claimed)
}

pub(crate) fn stage_heartbeat(tx: &Tx<'_>, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
    let mut table = tx.txn.open_table(tables::RUN_QUEUE).ctx(tx.path)?;
    let mine: Vec<(String, Row)> = readable_rows(tx.path, &table)?
        .into_iter()
        .filter(|(t, row)| row.holder.as_deref() == Some(holder) && tx.leases.is_held_by(t, holder, now))
        .collect();
    let mut controls = Vec::new();
    for (thread, mut row) in mine {
        if let Some(c) = row.control {
            controls.push((thread.clone(), c));
        }
        row.heartbeat_at = Some(now);
        tx.wrote();
        table.insert(thread.as_str(), encode(&row).as_slice()).ctx(tx.path)?;
    }
    Ok(controls)
}

pub(crate) fn stage_settle(tx: &Tx<'_>, thread: &str, holder: &str, settle: &Settle) -> Result<bool, QueueError> {
    let mut table = tx.txn.open_table(tables::RUN_QUEUE).ctx(tx.path)?;
    let row = match table.get(thread).ctx(tx.path)? {
        Some(v) => decode(tx.path, thread, v.value())?,
        None => return Ok(false),
    };
    if row.holder.as_deref() != Some(holder) {
        return Ok(false);
    }
    tx.wrote();
    // Held for the follow-ups behind it; without any, the row leaves the queue.
    let held_for_follow_ups = settle.park == Some(RunWait::Held) && follow_ups::any(tx, thread)?;
    // The run's webhook is told once: by the first settle that writes its delivery.
    let webhook = match (&row.webhook, &settle.webhook) {
        (Some(_), Some(delivery)) => {
            crate::redb::webhooks::insert(tx, thread, delivery)?;
            None
        }
        _ => row.webhook.clone(),
    };
    let row = if settle.keeps(row.control) {
        Row { wait: RunWait::Ready, awaits: Vec::new(), webhook, ..row }
    } else if let Some(wait) = settle.park.filter(|w| *w != RunWait::Held || held_for_follow_ups) {
        let awaits = if wait == RunWait::Approval { settle.awaits.clone() } else { Vec::new() };
        Row { wait, awaits, control: None, webhook, ..row }
    } else if let Some(next) = follow_ups::pop(tx, thread)? {
        // The thread's first follow-up takes the ended run's place.
        row_of(next)
    } else {
        table.remove(thread).ctx(tx.path)?;
        return Ok(true);
    };
    table.insert(thread, encode(&row).as_slice()).ctx(tx.path)?;
    Ok(true)
}

pub(crate) fn stage_wake(tx: &Tx<'_>, thread: &str, wait: RunWait) -> Result<bool, QueueError> {
    let mut table = tx.txn.open_table(tables::RUN_QUEUE).ctx(tx.path)?;
    let row = match table.get(thread).ctx(tx.path)? {
        Some(v) => decode(tx.path, thread, v.value())?,
        None => return Ok(false),
    };
    if row.wait != wait {
        return Ok(false);
    }
    let row = Row { wait: RunWait::Ready, awaits: Vec::new(), ..row };
    tx.wrote();
    table.insert(thread, encode(&row).as_slice()).ctx(tx.path)?;
    Ok(true)
}

pub(crate) fn stage_control(tx: &Tx<'_>, thread: &str, control: RunControl) -> Result<bool, QueueError> {
    let mut table = tx.txn.open_table(tables::RUN_QUEUE).ctx(tx.path)?;
    let row = match table.get(thread).ctx(tx.path)? {
        Some(v) => decode(tx.path, thread, v.value())?,
        None => return Ok(false),
    };
    // A pause makes a parked row claimable, and the run it wakes would stop paused at its
    // first step, out of the queue, while what it waited for (an approval) still waits for it.
    if control == RunControl::Pause && row.wait != RunWait::Ready {
        return Err(QueueError::Waiting { thread: thread.to_string(), wait: row.wait });
    }
    // A pause does not take the place of a cancel: the stronger request stands.
    let control = if row.control == Some(RunControl::Cancel) { RunControl::Cancel } else { control };
    let row = Row { control: Some(control), ..row };
    tx.wrote();
    table.insert(thread, encode(&row).as_slice()).ctx(tx.path)?;
    Ok(true)
}
