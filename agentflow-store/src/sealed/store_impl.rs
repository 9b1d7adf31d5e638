//! `impl Store for SealedStore`: every method forwarded to the wrapped store, the payloads
//! sealed on the way in and opened on the way out.

use crate::audit_chain::{BrokenLink, ChainReport};
use crate::breaker::{BreakerAnswer, BreakerError, BreakerRecord, BreakerUpdate};
use crate::checks::{check_conditions, check_depths, check_detail};
use crate::dump::ThreadDump;
use crate::error::{
    ApprovalError, AuditError, CommitError, CompactError, EffectError, LeaseError, PurgeError, ReadError, StorageError,
};
use crate::queue::{
    FollowUpPlace, FollowUpQueued, NewRun, QueueError, QueuedRun, RunControl, RunWait, ScheduleFire, Settle,
};
use crate::record::{
    ApprovalPatch, ApprovalRecord, ApprovalStatus, AuditEntry, Checkpoint, CheckpointSummary, CommitReceipt,
    CompactReport, EffectBatch, EffectKey, EffectOutcome, EventId, EventPage, EventWake, Lease, LegalHold,
    NewAuditEntry, PendingWrite, PurgeReport, ScheduleRecord, StateChain, StepCommit, ThreadRecord, Timer,
    WebhookDelivery, WebhookSettle,
};
use crate::sealed::cipher::SEAL_OVERHEAD;
use crate::sealed::error::SealError;
use crate::sealed::open_listing::open_listing;
use crate::sealed::records::{is_sealed_text, kind};
use crate::sealed::sealed_store::SealedStore;
use crate::store::{CommitCallback, FoldFn, Listing, Store};

/// A sealing result as the [`StorageError`] every error family wraps.
trait Sealing<T> {
    fn st(self) -> Result<T, StorageError>;
}

impl<T> Sealing<T> for Result<T, SealError> {
    fn st(self) -> Result<T, StorageError> {
        self.map_err(StorageError::from)
    }
}

impl<S: Store> SealedStore<S> {
    fn open_approval(&self, a: ApprovalRecord) -> Result<ApprovalRecord, SealError> {
        let thread = a.thread.clone();
        self.opener(&thread).approval(a)
    }

    fn open_outcomes(&self, keys: &[EffectKey], outcomes: Vec<EffectOutcome>) -> Result<Vec<EffectOutcome>, SealError> {
        outcomes
            .into_iter()
            .enumerate()
            .map(|(i, o)| match (o, keys.get(i)) {
                (EffectOutcome::AlreadyRecorded(v), Some(k)) => {
                    Ok(EffectOutcome::AlreadyRecorded(self.opener(&k.thread).bytes(kind::EFFECT, v)?))
                }
                (o, _) => Ok(o),
            })
            .collect()
    }

    pub(crate) fn open_run(&self, mut run: QueuedRun) -> Result<QueuedRun, SealError> {
        let thread = run.thread.clone();
        run.input = run.input.map(|i| self.opener(&thread).bytes(kind::INPUT, i)).transpose()?;
        Ok(run)
    }

    pub(crate) fn seal_run(&self, mut run: NewRun) -> Result<NewRun, StorageError> {
        if let Some(input) = &run.input {
            run.input = Some(self.sealer(&run.thread)?.bytes(kind::INPUT, input)?);
        }
        Ok(run)
    }

    /// `commit` with its thread record's detail sealed.
    fn seal_detail(&self, mut commit: StepCommit) -> Result<StepCommit, StorageError> {
        commit.thread = self.seal_thread(commit.thread)?;
        Ok(commit)
    }

    /// `thread` with its detail sealed (an empty detail is left empty, and asks for no key).
    fn seal_thread(&self, thread: ThreadRecord) -> Result<ThreadRecord, StorageError> {
        if thread.detail.is_empty() {
            return Ok(thread);
        }
        let id = thread.id.clone();
        Ok(self.sealer(&id)?.thread(thread)?)
    }

