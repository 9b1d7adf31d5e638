//! The store a crash test runs on: it forwards every call to a real store, names each write by
//! its items ([`super::boundary`]), and, aimed at one item, takes a snapshot of what is
//! committed there (without the write, or with it) and then fails that call and every later
//! one: the process died there.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use agentflow_store::{
    ApprovalError, ApprovalPatch, ApprovalRecord, ApprovalStatus, AuditEntry, AuditError, BreakerAnswer, BreakerError,
    BreakerRecord, BreakerUpdate, Checkpoint, CheckpointSummary, CommitError, CommitReceipt, CompactError,
    CompactReport, EffectBatch, EffectError, EffectKey, EffectOutcome, FoldFn, Lease, LeaseError, LegalHold, Listing,
    NewAuditEntry, NewRun, PendingWrite, PurgeError, PurgeReport, QueueError, QueuedRun, ReadError, RunControl,
    RunWait, Settle, StateChain, StepCommit, StorageError, Store, ThreadDump, ThreadRecord, Timer,
};
use tokio::sync::Notify;

use super::boundary::{self, Item, Numbering};
use super::report::{Boundary, Cut};

/// Where the store is aimed.
#[derive(Debug, Clone)]
pub(crate) enum Aim {
    /// Records every write's items (the uncut run).
    Record,
    /// Dies at the write carrying this item.
    At(String, Cut),
    /// Forwards (a resume after a cut).
    Forward,
}

/// What was committed before the cut: each write the run was told committed, and the cut's
/// own write when the cut is after it.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Acked {
    /// `(thread, seq, node, idx)` of each pending write kept.
    pub(crate) writes: BTreeSet<(String, u64, String, u32)>,
    /// `(thread, seq)` of each step whose commit made a checkpoint on checkpoint `seq`.
    pub(crate) steps: BTreeSet<(String, u64)>,
}

impl Acked {
    fn add(&mut self, thread: &str, writes: &[PendingWrite], parent: Option<u64>) {
        for w in writes {
            self.writes.insert((thread.to_string(), w.seq, w.node.clone(), w.idx));
        }
        if let Some(parent) = parent {
            self.steps.insert((thread.to_string(), parent));
        }
    }

    /// Whether the write of `node` (instance `idx`) of the step on `seq` was committed.
    pub(crate) fn holds(&self, thread: &str, seq: u64, node: &str, idx: u32) -> bool {
        self.steps.contains(&(thread.to_string(), seq))
            || self.writes.contains(&(thread.to_string(), seq, node.to_string(), idx))
    }
}

#[derive(Default)]
struct Watch {
    numbering: Numbering,
    boundaries: Vec<Boundary>,
    acked: Acked,
    dead: bool,
    snapshot: Option<Result<Vec<ThreadDump>, String>>,
}

/// What the store does at the cut.
pub(crate) enum OnCut {
    /// Takes a snapshot of the inner store, then fails every call: the process "died".
    Snapshot,
    /// Hands what was committed to the closure, then kills the process (SIGKILL).
    Kill(Box<dyn Fn(&Acked) + Send + Sync>),
}

/// See the module docs.
pub(crate) struct CrashStore {
    inner: Arc<dyn Store>,
    aim: Aim,
    on_cut: OnCut,
    watch: Mutex<Watch>,
    /// Told once the process "died".
    pub(crate) died: Arc<Notify>,
}

/// The error every call gets once the process died.
pub(crate) fn sentinel() -> StorageError {
    StorageError::Closed {
        path: PathBuf::from("crash-matrix"),
        detail: "the process died here (a crash test cut it off)".to_string(),
    }
}

/// Everything `store` holds, thread by thread (parents and subgraph children alike).
pub(crate) fn snapshot(store: &dyn Store) -> Result<Vec<ThreadDump>, String> {
    let threads = store.list_threads().map_err(|e| e.to_string())?;
    let mut dumps = Vec::with_capacity(threads.len());
    for t in threads {
        if let Some(d) = store.dump_thread(&t.id).map_err(|e| e.to_string())? {
            dumps.push(d);
        }
    }
    Ok(dumps)
}

enum Pass {
    /// Forward the call.
    Go,
    /// Forward it, then die (the cut is after it).
    GoThenDie,
    /// Die now, without it.
    Die,
}

impl CrashStore {
    pub(crate) fn new(inner: Arc<dyn Store>, aim: Aim) -> Self {
        CrashStore::with(inner, aim, OnCut::Snapshot)
    }

