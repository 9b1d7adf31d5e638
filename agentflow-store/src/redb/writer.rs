//! Group commit: one thread owns every write transaction of a [`RedbStore`](crate::RedbStore).
//!
//! Callers send a job and wait on a reply channel. The writer takes the first queued job, drains
//! whatever else is queued (up to `max_group`), stages every job in one redb write transaction,
//! commits once and answers each caller. The transaction is immediate if any job in the group
//! asks for it, so an `Immediate` caller returns only after its data is durable, and concurrent
//! callers share one fsync.
//!
//! A job that is refused before it wrote anything (a lost compare-and-set, a busy lease, a bad
//! commit) is answered with its error and the rest of the group goes on. A job that fails after
//! it wrote (a storage error mid-way) leaves the transaction unusable: the writer aborts it and
//! runs every job of the group again, each alone in its own transaction, so one bad batch never
//! drops or corrupts the others. If the group's commit itself fails, every job of the group gets
//! that error and none of them is applied.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, TryLockError};
use std::time::{Duration, Instant};

use redb::{Database, WriteTransaction};

use crate::error::StorageError;
use crate::record::Durability;
use crate::redb::error::WithPath;
use crate::redb::leases::Leases;
use crate::redb::step_facts::{Learned, StepFacts, ThreadFacts};

/// State shared by the store handle and its writer thread.
pub(crate) struct Shared {
    pub(crate) db: RwLock<Database>,
    pub(crate) path: PathBuf,
    pub(crate) leases: Leases,
    /// What the step commits made so far know about their threads (see [`crate::redb::step_facts`]).
    pub(crate) facts: StepFacts,
    /// Held by whoever stages and commits a transaction: the writer thread for a group, or a
    /// caller committing its own job inline (see [`commit_inline`]).
    turn: Mutex<()>,
    /// Durable commits made so far, by the writer or inline. redb commits in order, so a durable
    /// commit also makes every earlier non-durable one durable: the writer skips its timed flush
    /// when this moved since its last non-durable commit.
    durable_commits: AtomicU64,
}

impl Shared {
    pub(crate) fn new(db: Database, path: PathBuf) -> Self {
        Shared {
            db: RwLock::new(db),
            path,
            leases: Leases::default(),
            facts: StepFacts::default(),
            turn: Mutex::new(()),
            durable_commits: AtomicU64::new(0),
        }
    }

    /// Waits for the turn to commit. A write made outside the writer (thread compaction) holds
    /// it too, so no job stages meanwhile.
    pub(crate) fn turn(&self) -> MutexGuard<'_, ()> {
        // The guarded value is `()`: a panic while it was held leaves nothing half-updated.
        self.turn.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The turn to commit, if nobody holds it.
    fn try_turn(&self) -> Option<MutexGuard<'_, ()>> {
        match self.turn.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// How many durable commits were made so far.
    pub(crate) fn durable_commits(&self) -> u64 {
        self.durable_commits.load(Ordering::SeqCst)
    }

    /// Counts a durable commit; called with the turn held, right after the commit.
    fn durable_commit_made(&self) {
        self.durable_commits.fetch_add(1, Ordering::SeqCst);
    }

    /// The database, for transactions. Compaction of the file takes it exclusively.
    pub(crate) fn db(&self) -> RwLockReadGuard<'_, Database> {
        // A panic while the lock was held cannot leave the `Database` half-updated.
        self.db.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A write transaction as seen by a job, counting the job's writes.
pub(crate) struct Tx<'a> {
    pub(crate) txn: &'a WriteTransaction,
    pub(crate) path: &'a Path,
    pub(crate) leases: &'a Leases,
    shared_facts: &'a StepFacts,
    /// Thread facts learned in this transaction (see [`crate::redb::step_facts`]).
    learned: Learned,
    writes: Cell<u64>,
}

impl<'a> Tx<'a> {
    fn new(txn: &'a WriteTransaction, shared: &'a Shared) -> Self {
        Tx {
            txn,
            path: shared.path.as_path(),
            leases: &shared.leases,
            shared_facts: &shared.facts,
            learned: Learned::default(),
            writes: Cell::new(0),
        }
    }

    /// Takes what the store knows about `thread` (see [`crate::redb::step_facts`]); a step commit
    /// gives it back with [`Tx::learn_facts`] once staged.
    pub(crate) fn take_facts(&self, thread: &str) -> Option<ThreadFacts> {
        self.learned.take(self.shared_facts, thread)
    }

    /// What `thread` looks like once this transaction commits.
    pub(crate) fn learn_facts(&self, thread: &str, facts: ThreadFacts) {
        self.learned.learn(thread, facts);
    }

