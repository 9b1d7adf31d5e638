//! The [`Store`] trait on a [`PostgresStore`]: each method a future run on the store's I/O
//! thread, in a transaction where it writes.

use std::path::PathBuf;

use crate::breaker::{BreakerAnswer, BreakerError, BreakerRecord, BreakerUpdate};
use crate::error::{
    ApprovalError, AuditError, CommitError, CompactError, EffectError, LeaseError, PurgeError, ReadError, StorageError,
};
use crate::postgres::PostgresStore;
use crate::postgres::commit::commit;
use crate::postgres::error::Fail;
use crate::postgres::transaction::{OpenTx, in_transaction, released, retrying};
use crate::postgres::{
    approvals, breakers, compact, effects, event_log, follow_ups, idempotency, leases, purge, queue, reads, restore,
    schedules, sql, webhooks,
};
use crate::queue::{
    FollowUpPlace, FollowUpQueued, NewRun, QueueError, QueuedRun, RunControl, RunWait, ScheduleFire, Settle,
};
use crate::record::{
    ApprovalPatch, ApprovalRecord, ApprovalStatus, AuditEntry, Checkpoint, CheckpointSummary, CommitReceipt,
    CompactReport, Durability, EffectBatch, EffectKey, EffectOutcome, EventId, EventPage, EventWake, Lease, LegalHold,
    NewAuditEntry, PendingWrite, PurgeReport, ScheduleRecord, StateChain, StepCommit, ThreadRecord, Timer,
    WebhookDelivery, WebhookSettle,
};
use crate::store::{CommitCallback, FoldFn, Listing, Store};

/// How often a compaction is planned again when the thread's history changed under it.
const COMPACT_ATTEMPTS: u32 = 3;

/// Calls a commit callback exactly once: with the answer, or with an error if the I/O thread
/// dropped the commit unanswered (the store was closed).
struct Answer {
    done: Option<CommitCallback>,
    path: PathBuf,
}

impl Answer {
    fn send(mut self, answer: Result<CommitReceipt, CommitError>) {
        if let Some(done) = self.done.take() {
            done(answer);
        }
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done(Err(CommitError::Storage(StorageError::Closed {
                path: self.path.clone(),
                detail: "the commit did not answer (the store was closed, or the call stopped on the store's I/O \
                         thread); whether it was written is unknown: read the thread back"
                    .to_string(),
            })));
        }
    }
}

/// Runs `$body` (a `Result<T, Fail<QueueError>>` expression using `$ctx` and `$c`, a pooled
/// connection) on the store's I/O thread, again on a serialization failure or deadlock.
macro_rules! on_client {
    ($self:ident, |$ctx:ident, $c:ident| $body:expr) => {
        $self.call(move |pool| async move {
            let $ctx = &*pool;
            retrying!($ctx, {
                let $c = $ctx.client().await?;
                $body
            })
        })
    };
}

impl Store for PostgresStore {
    fn thread(&self, id: &str) -> Result<Option<ThreadRecord>, ReadError> {
        let id = id.to_string();
        self.call(move |ctx| async move { Ok(reads::thread(&ctx, &id).await?) })
    }

    fn list_threads(&self) -> Result<Vec<ThreadRecord>, ReadError> {
        self.call(move |ctx| async move { Ok(reads::threads(&ctx, reads::Scan::Strict).await?.items) })
    }

    fn scan_threads(&self) -> Result<Listing<ThreadRecord>, ReadError> {
        self.call(move |ctx| async move { Ok(reads::threads(&ctx, reads::Scan::Skip).await?) })
    }

    fn child_threads(&self, parent: &str) -> Result<Listing<ThreadRecord>, ReadError> {
        let parent = parent.to_string();
        self.call(move |ctx| async move { Ok(reads::child_threads(&ctx, &parent).await?) })
    }

    fn commit_step(&self, c: StepCommit) -> Result<CommitReceipt, CommitError> {
        self.call(move |ctx| async move { commit(&ctx, c).await })
    }

    /// Answers on the store's I/O thread: `done` must not block or call the store.
    fn commit_step_then(&self, c: StepCommit, done: CommitCallback) {
        let ctx = self.ctx.clone();
        let answer = Answer { done: Some(done), path: ctx.path.clone() };
        self.io.spawn(async move {
            let result = commit(&ctx, c).await;
            answer.send(result);
        });
    }