    pub(crate) fn with(inner: Arc<dyn Store>, aim: Aim, on_cut: OnCut) -> Self {
        CrashStore { inner, aim, on_cut, watch: Mutex::new(Watch::default()), died: Arc::new(Notify::new()) }
    }

    fn watch(&self) -> std::sync::MutexGuard<'_, Watch> {
        self.watch.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The boundaries recorded so far (under [`Aim::Record`]).
    pub(crate) fn boundaries(&self) -> Vec<Boundary> {
        self.watch().boundaries.clone()
    }

    /// What was committed and told committed before the cut.
    pub(crate) fn acked(&self) -> Acked {
        self.watch().acked.clone()
    }

    /// Whether the cut was reached; the snapshot taken there.
    pub(crate) fn take_snapshot(&self) -> Option<Result<Vec<ThreadDump>, String>> {
        self.watch().snapshot.take()
    }

    fn alive(&self) -> Result<(), StorageError> {
        if self.watch().dead { Err(sentinel()) } else { Ok(()) }
    }

    /// Decides what to do with a write carrying `items`.
    fn pass(&self, items: Vec<Item>) -> Result<Pass, StorageError> {
        let mut w = self.watch();
        if w.dead {
            return Err(sentinel());
        }
        let items = w.numbering.number(items);
        match &self.aim {
            Aim::Record => {
                if let Some(first) = items.first() {
                    w.boundaries.push(Boundary {
                        key: first.key.clone(),
                        kind: first.kind,
                        items: items.iter().map(|i| i.key.clone()).collect(),
                    });
                }
                Ok(Pass::Go)
            }
            Aim::At(target, cut) if items.iter().any(|i| &i.key == target) => {
                Ok(if *cut == Cut::Before { Pass::Die } else { Pass::GoThenDie })
            }
            _ => Ok(Pass::Go),
        }
    }

    fn die(&self) {
        if let OnCut::Kill(hand_over) = &self.on_cut {
            hand_over(&self.watch().acked);
            kill_this_process();
        }
        let snap = snapshot(&*self.inner);
        let mut w = self.watch();
        w.dead = true;
        w.snapshot = Some(snap);
        drop(w);
        self.died.notify_one();
    }

    /// Runs a write through the aim: `write` forwards it, `ok` notes what an answer of `Ok`
    /// committed.
    fn write<T, E: From<StorageError>>(
        &self,
        items: Vec<Item>,
        write: impl FnOnce() -> Result<T, E>,
        ok: impl FnOnce(&mut Acked),
    ) -> Result<T, E> {
        match self.pass(items)? {
            Pass::Die => {
                self.die();
                Err(sentinel().into())
            }
            Pass::GoThenDie => {
                // Committed, though the run is never told: a resume must not do it again.
                if write().is_ok() {
                    ok(&mut self.watch().acked);
                }
                self.die();
                Err(sentinel().into())
            }
            Pass::Go => {
                let answer = write();
                if answer.is_ok() {
                    ok(&mut self.watch().acked);
                }
                answer
            }
        }
    }
}

/// Forwards reads (and writes that are no boundary) to the inner store, while alive.
macro_rules! forward {
    ($( fn $name:ident(&self $(, $arg:ident : $ty:ty)*) -> $ret:ty; )*) => {
        $(
            fn $name(&self $(, $arg: $ty)*) -> $ret {
                self.alive()?;
                self.inner.$name($($arg),*)
            }
        )*
    };
}

