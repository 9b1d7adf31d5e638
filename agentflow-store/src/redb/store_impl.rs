//! The [`Store`] trait on a [`RedbStore`]: each method a read transaction, or a job for the
//! writer thread.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::breaker::{BreakerAnswer, BreakerError, BreakerRecord, BreakerUpdate};
use crate::dump::ThreadDump;
use crate::error::{
    ApprovalError, AuditError, CommitError, CompactError, EffectError, LeaseError, PurgeError, ReadError, StorageError,
};
use crate::queue::{
    FollowUpPlace, FollowUpQueued, NewRun, QueueError, QueuedRun, RunControl, RunWait, ScheduleFire, Settle,
};
use crate::record::{
    ApprovalPatch, ApprovalRecord, ApprovalStatus, AuditEntry, Checkpoint, CheckpointSummary, CommitReceipt,
    CompactReport, Durability, EffectBatch, EffectKey, EffectOutcome, EventId, EventPage, EventWake, Lease, LegalHold,
    NewAuditEntry, Payload, PendingWrite, PurgeReport, ScheduleRecord, StateChain, StepCommit, ThreadRecord, Timer,
    WebhookDelivery, WebhookSettle,
};
use crate::redb::approvals::{stage_put_approval, stage_transition};
use crate::redb::audit::stage_append_audit;
use crate::redb::breakers;
use crate::redb::effects::{effect_key, stage_effect_batch, stage_record_effect};
use crate::redb::error::WithPath;
use crate::redb::event_log;
use crate::redb::idempotency;
use crate::redb::listings::{
    Scan, approvals_in, audit_in, load_checkpoint, numbered, pending_writes_in, thread_effects_in, timer_in,
};
use crate::redb::queue;
use crate::redb::reads;
use crate::redb::redb_store::RedbStore;
use crate::redb::step_commit::{CommitOut, stage_commit};
use crate::redb::tables;
use crate::redb::writer::{Reply, Tx};
use crate::redb::{schedules, webhooks};
use crate::store::{CommitCallback, FoldFn, Listing, Store};

impl Store for RedbStore {
    fn thread(&self, id: &str) -> Result<Option<ThreadRecord>, ReadError> {
        self.read(|txn, path| {
            let threads = txn.open_table(tables::THREADS).ctx(path)?;
            Ok(reads::thread_record(path, &threads, &self.shared.leases, id)?)
        })
    }

    fn list_threads(&self) -> Result<Vec<ThreadRecord>, ReadError> {
        self.threads(Scan::Strict).map(|l| l.items)
    }

    fn scan_threads(&self) -> Result<Listing<ThreadRecord>, ReadError> {
        self.threads(Scan::Skip)
    }

    fn child_threads(&self, parent: &str) -> Result<Listing<ThreadRecord>, ReadError> {
        self.threads_under(parent)
    }

