//! A worker whose lease on a claimed thread is lost between the claim and the run's first
//! commit: the commit is refused inside the store, nothing of the run is written, and the
//! worker reports the run as lost (not failed) and leaves the queue row to the new holder.
//!
//! The lease is taken from under the worker by a store that, right after handing out a claim,
//! lets another holder take the thread's lease (as if the claim's lease had expired: the
//! "thief" asks at a time past its expiry). Everything else is a plain `RedbStore` or
//! `PostgresStore` (skipped with one line without `AGENTFLOW_PG_URL`).

#[path = "pg/mod.rs"]
mod pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use agentflow::prelude::*;
use agentflow::{CancellationToken, RedbStore, Store, Worker};
use agentflow_store::{
    ApprovalError, ApprovalPatch, ApprovalRecord, ApprovalStatus, AuditEntry, AuditError, BreakerAnswer, BreakerError,
    BreakerRecord, BreakerUpdate, Checkpoint, CheckpointSummary, CommitCallback, CommitError, CommitReceipt,
    CompactError, CompactReport, EffectBatch, EffectError, EffectKey, EffectOutcome, FoldFn, Lease, LeaseError,
    Listing, NewAuditEntry, NewRun, PendingWrite, QueueError, QueuedRun, ReadError, RunControl, RunWait, StateChain,
    StepCommit, StorageError, ThreadDump, ThreadRecord, Timer,
};
use serde::{Deserialize, Serialize};

const LIMIT: Duration = Duration::from_secs(60);
const THIEF: &str = "thief";

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Count {
    #[reduce(add)]
    pub n: u64,
}

#[derive(Default)]
pub struct Runs {
    nodes: AtomicU32,
}

#[graph(state = Count, deps = Runs, start = one)]
mod two_steps {
    use super::*;

    #[node(goto = [two])]
    async fn one(_s: &Count, deps: &Runs) -> Step<Count> {
        deps.nodes.fetch_add(1, Ordering::SeqCst);
        goto!(two, Count::update().n(1))
    }

    #[node(goto = [END])]
    async fn two(_s: &Count, deps: &Runs) -> Step<Count> {
        deps.nodes.fetch_add(1, Ordering::SeqCst);
        goto!(END, Count::update().n(1))
    }
}

/// A `RedbStore` whose `claim_runs` lets [`THIEF`] take each claimed thread's lease right after
/// the claim, before the claiming worker wrote anything.
struct Stealing {
    inner: Arc<dyn Store>,
    stolen: AtomicBool,
}

impl Store for Stealing {
    fn claim_runs(
        &self,
        graph: &str,
        holder: &str,
        ttl_ms: u64,
        now: u64,
        max: usize,
    ) -> Result<Vec<QueuedRun>, QueueError> {
        let claims = self.inner.claim_runs(graph, holder, ttl_ms, now, max)?;
        for claim in &claims {
            let expired = claim.lease.as_ref().map_or(now, |l| l.expires_at) + 1;
            let lease = self.inner.acquire_lease(&claim.thread, THIEF, 600_000, expired);
            assert!(lease.is_ok(), "the thief takes the expired-looking lease: {lease:?}");
            self.stolen.store(true, Ordering::SeqCst);
        }
        Ok(claims)
    }