    fn forget_facts(&self) {
        self.learned.forget_all(self.shared_facts);
    }

    /// Must be called before a job's first insert or remove: a job refused after writing breaks
    /// the group transaction.
    pub(crate) fn wrote(&self) {
        self.writes.set(self.writes.get() + 1);
    }
}

/// How the transaction that carried a job ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Committed {
    pub(crate) durable: bool,
    pub(crate) group_size: usize,
}

/// A unit of work for the writer thread.
pub(crate) trait Job: Send {
    fn durability(&self) -> Durability;
    /// Whether the job keeps the thread facts of [`crate::redb::step_facts`] exact itself (a step
    /// commit). Before any other job stages, the writer forgets them all.
    fn keeps_facts(&self) -> bool;
    /// Runs the job inside `tx`; `false` if it was refused.
    fn stage(&mut self, tx: &Tx<'_>) -> bool;
    /// Answers the caller: the staged result, or the commit's failure.
    fn finish(self: Box<Self>, commit: Result<Committed, StorageError>);
}

/// A closure job whose result goes back over a channel.
/// Where a job's answer goes: a waiting caller's channel, or a callback.
pub(crate) type Reply<O, E> = Box<dyn FnOnce(Result<(O, Committed), E>) + Send>;

pub(crate) struct OpJob<O, E, F> {
    op: F,
    durability: Durability,
    keeps_facts: bool,
    result: Option<Result<O, E>>,
    reply: Reply<O, E>,
}

impl<O: Send + 'static, E: Send + 'static, F> OpJob<O, E, F> {
    /// A job answered on `reply` (the caller blocks on the receiving end).
    pub(crate) fn new(durability: Durability, op: F, reply: SyncSender<Result<(O, Committed), E>>) -> Self {
        // The caller may have gone away; nothing to do then.
        Self::with_reply(durability, op, Box::new(move |answer| drop(reply.send(answer))))
    }

    /// A job answered by calling `reply` on the writer thread.
    pub(crate) fn with_reply(durability: Durability, op: F, reply: Reply<O, E>) -> Self {
        OpJob { op, durability, keeps_facts: false, result: None, reply }
    }

    /// Marks the job as one that keeps the thread facts exact (only step commits do).
    pub(crate) fn keeping_facts(mut self) -> Self {
        self.keeps_facts = true;
        self
    }
}

impl<O, E, F> Job for OpJob<O, E, F>
where
    O: Send,
    E: From<StorageError> + Send,
    F: FnMut(&Tx<'_>) -> Result<O, E> + Send,
{
    fn durability(&self) -> Durability {
        self.durability
    }

    fn keeps_facts(&self) -> bool {
        self.keeps_facts
    }

    fn stage(&mut self, tx: &Tx<'_>) -> bool {
        let result = (self.op)(tx);
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn finish(self: Box<Self>, commit: Result<Committed, StorageError>) {
        let answer = match (self.result, commit) {
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(out)), Ok(committed)) => Ok((out, committed)),
            (_, Err(e)) => Err(E::from(e)),
            (None, Ok(_)) => return,
        };
        (self.reply)(answer);
    }
}

/// Settings of the writer thread.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriterConfig {
    pub(crate) max_group: usize,
    pub(crate) flush_interval: Option<Duration>,
    /// How long to poll for the next request before going to sleep.
    pub(crate) linger: Duration,
}

/// Polls for a request for up to `window` without sleeping. The next step
/// of a `Sync` run usually arrives within tens of microseconds of its
/// previous commit; catching it here saves waking a sleeping thread, which
/// would otherwise sit on every commit's critical path.
fn linger(rx: &Receiver<Box<dyn Job>>, window: Duration) -> Option<Box<dyn Job>> {
    if window.is_zero() {
        return None;
    }
    let until = Instant::now() + window;
    loop {
        match rx.try_recv() {
            Ok(job) => return Some(job),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if Instant::now() >= until => return None,
            Err(TryRecvError::Empty) => std::hint::spin_loop(),
        }
    }
}