    /// `thread` with its detail opened; a detail that does not open reads as a fixed text,
    /// so one thread whose key is gone does not fail a listing.
    fn open_thread(&self, mut thread: ThreadRecord) -> ThreadRecord {
        self.open_detail(&mut thread);
        thread
    }

    fn open_detail(&self, thread: &mut ThreadRecord) {
        if is_sealed_text(&thread.detail) {
            let detail = std::mem::take(&mut thread.detail);
            thread.detail = self.opener(&thread.id).detail(detail);
        }
    }

    fn open_threads(&self, listing: Listing<ThreadRecord>) -> Listing<ThreadRecord> {
        let Listing { items, skipped } = listing;
        Listing::new(items.into_iter().map(|t| self.open_thread(t)).collect(), skipped)
    }

    fn seal_entry(&self, thread: &str, entry: NewAuditEntry) -> Result<NewAuditEntry, StorageError> {
        Ok(self.sealer(thread)?.audit(entry)?)
    }
}

impl<S: Store> Store for SealedStore<S> {
    fn thread(&self, id: &str) -> Result<Option<ThreadRecord>, ReadError> {
        Ok(self.inner.thread(id)?.map(|t| self.open_thread(t)))
    }

    fn list_threads(&self) -> Result<Vec<ThreadRecord>, ReadError> {
        Ok(self.inner.list_threads()?.into_iter().map(|t| self.open_thread(t)).collect())
    }

    fn scan_threads(&self) -> Result<Listing<ThreadRecord>, ReadError> {
        Ok(self.open_threads(self.inner.scan_threads()?))
    }

    fn child_threads(&self, parent: &str) -> Result<Listing<ThreadRecord>, ReadError> {
        Ok(self.open_threads(self.inner.child_threads(parent)?))
    }

    fn commit_step(&self, commit: StepCommit) -> Result<CommitReceipt, CommitError> {
        check_depths(&commit)?;
        self.inner.commit_step(self.seal_commit(self.seal_detail(commit)?)?)
    }

    fn commit_step_then(&self, commit: StepCommit, done: CommitCallback) {
        let sealed = check_depths(&commit).and_then(|()| Ok(self.seal_commit(self.seal_detail(commit)?)?));
        match sealed {
            Ok(commit) => self.inner.commit_step_then(commit, done),
            Err(e) => done(Err(e)),
        }
    }

    fn flush(&self) -> Result<(), CommitError> {
        self.inner.flush()
    }

    fn checkpoint(&self, thread: &str, seq: u64) -> Result<Option<Checkpoint>, ReadError> {
        let cp = self.inner.checkpoint(thread, seq)?;
        Ok(cp.map(|cp| self.opener(thread).checkpoint(cp)).transpose().st()?)
    }

    fn latest_checkpoint(&self, thread: &str) -> Result<Option<Checkpoint>, ReadError> {
        let cp = self.inner.latest_checkpoint(thread)?;
        Ok(cp.map(|cp| self.opener(thread).checkpoint(cp)).transpose().st()?)
    }

    fn list_checkpoints(&self, thread: &str) -> Result<Vec<CheckpointSummary>, ReadError> {
        let mut o = self.opener(thread);
        let mut summaries = self.inner.list_checkpoints(thread)?;
        for s in &mut summaries {
            s.metadata.extra = o.extra(std::mem::take(&mut s.metadata.extra)).st()?;
            // The payload's size as given, without what sealing added to each blob.
            let blobs = u64::from(s.has_snapshot) + s.delta_len as u64;
            s.payload_bytes = s.payload_bytes.saturating_sub(SEAL_OVERHEAD as u64 * blobs);
        }
        Ok(summaries)
    }

    fn state_chain(&self, thread: &str, seq: u64) -> Result<Option<StateChain>, ReadError> {
        let chain = self.inner.state_chain(thread, seq)?;
        Ok(chain.map(|c| self.opener(thread).chain(c)).transpose().st()?)
    }

