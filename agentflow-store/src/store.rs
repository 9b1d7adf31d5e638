//! The [`Store`] trait: what the executor needs from persistence, independent of the backend.

use crate::audit_chain::{BrokenLink, ChainReport};
use crate::breaker::{BreakerAnswer, BreakerError, BreakerRecord, BreakerUpdate};
use crate::dump::ThreadDump;
use crate::error::{
    ApprovalError, AuditError, BoxError, CommitError, CompactError, EffectError, LeaseError, PurgeError, ReadError,
    StorageError,
};
pub use crate::listing::Listing;
use crate::queue::{
    FollowUpPlace, FollowUpQueued, NewRun, QueueError, QueuedRun, RunControl, RunWait, ScheduleFire, Settle,
    unsupported,
};
use crate::record::{
    ApprovalPatch, ApprovalRecord, ApprovalStatus, AuditEntry, Checkpoint, CheckpointSummary, CommitReceipt,
    CompactReport, EffectBatch, EffectKey, EffectOutcome, EventId, EventPage, EventWake, Lease, LegalHold,
    NewAuditEntry, PendingWrite, PurgeReport, ScheduleRecord, StateChain, StepCommit, ThreadRecord, Timer,
    WebhookDelivery, WebhookSettle,
};

/// Rebuilds the full state from a [`StateChain`] and returns it serialised; supplied by the
/// executor to [`Store::compact`] because only it knows how to apply deltas.
pub type FoldFn<'a> = dyn Fn(&StateChain) -> Result<Vec<u8>, BoxError> + 'a;

/// Receives the answer of [`Store::commit_step_then`].
pub type CommitCallback = Box<dyn FnOnce(Result<CommitReceipt, CommitError>) + Send>;

type Followed = Result<FollowUpQueued, QueueError>;
/// Persistence for agentflow threads.
///
/// Synchronous and blocking: call it from `spawn_blocking` in async code. Implementations are
/// shared between threads (`Send + Sync`) and must pass [`conformance`](crate#conformance).
/// Times are unix millis supplied by the caller, so tests control the clock.
///
/// Writes that must not be lost on their own (effects, audit entries, approvals) are made with
/// immediate durability; [`Store::commit_step`] takes the durability from the commit. Leases
/// need only live as long as the processes that can see the store: a backend that one process
/// opens at a time (redb) may keep them in memory.
///
/// # Trust boundary
///
/// No method checks who calls it. A store handle (and, for a file-backed store, whoever can
/// open the file) permits everything: reading every thread's state, approvals and audit log;
/// writing checkpoints, pending writes and journaled effect results (a recorded result is what
/// a re-run node gets back instead of running its effect); appending audit entries in any
/// actor's name; and deciding approvals, for any call with any arguments, in anyone's name
/// ([`Store::transition_approval`], or the `approval_transitions` of a [`StepCommit`]).
/// Who may decide what is checked above the store, by `agentflow`'s approval desk and its
/// `Authorizer`. The audit log is chained ([`crate::audit_chain`]): an entry changed, removed
/// or moved after it was written shows in [`Store::verify_audit`], unless whoever changed it
/// also recomputed every later link (keep a verified [`ChainReport::head`] elsewhere to tell). Treat a store handle and its file like a database credential: hand them only
/// to code trusted to decide approvals, and protect the file with filesystem permissions.
pub trait Store: Send + Sync {
    /// Reads a thread, with its current lease.
    fn thread(&self, id: &str) -> Result<Option<ThreadRecord>, ReadError>;

    /// Every thread, ordered by id. Fails on the first record that does not decode; see
    /// [`Store::scan_threads`].
    fn list_threads(&self) -> Result<Vec<ThreadRecord>, ReadError>;

    /// Like [`Store::list_threads`], but a record that does not decode is skipped and reported
    /// in [`Listing::skipped`]. The default lists strictly (nothing skipped).
    fn scan_threads(&self) -> Result<Listing<ThreadRecord>, ReadError> {
        self.list_threads().map(Listing::complete)
    }

    /// The subgraph children of thread `parent`, one level down: the threads whose record names
    /// it as their [`ThreadRecord::parent`], ordered by id. Lenient as
    /// [`Store::scan_threads`]. The default filters [`Store::scan_threads`]; `RedbStore` reads
    /// the ids under `parent/` and `PostgresStore` the rows of `parent`, without a scan.
    fn child_threads(&self, parent: &str) -> Result<Listing<ThreadRecord>, ReadError> {
        let Listing { items, skipped } = self.scan_threads()?;
        let children = items.into_iter().filter(|t| t.parent.as_deref() == Some(parent)).collect();
        Ok(Listing { items: children, skipped })
    }

    /// Persists one super-step atomically (see [`StepCommit`] for what and in which order).
    /// The thread record is written as given, but for what a thread keeps from its first
    /// write: its [`tenant`](ThreadRecord::tenant), and its [`trace`](ThreadRecord::trace) once
    /// a write stored one.
    fn commit_step(&self, commit: StepCommit) -> Result<CommitReceipt, CommitError>;

