//! The provided methods of `Store` as a backend gets them when it implements only what it
//! must, over a `RedbStore`: the default `thread_effects` (the journal seq by seq through
//! `effect_keys` and `effect`) and the default listings pass the conformance suite.

use agentflow_store::{
    ApprovalError, ApprovalPatch, ApprovalRecord, ApprovalStatus, AuditEntry, AuditError, Checkpoint,
    CheckpointSummary, CommitError, CommitReceipt, CompactError, CompactReport, EffectBatch, EffectError, EffectKey,
    EffectOutcome, FoldFn, Lease, LeaseError, NewAuditEntry, NewRun, PendingWrite, QueueError, QueuedRun, ReadError,
    RedbStore, RunControl, RunWait, Settle, StateChain, StepCommit, StorageError, Store, ThreadRecord, conformance,
};

/// A `RedbStore` behind the methods a backend must write (and those whose defaults refuse),
/// `thread_effects` and the lenient listings left to their defaults.
struct Plain(RedbStore);

impl Store for Plain {
    fn thread(&self, id: &str) -> Result<Option<ThreadRecord>, ReadError> {
        self.0.thread(id)
    }
    fn list_threads(&self) -> Result<Vec<ThreadRecord>, ReadError> {
        self.0.list_threads()
    }
    fn commit_step(&self, commit: StepCommit) -> Result<CommitReceipt, CommitError> {
        self.0.commit_step(commit)
    }
    fn flush(&self) -> Result<(), CommitError> {
        self.0.flush()
    }
    fn checkpoint(&self, thread: &str, seq: u64) -> Result<Option<Checkpoint>, ReadError> {
        self.0.checkpoint(thread, seq)
    }
    fn latest_checkpoint(&self, thread: &str) -> Result<Option<Checkpoint>, ReadError> {
        self.0.latest_checkpoint(thread)
    }
    fn list_checkpoints(&self, thread: &str) -> Result<Vec<CheckpointSummary>, ReadError> {
        self.0.list_checkpoints(thread)
    }
    fn state_chain(&self, thread: &str, seq: u64) -> Result<Option<StateChain>, ReadError> {
        self.0.state_chain(thread, seq)
    }
    fn pending_writes(&self, thread: &str, seq: u64) -> Result<Vec<PendingWrite>, ReadError> {
        self.0.pending_writes(thread, seq)
    }
    fn acquire_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        self.0.acquire_lease(thread, holder, ttl_ms, now)
    }
    fn renew_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        self.0.renew_lease(thread, holder, ttl_ms, now)
    }
    fn release_lease(&self, thread: &str, holder: &str) -> Result<(), LeaseError> {
        self.0.release_lease(thread, holder)
    }
    fn effect(&self, key: &EffectKey) -> Result<Option<Vec<u8>>, ReadError> {
        self.0.effect(key)
    }
    fn effect_keys(&self, thread: &str, seq: u64) -> Result<Vec<EffectKey>, ReadError> {
        self.0.effect_keys(thread, seq)
    }
    fn record_effect(&self, key: &EffectKey, result: &[u8]) -> Result<EffectOutcome, EffectError> {
        self.0.record_effect(key, result)
    }
    fn commit_effects(&self, batch: EffectBatch) -> Result<Vec<EffectOutcome>, CommitError> {
        self.0.commit_effects(batch)
    }
    fn append_audit(&self, thread: &str, entry: NewAuditEntry) -> Result<u64, AuditError> {
        self.0.append_audit(thread, entry)
    }
    fn list_audit(&self, thread: &str) -> Result<Vec<AuditEntry>, ReadError> {
        self.0.list_audit(thread)
    }
    fn put_approval(&self, approval: ApprovalRecord, actor: &str) -> Result<(), ApprovalError> {
        self.0.put_approval(approval, actor)
    }
    fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, ReadError> {
        self.0.approval(id)
    }
    fn list_approvals(&self, thread: &str) -> Result<Vec<ApprovalRecord>, ReadError> {
        self.0.list_approvals(thread)
    }
    fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, ReadError> {
        self.0.list_pending_approvals()
    }
    fn transition_approval(
        &self,
        id: &str,
        expected: ApprovalStatus,
        to: ApprovalStatus,
        patch: ApprovalPatch,
    ) -> Result<ApprovalRecord, ApprovalError> {
        self.0.transition_approval(id, expected, to, patch)
    }
    fn compact(&self, thread: &str, keep_last: usize, fold: &FoldFn<'_>) -> Result<CompactReport, CompactError> {
        self.0.compact(thread, keep_last, fold)
    }
    fn due_timers(&self, until: u64, limit: usize) -> Result<Vec<agentflow_store::Timer>, ReadError> {
        self.0.due_timers(until, limit)
    }
    fn thread_timer(&self, thread: &str) -> Result<Option<u64>, ReadError> {
        self.0.thread_timer(thread)
    }
    fn put_graph_description(&self, fingerprint: &str, description: &str) -> Result<(), StorageError> {
        self.0.put_graph_description(fingerprint, description)
    }
    fn graph_description(&self, fingerprint: &str) -> Result<Option<String>, ReadError> {
        self.0.graph_description(fingerprint)
    }
    fn restore_thread(&self, dump: agentflow_store::ThreadDump) -> Result<(), CommitError> {
        self.0.restore_thread(dump)
    }
    fn purge_thread(
        &self,
        thread: &str,
        entry: NewAuditEntry,
    ) -> Result<agentflow_store::PurgeReport, agentflow_store::PurgeError> {
        self.0.purge_thread(thread, entry)
    }
    fn set_legal_hold(
        &self,
        thread: &str,
        hold: Option<agentflow_store::LegalHold>,
        entry: NewAuditEntry,
    ) -> Result<(), agentflow_store::PurgeError> {
        self.0.set_legal_hold(thread, hold, entry)
    }
    fn legal_hold(&self, thread: &str) -> Result<Option<agentflow_store::LegalHold>, ReadError> {
        self.0.legal_hold(thread)
    }
    // The default restores one thread after the other, which a backend with transactions
    // should not keep (see `Store::restore_threads`); the suite holds it to all or none.
    fn restore_threads(&self, dumps: Vec<agentflow_store::ThreadDump>) -> Result<(), CommitError> {
        self.0.restore_threads(dumps)
    }
    fn enqueue_run(&self, run: NewRun) -> Result<(), QueueError> {
        self.0.enqueue_run(run)
    }
    fn claim_runs(
        &self,
        graph: &str,
        holder: &str,
        ttl_ms: u64,
        now: u64,
        max: usize,
    ) -> Result<Vec<QueuedRun>, QueueError> {
        self.0.claim_runs(graph, holder, ttl_ms, now, max)
    }
    fn heartbeat_runs(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
        self.0.heartbeat_runs(holder, now)
    }
    fn settle_run(&self, thread: &str, holder: &str, settle: &Settle) -> Result<bool, QueueError> {
        self.0.settle_run(thread, holder, settle)
    }
    fn control_run(&self, thread: &str, control: RunControl) -> Result<bool, QueueError> {
        self.0.control_run(thread, control)
    }
    fn wake_run(&self, thread: &str, wait: RunWait) -> Result<bool, QueueError> {
        self.0.wake_run(thread, wait)
    }
    fn list_runs(&self) -> Result<Vec<QueuedRun>, QueueError> {
        self.0.list_runs()
    }
    fn breaker(&self, tool: &str) -> Result<Option<agentflow_store::BreakerRecord>, ReadError> {
        self.0.breaker(tool)
    }
    fn update_breaker(
        &self,
        update: agentflow_store::BreakerUpdate,
    ) -> Result<agentflow_store::BreakerAnswer, agentflow_store::BreakerError> {
        self.0.update_breaker(update)
    }
    // The event log is kept by the backend's commits: no other method can provide it.
    fn read_events(
        &self,
        thread: &str,
        after: Option<agentflow_store::EventId>,
        limit: usize,
    ) -> Result<agentflow_store::EventPage, ReadError> {
        self.0.read_events(thread, after, limit)
    }
    fn on_events(&self, wake: agentflow_store::EventWake) -> bool {
        self.0.on_events(wake)
    }
    // Follow-ups, schedules and webhook deliveries: their defaults refuse.
    fn enqueue_follow_up(
        &self,
        run: NewRun,
        entry: NewAuditEntry,
        place: agentflow_store::FollowUpPlace,
    ) -> Result<agentflow_store::FollowUpQueued, QueueError> {
        self.0.enqueue_follow_up(run, entry, place)
    }
    fn enqueue_follow_up_as(
        &self,
        run: NewRun,
        entry: NewAuditEntry,
        rule: agentflow_store::FollowUpRule,
    ) -> Result<agentflow_store::FollowUpQueued, QueueError> {
        self.0.enqueue_follow_up_as(run, entry, rule)
    }
    fn list_follow_ups(&self, thread: &str) -> Result<Vec<QueuedRun>, QueueError> {
        self.0.list_follow_ups(thread)
    }
    fn put_schedule(&self, schedule: agentflow_store::ScheduleRecord) -> Result<(), QueueError> {
        self.0.put_schedule(schedule)
    }
    fn delete_schedule(&self, id: &str) -> Result<bool, QueueError> {
        self.0.delete_schedule(id)
    }
    fn schedule(&self, id: &str) -> Result<Option<agentflow_store::ScheduleRecord>, QueueError> {
        self.0.schedule(id)
    }
    fn scan_schedules(&self) -> Result<agentflow_store::Listing<agentflow_store::ScheduleRecord>, QueueError> {
        self.0.scan_schedules()
    }
    fn fire_schedule(&self, fire: agentflow_store::ScheduleFire) -> Result<bool, QueueError> {
        self.0.fire_schedule(fire)
    }
    fn due_webhooks(
        &self,
        now: u64,
        limit: usize,
    ) -> Result<agentflow_store::Listing<agentflow_store::WebhookDelivery>, QueueError> {
        self.0.due_webhooks(now, limit)
    }
    fn claim_webhook(&self, id: u64, holder: &str, now: u64, until: u64) -> Result<bool, QueueError> {
        self.0.claim_webhook(id, holder, now, until)
    }
    fn settle_webhook(
        &self,
        id: u64,
        holder: &str,
        settle: agentflow_store::WebhookSettle,
    ) -> Result<bool, QueueError> {
        self.0.settle_webhook(id, holder, settle)
    }
    fn list_webhooks(&self, thread: &str) -> Result<Vec<agentflow_store::WebhookDelivery>, QueueError> {
        self.0.list_webhooks(thread)
    }
}

fn plain() -> Plain {
    Plain(RedbStore::in_memory().expect("in-memory store"))
}

#[test]
fn the_defaults_pass_the_conformance_suite() {
    for (name, case) in conformance::CASES {
        eprintln!("conformance: {name}");
        case(&plain());
    }
}