    fn flush(&self) -> Result<(), CommitError> {
        self.call(move |ctx| async move {
            // A synchronous commit that writes makes the WAL durable up to it, which covers
            // every earlier `synchronous_commit = off` commit.
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| sql::execute(
                &tx,
                "UPDATE flush SET n = n + 1 WHERE id = 1",
                &[]
            )
            .await
            .map_err(Fail::<CommitError>::Db))?;
            Ok(())
        })
    }

    fn checkpoint(&self, thread: &str, seq: u64) -> Result<Option<Checkpoint>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::checkpoint(&ctx, &thread, seq).await?) })
    }

    fn latest_checkpoint(&self, thread: &str) -> Result<Option<Checkpoint>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::latest_checkpoint(&ctx, &thread).await?) })
    }

    fn list_checkpoints(&self, thread: &str) -> Result<Vec<CheckpointSummary>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::list_checkpoints(&ctx, &thread).await?) })
    }

    fn state_chain(&self, thread: &str, seq: u64) -> Result<Option<StateChain>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move {
            let client = ctx.client().await?;
            reads::state_chain(&ctx, &client, &thread, seq).await
        })
    }

    fn pending_writes(&self, thread: &str, seq: u64) -> Result<Vec<PendingWrite>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::pending_writes(&ctx, &thread, seq).await?) })
    }

    fn acquire_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        let (thread, holder) = (thread.to_string(), holder.to_string());
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, leases::acquire(ctx, &thread, &holder, ttl_ms, now).await)
        })
    }

    fn renew_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        let (thread, holder) = (thread.to_string(), holder.to_string());
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, leases::renew(ctx, &thread, &holder, ttl_ms, now).await)
        })
    }

    /// One statement on a pooled connection; safe from a `Drop` on an async worker thread.
    fn release_lease(&self, thread: &str, holder: &str) -> Result<(), LeaseError> {
        let (thread, holder) = (thread.to_string(), holder.to_string());
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, leases::release(ctx, &thread, &holder).await)
        })
    }

    fn effect(&self, key: &EffectKey) -> Result<Option<Vec<u8>>, ReadError> {
        let key = key.clone();
        self.call(move |ctx| async move { Ok(reads::effect(&ctx, &key).await?) })
    }

    fn effect_keys(&self, thread: &str, seq: u64) -> Result<Vec<EffectKey>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::effect_keys(&ctx, &thread, seq).await?) })
    }

    /// One query over the thread's rows of the effects table.
    fn thread_effects(&self, thread: &str) -> Result<Vec<(EffectKey, Vec<u8>)>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::thread_effects(&ctx, &thread).await?) })
    }

    fn record_effect(&self, key: &EffectKey, result: &[u8]) -> Result<EffectOutcome, EffectError> {
        let (key, result) = (key.clone(), result.to_vec());
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, {
                let client = ctx.client().await?;
                effects::record::<_, EffectError>(ctx, &client, &key, &result).await
            })
        })
    }

    /// One transaction: the effects, the approval compare-and-sets (each under its row's lock,
    /// with its audit entry) and the audit entries are written together, or, on a refusal, none
    /// of them.
    fn commit_effects(&self, batch: EffectBatch) -> Result<Vec<EffectOutcome>, CommitError> {
        effects::check_batch(&batch)?;
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| effects::stage_batch(ctx, &tx, &batch).await)
        })
    }

    fn append_audit(&self, thread: &str, entry: NewAuditEntry) -> Result<u64, AuditError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| approvals::append_audit::<_, AuditError>(
                ctx, &tx, &thread, &entry
            )
            .await)
        })
    }

    fn list_audit(&self, thread: &str) -> Result<Vec<AuditEntry>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::audit(&ctx, &thread, reads::Scan::Strict).await?.items) })
    }

    fn scan_audit(&self, thread: &str) -> Result<Listing<AuditEntry>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::audit(&ctx, &thread, reads::Scan::Skip).await?) })
    }

    fn put_approval(&self, approval: ApprovalRecord, actor: &str) -> Result<(), ApprovalError> {
        let actor = actor.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| approvals::insert::<_, ApprovalError>(
                ctx, &tx, &approval, &actor
            )
            .await)?;
            Ok(())
        })
    }

    fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, ReadError> {
        let id = id.to_string();
        self.call(move |ctx| async move { Ok(reads::approval(&ctx, &id).await?) })
    }

    fn list_approvals(&self, thread: &str) -> Result<Vec<ApprovalRecord>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::approvals(&ctx, &thread, reads::Scan::Strict).await?.items) })
    }

    fn scan_approvals(&self, thread: &str) -> Result<Listing<ApprovalRecord>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::approvals(&ctx, &thread, reads::Scan::Skip).await?) })
    }

    fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, ReadError> {
        self.call(move |ctx| async move { Ok(reads::pending_approvals(&ctx, reads::Scan::Strict).await?.items) })
    }

    fn scan_pending_approvals(&self) -> Result<Listing<ApprovalRecord>, ReadError> {
        self.call(move |ctx| async move { Ok(reads::pending_approvals(&ctx, reads::Scan::Skip).await?) })
    }

    fn transition_approval(
        &self,
        id: &str,
        expected: ApprovalStatus,
        to: ApprovalStatus,
        patch: ApprovalPatch,
    ) -> Result<ApprovalRecord, ApprovalError> {
        let id = id.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            let (record, _) =
                in_transaction!(ctx, Durability::Immediate, |tx| approvals::transition::<_, ApprovalError>(
                    ctx, &tx, &id, expected, to, &patch
                )
                .await)?;
            Ok(record)
        })
    }

    fn compact(&self, thread: &str, keep_last: usize, fold: &FoldFn<'_>) -> Result<CompactReport, CompactError> {
        let keep = keep_last.max(1);
        for _ in 0..COMPACT_ATTEMPTS {
            let t = thread.to_string();
            let plan = self.call(move |ctx| async move {
                let client = ctx.client().await?;
                match compact::plan(&ctx, &client, &t, keep).await {
                    Ok(plan) => Ok(plan),
                    Err(Fail::Refused(e)) => Err(e),
                    Err(Fail::Storage(e)) => Err(e.into()),
                    Err(Fail::Db(e)) => Err(ctx.db(&e).into()),
                }
            })?;
            let mut folded = Vec::with_capacity(plan.folds.len());
            for (mut summary, chain) in plan.folds {
                let seq = summary.seq;
                let snapshot =
                    fold(&chain).map_err(|source| CompactError::Fold { thread: thread.to_string(), seq, source })?;
                let delta = chain.steps.last().map(|s| s.delta.clone()).unwrap_or_default();
                summary.has_snapshot = true;
                summary.payload_bytes = (snapshot.len() + delta.iter().map(Vec::len).sum::<usize>()) as u64;
                folded.push(compact::Folded { seq: seq as i64, row: summary.encode_row(&delta), snapshot });
            }
            let (t, seen, dropped) = (thread.to_string(), plan.seen, plan.dropped);
            let n_folded = folded.len();
            let n_dropped = dropped.len();
            let applied = self.call(move |ctx| async move {
                let ctx = &*ctx;
                in_transaction!(ctx, Durability::Immediate, |tx| compact::apply(ctx, &tx, &t, &seen, &dropped, &folded)
                    .await)
            })?;
            if applied {
                // PostgreSQL reclaims the space itself (autovacuum): nothing to compact here.
                return Ok(CompactReport::new(n_dropped, n_folded, false));
            }
        }
        Err(CompactError::Storage(StorageError::Conflict {
            path: self.ctx.path.clone(),
            attempts: COMPACT_ATTEMPTS,
            detail: "the thread's history kept changing during compaction".to_string(),
        }))
    }

    /// One statement; with an idempotency key, one transaction (the key, then the run).
    fn enqueue_run(&self, run: NewRun) -> Result<(), QueueError> {
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            if run.idempotency.is_some() {
                return in_transaction!(ctx, Durability::Immediate, |tx| async {
                    idempotency::keep(ctx, &tx, &run).await?;
                    queue::enqueue(ctx, &tx, &run).await
                }
                .await);
            }
            retrying!(ctx, {
                let client = ctx.client().await?;
                queue::enqueue(ctx, &client, &run).await
            })
        })
    }

    /// One transaction in two round trips: `SELECT .. FOR UPDATE SKIP LOCKED` on the queue rows
    /// (with `BEGIN`), then the leases of the picked threads and the rows' claim columns (with
    /// the claimed rows and `COMMIT`). Committed without waiting for the disk: a claim lost in a
    /// server crash leaves the run queued and the lease with its previous holder, so the
    /// claimer's fenced commits are refused and the run is claimed again.
    fn claim_runs(
        &self,
        graph: &str,
        holder: &str,
        ttl_ms: u64,
        now: u64,
        max: usize,
    ) -> Result<Vec<QueuedRun>, QueueError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let (graph, holder) = (graph.to_string(), holder.to_string());
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, {
                let mut open = OpenTx { client: Some(ctx.client().await?) };
                let claimed = match &open.client {
                    Some(client) => queue::claim(ctx, client, &graph, &holder, ttl_ms, now, max).await,
                    None => Err(Fail::Storage(released(ctx))),
                };
                match claimed {
                    Ok(runs) => {
                        // Committed by `claim`: the connection goes back to the pool.
                        open.client.take();
                        Ok(runs)
                    }
                    Err(e) => {
                        let _ = open.end("ROLLBACK").await;
                        Err(e)
                    }
                }
            })
        })
    }

    /// One round trip; committed without waiting for the disk (a heartbeat is a timestamp).
    fn heartbeat_runs(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
        let holder = holder.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, {
                let mut open = OpenTx { client: Some(ctx.client().await?) };
                let beat = match &open.client {
                    Some(client) => queue::heartbeat(ctx, client, &holder, now).await,
                    None => Err(Fail::Storage(released(ctx))),
                };
                match beat {
                    Ok(controls) => {
                        // Committed by `heartbeat`: the connection goes back to the pool.
                        open.client.take();
                        Ok(controls)
                    }
                    Err(e) => {
                        let _ = open.end("ROLLBACK").await;
                        Err(e)
                    }
                }
            })
        })
    }

    /// One statement: one commit, one round trip (run again when a concurrent change to the row,
    /// a cancel or a follow-up, came after its snapshot).
    fn settle_run(&self, thread: &str, holder: &str, settle: &Settle) -> Result<bool, QueueError> {
        let (thread, holder, settle) = (thread.to_string(), holder.to_string(), settle.clone());
        self.call(move |ctx| async move { queue::settle_on(&ctx, &thread, &holder, &settle, false).await })
    }

    fn wake_run(&self, thread: &str, wait: RunWait) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        on_client!(self, |ctx, c| queue::wake(&c, &thread, wait).await)
    }

    fn control_run(&self, thread: &str, control: RunControl) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        on_client!(self, |ctx, c| queue::control(ctx, &c, &thread, control).await)
    }

    fn list_runs(&self) -> Result<Vec<QueuedRun>, QueueError> {
        on_client!(self, |ctx, c| queue::list(ctx, &c).await)
    }

    fn scan_runs(&self) -> Result<Listing<QueuedRun>, QueueError> {
        on_client!(self, |ctx, c| queue::scan(ctx, &c).await)
    }

    fn due_timers(&self, until: u64, limit: usize) -> Result<Vec<Timer>, ReadError> {
        self.call(move |ctx| async move { Ok(reads::due_timers(&ctx, until, limit).await?) })
    }

    /// One `REPEATABLE READ` snapshot: the dump is the thread at one moment.
    fn dump_thread(&self, thread: &str) -> Result<Option<crate::dump::ThreadDump>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::dump(&ctx, &thread).await?) })
    }

    fn thread_timer(&self, thread: &str) -> Result<Option<u64>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::thread_timer(&ctx, &thread).await?) })
    }

    fn breaker(&self, tool: &str) -> Result<Option<BreakerRecord>, ReadError> {
        let tool = tool.to_string();
        self.call(move |ctx| async move {
            let client = ctx.client().await?;
            Ok(breakers::read(&ctx, &client, &tool).await?)
        })
    }

    /// One transaction: the tool's row is locked (`FOR UPDATE`), moved, and a change of state
    /// audited, so updates from any number of processes never interleave.
    fn update_breaker(&self, update: BreakerUpdate) -> Result<BreakerAnswer, BreakerError> {
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| breakers::update(ctx, &tx, &update).await)
        })
    }

    fn put_graph_description(&self, fingerprint: &str, description: &str) -> Result<(), StorageError> {
        let (fingerprint, description) = (fingerprint.to_string(), description.to_string());
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| sql::execute(
                &tx,
                "INSERT INTO graphs (fingerprint, description) VALUES ($1, $2)
                 ON CONFLICT (fingerprint) DO UPDATE SET description = EXCLUDED.description",
                &[&fingerprint, &description],
            )
            .await
            .map_err(Fail::<StorageError>::from))
            .map(|_| ())
        })
    }

    fn restore_thread(&self, dump: crate::dump::ThreadDump) -> Result<(), CommitError> {
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| restore::stage(ctx, &tx, &dump).await)
        })
    }

    /// One transaction.
    fn restore_threads(&self, dumps: Vec<crate::dump::ThreadDump>) -> Result<(), CommitError> {
        crate::dump::check_distinct(&dumps)?;
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| async {
                for dump in &dumps {
                    restore::stage(ctx, &tx, dump).await?;
                }
                Ok::<_, Fail<CommitError>>(())
            }
            .await)
        })
    }

    fn graph_description(&self, fingerprint: &str) -> Result<Option<String>, ReadError> {
        let fingerprint = fingerprint.to_string();
        self.call(move |ctx| async move {
            let client = ctx.client().await?;
            let row = sql::query_opt(&client, "SELECT description FROM graphs WHERE fingerprint = $1", &[&fingerprint])
                .await
                .map_err(|e| ctx.db(&e))?;
            Ok(row.map(|r| sql::col::<String>(&ctx.path, "graphs", &r, 0)).transpose()?)
        })
    }

    /// One transaction.
    fn enqueue_run_audited(&self, run: NewRun, entry: NewAuditEntry) -> Result<(), QueueError> {
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| async {
                idempotency::keep(ctx, &tx, &run).await?;
                queue::enqueue(ctx, &tx, &run).await?;
                approvals::append_audit::<_, QueueError>(ctx, &tx, &run.thread, &entry).await?;
                Ok::<_, Fail<QueueError>>(())
            }
            .await)
        })
    }

    /// One transaction.
    fn wake_run_audited(&self, thread: &str, wait: RunWait, entry: NewAuditEntry) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| async {
                let woken = queue::wake(&tx, &thread, wait).await?;
                if woken {
                    approvals::append_audit::<_, QueueError>(ctx, &tx, &thread, &entry).await?;
                }
                Ok::<_, Fail<QueueError>>(woken)
            }
            .await)
        })
    }

    /// One transaction.
    fn control_run_audited(&self, thread: &str, control: RunControl, entry: NewAuditEntry) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| async {
                let set = queue::control(ctx, &tx, &thread, control).await?;
                if set {
                    approvals::append_audit::<_, QueueError>(ctx, &tx, &thread, &entry).await?;
                }
                Ok::<_, Fail<QueueError>>(set)
            }
            .await)
        })
    }
    /// One statement (settle and release together), as [`Store::settle_run`].
    fn settle_run_and_release(&self, thread: &str, holder: &str, settle: &Settle) -> Result<bool, QueueError> {
        let (thread, holder, settle) = (thread.to_string(), holder.to_string(), settle.clone());
        self.call(move |ctx| async move { queue::settle_on(&ctx, &thread, &holder, &settle, true).await })
    }

    /// One read-only statement on `holder`'s rows: no commit to wait for.
    fn run_controls(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
        let holder = holder.to_string();
        on_client!(self, |ctx, c| queue::controls(ctx, &c, &holder, now).await)
    }

    /// One transaction; the threads' rows are locked.
    fn purge_thread(&self, thread: &str, entry: NewAuditEntry) -> Result<PurgeReport, PurgeError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| purge::purge(ctx, &tx, &thread, &entry).await)
        })
    }

    /// One transaction.
    fn set_legal_hold(&self, thread: &str, hold: Option<LegalHold>, entry: NewAuditEntry) -> Result<(), PurgeError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| purge::set_hold(ctx, &tx, &thread, hold.as_ref(), &entry)
                .await)
        })
    }

    fn legal_hold(&self, thread: &str) -> Result<Option<LegalHold>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(purge::hold(&ctx, &thread).await?) })
    }

    /// One statement, so one snapshot.
    fn read_events(&self, thread: &str, after: Option<EventId>, limit: usize) -> Result<EventPage, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(event_log::read(&ctx, &thread, after, limit).await?) })
    }

    /// The wakes hear the commits of every process on this store's schema, through one
    /// `LISTEN` connection the first call opens beside the pool's (it waits until that
    /// connection listens, at most the connect timeout and a second). They are called on the store's I/O thread: a wake
    /// must not block, nor call the store (that waits on the same thread). While the connection
    /// is down (it reconnects by itself), commits are not heard: readers also poll.
    fn on_events(&self, wake: EventWake) -> bool {
        self.events.add(&self.io, wake);
        true
    }

    /// One transaction: the follow-up is added under the lock of its thread's queued run.
    fn enqueue_follow_up(
        &self,
        run: NewRun,
        entry: NewAuditEntry,
        place: FollowUpPlace,
    ) -> Result<FollowUpQueued, QueueError> {
        self.call(move |ctx| async move { follow_ups::submit(&ctx, run, entry, Err(place)).await })
    }

    /// One transaction: the thread's queued run is read, and the follow-up added, under its
    /// row's lock.
    fn enqueue_follow_up_as(
        &self,
        run: NewRun,
        entry: NewAuditEntry,
        rule: crate::FollowUpRule,
    ) -> Result<FollowUpQueued, QueueError> {
        self.call(move |ctx| async move { follow_ups::submit(&ctx, run, entry, Ok(rule)).await })
    }

    fn list_follow_ups(&self, thread: &str) -> Result<Vec<QueuedRun>, QueueError> {
        let thread = thread.to_string();
        on_client!(self, |ctx, c| follow_ups::list(ctx, &c, &thread).await)
    }

    fn put_schedule(&self, schedule: ScheduleRecord) -> Result<(), QueueError> {
        on_client!(self, |ctx, c| schedules::put(ctx, &c, &schedule).await)
    }

    fn delete_schedule(&self, id: &str) -> Result<bool, QueueError> {
        let id = id.to_string();
        on_client!(self, |ctx, c| schedules::delete(&c, &id).await)
    }

    fn schedule(&self, id: &str) -> Result<Option<ScheduleRecord>, QueueError> {
        let id = id.to_string();
        on_client!(self, |ctx, c| schedules::get(ctx, &c, &id).await)
    }

    fn scan_schedules(&self) -> Result<Listing<ScheduleRecord>, QueueError> {
        on_client!(self, |ctx, c| schedules::scan(ctx, &c).await)
    }

    /// One transaction: a compare-and-set `UPDATE` of the schedule's row, then the run.
    fn fire_schedule(&self, fire: ScheduleFire) -> Result<bool, QueueError> {
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| schedules::fire(ctx, &tx, &fire).await)
        })
    }

    fn due_webhooks(&self, now: u64, limit: usize) -> Result<Listing<WebhookDelivery>, QueueError> {
        on_client!(self, |ctx, c| webhooks::due(ctx, &c, now, limit).await)
    }

    fn claim_webhook(&self, id: u64, holder: &str, now: u64, until: u64) -> Result<bool, QueueError> {
        let holder = holder.to_string();
        on_client!(self, |ctx, c| webhooks::claim(&c, id, &holder, now, until).await)
    }

    fn settle_webhook(&self, id: u64, holder: &str, settle: WebhookSettle) -> Result<bool, QueueError> {
        let holder = holder.to_string();
        on_client!(self, |ctx, c| webhooks::settle(&c, id, &holder, &settle).await)
    }

    fn list_webhooks(&self, thread: &str) -> Result<Vec<WebhookDelivery>, QueueError> {
        let thread = thread.to_string();
        on_client!(self, |ctx, c| webhooks::list(ctx, &c, &thread).await)
    }
}