    /// The wakes of [`Store::on_events`] are called on the calling thread once the commit is
    /// made (visible; durable too unless it is [`Durability::Eventual`]), before it returns.
    fn commit_step(&self, commit: StepCommit) -> Result<CommitReceipt, CommitError> {
        let logged = (!commit.events.is_empty()).then(|| commit.thread.id.clone());
        let keep = self.event_keep;
        let (out, committed) =
            self.submit_job(commit.durability, true, move |tx: &Tx<'_>| stage_commit(tx, &commit, keep))?;
        if let Some(thread) = logged {
            self.wakes.wake(&thread);
        }
        Ok(CommitReceipt {
            checkpoint: out.checkpoint,
            audit_seqs: out.audit_seqs,
            durable: committed.durable,
            group_size: committed.group_size,
        })
    }

    /// The wakes of [`Store::on_events`] are called on the store's writer thread once the
    /// commit is made, before `done`.
    fn commit_step_then(&self, commit: StepCommit, done: CommitCallback) {
        let logged = (!commit.events.is_empty()).then(|| (commit.thread.id.clone(), Arc::clone(&self.wakes)));
        let keep = self.event_keep;
        let reply: Reply<CommitOut, CommitError> = Box::new(move |answer| {
            if let (Ok(_), Some((thread, wakes))) = (&answer, &logged) {
                wakes.wake(thread);
            }
            done(answer.map(|(out, committed)| CommitReceipt {
                checkpoint: out.checkpoint,
                audit_seqs: out.audit_seqs,
                durable: committed.durable,
                group_size: committed.group_size,
            }))
        });
        self.submit_step_then(commit.durability, move |tx: &Tx<'_>| stage_commit(tx, &commit, keep), reply);
    }

    fn flush(&self) -> Result<(), CommitError> {
        self.submit(Durability::Immediate, |_: &Tx<'_>| Ok::<_, CommitError>(()))?;
        Ok(())
    }

    fn checkpoint(&self, thread: &str, seq: u64) -> Result<Option<Checkpoint>, ReadError> {
        self.read(|txn, path| {
            let thread = numbered(txn, path, thread)?;
            let checkpoints = txn.open_table(tables::CHECKPOINTS).ctx(path)?;
            let snapshots = txn.open_table(tables::SNAPSHOTS).ctx(path)?;
            load_checkpoint(path, &checkpoints, &snapshots, thread, seq)
        })
    }

    fn latest_checkpoint(&self, thread: &str) -> Result<Option<Checkpoint>, ReadError> {
        self.read(|txn, path| {
            let thread = numbered(txn, path, thread)?;
            let checkpoints = txn.open_table(tables::CHECKPOINTS).ctx(path)?;
            let snapshots = txn.open_table(tables::SNAPSHOTS).ctx(path)?;
            match reads::latest_checkpoint_seq(path, &checkpoints, thread)? {
                None => Ok(None),
                Some(seq) => load_checkpoint(path, &checkpoints, &snapshots, thread, seq),
            }
        })
    }

    fn list_checkpoints(&self, thread: &str) -> Result<Vec<CheckpointSummary>, ReadError> {
        self.read(|txn, path| {
            let thread = numbered(txn, path, thread)?;
            let checkpoints = txn.open_table(tables::CHECKPOINTS).ctx(path)?;
            Ok(reads::summaries(path, &checkpoints, thread)?)
        })
    }

    fn state_chain(&self, thread: &str, seq: u64) -> Result<Option<StateChain>, ReadError> {
        self.read(|txn, path| {
            let thread = numbered(txn, path, thread)?;
            let checkpoints = txn.open_table(tables::CHECKPOINTS).ctx(path)?;
            let snapshots = txn.open_table(tables::SNAPSHOTS).ctx(path)?;
            reads::state_chain(path, &checkpoints, &snapshots, thread, seq)
        })
    }

    fn pending_writes(&self, thread: &str, seq: u64) -> Result<Vec<PendingWrite>, ReadError> {
        self.read(|txn, path| Ok(pending_writes_in(txn, path, thread, Some(seq))?))
    }

    fn acquire_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        self.open_or_closed()?;
        self.shared.leases.acquire(thread, holder, ttl_ms, now)
    }

    fn renew_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        self.open_or_closed()?;
        self.shared.leases.renew(thread, holder, ttl_ms, now)
    }

    fn release_lease(&self, thread: &str, holder: &str) -> Result<(), LeaseError> {
        self.open_or_closed()?;
        self.shared.leases.release(thread, holder)
    }

    fn effect(&self, key: &EffectKey) -> Result<Option<Vec<u8>>, ReadError> {
        self.read(|txn, path| {
            let effects = txn.open_table(tables::EFFECTS).ctx(path)?;
            let k = (key.thread.as_str(), key.seq, key.node.as_str(), key.key.as_str());
            match redb::ReadableTable::get(&effects, k).ctx(path)? {
                None => Ok(None),
                Some(v) => {
                    Ok(Some(reads::decode(path, tables::EFFECTS, || effect_key(key), v.value(), Payload::decode)?))
                }
            }
        })
    }

    fn effect_keys(&self, thread: &str, seq: u64) -> Result<Vec<EffectKey>, ReadError> {
        self.read(|txn, path| {
            let effects = txn.open_table(tables::EFFECTS).ctx(path)?;
            let mut keys = Vec::new();
            for entry in redb::ReadableTable::range(&effects, (thread, seq, "", "")..).ctx(path)? {
                let (k, _) = entry.ctx(path)?;
                let (t, s, node, key) = k.value();
                if t != thread || s != seq {
                    break;
                }
                keys.push(EffectKey::new(t, s, node, key));
            }
            Ok(keys)
        })
    }

    /// One range scan of the effects table over the thread's keys.
    fn thread_effects(&self, thread: &str) -> Result<Vec<(EffectKey, Vec<u8>)>, ReadError> {
        self.read(|txn, path| Ok(thread_effects_in(txn, path, thread)?))
    }

    /// Every part in one read transaction: the dump is the thread at one moment.
    fn dump_thread(&self, thread: &str) -> Result<Option<ThreadDump>, ReadError> {
        self.read(|txn, path| {
            let threads = txn.open_table(tables::THREADS).ctx(path)?;
            let Some(record) = reads::thread_record(path, &threads, &self.shared.leases, thread)? else {
                return Ok(None);
            };
            let mut dump = ThreadDump::new(record);
            dump.wake_at = timer_in(txn, path, thread)?;
            let numbered = numbered(txn, path, thread)?;
            let checkpoints = txn.open_table(tables::CHECKPOINTS).ctx(path)?;
            let snapshots = txn.open_table(tables::SNAPSHOTS).ctx(path)?;
            for summary in reads::summaries(path, &checkpoints, numbered)? {
                dump.checkpoints.extend(load_checkpoint(path, &checkpoints, &snapshots, numbered, summary.seq)?);
            }
            // The pending writes of the thread's checkpoints (a store keeps none of others).
            let seqs: BTreeSet<u64> = dump.checkpoints.iter().map(|c| c.seq).collect();
            dump.pending_writes = pending_writes_in(txn, path, thread, None)?;
            dump.pending_writes.retain(|w| seqs.contains(&w.seq));
            dump.effects = thread_effects_in(txn, path, thread)?;
            dump.audit = audit_in(txn, path, thread, Scan::Strict)?.items;
            dump.approvals = approvals_in(txn, path, thread, Scan::Strict)?.items;
            dump.events = event_log::all(txn, path, thread)?;
            Ok(Some(dump))
        })
    }

    fn record_effect(&self, key: &EffectKey, result: &[u8]) -> Result<EffectOutcome, EffectError> {
        let (key, result) = (key.clone(), result.to_vec());
        let (outcome, _) = self.submit(Durability::Immediate, move |tx: &Tx<'_>| {
            stage_record_effect(tx, &key, &result).map_err(EffectError::from)
        })?;
        Ok(outcome)
    }