    fn pending_writes(&self, thread: &str, seq: u64) -> Result<Vec<PendingWrite>, ReadError> {
        let mut o = self.opener(thread);
        let writes = self.inner.pending_writes(thread, seq)?;
        Ok(writes.into_iter().map(|w| o.pending(w)).collect::<Result<_, _>>().st()?)
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
        let result = self.inner.effect(key)?;
        Ok(result.map(|r| self.opener(&key.thread).bytes(kind::EFFECT, r)).transpose().st()?)
    }

    fn effect_keys(&self, thread: &str, seq: u64) -> Result<Vec<EffectKey>, ReadError> {
        self.inner.effect_keys(thread, seq)
    }

    fn thread_effects(&self, thread: &str) -> Result<Vec<(EffectKey, Vec<u8>)>, ReadError> {
        let mut o = self.opener(thread);
        let effects = self.inner.thread_effects(thread)?;
        Ok(effects
            .into_iter()
            .map(|(k, v)| Ok((k, o.bytes(kind::EFFECT, v)?)))
            .collect::<Result<_, SealError>>()
            .st()?)
    }

    fn record_effect(&self, key: &EffectKey, result: &[u8]) -> Result<EffectOutcome, EffectError> {
        let sealed = self.sealer(&key.thread)?.bytes(kind::EFFECT, result).st()?;
        match self.inner.record_effect(key, &sealed)? {
            EffectOutcome::AlreadyRecorded(v) => {
                Ok(EffectOutcome::AlreadyRecorded(self.opener(&key.thread).bytes(kind::EFFECT, v).st()?))
            }
            other => Ok(other),
        }
    }

    fn commit_effects(&self, batch: EffectBatch) -> Result<Vec<EffectOutcome>, CommitError> {
        for entry in &batch.audit {
            check_detail(&batch.thread, entry).map_err(|e| match e {
                AuditError::TooDeep { thread, source, .. } => CommitError::TooDeep { thread, source },
                other => CommitError::Invalid { thread: batch.thread.clone(), reason: other.to_string() },
            })?;
        }
        for a in &batch.new_approvals {
            check_conditions(&a.id, a.conditions.as_ref()).map_err(CommitError::Approval)?;
        }
        for t in &batch.approval_transitions {
            check_conditions(&t.id, t.patch.conditions.as_ref()).map_err(CommitError::Approval)?;
        }
        let keys: Vec<EffectKey> = batch.effects.iter().map(|(k, _)| k.clone()).collect();
        let outcomes = self.inner.commit_effects(self.seal_batch(batch)?)?;
        Ok(self.open_outcomes(&keys, outcomes).st()?)
    }

    fn append_audit(&self, thread: &str, entry: NewAuditEntry) -> Result<u64, AuditError> {
        check_detail(thread, &entry)?;
        self.inner.append_audit(thread, self.seal_entry(thread, entry)?)
    }

    fn list_audit(&self, thread: &str) -> Result<Vec<AuditEntry>, ReadError> {
        let stored = self.inner.list_audit(thread)?;
        Ok(self.open_audit(thread, Listing::complete(stored), true)?.items)
    }

    fn scan_audit(&self, thread: &str) -> Result<Listing<AuditEntry>, ReadError> {
        Ok(self.open_audit(thread, self.inner.scan_audit(thread)?, false)?)
    }

    /// Verifies the chain the wrapped store keeps (over the sealed details), then answers the
    /// report of the chain over the opened details (see [`SealedStore`]'s audit view): its
    /// head is the last listed entry's link.
    fn verify_audit(&self, thread: &str) -> Result<Result<ChainReport, BrokenLink>, ReadError> {
        if let Err(broken) = self.inner.verify_audit(thread)? {
            return Ok(Err(broken));
        }
        Ok(crate::audit_chain::verify_chain(thread, &self.list_audit(thread)?))
    }