    /// Like [`Store::commit_step`], but answers by calling `done` instead of
    /// blocking, so an async caller need not hold a thread while the commit
    /// waits for the disk. The default calls `commit_step` and then `done`,
    /// blocking the caller; backends with their own I/O threads override it.
    fn commit_step_then(&self, commit: StepCommit, done: CommitCallback) {
        done(self.commit_step(commit));
    }

    /// Makes every earlier commit durable (an empty immediate commit).
    fn flush(&self) -> Result<(), CommitError>;

    /// One checkpoint with its payload.
    fn checkpoint(&self, thread: &str, seq: u64) -> Result<Option<Checkpoint>, ReadError>;

    /// The checkpoint with the highest seq (the most recently committed).
    fn latest_checkpoint(&self, thread: &str) -> Result<Option<Checkpoint>, ReadError>;

    /// The thread's history, ordered by seq, without snapshots or deltas.
    fn list_checkpoints(&self, thread: &str) -> Result<Vec<CheckpointSummary>, ReadError>;

    /// Walks parent links from `seq` back to the nearest checkpoint with a snapshot. `None` if
    /// `seq` does not exist; [`ReadError::BrokenChain`] if an ancestor is missing.
    fn state_chain(&self, thread: &str, seq: u64) -> Result<Option<StateChain>, ReadError>;

    /// Pending writes recorded against checkpoint `seq`, ordered by (node, idx).
    fn pending_writes(&self, thread: &str, seq: u64) -> Result<Vec<PendingWrite>, ReadError>;

    /// Takes the thread for `holder` until `now + ttl_ms`. Succeeds if there is no lease, if it
    /// expired (`expires_at <= now`), or if `holder` already holds it (then it is extended).
    /// Otherwise [`LeaseError::ThreadBusy`]. The thread record need not exist yet.
    fn acquire_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError>;

    /// Extends `holder`'s lease to `now + ttl_ms`; [`LeaseError::NotHeld`] if another holder
    /// has it or there is none.
    fn renew_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError>;

    /// Drops `holder`'s lease. Releasing when there is no lease succeeds;
    /// [`LeaseError::NotHeld`] if another holder has it. The executor calls it from a `Drop`
    /// (also on an async worker thread and while a runtime shuts down): keep it quick.
    fn release_lease(&self, thread: &str, holder: &str) -> Result<(), LeaseError>;

    /// The journaled result of an effect, if it completed before.
    fn effect(&self, key: &EffectKey) -> Result<Option<Vec<u8>>, ReadError>;

    /// The keys of every effect journaled against checkpoint `seq` of `thread` (results and
    /// markers alike), ordered by node then key (byte order); empty when there are none.
    fn effect_keys(&self, thread: &str, seq: u64) -> Result<Vec<EffectKey>, ReadError>;

    /// Every effect journaled for `thread` with its result (markers alike), ordered by
    /// checkpoint seq, then node and key (byte order): the journal of every checkpoint, kept or
    /// compacted away, and of the seqs past the latest one (a compensation journals its calls
    /// under the last seq). [`Store::dump_thread`] exports it.
    ///
    /// [`RedbStore`](crate::RedbStore) and `PostgresStore` (feature `postgres`) read it in one
    /// scan. The default asks [`Store::effect_keys`] and [`Store::effect`] seq by seq: every seq
    /// from 0 to the latest checkpoint's (past 2^20 of them, the kept checkpoints' alone) and
    /// the last seq.
    fn thread_effects(&self, thread: &str) -> Result<Vec<(EffectKey, Vec<u8>)>, ReadError> {
        let seqs = crate::dump::journal_seqs(self.list_checkpoints(thread)?.iter().map(|c| c.seq).collect());
        let mut effects = Vec::new();
        for seq in seqs {
            for key in self.effect_keys(thread, seq)? {
                if let Some(result) = self.effect(&key)? {
                    effects.push((key, result));
                }
            }
        }
        Ok(effects)
    }

    /// Journals an effect's result, durably. Never overwrites: if a result exists it is returned
    /// as [`EffectOutcome::AlreadyRecorded`] and the new one is dropped.
    fn record_effect(&self, key: &EffectKey, result: &[u8]) -> Result<EffectOutcome, EffectError>;