    fn commit_effects(&self, batch: EffectBatch) -> Result<Vec<EffectOutcome>, CommitError> {
        let (outcomes, _) = self.submit(Durability::Immediate, move |tx: &Tx<'_>| stage_effect_batch(tx, &batch))?;
        Ok(outcomes)
    }

    fn append_audit(&self, thread: &str, entry: NewAuditEntry) -> Result<u64, AuditError> {
        let thread = thread.to_string();
        let (seq, _) =
            self.submit(Durability::Immediate, move |tx: &Tx<'_>| stage_append_audit(tx, &thread, &entry))?;
        Ok(seq)
    }

    fn list_audit(&self, thread: &str) -> Result<Vec<AuditEntry>, ReadError> {
        self.audit(thread, Scan::Strict).map(|l| l.items)
    }

    fn scan_audit(&self, thread: &str) -> Result<Listing<AuditEntry>, ReadError> {
        self.audit(thread, Scan::Skip)
    }

    fn put_approval(&self, approval: ApprovalRecord, actor: &str) -> Result<(), ApprovalError> {
        let actor = actor.to_string();
        self.submit(Durability::Immediate, move |tx: &Tx<'_>| stage_put_approval(tx, &approval, &actor))?;
        Ok(())
    }

    fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, ReadError> {
        self.read(|txn, path| {
            let approvals = txn.open_table(tables::APPROVALS).ctx(path)?;
            Ok(reads::get_str(path, &approvals, tables::APPROVALS, id, ApprovalRecord::decode)?)
        })
    }

    fn list_approvals(&self, thread: &str) -> Result<Vec<ApprovalRecord>, ReadError> {
        self.approvals_of(thread, Scan::Strict).map(|l| l.items)
    }

    fn scan_approvals(&self, thread: &str) -> Result<Listing<ApprovalRecord>, ReadError> {
        self.approvals_of(thread, Scan::Skip)
    }

    fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, ReadError> {
        self.pending_approvals(Scan::Strict).map(|l| l.items)
    }

    fn scan_pending_approvals(&self) -> Result<Listing<ApprovalRecord>, ReadError> {
        self.pending_approvals(Scan::Skip)
    }

    fn transition_approval(
        &self,
        id: &str,
        expected: ApprovalStatus,
        to: ApprovalStatus,
        patch: ApprovalPatch,
    ) -> Result<ApprovalRecord, ApprovalError> {
        let id = id.to_string();
        let (record, _) =
            self.submit(Durability::Immediate, move |tx: &Tx<'_>| stage_transition(tx, &id, expected, to, &patch))?;
        Ok(record)
    }

    fn compact(&self, thread: &str, keep_last: usize, fold: &FoldFn<'_>) -> Result<CompactReport, CompactError> {
        let (dropped, folded) = self.compact_thread(thread, keep_last.max(1), fold)?;
        let file_compacted = if dropped > 0 { self.compact_file()? } else { false };
        Ok(CompactReport { dropped, folded, file_compacted })
    }

    /// One write transaction, with the run's idempotency key.
    fn enqueue_run(&self, run: NewRun) -> Result<(), QueueError> {
        self.submit(Durability::Immediate, move |tx: &Tx<'_>| {
            idempotency::refuse_used(tx, &run)?;
            queue::stage_enqueue(tx, &run)?;
            idempotency::keep(tx, &run)?;
            Ok::<_, QueueError>(())
        })?;
        Ok(())
    }

    /// Made by the store's one writer thread, so claims in this process never overlap.
    fn claim_runs(
        &self,
        graph: &str,
        holder: &str,
        ttl_ms: u64,
        now: u64,
        max: usize,
    ) -> Result<Vec<QueuedRun>, QueueError> {
        let (graph, holder) = (graph.to_string(), holder.to_string());
        let (runs, _) = self.submit(Durability::Immediate, move |tx: &Tx<'_>| {
            queue::stage_claim(tx, &graph, &holder, ttl_ms, now, max)
        })?;
        Ok(runs)
    }

    fn heartbeat_runs(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
        let holder = holder.to_string();
        let (controls, _) =
            self.submit(Durability::Eventual, move |tx: &Tx<'_>| queue::stage_heartbeat(tx, &holder, now))?;
        Ok(controls)
    }

    fn settle_run(&self, thread: &str, holder: &str, settle: &Settle) -> Result<bool, QueueError> {
        let (thread, holder, settle) = (thread.to_string(), holder.to_string(), settle.clone());
        let (settled, _) =
            self.submit(Durability::Immediate, move |tx: &Tx<'_>| queue::stage_settle(tx, &thread, &holder, &settle))?;
        Ok(settled)
    }

    fn control_run(&self, thread: &str, control: RunControl) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        let (set, _) =
            self.submit(Durability::Immediate, move |tx: &Tx<'_>| queue::stage_control(tx, &thread, control))?;
        Ok(set)
    }

    fn wake_run(&self, thread: &str, wait: RunWait) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        let (woken, _) = self.submit(Durability::Immediate, move |tx: &Tx<'_>| queue::stage_wake(tx, &thread, wait))?;
        Ok(woken)
    }

    fn list_runs(&self) -> Result<Vec<QueuedRun>, QueueError> {
        Ok(self.read(|txn, path| queue::list(path, txn, &self.shared.leases))?)
    }

    fn scan_runs(&self) -> Result<Listing<QueuedRun>, QueueError> {
        Ok(self.read(|txn, path| queue::scan(path, txn, &self.shared.leases))?)
    }

    fn run_controls(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
        Ok(self.read(|txn, path| queue::controls(path, txn, &self.shared.leases, holder, now))?)
    }

    fn due_timers(&self, until: u64, limit: usize) -> Result<Vec<Timer>, ReadError> {
        self.read(|txn, path| {
            let timers = txn.open_table(tables::TIMERS).ctx(path)?;
            let of = txn.open_table(tables::TIMER_OF).ctx(path)?;
            let (mut out, mut corrected) = (Vec::new(), Vec::new());
            for entry in redb::ReadableTable::iter(&timers).ctx(path)? {
                if out.len() >= limit {
                    break;
                }
                let (k, _) = entry.ctx(path)?;
                let (wake_at, thread) = k.value();
                if wake_at > until {
                    break;
                }
                // The index's key has no checksum; the thread's record (which has one) is the
                // timer. A key it does not confirm (damaged) is read at the record's time, or
                // skipped when the thread has no timer. A record that does not decode is listed
                // at the key's time: waking that thread fails on its own record, and the other
                // timers still run. (A damaged key that names no sleeping thread, or whose time
                // moved past `until`, hides its thread's timer until then: the index has no
                // checksum to tell.)
                match crate::redb::step_commit::timer_of(path, &of, thread) {
                    Ok(Some(at)) if at == wake_at => out.push(Timer { wake_at, thread: thread.to_string() }),
                    Ok(Some(at)) if at <= until => corrected.push(Timer { wake_at: at, thread: thread.to_string() }),
                    Ok(_) => {}
                    Err(StorageError::Decode { .. }) => out.push(Timer { wake_at, thread: thread.to_string() }),
                    Err(e) => return Err(e.into()),
                }
            }
            // Corrected entries take their place by time (and a thread is listed once).
            if !corrected.is_empty() {
                out.extend(corrected);
                out.sort_by(|a, b| (a.wake_at, &a.thread).cmp(&(b.wake_at, &b.thread)));
                out.dedup_by(|a, b| a.thread == b.thread);
                out.truncate(limit);
            }
            Ok(out)
        })
    }

    fn thread_timer(&self, thread: &str) -> Result<Option<u64>, ReadError> {
        self.read(|txn, path| Ok(timer_in(txn, path, thread)?))
    }

    fn breaker(&self, tool: &str) -> Result<Option<BreakerRecord>, ReadError> {
        Ok(self.read(|txn, path| breakers::read(path, txn, tool))?)
    }

    /// Made by the store's one writer thread, so concurrent updates never interleave.
    fn update_breaker(&self, update: BreakerUpdate) -> Result<BreakerAnswer, BreakerError> {
        let (answer, _) = self.submit(Durability::Immediate, move |tx: &Tx<'_>| breakers::stage_update(tx, &update))?;
        Ok(answer)
    }

    fn put_graph_description(&self, fingerprint: &str, description: &str) -> Result<(), StorageError> {
        let (fingerprint, row) = (fingerprint.to_string(), Payload::encode(description.as_bytes()));
        self.submit(Durability::Immediate, move |tx: &Tx<'_>| -> Result<(), StorageError> {
            let mut graphs = tx.txn.open_table(tables::GRAPHS).ctx(tx.path)?;
            tx.wrote();
            graphs.insert(fingerprint.as_str(), row.as_slice()).ctx(tx.path)?;
            Ok(())
        })?;
        Ok(())
    }

    /// One write transaction.
    fn enqueue_run_audited(&self, run: NewRun, entry: NewAuditEntry) -> Result<(), QueueError> {
        self.submit(Durability::Immediate, move |tx: &Tx<'_>| {
            idempotency::refuse_used(tx, &run)?;
            queue::stage_enqueue(tx, &run)?;
            idempotency::keep(tx, &run)?;
            stage_append_audit(tx, &run.thread, &entry)?;
            Ok::<_, QueueError>(())
        })?;
        Ok(())
    }

    fn restore_thread(&self, dump: crate::dump::ThreadDump) -> Result<(), CommitError> {
        self.submit(Durability::Immediate, move |tx: &Tx<'_>| crate::redb::restore::stage_restore(tx, &dump))?;
        Ok(())
    }

    /// One write transaction.
    fn restore_threads(&self, dumps: Vec<crate::dump::ThreadDump>) -> Result<(), CommitError> {
        crate::dump::check_distinct(&dumps)?;
        self.submit(Durability::Immediate, move |tx: &Tx<'_>| {
            dumps.iter().try_for_each(|dump| crate::redb::restore::stage_restore(tx, dump))
        })?;
        Ok(())
    }

    fn graph_description(&self, fingerprint: &str) -> Result<Option<String>, ReadError> {
        self.read(|txn, path| {
            let graphs = txn.open_table(tables::GRAPHS).ctx(path)?;
            let bytes = reads::get_str(path, &graphs, tables::GRAPHS, fingerprint, Payload::decode)?;
            Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
        })
    }

    /// One write transaction.
    fn wake_run_audited(&self, thread: &str, wait: RunWait, entry: NewAuditEntry) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        let (woken, _) = self.submit(Durability::Immediate, move |tx: &Tx<'_>| {
            let woken = queue::stage_wake(tx, &thread, wait)?;
            if woken {
                stage_append_audit(tx, &thread, &entry)?;
            }
            Ok::<_, QueueError>(woken)
        })?;
        Ok(woken)
    }

    /// One write transaction.
    fn control_run_audited(&self, thread: &str, control: RunControl, entry: NewAuditEntry) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        let (set, _) = self.submit(Durability::Immediate, move |tx: &Tx<'_>| {
            let set = queue::stage_control(tx, &thread, control)?;
            if set {
                stage_append_audit(tx, &thread, &entry)?;
            }
            Ok::<_, QueueError>(set)
        })?;
        Ok(set)
    }

    /// One write transaction, then the file is compacted (waiting for reads in flight) when the
    /// purge removed anything: the purge is done whether or not the compaction worked.
    fn purge_thread(&self, thread: &str, entry: NewAuditEntry) -> Result<PurgeReport, PurgeError> {
        let thread = thread.to_string();
        let (mut report, _) = self
            .submit(Durability::Immediate, move |tx: &Tx<'_>| crate::redb::purge::stage_purge(tx, &thread, &entry))?;
        let removed = report.checkpoints
            + report.pending_writes
            + report.effects
            + report.audit_details
            + report.events
            + report.webhooks;
        if removed + report.approvals + report.queued_runs > 0 {
            report.file_compacted = self.compact_file().unwrap_or(false);
        }
        Ok(report)
    }

    /// One write transaction.
    fn set_legal_hold(&self, thread: &str, hold: Option<LegalHold>, entry: NewAuditEntry) -> Result<(), PurgeError> {
        let thread = thread.to_string();
        self.submit(Durability::Immediate, move |tx: &Tx<'_>| {
            crate::redb::purge::stage_hold(tx, &thread, hold.as_ref(), &entry)
        })?;
        Ok(())
    }

    fn legal_hold(&self, thread: &str) -> Result<Option<LegalHold>, ReadError> {
        self.read(|txn, path| {
            let holds = txn.open_table(tables::HOLDS).ctx(path)?;
            Ok(crate::redb::purge::hold_in(path, &holds, thread)?)
        })
    }

    fn file_path(&self) -> Option<std::path::PathBuf> {
        self.on_disk().then(|| self.path_buf())
    }

    fn read_events(&self, thread: &str, after: Option<EventId>, limit: usize) -> Result<EventPage, ReadError> {
        self.read(|txn, path| Ok(event_log::read(txn, path, thread, after, limit)?))
    }

    /// One write transaction.
    fn enqueue_follow_up(
        &self,
        run: NewRun,
        entry: NewAuditEntry,
        place: FollowUpPlace,
    ) -> Result<FollowUpQueued, QueueError> {
        let (queued, _) =
            self.submit(Durability::Immediate, move |tx: &Tx<'_>| queue::stage_follow_up(tx, &run, &entry, place))?;
        Ok(queued)
    }

    /// One write transaction.
    fn enqueue_follow_up_as(
        &self,
        run: NewRun,
        entry: NewAuditEntry,
        rule: crate::FollowUpRule,
    ) -> Result<FollowUpQueued, QueueError> {
        let run = NewRun { follow_up: true, ..run };
        let (queued, _) =
            self.submit(Durability::Immediate, move |tx: &Tx<'_>| queue::stage_follow_up_as(tx, &run, &entry, &rule))?;
        Ok(queued)
    }

    fn list_follow_ups(&self, thread: &str) -> Result<Vec<QueuedRun>, QueueError> {
        Ok(self.read(|txn, path| queue::follow_ups_of(txn, path, thread))?)
    }

    fn put_schedule(&self, schedule: ScheduleRecord) -> Result<(), QueueError> {
        self.submit(Durability::Immediate, move |tx: &Tx<'_>| schedules::stage_put(tx, &schedule))?;
        Ok(())
    }

    fn delete_schedule(&self, id: &str) -> Result<bool, QueueError> {
        let id = id.to_string();
        Ok(self.submit(Durability::Immediate, move |tx: &Tx<'_>| schedules::stage_delete(tx, &id))?.0)
    }

    fn schedule(&self, id: &str) -> Result<Option<ScheduleRecord>, QueueError> {
        Ok(self.read(|txn, path| schedules::get(txn, path, id))?)
    }

    fn scan_schedules(&self) -> Result<Listing<ScheduleRecord>, QueueError> {
        Ok(self.read(schedules::scan)?)
    }

    /// One write transaction, made by the store's one writer thread: of two fires of one
    /// `next_at`, the second finds it moved.
    fn fire_schedule(&self, fire: ScheduleFire) -> Result<bool, QueueError> {
        Ok(self.submit(Durability::Immediate, move |tx: &Tx<'_>| schedules::stage_fire(tx, &fire))?.0)
    }

    fn due_webhooks(&self, now: u64, limit: usize) -> Result<Listing<WebhookDelivery>, QueueError> {
        Ok(self.read(|txn, path| webhooks::due(txn, path, now, limit))?)
    }

    fn claim_webhook(&self, id: u64, holder: &str, now: u64, until: u64) -> Result<bool, QueueError> {
        let holder = holder.to_string();
        let job = move |tx: &Tx<'_>| webhooks::stage_claim(tx, id, &holder, now, until);
        Ok(self.submit(Durability::Immediate, job)?.0)
    }

    fn settle_webhook(&self, id: u64, holder: &str, settle: WebhookSettle) -> Result<bool, QueueError> {
        let holder = holder.to_string();
        let job = move |tx: &Tx<'_>| webhooks::stage_settle(tx, id, &holder, &settle);
        Ok(self.submit(Durability::Immediate, job)?.0)
    }

    fn list_webhooks(&self, thread: &str) -> Result<Vec<WebhookDelivery>, QueueError> {
        Ok(self.read(|txn, path| webhooks::list(txn, path, thread))?)
    }

    /// The wakes are called after this store's own commits (a redb file is open in one
    /// process): by [`Store::commit_step`] on the committing thread, by
    /// [`Store::commit_step_then`] on the writer thread. A wake that blocks holds up that commit's
    /// answer (and, on the writer thread, every later commit); one that panics is skipped.
    fn on_events(&self, wake: EventWake) -> bool {
        self.wakes.add(wake);
        true
    }
}
