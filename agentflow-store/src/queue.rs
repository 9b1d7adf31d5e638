//! The run queue: runs submitted by any process for a pool of workers to claim
//! ([`Store::enqueue_run`](crate::Store::enqueue_run) and the methods after it), and the
//! control flags (cancel, pause) a process that does not run a thread sets on it.
//!
//! A queued run is one row per thread. It stays in the queue while the run is in a worker's
//! hands, so a worker that dies leaves it behind: once the dead worker's lease expires, another
//! worker claims it and resumes the thread from its last checkpoint. A worker removes the row
//! when the run ends ([`Store::settle_run`](crate::Store::settle_run)), or parks it while the
//! thread waits ([`RunWait`]: for a human's approval, its durable timer, or a person's answer);
//! a parked row becomes claimable again once what it waits for is there.
//!
//! With [`RedbStore`](crate::RedbStore) the queue is a table in the file (a submitted run
//! survives a restart) and claims are made by the store's single writer thread; with
//! `PostgresStore` it is a table claimed with `FOR UPDATE SKIP LOCKED`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Ctx, StorageError};
use crate::leases::Leases;
use crate::record::{ApprovalRecord, Lease, Payload, ThreadRecord};
use crate::tables;
use crate::writer::Tx;

/// What a queued run waits for before a worker may claim it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RunWait {
    /// Nothing: a worker may claim it (once no live lease holds its thread).
    Ready,
    /// A human's decision: claimable once none of the approvals of the thread and of its
    /// subgraph children at every level (threads whose [`ThreadRecord::parent`]s lead to it)
    /// is `PENDING` or `OUTCOME_UNKNOWN`, or
    /// once the thread's durable timer is due (the first approval's expiry: the resumed run
    /// expires it).
    Approval,
    /// The thread's durable timer: claimable once the thread has no timer later than now (it
    /// is due, or the thread was woken otherwise and moved on). (Appended last.)
    Timer,
    /// A person's value for the thread's `cx.interrupt`: claimable once
    /// [`Store::wake_run`](crate::Store::wake_run) makes it ready (recording an answer does), or
    /// once the thread's status is neither `interrupted` nor `failed` (a value of the wrong shape
    /// fails a thread where it waits): it moved on without the queue. (Appended last.)
    Answer,
}

impl RunWait {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunWait::Ready => "READY",
            RunWait::Approval => "APPROVAL",
            RunWait::Timer => "TIMER",
            RunWait::Answer => "ANSWER",
        }
    }

    /// The value stored as `name`, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "READY" => Some(RunWait::Ready),
            "APPROVAL" => Some(RunWait::Approval),
            "TIMER" => Some(RunWait::Timer),
            "ANSWER" => Some(RunWait::Answer),
            _ => None,
        }
    }
}

/// A request, from any process, to stop a queued or running thread at its next step boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RunControl {
    /// Stop and leave the queue; the thread ends `CANCELLED`.
    Cancel,
    /// Stop and leave the queue; the thread's status becomes
    /// [`ThreadStatus::Paused`](crate::ThreadStatus::Paused) (nothing is undone) and it is
    /// continued by submitting it again to resume.
    Pause,
}

impl RunControl {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunControl::Cancel => "CANCEL",
            RunControl::Pause => "PAUSE",
        }
    }

    /// The value stored as `name`, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "CANCEL" => Some(RunControl::Cancel),
            "PAUSE" => Some(RunControl::Pause),
            _ => None,
        }
    }
}