    fn thread(&self, id: &str) -> Result<Option<ThreadRecord>, ReadError> {
        self.inner.thread(id)
    }
    fn list_threads(&self) -> Result<Vec<ThreadRecord>, ReadError> {
        self.inner.list_threads()
    }
    fn scan_threads(&self) -> Result<Listing<ThreadRecord>, ReadError> {
        self.inner.scan_threads()
    }
    fn commit_step(&self, commit: StepCommit) -> Result<CommitReceipt, CommitError> {
        self.inner.commit_step(commit)
    }
    fn commit_step_then(&self, commit: StepCommit, done: CommitCallback) {
        self.inner.commit_step_then(commit, done)
    }
    fn flush(&self) -> Result<(), CommitError> {
        self.inner.flush()
    }
    fn checkpoint(&self, thread: &str, seq: u64) -> Result<Option<Checkpoint>, ReadError> {
        self.inner.checkpoint(thread, seq)
    }
    fn latest_checkpoint(&self, thread: &str) -> Result<Option<Checkpoint>, ReadError> {
        self.inner.latest_checkpoint(thread)
    }
    fn list_checkpoints(&self, thread: &str) -> Result<Vec<CheckpointSummary>, ReadError> {
        self.inner.list_checkpoints(thread)
    }
    fn state_chain(&self, thread: &str, seq: u64) -> Result<Option<StateChain>, ReadError> {
        self.inner.state_chain(thread, seq)
    }
    fn pending_writes(&self, thread: &str, seq: u64) -> Result<Vec<PendingWrite>, ReadError> {
        self.inner.pending_writes(thread, seq)
    }
    fn acquire_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        self.inner.acquire_lease(thread, holder, ttl_ms, now)
    }
    fn renew_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        self.inner.renew_lease(thread, holder, ttl_ms, now)
    }
    fn release_lease(&self, thread: &str, holder: &str) -> Result<(), LeaseError> {
        self.inner.release_lease(thread, holder)
    }
    fn effect(&self, key: &EffectKey) -> Result<Option<Vec<u8>>, ReadError> {
        self.inner.effect(key)
    }
    fn effect_keys(&self, thread: &str, seq: u64) -> Result<Vec<EffectKey>, ReadError> {
        self.inner.effect_keys(thread, seq)
    }
    fn record_effect(&self, key: &EffectKey, result: &[u8]) -> Result<EffectOutcome, EffectError> {
        self.inner.record_effect(key, result)
    }
    fn commit_effects(&self, batch: EffectBatch) -> Result<Vec<EffectOutcome>, CommitError> {
        self.inner.commit_effects(batch)
    }
    fn append_audit(&self, thread: &str, entry: NewAuditEntry) -> Result<u64, AuditError> {
        self.inner.append_audit(thread, entry)
    }
    fn list_audit(&self, thread: &str) -> Result<Vec<AuditEntry>, ReadError> {
        self.inner.list_audit(thread)
    }
    fn scan_audit(&self, thread: &str) -> Result<Listing<AuditEntry>, ReadError> {
        self.inner.scan_audit(thread)
    }
    fn put_approval(&self, approval: ApprovalRecord, actor: &str) -> Result<(), ApprovalError> {
        self.inner.put_approval(approval, actor)
    }
    fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, ReadError> {
        self.inner.approval(id)
    }
    fn list_approvals(&self, thread: &str) -> Result<Vec<ApprovalRecord>, ReadError> {
        self.inner.list_approvals(thread)
    }
    fn scan_approvals(&self, thread: &str) -> Result<Listing<ApprovalRecord>, ReadError> {
        self.inner.scan_approvals(thread)
    }
    fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, ReadError> {
        self.inner.list_pending_approvals()
    }
    fn scan_pending_approvals(&self) -> Result<Listing<ApprovalRecord>, ReadError> {
        self.inner.scan_pending_approvals()
    }
    fn transition_approval(
        &self,
        id: &str,
        expected: ApprovalStatus,
        to: ApprovalStatus,
        patch: ApprovalPatch,
    ) -> Result<ApprovalRecord, ApprovalError> {
        self.inner.transition_approval(id, expected, to, patch)
    }
    fn compact(&self, thread: &str, keep_last: usize, fold: &FoldFn<'_>) -> Result<CompactReport, CompactError> {
        self.inner.compact(thread, keep_last, fold)
    }
    fn enqueue_run(&self, run: NewRun) -> Result<(), QueueError> {
        self.inner.enqueue_run(run)
    }
    fn heartbeat_runs(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
        self.inner.heartbeat_runs(holder, now)
    }
    fn settle_run(&self, thread: &str, holder: &str, park: Option<RunWait>) -> Result<bool, QueueError> {
        self.inner.settle_run(thread, holder, park)
    }
    fn control_run(&self, thread: &str, control: RunControl) -> Result<bool, QueueError> {
        self.inner.control_run(thread, control)
    }
    fn wake_run(&self, thread: &str, wait: RunWait) -> Result<bool, QueueError> {
        self.inner.wake_run(thread, wait)
    }
    fn list_runs(&self) -> Result<Vec<QueuedRun>, QueueError> {
        self.inner.list_runs()
    }
    fn due_timers(&self, until: u64, limit: usize) -> Result<Vec<Timer>, ReadError> {
        self.inner.due_timers(until, limit)
    }
    fn thread_timer(&self, thread: &str) -> Result<Option<u64>, ReadError> {
        self.inner.thread_timer(thread)
    }
    fn breaker(&self, tool: &str) -> Result<Option<BreakerRecord>, ReadError> {
        self.inner.breaker(tool)
    }
    fn update_breaker(&self, update: BreakerUpdate) -> Result<BreakerAnswer, BreakerError> {
        self.inner.update_breaker(update)
    }
    fn put_graph_description(&self, fingerprint: &str, description: &str) -> Result<(), StorageError> {
        self.inner.put_graph_description(fingerprint, description)
    }
    fn graph_description(&self, fingerprint: &str) -> Result<Option<String>, ReadError> {
        self.inner.graph_description(fingerprint)
    }
    fn restore_thread(&self, dump: ThreadDump) -> Result<(), CommitError> {
        self.inner.restore_thread(dump)
    }
    fn enqueue_run_audited(&self, run: NewRun, entry: NewAuditEntry) -> Result<(), QueueError> {
        self.inner.enqueue_run_audited(run, entry)
    }
    fn control_run_audited(&self, thread: &str, control: RunControl, entry: NewAuditEntry) -> Result<bool, QueueError> {
        self.inner.control_run_audited(thread, control, entry)
    }
    fn settle_run_and_release(&self, thread: &str, holder: &str, park: Option<RunWait>) -> Result<bool, QueueError> {
        self.inner.settle_run_and_release(thread, holder, park)
    }
    fn run_controls(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
        self.inner.run_controls(holder, now)
    }
}