    /// Journals a batch durably: its effect results (each as [`Store::record_effect`] would,
    /// answering one [`EffectOutcome`] per effect, in order), then its approval compare-and-sets
    /// (each as [`Store::transition_approval`] would, with its audit entry), then its audit
    /// entries. A refused part ([`CommitError::Approval`] for a lost compare-and-set,
    /// [`CommitError::Invalid`] for a part of another thread, [`CommitError::TooDeep`]) refuses
    /// the batch. A batch fenced by a lease holder ([`EffectBatch::fenced_by`]) is refused with
    /// [`CommitError::LeaseLost`] unless that holder has an unexpired lease on the thread at the
    /// batch's `now`, checked inside the transaction: the runtime fences what starts an effect,
    /// so a run that lost its thread does not act. A store that ignores the fence lets it act.
    ///
    /// The whole batch is one transaction: all of it or none, so a crash or a refusal leaves
    /// nothing of it written. The runtime relies on it (an approval's claim rides with its
    /// journal's *started* marker: one without the other would let an approved call run
    /// twice), and [`conformance`](crate#conformance) checks it (the `effect_batch_*` cases).
    /// There is no default made of the other methods, which could not keep that: a `Store`
    /// that wraps another forwards this method to it. [`RedbStore`](crate::RedbStore) and
    /// `PostgresStore` (feature `postgres`) implement it.
    fn commit_effects(&self, batch: EffectBatch) -> Result<Vec<EffectOutcome>, CommitError>;

    /// Appends to the thread's audit log; returns the entry's seq.
    fn append_audit(&self, thread: &str, entry: NewAuditEntry) -> Result<u64, AuditError>;

    /// The thread's audit log, oldest first. Fails on the first entry that does not decode; see
    /// [`Store::scan_audit`].
    fn list_audit(&self, thread: &str) -> Result<Vec<AuditEntry>, ReadError>;

    /// Like [`Store::list_audit`], but an entry that does not decode is skipped and reported in
    /// [`Listing::skipped`] (its seq is missing from `items`). The default lists strictly.
    fn scan_audit(&self, thread: &str) -> Result<Listing<AuditEntry>, ReadError> {
        self.list_audit(thread).map(Listing::complete)
    }

    /// Verifies the thread's audit log against its hash chain (see [`crate::audit_chain`]):
    /// `Ok(Ok(report))` when every entry is as it was written, `Ok(Err(broken))` naming the
    /// first entry that was changed, removed or moved since, and `Err` when the log cannot be
    /// read (an entry that does not decode is an error here, not skipped). An empty log (or an
    /// unknown thread) verifies with no entries. The default reads [`Store::list_audit`].
    fn verify_audit(&self, thread: &str) -> Result<Result<ChainReport, BrokenLink>, ReadError> {
        Ok(crate::audit_chain::verify_chain(thread, &self.list_audit(thread)?))
    }

    /// Creates a `PENDING` approval (or an `OUTCOME_UNKNOWN` record, see
    /// [`ApprovalStatus::is_waiting`]) and appends an `approval.requested` audit entry by `actor`.
    fn put_approval(&self, approval: ApprovalRecord, actor: &str) -> Result<(), ApprovalError>;

    /// Reads an approval.
    fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, ReadError>;

    /// The thread's approvals, ordered by id. Fails on the first record that does not decode;
    /// see [`Store::scan_approvals`].
    fn list_approvals(&self, thread: &str) -> Result<Vec<ApprovalRecord>, ReadError>;

    /// Like [`Store::list_approvals`], but a record that does not decode is skipped and reported
    /// in [`Listing::skipped`]. The default lists strictly.
    fn scan_approvals(&self, thread: &str) -> Result<Listing<ApprovalRecord>, ReadError> {
        self.list_approvals(thread).map(Listing::complete)
    }

    /// Every approval waiting for a human (`PENDING` or `OUTCOME_UNKNOWN`), ordered by id. Fails on
    /// the first record that does not decode; see [`Store::scan_pending_approvals`].
    fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, ReadError>;

    /// Like [`Store::list_pending_approvals`], but a record that does not decode is skipped and
    /// reported in [`Listing::skipped`]. The default lists strictly.
    fn scan_pending_approvals(&self) -> Result<Listing<ApprovalRecord>, ReadError> {
        self.list_pending_approvals().map(Listing::complete)
    }

    /// Compare-and-set of an approval's status in one write transaction, with an
    /// `approval.<to>` audit entry (lowercase status) in the same transaction. Refuses an
    /// illegal move ([`ApprovalError::IllegalTransition`]) and a status other than `expected`
    /// ([`ApprovalError::AlreadyDecided`]): of concurrent callers, exactly one wins.
    ///
    /// This is the raw transition, below any authorization: it checks only the compare-and-set
    /// and that the move is legal. It consults no authorizer, and records `patch.actor`,
    /// `patch.decided_by` and `patch.args` as given, so a caller can approve any pending call,
    /// with any arguments, in anyone's name. People decide approvals through `agentflow`'s
    /// `ApprovalDesk`, which checks its `Authorizer` first; the executor additionally refuses
    /// to run an `APPROVED` record that names no decider (`decided_by`) or has no
    /// `approval.approved` audit entry by that decider for its arguments, which catches
    /// careless writes around the desk but not a caller who fills in both. Holding the store
    /// is a trust boundary (see [the trait docs](Store#trust-boundary)).
    fn transition_approval(
        &self,
        id: &str,
        expected: ApprovalStatus,
        to: ApprovalStatus,
        patch: ApprovalPatch,
    ) -> Result<ApprovalRecord, ApprovalError>;