/// How a worker ends its claim of a queued run ([`Store::settle_run`](crate::Store::settle_run)):
/// the row leaves the queue ([`Settle::remove`]: the run ended) or is parked until what the
/// thread waits for is there ([`Settle::park`], [`Settle::await_approvals`]).
///
/// A control request set on the row is answered by the same write:
/// - the one the worker acted on ([`Settle::handled`]) is cleared with the claim;
/// - a pause it did not act on is moot and cleared too: the run stopped already, ended or
///   waiting (a pause stops a run at a step boundary, not a wait);
/// - a cancel it did not act on (asked after the worker last read the row's requests, or after
///   the pause it acted on) keeps the row in the queue, claimable at once, so the next claim
///   ends the thread cancelled: a request the store took is never dropped by a settle.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Settle {
    /// `None`: the row leaves the queue; `Some(wait)`: it stays, parked until `wait` is there.
    pub park: Option<RunWait>,
    /// Parked for [`RunWait::Approval`]: the records it waits on (requests and
    /// `OUTCOME_UNKNOWN` records, of the thread or of its subgraph children). Empty: every
    /// waiting record of the thread and its children holds it. Ignored for other waits.
    pub awaits: Vec<String>,
    /// The control request the worker acted on (it stopped the run as asked, or found it moot),
    /// as it read it from the row: a claim's, or a heartbeat's.
    pub handled: Option<RunControl>,
}

impl Settle {
    /// The run ended: the row leaves the queue.
    pub fn remove() -> Self {
        Settle::default()
    }

    /// The thread waits for `wait`: the row stays, parked until it is there.
    pub fn park(wait: RunWait) -> Self {
        Settle { park: Some(wait), ..Settle::default() }
    }

    /// The thread waits for people to decide the records `ids` (see [`Settle::awaits`]): the
    /// row stays, parked until none of them waits for a human, or the thread's timer is due.
    pub fn await_approvals(ids: Vec<String>) -> Self {
        Settle { park: Some(RunWait::Approval), awaits: ids, handled: None }
    }

    /// The same, the worker having acted on `control` (see [`Settle::handled`]).
    #[must_use]
    pub fn handled(mut self, control: Option<RunControl>) -> Self {
        self.handled = control;
        self
    }

    /// What happens to a row whose control request is `control`: `true` when the request
    /// stays, the row kept claimable at once (a cancel the worker did not act on).
    pub(crate) fn keeps(&self, control: Option<RunControl>) -> bool {
        control == Some(RunControl::Cancel) && self.handled != Some(RunControl::Cancel)
    }
}

/// A run to put in the queue ([`Store::enqueue_run`](crate::Store::enqueue_run)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NewRun {
    /// The thread to run.
    pub thread: String,
    /// The graph whose workers may claim it (workers claim by graph name).
    pub graph: String,
    /// The serialised input state of a new thread; `None` resumes the existing thread.
    pub input: Option<Vec<u8>>,
    /// Who the thread belongs to.
    pub owner: String,
    /// When it was submitted (unix millis).
    pub at: u64,
}

impl NewRun {
    /// A run of `graph` on `thread`, submitted at `at`; see the fields.
    pub fn new(thread: &str, graph: &str, input: Option<Vec<u8>>, owner: &str, at: u64) -> Self {
        NewRun { thread: thread.to_string(), graph: graph.to_string(), input, owner: owner.to_string(), at }
    }
}

/// A run in the queue, as listed or claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueuedRun {
    /// The thread.
    pub thread: String,
    /// The graph whose workers may claim it.
    pub graph: String,
    /// The serialised input of a new thread; `None` resumes the existing thread.
    pub input: Option<Vec<u8>>,
    /// Who the thread belongs to.
    pub owner: String,
    /// When it was submitted (unix millis).
    pub enqueued_at: u64,
    /// What it waits for.
    pub wait: RunWait,
    /// A stop requested from any process, if any.
    pub control: Option<RunControl>,
    /// The worker that claimed it last, if any.
    pub holder: Option<String>,
    /// When that worker last reported it alive (unix millis): at the claim, then at every
    /// [`Store::heartbeat_runs`](crate::Store::heartbeat_runs).
    pub heartbeat_at: Option<u64>,
    /// How many times a worker claimed it (more than one: a worker stopped or died with it).
    pub claims: u32,
    /// The thread's lease now (expired or not), if one is held.
    pub lease: Option<Lease>,
}