/// The writer thread's loop; returns when every sender is gone, after a final flush.
pub(crate) fn run(shared: &Arc<Shared>, rx: &Receiver<Box<dyn Job>>, config: WriterConfig) {
    // Time of the oldest commit that is not durable yet, and the count of durable commits
    // right after it: a durable commit made since (inline, by a `Sync` step) flushed it.
    let mut unflushed_since: Option<Instant> = None;
    let mut durable_at_unflushed = 0;
    // Poll only right after a commit, when the next request is likely close.
    let mut just_committed = false;
    loop {
        let polled = if just_committed { linger(rx, config.linger) } else { None };
        just_committed = false;
        if unflushed_since.is_some() && shared.durable_commits() != durable_at_unflushed {
            unflushed_since = None;
        }
        let first = match polled {
            Some(job) => job,
            None => match (unflushed_since, config.flush_interval) {
                (Some(since), Some(interval)) => {
                    let wait = interval.saturating_sub(since.elapsed());
                    match rx.recv_timeout(wait) {
                        Ok(job) => job,
                        Err(RecvTimeoutError::Timeout) => {
                            if shared.durable_commits() == durable_at_unflushed {
                                // On failure, try again one interval later rather than spinning.
                                unflushed_since = (!flush(shared)).then(Instant::now);
                            } else {
                                unflushed_since = None;
                            }
                            continue;
                        }
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                _ => match rx.recv() {
                    Ok(job) => job,
                    Err(_) => break,
                },
            },
        };
        let mut group = vec![first];
        while group.len() < config.max_group.max(1) {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let force = matches!(
            (unflushed_since, config.flush_interval),
            (Some(since), Some(interval)) if since.elapsed() >= interval
        );
        // A panic inside redb drops the group's jobs, whose callers then see a closed store;
        // the writer itself keeps serving.
        let outcome = catch_unwind(AssertUnwindSafe(|| run_group(shared, group, force)));
        just_committed = true;
        match outcome {
            Ok(Some(true)) => unflushed_since = None,
            Ok(Some(false)) => {
                if unflushed_since.is_none() {
                    unflushed_since = Some(Instant::now());
                    durable_at_unflushed = shared.durable_commits();
                }
            }
            Ok(None) | Err(_) => {}
        }
    }
    if unflushed_since.is_some() && shared.durable_commits() == durable_at_unflushed {
        flush(shared);
    }
}

/// Stages and commits `op` on the caller's thread, in a durable transaction of its own, if no
/// transaction is being staged or committed right now; otherwise returns `None`, and the caller
/// queues the operation for the writer thread.
///
/// A lone caller (one `Sync` run) then pays one redb commit and nothing else: no job to box, no
/// reply channel, no hand-off to the writer thread and no wake-up of the caller afterwards.
/// Callers that arrive while a commit is under way queue up as before and share the writer's
/// next group commit.
pub(crate) fn commit_inline<O, E, F>(
    shared: &Shared,
    keeps_facts: bool,
    op: &mut F,
) -> Option<Result<(O, Committed), E>>
where
    E: From<StorageError>,
    F: FnMut(&Tx<'_>) -> Result<O, E>,
{
    let turn = shared.try_turn()?;
    let path = shared.path.as_path();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // As in a group: an operation refused after it wrote runs once more in a fresh
        // transaction, whose result is the answer (its own error, unless that transaction could
        // not even begin).
        match commit_one_in_turn(shared, keeps_facts, &mut *op) {
            Err((first, Failed::AfterWriting)) => match commit_one_in_turn(shared, keeps_facts, op) {
                Err((_, Failed::ToBegin)) => Err(first),
                Err((e, _)) => Err(e),
                Ok(done) => Ok(done),
            },
            Err((e, _)) => Err(e),
            Ok(done) => Ok(done),
        }
    }));
    drop(turn);
    Some(outcome.unwrap_or_else(|_| {
        // A panic inside redb: whatever this transaction learned is gone with it.
        shared.facts.clear();
        Err(E::from(StorageError::Closed {
            path: path.to_path_buf(),
            detail: "the commit failed on this request".to_string(),
        }))
    }))
}

/// Where [`commit_one_in_turn`] failed.
enum Failed {
    ToBegin,
    BeforeWriting,
    AfterWriting,
    ToCommit,
}

/// One durable transaction for `op` alone (the caller holds the turn). On failure, also says
/// where it failed.
fn commit_one_in_turn<O, E, F>(shared: &Shared, keeps_facts: bool, op: &mut F) -> Result<(O, Committed), (E, Failed)>
where
    E: From<StorageError>,
    F: FnMut(&Tx<'_>) -> Result<O, E>,
{
    let db = shared.db();
    let path = shared.path.as_path();
    let txn = begin(&db, path, true).map_err(|e| (E::from(e), Failed::ToBegin))?;
    let tx = Tx::new(&txn, shared);
    if !keeps_facts {
        tx.forget_facts();
    }
    let out = match op(&tx) {
        Ok(out) => out,
        Err(e) => {
            let failed = if tx.writes.get() > 0 { Failed::AfterWriting } else { Failed::BeforeWriting };
            drop(tx);
            let _ = txn.abort();
            return Err((e, failed));
        }
    };
    let learned = tx.learned;
    match txn.commit().ctx(path) {
        Ok(()) => {
            learned.commit(&shared.facts);
            shared.durable_commit_made();
            Ok((out, Committed { durable: true, group_size: 1 }))
        }
        Err(e) => {
            shared.facts.clear();
            Err((E::from(e), Failed::ToCommit))
        }
    }
}

/// An empty immediate commit, which makes every earlier commit durable.
fn flush(shared: &Shared) -> bool {
    let _turn = shared.turn();
    let db = shared.db();
    let flushed = match db.begin_write() {
        Ok(txn) => txn.commit().is_ok(),
        Err(_) => false,
    };
    if flushed {
        shared.durable_commit_made();
    }
    flushed
}

/// Stages and commits one group. Returns whether a commit was durable (`None`: nothing
/// committed).
fn run_group(shared: &Shared, group: Vec<Box<dyn Job>>, force_durable: bool) -> Option<bool> {
    let _turn = shared.turn();
    run_group_in_turn(shared, group, force_durable)
}

/// [`run_group`] for a caller that holds the turn.
fn run_group_in_turn(shared: &Shared, group: Vec<Box<dyn Job>>, force_durable: bool) -> Option<bool> {
    let immediate = force_durable || group.iter().any(|j| j.durability() == Durability::Immediate);
    let db = shared.db();
    let path = shared.path.as_path();
    let txn = match begin(&db, path, immediate) {
        Ok(txn) => txn,
        Err(e) => {
            for job in group {
                job.finish(Err(e.clone()));
            }
            return None;
        }
    };
    let tx = Tx::new(&txn, shared);
    let mut staged: Vec<Box<dyn Job>> = Vec::with_capacity(group.len());
    let mut jobs = group.into_iter();
    while let Some(mut job) = jobs.next() {
        let before = tx.writes.get();
        if !job.keeps_facts() {
            tx.forget_facts();
        }
        if job.stage(&tx) {
            staged.push(job);
        } else if tx.writes.get() == before {
            job.finish(Err(closed(path)));
        } else {
            // The refused job left writes behind: redo the group one job at a time.
            drop(tx);
            drop(txn);
            staged.push(job);
            staged.extend(jobs);
            drop(db);
            return run_alone(shared, staged);
        }
    }
    if staged.is_empty() {
        let _ = txn.abort();
        return None;
    }
    let committed = Committed { durable: immediate, group_size: staged.len() };
    let learned = tx.learned;
    let result = txn.commit().ctx(path).map(|()| committed);
    let ok = result.is_ok();
    if ok {
        learned.commit(&shared.facts);
        if immediate {
            shared.durable_commit_made();
        }
    } else {
        shared.facts.clear();
    }
    for job in staged {
        job.finish(result.clone());
    }
    ok.then_some(immediate)
}

/// Runs each job in its own transaction (the caller holds the turn).
fn run_alone(shared: &Shared, jobs: Vec<Box<dyn Job>>) -> Option<bool> {
    let db = shared.db();
    let path = shared.path.as_path();
    let mut all_durable = None;
    for mut job in jobs {
        let immediate = job.durability() == Durability::Immediate;
        let txn = match begin(&db, path, immediate) {
            Ok(txn) => txn,
            Err(e) => {
                job.finish(Err(e));
                continue;
            }
        };
        let tx = Tx::new(&txn, shared);
        if !job.keeps_facts() {
            tx.forget_facts();
        }
        if job.stage(&tx) {
            let learned = tx.learned;
            let result = txn.commit().ctx(path).map(|()| Committed { durable: immediate, group_size: 1 });
            if result.is_ok() {
                learned.commit(&shared.facts);
                if immediate {
                    shared.durable_commit_made();
                }
                all_durable = Some(all_durable.unwrap_or(true) && immediate);
            } else {
                shared.facts.clear();
            }
            job.finish(result);
        } else {
            drop(txn);
            job.finish(Err(closed(path)));
        }
    }
    all_durable
}

fn begin(db: &redb::Database, path: &Path, immediate: bool) -> Result<WriteTransaction, StorageError> {
    let mut txn = db.begin_write().ctx(path)?;
    let durability = if immediate { redb::Durability::Immediate } else { redb::Durability::None };
    txn.set_durability(durability).ctx(path)?;
    Ok(txn)
}

/// Only reaches a caller if a refused job forgot its own error, which `OpJob` never does.
fn closed(path: &Path) -> StorageError {
    StorageError::Closed { path: path.to_path_buf(), detail: "the request was dropped by the writer".to_string() }
}

#[cfg(test)]
mod tests;