    /// Retention for a finished thread: keeps the `keep_last` newest checkpoints (at least one)
    /// and drops the older ones with their pending writes; the audit log is kept. A retained
    /// checkpoint whose chain would run into a dropped one gets a snapshot built by `fold` from
    /// its [`StateChain`], so every retained checkpoint stays rebuildable. Then the backing
    /// storage is compacted.
    ///
    /// The effects (the journal) of the dropped checkpoints go too only when the thread's
    /// status allows no resume: [`Completed`](crate::ThreadStatus::Completed) or
    /// [`Compensated`](crate::ThreadStatus::Compensated). A thread that is finished but
    /// resumable ([`is_resumable`](crate::ThreadStatus::is_resumable): `Failed`, `Cancelled`,
    /// `BudgetExhausted`) keeps every effect: its next step may be journaled under an older
    /// checkpoint's seq (a checkpoint appended by a state update keeps the journal of the one it
    /// was made on), and a lost journal would run an approved irreversible call or an effect a
    /// second time. A later compaction, once the thread can no longer be resumed (it was
    /// resumed and completed, say), drops every effect keyed below its oldest retained
    /// checkpoint, those that earlier compactions kept included, even when it drops no
    /// checkpoint itself.
    ///
    /// Refused for an unknown thread ([`CompactError::UnknownThread`]), for one that is not
    /// finished ([`CompactError::NotFinished`], see
    /// [`is_finished`](crate::ThreadStatus::is_finished)) and for one under legal hold, or
    /// whose parent (at any level) is ([`CompactError::Held`]).
    fn compact(&self, thread: &str, keep_last: usize, fold: &FoldFn<'_>) -> Result<CompactReport, CompactError>;

    /// Puts a run in the queue for a worker of `run.graph` to claim, with its follow-up,
    /// fork and webhook fields ([`QueueError::AlreadyQueued`] if the thread is queued already), durably. With an
    /// [idempotency key](NewRun::idempotency), the key is kept in the same transaction, or the
    /// run is refused with [`QueueError::KeyUsed`] (writing nothing) while an earlier start's
    /// key is kept: of concurrent starts with one key, exactly one queues.
    ///
    /// The default has no queue: [`QueueError::Unsupported`].
    fn enqueue_run(&self, run: NewRun) -> Result<(), QueueError> {
        let _ = run;
        Err(unsupported())
    }

    /// Claims at most `max` queued runs of `graph` for `holder`, oldest first, each with a lease
    /// until `now + ttl_ms` (as [`Store::acquire_lease`] would take it). A run is claimable when
    /// no unexpired lease has its thread (not even `holder`'s: a run it holds is running), and it waits for nothing (or it
    /// waits for an approval and none of its thread's approvals waits for a human any more, or
    /// it waits for its thread's timer and the thread has no timer later than `now`, or it waits
    /// for an answer and the thread is neither `interrupted` nor `failed` any more, or a control
    /// request was set on it; [`Store::wake_run`] makes a parked run ready). Of concurrent
    /// claimers (in any process), each run goes to one. The claimed rows record `holder`, `heartbeat_at = now` and one more claim,
    /// and are answered ready, each saying whether it was held when claimed ([`QueuedRun::held`]).
    fn claim_runs(
        &self,
        graph: &str,
        holder: &str,
        ttl_ms: u64,
        now: u64,
        max: usize,
    ) -> Result<Vec<QueuedRun>, QueueError> {
        let _ = (graph, holder, ttl_ms, now, max);
        Err(unsupported())
    }

    /// A worker's heartbeat: sets `heartbeat_at = now` on the queued runs `holder` claimed and
    /// still holds the lease of, and answers the control requests set on them.
    fn heartbeat_runs(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
        let _ = (holder, now);
        Err(unsupported())
    }

    /// Ends `holder`'s claim of `thread` as `settle` says, in one transaction: the row leaves the
    /// queue (or the thread's first follow-up takes its place, ready) or is parked; a control
    /// request set on it is cleared or, a cancel the worker did not act on, kept with the row
    /// claimable at once (see [`Settle`]); and when the row has a webhook and `settle` a
    /// delivery ([`Settle::webhook`]), the delivery is written and the row's webhook cleared.
    /// `true` when the row was `holder`'s; `false`, changing nothing, if the run is not queued
    /// or another holder claimed it since.
    fn settle_run(&self, thread: &str, holder: &str, settle: &Settle) -> Result<bool, QueueError> {
        let _ = (thread, holder, settle);
        Err(unsupported())
    }

    /// Sets a control request on a queued run, from any process: its worker stops it at the next
    /// step boundary (or a worker that claims it next ends it without running it). A pause does
    /// not replace a cancel already set (the cancel stands). `false` if the thread is not queued.
    /// A pause for a run parked until what its thread waits for is there is refused with
    /// [`QueueError::Waiting`], writing nothing: it has no step to stop at, and set, it would
    /// make the row claimable and the woken run stop paused, out of the queue, with what it
    /// waited for (an approval) still waiting.
    fn control_run(&self, thread: &str, control: RunControl) -> Result<bool, QueueError> {
        let _ = (thread, control);
        Err(unsupported())
    }

    /// Makes a queued run parked for `wait` claimable now (its wait becomes
    /// [`RunWait::Ready`]), from any process: how recording an answer to a thread's
    /// `cx.interrupt` hands the thread back to the workers ([`RunWait::Answer`]). `false`,
    /// changing nothing, if the thread is not queued or its run is not parked for `wait`.
    ///
    /// The default has no queue: [`QueueError::Unsupported`].
    fn wake_run(&self, thread: &str, wait: RunWait) -> Result<bool, QueueError> {
        let _ = (thread, wait);
        Err(unsupported())
    }

    /// Every queued run, by thread id, with its worker, last heartbeat and lease; strict (see [`Store::scan_runs`]).
    fn list_runs(&self) -> Result<Vec<QueuedRun>, QueueError> {
        Err(unsupported())
    }

    /// Like [`Store::list_runs`], but a row that does not decode is skipped and reported in
    /// [`Listing::skipped`] (the default lists strictly).
    fn scan_runs(&self) -> Result<Listing<QueuedRun>, QueueError> {
        self.list_runs().map(Listing::complete)
    }

    /// The durable timers due at `until` (`wake_at <= until`), earliest first (ties by thread
    /// id), at most `limit`. A thread's timer is set by a [`StepCommit`] with a
    /// [`wake_at`](StepCommit::wake_at) (required when it records the thread as
    /// [`ThreadStatus::Sleeping`](crate::ThreadStatus::Sleeping)) and replaced by each of the
    /// thread's commits, so a commit without one clears it. `due_timers(u64::MAX, 1)` is the
    /// next timer to fire.
    ///
    /// The default (for backends without timers) lists none: their sleeping threads wake only
    /// when resumed by hand.
    fn due_timers(&self, until: u64, limit: usize) -> Result<Vec<Timer>, ReadError> {
        let _ = (until, limit);
        Ok(Vec::new())
    }

    /// The thread's durable timer (its `wake_at`), if it is sleeping. The default: none.
    fn thread_timer(&self, thread: &str) -> Result<Option<u64>, ReadError> {
        let _ = thread;
        Ok(None)
    }

    /// The circuit breaker of `tool`, if it ever moved (no record: `CLOSED`, no failures). The
    /// default: none.
    fn breaker(&self, tool: &str) -> Result<Option<BreakerRecord>, ReadError> {
        let _ = tool;
        Ok(None)
    }

    /// Moves the circuit breaker of `update.tool` by [`breaker_step`](crate::breaker_step):
    /// read, apply and write in one write transaction, so of concurrent updates (in any process)
    /// none is lost (every failure counts) and of concurrent probes after a cool-down exactly one
    /// is admitted. A change of state appends a `breaker.<state>` audit entry to
    /// `update.thread`'s log by `update.actor`, in the same transaction, durably.
    ///
    /// The default keeps no breakers: [`BreakerError::Unsupported`].
    fn update_breaker(&self, update: BreakerUpdate) -> Result<BreakerAnswer, BreakerError> {
        let _ = update;
        Err(BreakerError::Unsupported {
            detail: "the Store implementation does not override `update_breaker`".to_string(),
        })
    }

    /// Keeps the description of the graph whose fingerprint is `fingerprint`, durably, replacing
    /// one stored before under the same fingerprint. `agentflow` writes one when a thread of a
    /// graph is created (JSON with the graph's name, its Mermaid drawing, the state's fields and
    /// reducers, and the tools), so a tool without the graph's Rust types (the `agentflow`
    /// command-line tool) can draw a thread's graph and read its state. The store treats it as
    /// opaque text.
    ///
    /// The default keeps nothing ([`Store::graph_description`] then answers `None`).
    fn put_graph_description(&self, fingerprint: &str, description: &str) -> Result<(), StorageError> {
        let _ = (fingerprint, description);
        Ok(())
    }

    /// The description stored by [`Store::put_graph_description`] for `fingerprint`, if any.
    /// The default: none.
    fn graph_description(&self, fingerprint: &str) -> Result<Option<String>, ReadError> {
        let _ = fingerprint;
        Ok(None)
    }

    /// Everything this store keeps for `thread` (`None`: no such thread), as
    /// [`Store::restore_thread`] writes it back: its record, timer, checkpoints with their
    /// pending writes, the whole effect journal ([`Store::thread_effects`]), the audit log, the
    /// approvals and the event log as kept, with its ids.
    ///
    /// The built-in backends read it in one read transaction (redb) or one snapshot
    /// (PostgreSQL, `REPEATABLE READ`): the thread at one moment, even while a run commits. The
    /// default reads part by part, which is right for a thread no run changes meanwhile.
    fn dump_thread(&self, thread: &str) -> Result<Option<ThreadDump>, ReadError> {
        let Some(record) = self.thread(thread)? else { return Ok(None) };
        let mut dump = ThreadDump::new(record);
        dump.wake_at = self.thread_timer(thread)?;
        for summary in self.list_checkpoints(thread)? {
            let Some(cp) = self.checkpoint(thread, summary.seq)? else { continue };
            dump.pending_writes.extend(self.pending_writes(thread, cp.seq)?);
            dump.checkpoints.push(cp);
        }
        dump.effects = self.thread_effects(thread)?;
        dump.audit = self.list_audit(thread)?;
        dump.approvals = self.list_approvals(thread)?;
        dump.events = crate::record::whole_log(|after| self.read_events(thread, after, 1_000))?;
        Ok(Some(dump))
    }

    /// Writes a thread read by [`Store::dump_thread`] (from this store or another) as it was,
    /// in one transaction where the backend has them: record, timer, checkpoints, pending
    /// writes, effects, audit log (with its seqs), approvals (with their statuses) and event log
    /// (with its ids: the log's next commit goes on after the newest). Refused, writing nothing,
    /// with [`CommitError::Invalid`] when the thread, or one of its approvals, exists already,
    /// or when the dump does not hang together (a part of another thread, checkpoints or event
    /// ids out of order, a checkpoint with neither its parent nor a snapshot, audit seqs that do
    /// not run 1, 2, .., an id or key that comes twice, a NUL byte in an id, name or key, a time
    /// past `i64::MAX`), and with [`CommitError::TooDeep`] or [`CommitError::Approval`] when JSON
    /// the store reads back nests deeper than a commit accepts.
    ///
    /// The default refuses every dump: the other methods cannot write records as they are.
    fn restore_thread(&self, dump: ThreadDump) -> Result<(), CommitError> {
        Err(CommitError::Invalid {
            thread: dump.thread.id,
            reason: "this Store implementation cannot restore threads (it does not override `restore_thread`)"
                .to_string(),
        })
    }

    /// [`Store::restore_thread`] for several threads (a parent and its subgraph children) as
    /// one: every one of them is written, or none (the first refusal is the answer). A parent
    /// restored without its children would, once resumed, start a child afresh and make its
    /// calls again.
    ///
    /// The default (for backends outside this crate) restores them one by one, so a refusal
    /// part-way leaves the earlier ones written; `RedbStore` and `PostgresStore` write them in
    /// one transaction.
    fn restore_threads(&self, dumps: Vec<ThreadDump>) -> Result<(), CommitError> {
        crate::dump::check_distinct(&dumps)?;
        for dump in dumps {
            self.restore_thread(dump)?;
        }
        Ok(())
    }

    /// [`Store::enqueue_run`] with `entry` appended to the run's thread's audit log (who
    /// submitted it), in the same transaction: both are written or neither.
    ///
    /// The default (for backends outside this crate) makes them two writes, the run first.
    fn enqueue_run_audited(&self, run: NewRun, entry: NewAuditEntry) -> Result<(), QueueError> {
        let thread = run.thread.clone();
        self.enqueue_run(run)?;
        self.append_audit(&thread, entry)?;
        Ok(())
    }

    /// [`Store::wake_run`] with `entry` appended to the thread's audit log (who asked), in the
    /// same transaction, if the run was parked for `wait`; `false`, writing nothing, if not.
    ///
    /// The default (for backends outside this crate) makes them two writes, the wake first.
    fn wake_run_audited(&self, thread: &str, wait: RunWait, entry: NewAuditEntry) -> Result<bool, QueueError> {
        let woken = self.wake_run(thread, wait)?;
        if woken {
            self.append_audit(thread, entry)?;
        }
        Ok(woken)
    }

    /// [`Store::control_run`] with `entry` appended to the thread's audit log (who asked), in
    /// the same transaction, if the thread is queued; `false`, writing nothing, if it is not.
    ///
    /// The default (for backends outside this crate) makes them two writes, the request first.
    fn control_run_audited(&self, thread: &str, control: RunControl, entry: NewAuditEntry) -> Result<bool, QueueError> {
        let set = self.control_run(thread, control)?;
        if set {
            self.append_audit(thread, entry)?;
        }
        Ok(set)
    }
    /// [`Store::settle_run`], then releases `holder`'s lease of `thread` if `holder` still holds
    /// it (a lease another holder took is left alone): how a worker ends a run it claimed. The
    /// answer is `settle_run`'s.
    ///
    /// `PostgresStore` makes both one statement, so one commit and one round trip; the default
    /// (redb, whose leases are in memory, and backends outside this crate) calls the two
    /// methods; a failed release is not returned (the lease then expires by itself).
    fn settle_run_and_release(&self, thread: &str, holder: &str, settle: &Settle) -> Result<bool, QueueError> {
        let settled = self.settle_run(thread, holder, settle);
        let _ = self.release_lease(thread, holder);
        settled
    }

    /// Removes the data of `thread` and of its subgraph children (every level, told by
    /// [`Store::child_threads`]) in one transaction: their checkpoints, pending writes, effect
    /// journal, timers, queued runs (with their follow-ups), webhook deliveries, event logs (a
    /// log's next commit still goes on after its last seq) and the idempotency keys of their
    /// starts; the arguments and conditions of their approvals (the records stay, with status
    /// and decider); and their audit details, replaced by the
    /// [purge marker](crate::audit_chain::PURGED_DETAIL) so [`Store::verify_audit`] still
    /// verifies. The thread records stay as tombstones with status
    /// [`ThreadStatus::Purged`](crate::ThreadStatus::Purged), an empty detail and no
    /// [trace context](crate::ThreadRecord::trace), and `entry` (a `thread.purged` entry: who,
    /// when) is appended to `thread`'s audit log, with the report's counts merged into its detail.
    ///
    /// Refused, changing nothing, with [`PurgeError::Held`] if the thread, one of its children or
    /// a thread above it is under legal hold ([`Store::set_legal_hold`]), and with
    /// [`PurgeError::UnknownThread`] for an unknown thread. Purging a purged thread succeeds (and
    /// removes nothing more). The store does not look at leases: a caller checks that no run
    /// holds the thread.
    ///
    /// What was removed is gone from the live store; its bytes may stay in freed pages (redb,
    /// until reused; [`RedbStore`](crate::RedbStore) compacts its file after a purge that removed
    /// anything) or dead rows (PostgreSQL, until `VACUUM FULL`).
    ///
    /// The default refuses ([`PurgeError::Unsupported`]): a purge made of the other methods
    /// could stop half way.
    fn purge_thread(&self, thread: &str, entry: NewAuditEntry) -> Result<PurgeReport, PurgeError> {
        let _ = (thread, entry);
        Err(PurgeError::Unsupported { detail: "it does not override `purge_thread`".to_string() })
    }

    /// Sets (`Some`) or releases (`None`) the legal hold of `thread`, with `entry` (a
    /// `thread.held` or `thread.released` entry) appended to its audit log in the same
    /// transaction. Setting a hold replaces the one before. [`PurgeError::UnknownThread`] if
    /// there is no such thread.
    ///
    /// The default refuses ([`PurgeError::Unsupported`]).
    fn set_legal_hold(&self, thread: &str, hold: Option<LegalHold>, entry: NewAuditEntry) -> Result<(), PurgeError> {
        let _ = (thread, hold, entry);
        Err(PurgeError::Unsupported { detail: "it does not override `set_legal_hold`".to_string() })
    }

    /// The legal hold of `thread`, if one is set. The default: none (a store without holds
    /// cannot purge either).
    fn legal_hold(&self, thread: &str) -> Result<Option<LegalHold>, ReadError> {
        let _ = thread;
        Ok(None)
    }

    /// Whether this store seals the payloads it keeps (states, updates, pending writes, effect
    /// results, approval arguments, audit details) so that its files or tables do not hold them
    /// in clear: `SealedStore` (feature `encryption`) answers `true`. The runtime allows state
    /// fields marked as credentials only on a store that seals. The default: `false`.
    fn seals_payloads(&self) -> bool {
        false
    }

    /// The file this store keeps its data in, when it is a file one process opens at a time:
    /// [`RedbStore`](crate::RedbStore) answers its path (`None` in memory), and a store that
    /// wraps another passes the wrapped one's answer through. A server uses it to know it holds
    /// the file, and writes the [sidecar](crate::redb_owner) that names it beside the file.
    /// The default: `None` (a store many processes share, as PostgreSQL, or none on disk).
    fn file_path(&self) -> Option<std::path::PathBuf> {
        None
    }

    /// The events of thread `thread`'s log after `after` (from the oldest kept when `None`),
    /// oldest first, at most `limit` (see [`StepCommit::events`](crate::StepCommit::events));
    /// the page also says which are the oldest and newest the log keeps. A thread without a log
    /// (or unknown) reads as an empty page. The default: an empty page (a store without a log).
    fn read_events(&self, thread: &str, after: Option<EventId>, limit: usize) -> Result<EventPage, ReadError> {
        let _ = (thread, after, limit);
        Ok(EventPage::default())
    }

    /// Asks the store to call `wake` with a thread's id after each commit that added events to
    /// its log: [`RedbStore`](crate::RedbStore) for its own commits, `PostgresStore` for the
    /// commits of every process that shares its schema (by `LISTEN`/`NOTIFY`). `false`: the store
    /// cannot, and readers poll [`Store::read_events`]. A store that wraps another passes it
    /// through. The default: `false`.
    fn on_events(&self, wake: EventWake) -> bool {
        let _ = wake;
        false
    }

    /// Queues follow-up run `run` of thread `run.thread` ([`NewRun::follow_up`] set) with `entry`
    /// in its audit log, in one transaction: the thread's queued run when it has none, else at
    /// `place` behind it ([`FollowUpQueued`]); the settle that removes the run puts the first
    /// follow-up in its place ([`Settle::remove`]). The caller checks that the thread exists.
    fn enqueue_follow_up(&self, run: NewRun, entry: NewAuditEntry, place: FollowUpPlace) -> Followed {
        let _ = (run, entry, place);
        Err(unsupported())
    }

    /// [`Store::enqueue_follow_up`], deciding about the thread's run by `rule` in one transaction.
    fn enqueue_follow_up_as(&self, run: NewRun, entry: NewAuditEntry, rule: crate::FollowUpRule) -> Followed {
        let _ = (run, entry, rule);
        Err(unsupported())
    }

    /// The follow-up runs waiting behind thread `thread`'s queued run, first first (ready, never
    /// claimed, no lease).
    fn list_follow_ups(&self, thread: &str) -> Result<Vec<QueuedRun>, QueueError> {
        let _ = thread;
        Err(unsupported())
    }

    /// Keeps cron schedule `schedule`, replacing one of its id.
    fn put_schedule(&self, schedule: ScheduleRecord) -> Result<(), QueueError> {
        let _ = schedule;
        Err(unsupported())
    }

    /// Removes schedule `id`; `false` if there was none.
    fn delete_schedule(&self, id: &str) -> Result<bool, QueueError> {
        let _ = id;
        Err(unsupported())
    }

    /// Schedule `id`, if kept.
    fn schedule(&self, id: &str) -> Result<Option<ScheduleRecord>, QueueError> {
        let _ = id;
        Err(unsupported())
    }

    /// Every schedule, by id; one that does not decode is skipped and reported in [`Listing::skipped`].
    fn scan_schedules(&self) -> Result<Listing<ScheduleRecord>, QueueError> {
        Err(unsupported())
    }

    /// Makes fire `fire` of a schedule ([`ScheduleFire`]) in one transaction: `true` when its
    /// `next_at` was `fire.expected_next` (it moves to `fire.next_at`, the fire is recorded, and
    /// `fire.run` is queued as [`Store::enqueue_run_audited`] queues it); `false`, writing
    /// nothing, when the schedule is gone or moved on (another process fired it). A refused run
    /// ([`QueueError::AlreadyQueued`], [`QueueError::KeyUsed`]) writes nothing either.
    fn fire_schedule(&self, fire: ScheduleFire) -> Result<bool, QueueError> {
        let _ = fire;
        Err(unsupported())
    }

    /// Webhook deliveries due at `now` (pending, `next_at <= now`, held by nobody at `now`), the
    /// longest due first (by `next_at`, then id), at most `limit`; one that does not decode is
    /// skipped (not counted) and reported in [`Listing::skipped`].
    fn due_webhooks(&self, now: u64, limit: usize) -> Result<Listing<WebhookDelivery>, QueueError> {
        let _ = (now, limit);
        Err(unsupported())
    }

    /// Holds delivery `id` for `holder` until `until` for an attempt: `true` if it is pending and
    /// nobody else holds it at `now` (of concurrent claims, one wins).
    fn claim_webhook(&self, id: u64, holder: &str, now: u64, until: u64) -> Result<bool, QueueError> {
        let _ = (id, holder, now, until);
        Err(unsupported())
    }

    /// Records how `holder`'s attempt at pending delivery `id` ended ([`WebhookSettle`]): one more
    /// attempt counted, the hold released. `false`, writing nothing, if `holder` does not hold it.
    fn settle_webhook(&self, id: u64, holder: &str, settle: WebhookSettle) -> Result<bool, QueueError> {
        let _ = (id, holder, settle);
        Err(unsupported())
    }

    /// Thread `thread`'s webhook deliveries, oldest first.
    fn list_webhooks(&self, thread: &str) -> Result<Vec<WebhookDelivery>, QueueError> {
        let _ = thread;
        Err(unsupported())
    }

    /// The control requests set on the queued runs `holder` claimed and still holds the lease of
    /// at `now`, as [`Store::heartbeat_runs`] answers them, without writing anything: a worker
    /// reads them often and writes its heartbeat seldom.
    ///
    /// The default reads [`Store::list_runs`]; `PostgresStore` reads only `holder`'s rows.
    fn run_controls(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
        Ok(crate::queue::controls_of(self.list_runs()?, holder, now))
    }
}