    fn put_approval(&self, approval: ApprovalRecord, actor: &str) -> Result<(), ApprovalError> {
        check_conditions(&approval.id, approval.conditions.as_ref())?;
        let thread = approval.thread.clone();
        let sealed = self.sealer(&thread)?.approval(approval).st()?;
        self.inner.put_approval(sealed, actor)
    }

    fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, ReadError> {
        let a = self.inner.approval(id)?;
        Ok(a.map(|a| self.open_approval(a)).transpose().st()?)
    }

    fn list_approvals(&self, thread: &str) -> Result<Vec<ApprovalRecord>, ReadError> {
        let list = self.inner.list_approvals(thread)?;
        Ok(list.into_iter().map(|a| self.open_approval(a)).collect::<Result<_, _>>().st()?)
    }

    fn scan_approvals(&self, thread: &str) -> Result<Listing<ApprovalRecord>, ReadError> {
        Ok(open_listing(self.inner.scan_approvals(thread)?, |a| self.open_approval(a))?)
    }

    fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, ReadError> {
        let list = self.inner.list_pending_approvals()?;
        Ok(list.into_iter().map(|a| self.open_approval(a)).collect::<Result<_, _>>().st()?)
    }

    fn scan_pending_approvals(&self) -> Result<Listing<ApprovalRecord>, ReadError> {
        Ok(open_listing(self.inner.scan_pending_approvals()?, |a| self.open_approval(a))?)
    }

    fn transition_approval(
        &self,
        id: &str,
        expected: ApprovalStatus,
        to: ApprovalStatus,
        patch: ApprovalPatch,
    ) -> Result<ApprovalRecord, ApprovalError> {
        check_conditions(id, patch.conditions.as_ref())?;
        let has_payload =
            patch.note.is_some() || patch.args.is_some() || patch.conditions.as_ref().is_some_and(|c| !c.is_null());
        let patch = match (has_payload, self.inner.approval(id)) {
            (false, _) => patch,
            (true, Ok(Some(record))) => self.sealer(&record.thread)?.patch(patch).st()?,
            (true, Ok(None)) => return Err(ApprovalError::NotFound { id: id.to_string() }),
            (true, Err(ReadError::Storage(e))) => return Err(e.into()),
            (true, Err(e)) => {
                return Err(StorageError::Sealed {
                    thread: String::new(),
                    what: "approval".into(),
                    detail: e.to_string(),
                }
                .into());
            }
        };
        let record = self.inner.transition_approval(id, expected, to, patch)?;
        Ok(self.open_approval(record).st()?)
    }

    fn compact(&self, thread: &str, keep_last: usize, fold: &FoldFn<'_>) -> Result<CompactReport, CompactError> {
        let sealed_fold = |chain: &StateChain| -> Result<Vec<u8>, crate::error::BoxError> {
            let opened = self.opener(thread).chain(chain.clone())?;
            let state = fold(&opened)?;
            Ok(self.sealer(thread)?.bytes(kind::SNAPSHOT, &state)?)
        };
        self.inner.compact(thread, keep_last, &sealed_fold)
    }

    fn enqueue_run(&self, run: NewRun) -> Result<(), QueueError> {
        self.inner.enqueue_run(self.seal_run(run)?)
    }

    fn claim_runs(
        &self,
        graph: &str,
        holder: &str,
        ttl_ms: u64,
        now: u64,
        max: usize,
    ) -> Result<Vec<QueuedRun>, QueueError> {
        let runs = self.inner.claim_runs(graph, holder, ttl_ms, now, max)?;
        Ok(runs.into_iter().map(|r| self.open_run(r)).collect::<Result<_, _>>().st()?)
    }

    fn heartbeat_runs(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
        self.inner.heartbeat_runs(holder, now)
    }

    fn settle_run(&self, thread: &str, holder: &str, settle: &Settle) -> Result<bool, QueueError> {
        self.inner.settle_run(thread, holder, &self.seal_settle(thread, settle)?)
    }

    fn control_run(&self, thread: &str, control: RunControl) -> Result<bool, QueueError> {
        self.inner.control_run(thread, control)
    }