/// The run queue refused or failed an operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// `enqueue_run` for a thread that is already queued.
    #[error("thread `{thread}` is already queued; wait for its run to end, or cancel it with a control request first")]
    AlreadyQueued {
        /// The thread.
        thread: String,
    },
    /// The store has no run queue (a `Store` implementation outside this crate that does not
    /// override the queue methods).
    #[error("this store has no run queue ({detail}); use RedbStore or PostgresStore to run workers")]
    Unsupported {
        /// Which store.
        detail: String,
    },
    /// The audit entry of a queue operation was refused (nothing was written). (Appended last.)
    #[error(transparent)]
    Audit(#[from] crate::error::AuditError),
    /// A pause for a run parked until what its thread waits for is there (a person, its timer):
    /// it has no step to stop at, and it continues by itself once that is there; a cancel
    /// stops it for good. Nothing was written. (Appended last.)
    #[error(
        "thread `{thread}` waits ({}), so a pause has nothing to stop; it continues by itself once that is \
         there; cancel it to stop it for good",
        wait.as_str()
    )]
    Waiting {
        /// The thread.
        thread: String,
        /// What its parked run waits for.
        wait: RunWait,
    },
}

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
    }
}

use redb::{ReadableTable, TableHandle};

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

pub(crate) fn stage_enqueue(tx: &Tx<'_>, run: &NewRun) -> Result<(), QueueError> {
    let mut table = tx.txn.open_table(tables::RUN_QUEUE).ctx(tx.path)?;
    if table.get(run.thread.as_str()).ctx(tx.path)?.is_some() {
        return Err(QueueError::AlreadyQueued { thread: run.thread.clone() });
    }
    let row = Row {
        v: ROW_VERSION,
        graph: run.graph.clone(),
        input: run.input.clone(),
        owner: run.owner.clone(),
        enqueued_at: run.at,
        wait: RunWait::Ready,
        control: None,
        holder: None,
        heartbeat_at: None,
        claims: 0,
        awaits: Vec::new(),
    };
    tx.wrote();
    table.insert(run.thread.as_str(), encode(&row).as_slice()).ctx(tx.path)?;
    Ok(())
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
                let record = crate::reads::decode(tx.path, tables::APPROVALS, || id.to_string(), v.value(), decode)?;
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
    threads: &impl crate::reads::ByStr,
    id: &str,
    ancestor: &str,
) -> Result<bool, StorageError> {
    let mut at = id.to_string();
    // A child's id extends its parent's: a chain that does not shrink is not one.
    while at.len() > ancestor.len() {
        let parent = match crate::reads::get_str(path, threads, tables::THREADS, &at, ThreadRecord::decode)? {
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
    crate::step_commit::timer_of(tx.path, &tx.txn.open_table(tables::TIMER_OF).ctx(tx.path)?, thread)
}

/// Whether one of the approvals `ids` still waits for a human (a record that is gone waits for
/// nobody).
fn awaited_waits(tx: &Tx<'_>, ids: &[String]) -> Result<bool, StorageError> {
    let approvals = tx.txn.open_table(tables::APPROVALS).ctx(tx.path)?;
    for id in ids {
        if let Some(v) = approvals.get(id.as_str()).ctx(tx.path)? {
            let decode = ApprovalRecord::decode;
            let record = crate::reads::decode(tx.path, tables::APPROVALS, || id.clone(), v.value(), decode)?;
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
    let record = crate::reads::thread_record(tx.path, &threads, tx.leases, thread)?;
    Ok(record.is_some_and(|r| matches!(r.status, crate::ThreadStatus::Interrupted | crate::ThreadStatus::Failed)))
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
        row.wait = RunWait::Ready;
        row.awaits.clear();
        row.holder = Some(holder.to_string());
        row.heartbeat_at = Some(now);
        row.claims = row.claims.saturating_add(1);
        tx.wrote();
        let mut table = tx.txn.open_table(tables::RUN_QUEUE).ctx(tx.path)?;
        table.insert(thread.as_str(), encode(&row).as_slice()).ctx(tx.path)?;
        claimed.push(queued(&thread, row, Some(lease)));
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
    let row = if settle.keeps(row.control) {
        Row { wait: RunWait::Ready, awaits: Vec::new(), ..row }
    } else if let Some(wait) = settle.park {
        let awaits = if wait == RunWait::Approval { settle.awaits.clone() } else { Vec::new() };
        Row { wait, awaits, control: None, ..row }
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