async fn lost_between_the_claim_and_the_first_commit(inner: Arc<dyn Store>) {
    let store = Arc::new(Stealing { inner, stolen: AtomicBool::new(false) });
    let app = two_steps::graph().app().store(Arc::clone(&store) as Arc<dyn Store>);
    app.submit("t", &Count::default()).unwrap();

    let deps = Arc::new(Runs::default());
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&deps)).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let began = std::time::Instant::now();
    while !store.stolen.load(Ordering::SeqCst) {
        assert!(began.elapsed() < LIMIT, "timed out waiting for the claim");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Shutdown lets the claimed run end first, then returns the report.
    stop.cancel();
    let report = tokio::time::timeout(LIMIT, handle).await.expect("the worker stops").unwrap().unwrap();

    // The run's first commit (the input checkpoint) was refused: no thread, no node ran.
    assert_eq!(app.thread("t").unwrap(), None, "nothing of the run was committed");
    assert_eq!(deps.nodes.load(Ordering::SeqCst), 0, "no node ran");
    // Reported as a lost lease, not as a failure.
    assert_eq!((report.claimed, report.lost, report.failed), (1, 1, 0), "{report:?}");
    // The thread's lease is still the thief's: the worker neither released nor overwrote it.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let taken = store.inner.acquire_lease("t", "someone-else", 1_000, now);
    assert!(
        matches!(&taken, Err(LeaseError::ThreadBusy { holder, .. }) if holder == THIEF),
        "the lease stays with the holder that took it: {taken:?}"
    );
    // The run is still queued, for whoever holds the thread now.
    assert_eq!(app.live_runs().unwrap().iter().filter(|r| r.thread == "t").count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_lease_lost_between_the_claim_and_the_first_commit_writes_nothing_and_is_reported_lost() {
    lost_between_the_claim_and_the_first_commit(Arc::new(RedbStore::in_memory().expect("in-memory store"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_lease_lost_between_the_claim_and_the_first_commit_writes_nothing_and_is_reported_lost() {
    let Some(url) = pg::pg_url() else { return };
    let schema = format!("worker_lease_lost_{}", std::process::id());
    let store =
        agentflow_store::PostgresStore::builder().schema(&schema).open(&url).expect("open the PostgreSQL store");
    lost_between_the_claim_and_the_first_commit(Arc::new(store)).await;
}