    fn wake_run(&self, thread: &str, wait: RunWait) -> Result<bool, QueueError> {
        self.inner.wake_run(thread, wait)
    }

    fn list_runs(&self) -> Result<Vec<QueuedRun>, QueueError> {
        let runs = self.inner.list_runs()?;
        Ok(runs.into_iter().map(|r| self.open_run(r)).collect::<Result<_, _>>().st()?)
    }

    fn scan_runs(&self) -> Result<Listing<QueuedRun>, QueueError> {
        Ok(open_listing(self.inner.scan_runs()?, |r| self.open_run(r))?)
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

    fn dump_thread(&self, thread: &str) -> Result<Option<ThreadDump>, ReadError> {
        let dump = self.inner.dump_thread(thread)?.map(|d| self.open_dump(d)).transpose()?;
        Ok(dump.map(|mut d| {
            self.open_detail(&mut d.thread);
            d
        }))
    }

    fn restore_thread(&self, mut dump: ThreadDump) -> Result<(), CommitError> {
        crate::dump::check_dump(&dump)?;
        dump.thread = self.seal_thread(dump.thread)?;
        self.inner.restore_thread(self.seal_dump(dump)?)
    }

    fn restore_threads(&self, dumps: Vec<ThreadDump>) -> Result<(), CommitError> {
        crate::dump::check_distinct(&dumps)?;
        for d in &dumps {
            crate::dump::check_dump(d)?;
        }
        let sealed = dumps
            .into_iter()
            .map(|mut d| {
                d.thread = self.seal_thread(d.thread)?;
                self.seal_dump(d)
            })
            .collect::<Result<_, _>>()?;
        self.inner.restore_threads(sealed)
    }

    fn enqueue_run_audited(&self, run: NewRun, entry: NewAuditEntry) -> Result<(), QueueError> {
        let entry = self.seal_entry(&run.thread, entry)?;
        self.inner.enqueue_run_audited(self.seal_run(run)?, entry)
    }

    fn wake_run_audited(&self, thread: &str, wait: RunWait, entry: NewAuditEntry) -> Result<bool, QueueError> {
        self.inner.wake_run_audited(thread, wait, self.seal_entry(thread, entry)?)
    }

    fn control_run_audited(&self, thread: &str, control: RunControl, entry: NewAuditEntry) -> Result<bool, QueueError> {
        self.inner.control_run_audited(thread, control, self.seal_entry(thread, entry)?)
    }

    fn settle_run_and_release(&self, thread: &str, holder: &str, settle: &Settle) -> Result<bool, QueueError> {
        self.inner.settle_run_and_release(thread, holder, &self.seal_settle(thread, settle)?)
    }

    /// Destroys the data keys of the thread and of its subgraph children, then purges them in
    /// the wrapped store (see [`SealedStore`]). The `thread.purged` entry is kept unsealed: it
    /// is the tombstone, readable after the keys are gone.
    fn purge_thread(&self, thread: &str, entry: NewAuditEntry) -> Result<PurgeReport, PurgeError> {
        self.purge(thread, entry)
    }

    fn set_legal_hold(&self, thread: &str, hold: Option<LegalHold>, entry: NewAuditEntry) -> Result<(), PurgeError> {
        self.inner.set_legal_hold(thread, hold, entry)
    }

    fn legal_hold(&self, thread: &str) -> Result<Option<LegalHold>, ReadError> {
        self.inner.legal_hold(thread)
    }

    fn seals_payloads(&self) -> bool {
        true
    }

    fn file_path(&self) -> Option<std::path::PathBuf> {
        self.inner.file_path()
    }

    fn run_controls(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
        self.inner.run_controls(holder, now)
    }

    /// Each event's data opened (its kind was never sealed); one that does not open (its key
    /// destroyed, or its bytes changed) fails the read.
    fn read_events(&self, thread: &str, after: Option<EventId>, limit: usize) -> Result<EventPage, ReadError> {
        let mut page = self.inner.read_events(thread, after, limit)?;
        let mut o = self.opener(thread);
        for event in &mut page.events {
            event.data = o.bytes(kind::EVENT, std::mem::take(&mut event.data)).st()?;
        }
        Ok(page)
    }

    fn on_events(&self, wake: EventWake) -> bool {
        self.inner.on_events(wake)
    }

    fn enqueue_follow_up(
        &self,
        run: NewRun,
        entry: NewAuditEntry,
        place: FollowUpPlace,
    ) -> Result<FollowUpQueued, QueueError> {
        check_detail(&run.thread, &entry)?;
        let entry = self.seal_entry(&run.thread, entry)?;
        self.inner.enqueue_follow_up(self.seal_run(run)?, entry, place)
    }

    fn enqueue_follow_up_as(
        &self,
        run: NewRun,
        entry: NewAuditEntry,
        rule: crate::FollowUpRule,
    ) -> Result<FollowUpQueued, QueueError> {
        check_detail(&run.thread, &entry)?;
        let rule = match rule {
            crate::FollowUpRule::Interrupt { cancel } => {
                check_detail(&run.thread, &cancel)?;
                crate::FollowUpRule::Interrupt { cancel: self.seal_entry(&run.thread, cancel)? }
            }
            rule => rule,
        };
        let entry = self.seal_entry(&run.thread, entry)?;
        self.inner.enqueue_follow_up_as(self.seal_run(run)?, entry, rule)
    }

    fn list_follow_ups(&self, thread: &str) -> Result<Vec<QueuedRun>, QueueError> {
        Ok(self.open_runs(self.inner.list_follow_ups(thread)?)?)
    }

    fn put_schedule(&self, schedule: ScheduleRecord) -> Result<(), QueueError> {
        self.inner.put_schedule(self.seal_schedule(schedule)?)
    }

    /// Destroys the schedule's data key once the wrapped store removed it.
    fn delete_schedule(&self, id: &str) -> Result<bool, QueueError> {
        self.delete_sealed_schedule(id)
    }

    fn schedule(&self, id: &str) -> Result<Option<ScheduleRecord>, QueueError> {
        Ok(self.inner.schedule(id)?.map(|s| self.open_schedule(s)).transpose().st()?)
    }

    fn scan_schedules(&self) -> Result<Listing<ScheduleRecord>, QueueError> {
        Ok(open_listing(self.inner.scan_schedules()?, |s| self.open_schedule(s))?)
    }

    fn fire_schedule(&self, fire: ScheduleFire) -> Result<bool, QueueError> {
        check_detail(&fire.run.thread, &fire.entry)?;
        self.inner.fire_schedule(self.seal_fire(fire)?)
    }

    /// A delivery whose payload does not open (its bytes changed) is skipped and reported: it is
    /// never sent sealed.
    fn due_webhooks(&self, now: u64, limit: usize) -> Result<Listing<WebhookDelivery>, QueueError> {
        // A delivery that does not open is not counted in `limit` (as the wrapped store does not
        // count a row that does not decode): asked again for as many more.
        let mut ask = limit;
        loop {
            let listed = self.inner.due_webhooks(now, ask)?;
            let listed_items = listed.items.len();
            let mut due = open_listing(listed, |w| self.open_delivery(w))?;
            let more = limit.saturating_add(listed_items - due.items.len());
            if due.items.len() >= limit || listed_items < ask || more <= ask {
                due.items.truncate(limit);
                return Ok(due);
            }
            ask = more;
        }
    }

    fn claim_webhook(&self, id: u64, holder: &str, now: u64, until: u64) -> Result<bool, QueueError> {
        self.inner.claim_webhook(id, holder, now, until)
    }

    fn settle_webhook(&self, id: u64, holder: &str, settle: WebhookSettle) -> Result<bool, QueueError> {
        self.inner.settle_webhook(id, holder, settle)
    }

    fn list_webhooks(&self, thread: &str) -> Result<Vec<WebhookDelivery>, QueueError> {
        let listed = self.inner.list_webhooks(thread)?;
        Ok(listed.into_iter().map(|w| self.open_delivery(w)).collect::<Result<_, _>>().st()?)
    }
}

#[cfg(test)]
mod detail_tests {
    use std::sync::Arc;