impl Store for CrashStore {
    forward! {
        fn thread(&self, id: &str) -> Result<Option<ThreadRecord>, ReadError>;
        fn list_threads(&self) -> Result<Vec<ThreadRecord>, ReadError>;
        fn scan_threads(&self) -> Result<Listing<ThreadRecord>, ReadError>;
        fn child_threads(&self, parent: &str) -> Result<Listing<ThreadRecord>, ReadError>;
        fn flush(&self) -> Result<(), CommitError>;
        fn checkpoint(&self, thread: &str, seq: u64) -> Result<Option<Checkpoint>, ReadError>;
        fn latest_checkpoint(&self, thread: &str) -> Result<Option<Checkpoint>, ReadError>;
        fn list_checkpoints(&self, thread: &str) -> Result<Vec<CheckpointSummary>, ReadError>;
        fn state_chain(&self, thread: &str, seq: u64) -> Result<Option<StateChain>, ReadError>;
        fn pending_writes(&self, thread: &str, seq: u64) -> Result<Vec<PendingWrite>, ReadError>;
        fn acquire_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError>;
        fn renew_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError>;
        fn release_lease(&self, thread: &str, holder: &str) -> Result<(), LeaseError>;
        fn effect(&self, key: &EffectKey) -> Result<Option<Vec<u8>>, ReadError>;
        fn effect_keys(&self, thread: &str, seq: u64) -> Result<Vec<EffectKey>, ReadError>;
        fn thread_effects(&self, thread: &str) -> Result<Vec<(EffectKey, Vec<u8>)>, ReadError>;
        fn list_audit(&self, thread: &str) -> Result<Vec<AuditEntry>, ReadError>;
        fn scan_audit(&self, thread: &str) -> Result<Listing<AuditEntry>, ReadError>;
        fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, ReadError>;
        fn list_approvals(&self, thread: &str) -> Result<Vec<ApprovalRecord>, ReadError>;
        fn scan_approvals(&self, thread: &str) -> Result<Listing<ApprovalRecord>, ReadError>;
        fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, ReadError>;
        fn scan_pending_approvals(&self) -> Result<Listing<ApprovalRecord>, ReadError>;
        fn enqueue_run(&self, run: NewRun) -> Result<(), QueueError>;
        fn claim_runs(&self, graph: &str, holder: &str, ttl_ms: u64, now: u64, max: usize) -> Result<Vec<QueuedRun>, QueueError>;
        fn heartbeat_runs(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError>;
        fn settle_run(&self, thread: &str, holder: &str, settle: &Settle) -> Result<bool, QueueError>;
        fn control_run(&self, thread: &str, control: RunControl) -> Result<bool, QueueError>;
        fn wake_run(&self, thread: &str, wait: RunWait) -> Result<bool, QueueError>;
        fn list_runs(&self) -> Result<Vec<QueuedRun>, QueueError>;
        fn scan_runs(&self) -> Result<Listing<QueuedRun>, QueueError>;
        fn due_timers(&self, until: u64, limit: usize) -> Result<Vec<Timer>, ReadError>;
        fn thread_timer(&self, thread: &str) -> Result<Option<u64>, ReadError>;
        fn breaker(&self, tool: &str) -> Result<Option<BreakerRecord>, ReadError>;
        fn update_breaker(&self, update: BreakerUpdate) -> Result<BreakerAnswer, BreakerError>;
        fn put_graph_description(&self, fingerprint: &str, description: &str) -> Result<(), StorageError>;
        fn graph_description(&self, fingerprint: &str) -> Result<Option<String>, ReadError>;
        fn dump_thread(&self, thread: &str) -> Result<Option<ThreadDump>, ReadError>;
        fn restore_thread(&self, dump: ThreadDump) -> Result<(), CommitError>;
        fn restore_threads(&self, dumps: Vec<ThreadDump>) -> Result<(), CommitError>;
        fn enqueue_run_audited(&self, run: NewRun, entry: NewAuditEntry) -> Result<(), QueueError>;
        fn wake_run_audited(&self, thread: &str, wait: RunWait, entry: NewAuditEntry) -> Result<bool, QueueError>;
        fn control_run_audited(&self, thread: &str, control: RunControl, entry: NewAuditEntry) -> Result<bool, QueueError>;
        fn settle_run_and_release(&self, thread: &str, holder: &str, settle: &Settle) -> Result<bool, QueueError>;
        fn run_controls(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError>;
        fn purge_thread(&self, thread: &str, entry: NewAuditEntry) -> Result<PurgeReport, PurgeError>;
        fn set_legal_hold(&self, thread: &str, hold: Option<LegalHold>, entry: NewAuditEntry) -> Result<(), PurgeError>;
        fn legal_hold(&self, thread: &str) -> Result<Option<LegalHold>, ReadError>;
        fn read_events(&self, thread: &str, after: Option<agentflow_store::EventId>, limit: usize) -> Result<agentflow_store::EventPage, ReadError>;
        fn enqueue_follow_up(&self, run: NewRun, entry: NewAuditEntry, place: agentflow_store::FollowUpPlace) -> Result<agentflow_store::FollowUpQueued, QueueError>;
        fn enqueue_follow_up_as(&self, run: NewRun, entry: NewAuditEntry, rule: agentflow_store::FollowUpRule) -> Result<agentflow_store::FollowUpQueued, QueueError>;
        fn list_follow_ups(&self, thread: &str) -> Result<Vec<QueuedRun>, QueueError>;
        fn put_schedule(&self, schedule: agentflow_store::ScheduleRecord) -> Result<(), QueueError>;
        fn delete_schedule(&self, id: &str) -> Result<bool, QueueError>;
        fn schedule(&self, id: &str) -> Result<Option<agentflow_store::ScheduleRecord>, QueueError>;
        fn scan_schedules(&self) -> Result<Listing<agentflow_store::ScheduleRecord>, QueueError>;
        fn fire_schedule(&self, fire: agentflow_store::ScheduleFire) -> Result<bool, QueueError>;
        fn due_webhooks(&self, now: u64, limit: usize) -> Result<Listing<agentflow_store::WebhookDelivery>, QueueError>;
        fn claim_webhook(&self, id: u64, holder: &str, now: u64, until: u64) -> Result<bool, QueueError>;
        fn settle_webhook(&self, id: u64, holder: &str, settle: agentflow_store::WebhookSettle) -> Result<bool, QueueError>;
        fn list_webhooks(&self, thread: &str) -> Result<Vec<agentflow_store::WebhookDelivery>, QueueError>;
    }

    fn seals_payloads(&self) -> bool {
        self.inner.seals_payloads()
    }

    fn file_path(&self) -> Option<std::path::PathBuf> {
        self.inner.file_path()
    }

    fn on_events(&self, wake: agentflow_store::EventWake) -> bool {
        self.inner.on_events(wake)
    }

    fn compact(&self, thread: &str, keep_last: usize, fold: &FoldFn<'_>) -> Result<CompactReport, CompactError> {
        self.alive()?;
        self.inner.compact(thread, keep_last, fold)
    }

    fn commit_step(&self, commit: StepCommit) -> Result<CommitReceipt, CommitError> {
        let (thread, parent) = (commit.thread.id.clone(), commit.checkpoint.as_ref().and_then(|c| c.parent));
        let writes = commit.pending_writes.clone();
        let made_checkpoint = commit.checkpoint.is_some();
        self.write(
            boundary::step_items(&commit),
            || self.inner.commit_step(commit),
            |acked| {
                // The step's nodes' writes go with a pause's or a failure's commit: kept, they
                // are done. A checkpoint made on `parent` ends the step that ran from it.
                acked.add(&thread, &writes, parent.filter(|_| made_checkpoint));
            },
        )
    }

    fn commit_effects(&self, batch: EffectBatch) -> Result<Vec<EffectOutcome>, CommitError> {
        let thread = batch.thread.clone();
        let writes = batch.pending_writes.clone();
        self.write(
            boundary::batch_items(&batch),
            || self.inner.commit_effects(batch),
            |acked| acked.add(&thread, &writes, None),
        )
    }

    fn record_effect(&self, key: &EffectKey, result: &[u8]) -> Result<EffectOutcome, EffectError> {
        self.write(vec![boundary::effect_item(key)], || self.inner.record_effect(key, result), |_| {})
    }

    fn append_audit(&self, thread: &str, entry: NewAuditEntry) -> Result<u64, AuditError> {
        self.write(vec![boundary::audit(thread, &entry)], || self.inner.append_audit(thread, entry), |_| {})
    }

    fn put_approval(&self, approval: ApprovalRecord, actor: &str) -> Result<(), ApprovalError> {
        self.write(vec![boundary::requested(&approval)], || self.inner.put_approval(approval, actor), |_| {})
    }

    fn transition_approval(
        &self,
        id: &str,
        expected: ApprovalStatus,
        to: ApprovalStatus,
        patch: ApprovalPatch,
    ) -> Result<ApprovalRecord, ApprovalError> {
        self.write(
            vec![boundary::approval_move(id, to.as_str())],
            || self.inner.transition_approval(id, expected, to, patch),
            |_| {},
        )
    }
}

/// Kills this process with SIGKILL: nothing runs after it, no destructor, no flush.
fn kill_this_process() -> ! {
    let pid = std::process::id().to_string();
    let _ = std::process::Command::new("kill").args(["-KILL", &pid]).status();
    // `kill` is not there (or failed): abort, which is as abrupt for the store.
    std::process::abort()
}