    use crate::conformance::{root, thread};
    use crate::sealed::{Kek, KeyStore, MemoryKeyStore, SealedStore, StaticKeyProvider};
    use crate::{RedbStore, StepCommit, Store, ThreadRecord};

    const SECRET: &str = "detail-canary-5e1";

    fn sealed(keys: &Arc<MemoryKeyStore>) -> SealedStore<RedbStore> {
        let provider = StaticKeyProvider::new(Kek::new([3; 32]), vec![]);
        SealedStore::new(RedbStore::in_memory().unwrap(), keys.clone(), provider)
    }

    fn failed(id: &str) -> ThreadRecord {
        let mut t = thread(id);
        t.detail = format!("node `n` failed: invalid type: string \"{SECRET}\", expected u32");
        t
    }

    #[test]
    fn a_threads_detail_is_sealed_on_every_write_and_opened_on_every_read() {
        let keys = Arc::new(MemoryKeyStore::new());
        let store = sealed(&keys);
        store.commit_step(StepCommit::new(failed("t")).with_checkpoint(root("t", 0, b"s"))).unwrap();
        let child = failed("t/c").child_of("t");
        let (tx, rx) = std::sync::mpsc::channel();
        store.commit_step_then(StepCommit::new(child), Box::new(move |r| tx.send(r.map(|_| ())).unwrap()));
        rx.recv().unwrap().unwrap();
        let want = failed("t").detail;
        for id in ["t", "t/c"] {
            let stored = store.inner().thread(id).unwrap().unwrap().detail;
            assert!(stored.starts_with("$sealed:") && !stored.contains(SECRET), "{stored}");
            assert_eq!(store.thread(id).unwrap().unwrap().detail, want);
        }
        assert!(store.list_threads().unwrap().iter().all(|t| t.detail == want));
        assert!(store.scan_threads().unwrap().items.iter().all(|t| t.detail == want));
        assert_eq!(store.child_threads("t").unwrap().items[0].detail, want);
        let dump = store.dump_thread("t").unwrap().unwrap();
        assert_eq!(dump.thread.detail, want);

        // Restored into another sealed store: sealed again there, opened on read.
        let other = sealed(&keys);
        other.restore_thread(dump.clone()).unwrap();
        assert!(!other.inner().thread("t").unwrap().unwrap().detail.contains(SECRET));
        assert_eq!(other.thread("t").unwrap().unwrap().detail, want);
        let third = sealed(&keys);
        third.restore_threads(vec![dump]).unwrap();
        assert!(!third.inner().dump_thread("t").unwrap().unwrap().thread.detail.contains(SECRET));
        assert_eq!(third.dump_thread("t").unwrap().unwrap().thread.detail, want);

        // Its key destroyed, the thread still lists, its detail a fixed text.
        store.ring.destroy("t").unwrap();
        assert_eq!(store.thread("t").unwrap().unwrap().detail, super::super::records::UNOPENED_DETAIL);
        let listed = store.list_threads().unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(store.scan_threads().unwrap().skipped.len(), 0);
    }

    #[test]
    fn an_empty_detail_stays_empty_and_asks_for_no_key() {
        let keys = Arc::new(MemoryKeyStore::new());
        let store = sealed(&keys);
        store.commit_step(StepCommit::new(thread("e"))).unwrap();
        assert_eq!(store.inner().thread("e").unwrap().unwrap().detail, "");
        assert!(keys.get("e").unwrap().is_none());
        // A detail written before the store sealed reads as it is.
        store.inner().commit_step(StepCommit::new(failed("old"))).unwrap();
        assert_eq!(store.thread("old").unwrap().unwrap().detail, failed("old").detail);
    }
}
