//! The checkpointer: one checkpoint per super-step of a run, the pending writes of a step
//! that paused or failed, and the thread's record, each commit fenced by the run's lease.
//! Opening a thread for a run is in [`open`]; what a step's commit settles of the runs before
//! it, in [`sweep`]. With the app's event log on, each commit carries the run's events
//! ([`event_log`](super::event_log)).

pub(super) mod open;
mod sweep;

use std::sync::Arc;

use agentflow_store::{
    ApprovalPatch, ApprovalStatus, ApprovalTransition, Checkpoint, CheckpointMetadata, CheckpointSource,
    Durability as StoreDurability, LeaseError, NewEvent, PendingWrite, StepCommit, Store, ThreadRecord, ThreadStatus,
};
use serde_json::{Value, json};

use super::budget::budget_write;
use super::chain::next_seq;
use super::cut_off::UnknownOutcomes;
use super::durability::Durability;
use super::error::PersistError;
use super::event_log::RunLog;
use super::finished::{FinishedWrites, stored_write};
use super::journal::{Journal, ParentLeases};
use super::keys::{ANSWERS, BUDGET, INTERRUPTS, PAYLOADS};
use super::lease::LeaseGuard;
use crate::core::budget::{RunUsage, ThreadBudget};
use crate::core::clock::now_ms;
use crate::core::node_id::NodeId;
use crate::core::state::State;
use crate::core::step::Step;
use crate::interrupt::{KeptAnswer, KeptAnswers, Pending};

/// Below this size a snapshot is never worth skipping.
const MIN_SNAPSHOT_BYTES: usize = 512;

/// Writes a thread's checkpoints for one run. Holds the thread's lease
/// while it lives.
pub(crate) struct Checkpointer {
    store: Arc<dyn Store>,
    pub(crate) thread: String,
    owner: String,
    /// The thread whose run started this one as a subgraph child, stored in its record.
    parent: Option<String>,
    /// The tenant stored in its record (fixed when the thread was created).
    tenant: Option<String>,
    /// The W3C `traceparent` of the thread's root span, stored in its record (the first one
    /// stored wins); `None` without OpenTelemetry and for a subgraph child.
    trace: Option<String>,
    lease: LeaseGuard,
    fingerprint: String,
    version: u32,
    durability: Durability,
    /// The newest checkpoint of this run.
    pub(crate) seq: u64,
    /// The checkpoint the next step's effects and approvals are keyed by:
    /// `seq`, or for a step continued after a manual update, the checkpoint
    /// that step started from.
    journal_seq: u64,
    /// The next step continues a thread's move to this version of its graph (the checkpoint it
    /// continues is the move's).
    pub(crate) moved_to: Option<u32>,
    /// With `moved_to`: the names the renamed nodes' attempt started under (see
    /// [`Journal::started_as`]).
    pub(crate) started_as: Arc<std::collections::BTreeMap<String, String>>,
    created_at: u64,
    snapshot_len: usize,
    delta_since: usize,
    /// The last step's commit already recorded the thread as completed.
    completed: bool,
    /// The status and detail last written, and when they changed.
    last_status: Option<(ThreadStatus, String)>,
    updated_at: u64,
    /// The thread's stored limits and its usage before this run.
    pub(crate) budget: ThreadBudget,
    /// The next step commit cancels the approvals left open: set on resume,
    /// since a paused step may have asked for calls it no longer makes.
    sweep_approvals: bool,
    /// Whether a node of the graph runs subgraphs: only then can a step leave children behind.
    runs_subgraphs: bool,
    /// A subgraph child's run: the leases of the runs above it (see [`ParentLeases`]).
    parents: ParentLeases,
    /// Approved calls of the running step that failed with a passing fault, left `EXECUTING` for
    /// a retry of their node (see [`Journal::failed_approvals`]).
    failed_approvals: Arc<std::sync::Mutex<Vec<String>>>,
    /// The checkpoint has a list of kept answers (see [`KeptAnswer`]): the next pause replaces it.
    answers_kept: bool,
    /// The state was migrated from an older version on load: the version it has now. Until a
    /// snapshot of it is committed (the next step's checkpoint carries one), the thread record
    /// keeps the stored version, so a resume before then migrates the stored snapshot again
    /// (its chain then holds no delta of the new version).
    migrated_to: Option<u32>,
    /// The thread's status when this run opened it (`None` for a new thread).
    pub(crate) opened_as: Option<ThreadStatus>,
    /// When the run ends sleeping: the thread's timer, written with its status.
    pub(crate) wake_at: Option<u64>,
    /// The last step's checkpoint `extra` when it held only the budget: the
    /// next step reuses it while the budget is unchanged (no model or tool
    /// call), instead of serialising the same value again.
    step_extra: Option<(ThreadBudget, Value)>,
    /// The run's part of the thread's event log; `None` when the app keeps none (nothing is
    /// built then).
    log: Option<Box<RunLog>>,
}

/// What a commit writes besides the thread's record.
#[derive(Default)]
struct Changes {
    /// The step's checkpoint.
    checkpoint: Option<Checkpoint>,
    /// Writes kept at the current checkpoint.
    pending: Vec<PendingWrite>,
    /// Approval compare-and-sets.
    transitions: Vec<ApprovalTransition>,
    /// The records of calls whose outcome is unknown.
    unknown: UnknownOutcomes,
    /// The run's events for the thread's log.
    events: Vec<NewEvent>,
}

/// When a commit must be on disk.
#[derive(Clone, Copy)]
enum Flush {
    /// Before returning, whatever the run's durability.
    Now,
    /// As the run's durability says for a step.
    Step,
    /// With the next durable commit.
    Deferred,
}

fn to_json<T: serde::Serialize>(value: &T, what: &'static str) -> Result<Vec<u8>, PersistError> {
    super::document::document(value, what)
}

impl Checkpointer {
    fn new(
        store: Arc<dyn Store>,
        lease: LeaseGuard,
        owner: String,
        fingerprint: String,
        version: u32,
        durability: Durability,
    ) -> Self {
        Checkpointer {
            store,
            thread: lease.thread.clone(),
            owner,
            parent: None,
            tenant: None,
            trace: None,
            lease,
            fingerprint,
            version,
            durability,
            seq: 0,
            journal_seq: 0,
            moved_to: None,
            started_as: Arc::default(),
            created_at: now_ms(),
            snapshot_len: 0,
            delta_since: 0,
            completed: false,
            last_status: None,
            opened_as: None,
            updated_at: 0,
            budget: ThreadBudget::default(),
            sweep_approvals: false,
            runs_subgraphs: false,
            parents: ParentLeases::default(),
            failed_approvals: Arc::default(),
            answers_kept: false,
            migrated_to: None,
            wake_at: None,
            step_extra: None,
            log: None,
        }
    }

    /// Whether this run's commits carry events for the thread's log.
    pub(crate) fn logs_events(&self) -> bool {
        self.log.is_some()
    }

    /// The run ends waiting for `pending` (`interrupted`): the commit that records it logs what
    /// for (an `interrupt` event). Nothing is kept without the event log.
    pub(crate) fn parked_on(&mut self, pending: &[Pending]) {
        if let Some(log) = &mut self.log {
            log.parked = Some(pending.to_vec());
        }
    }

    /// Persists a finished super-step: its updates (already merged into
    /// `state`) and where the run goes next. `ran` names the node (and map instance) of each
    /// update of `delta`, for the event log's `step` event (empty without the log).
    // One argument per part of the checkpoint; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn commit_step<S: State>(
        &mut self,
        step: u32,
        state: &S,
        delta: Vec<Vec<u8>>,
        cursor: Vec<String>,
        nodes: Vec<String>,
        ran: &[(&str, Option<u32>)],
        payloads: Vec<(String, Vec<serde_json::Value>)>,
        usage: RunUsage,
    ) -> Result<(), PersistError> {
        self.delta_since += delta.iter().map(Vec::len).sum::<usize>();
        // Snapshot when the deltas since the last one outweigh it (so storage
        // stays linear in the updates), and at the end of a run unless one
        // is recent (a resumable end should not need a long delta chain).
        let last = cursor.is_empty();
        let threshold = if last { self.snapshot_len / 4 } else { self.snapshot_len.max(MIN_SNAPSHOT_BYTES) };
        let snapshot = if self.delta_since >= threshold || self.migrated_to.is_some() {
            let bytes = super::document::state_document(state, "the state", super::document::Allowed::of::<S>())?;
            self.snapshot_len = bytes.len();
            self.delta_since = 0;
            Some(bytes)
        } else {
            None
        };
        for value in payloads.iter().flat_map(|(_, values)| values) {
            super::document::refuse_credentials_in(value, "a worker's payload", super::document::Allowed::NONE)?;
        }
        let seq = next_seq(&self.thread, self.seq)?;
        // The step's event, and the run's end with the step that completes it.
        let events = match &self.log {
            None => Vec::new(),
            Some(log) => {
                let mut events = vec![log.step(step, seq, &nodes, ran, &delta, S::FIELDS)?];
                if last {
                    events.push(log.finished(ThreadStatus::Completed, seq, "Completed")?);
                }
                events
            }
        };
        // The migrated state's first snapshot: the commit that carries it records the thread as of
        // the new version (below, and only if it succeeds: any other write keeps the stored one).
        let migrated = self.migrated_to.filter(|_| snapshot.is_some());
        let checkpoint = Checkpoint {
            thread: self.thread.clone(),
            seq,
            parent: Some(self.seq),
            cursor,
            snapshot,
            delta,
            metadata: CheckpointMetadata {
                extra: if payloads.is_empty() {
                    self.budget_extra(ThreadBudget { usage, ..self.budget })
                } else {
                    json!({ BUDGET: ThreadBudget { usage, ..self.budget }, PAYLOADS: payloads })
                },
                ..CheckpointMetadata::new(u64::from(step), CheckpointSource::Loop, nodes)
            },
            created_at: now_ms(),
        };
        // The step that completes the run records the thread as completed in
        // the same commit, so finishing needs no second disk sync.
        let (status, detail) = if last {
            (ThreadStatus::Completed, "Completed".to_string())
        } else {
            (ThreadStatus::Running, String::new())
        };
        // Every node of the step finished: a call of the step's journal still open was cut off
        // (before the resume) and not made again; so was an approved call still `EXECUTING`.
        // Their records ride the step's commit, fenced by the lease: a crash cannot lose them,
        // and a run that lost the thread writes none.
        let (unknown, mut cut_off, abandoned) = if self.sweep_approvals {
            (
                self.unknown_outcomes(self.journal_seq).await?,
                self.cut_off_approvals(self.journal_seq).await?,
                self.record_abandoned_children(self.journal_seq).await?,
            )
        } else {
            (UnknownOutcomes::default(), vec![], vec![])
        };
        // An approved call that failed with a passing fault stayed `EXECUTING` for its node's
        // retry; its node finished without one that succeeded: the call failed. (Its retry's
        // success, if any, already moved it: that move stands.)
        let failed: Vec<String> = std::mem::take(&mut *self.failed_approvals.lock().unwrap_or_else(|p| p.into_inner()));
        for id in failed {
            // Known to have failed: not an unknown outcome, whatever the sweep found.
            cut_off.retain(|t| t.id != id);
            let note = "the approved call failed (a passing fault) and its step finished without making it again";
            cut_off.push(ApprovalTransition {
                id,
                from: ApprovalStatus::Executing,
                to: ApprovalStatus::Failed,
                patch: ApprovalPatch { note: Some(note.to_string()), ..ApprovalPatch::by("agentflow", now_ms()) },
            });
        }
        let flush = if last { Flush::Now } else { Flush::Step };
        let stored_version = self.version;
        if let Some(version) = migrated {
            self.version = version;
        }
        let committed = if cut_off.is_empty() {
            let changes =
                Changes { checkpoint: Some(checkpoint), transitions: cut_off, unknown, events, ..Changes::default() };
            self.commit_raw_with(changes, status, detail, flush).await
        } else {
            self.commit_with_cut_off(checkpoint, cut_off, unknown, events, status, detail, flush).await
        };
        if let Err(e) = committed {
            self.version = stored_version;
            return Err(e);
        }
        if migrated.is_some() {
            self.migrated_to = None;
        }
        self.completed = last;
        self.seq = seq;
        // The new checkpoint has no kept answers of its own.
        self.answers_kept = false;
        let finished = std::mem::replace(&mut self.journal_seq, self.seq);
        self.moved_to = None;
        self.started_as = Arc::default();
        if std::mem::take(&mut self.sweep_approvals) {
            self.cancel_orphaned_approvals(finished).await;
            self.cancel_abandoned_requests(abandoned, finished).await;
        }
        Ok(())
    }

    /// A step's checkpoint `extra` holding only `budget`.
    fn budget_extra(&mut self, budget: ThreadBudget) -> Value {
        match &self.step_extra {
            Some((last, extra)) if *last == budget => extra.clone(),
            _ => {
                let extra = json!({ BUDGET: budget });
                self.step_extra = Some((budget, extra.clone()));
                extra
            }
        }
    }

    /// Keeps the writes of the nodes that finished in a step that failed, so
    /// a resume re-runs only the failed nodes. (The thread's usage is
    /// written by [`Checkpointer::finish`], which follows.) `interrupts`
    /// replaces what the thread waits for (`None` leaves it as it is).
    pub(crate) async fn keep_pending<S: State>(
        &mut self,
        done: &[(NodeId, Step<S>)],
        interrupts: Option<&[Pending]>,
        kept: Option<&[KeptAnswer]>,
        names: impl Fn(NodeId) -> &'static str,
    ) -> Result<(), PersistError> {
        let mut writes = Vec::new();
        if let Some(interrupts) = interrupts {
            let value = to_json(&interrupts, "the interrupts")?;
            writes.push(PendingWrite { seq: self.seq, node: INTERRUPTS.to_string(), idx: 0, value });
        }
        // A pause replaces the kept answers (a node that now asks anew keeps none); a step that
        // failed leaves them as they were.
        if let Some(kept) = kept
            && (!kept.is_empty() || self.answers_kept)
        {
            let value = to_json(&KeptAnswers { seq: self.seq, answers: kept }, "the answers the paused nodes keep")?;
            writes.push(PendingWrite { seq: self.seq, node: ANSWERS.to_string(), idx: 0, value });
            self.answers_kept = !kept.is_empty();
        }
        for (id, step) in done {
            let value = stored_write(step, &names)?;
            let idx = step.instance.unwrap_or(0);
            writes.push(PendingWrite { seq: self.seq, node: names(*id).to_string(), idx, value });
        }
        if !writes.is_empty() {
            self.commit_raw(None, writes, ThreadStatus::Running, String::new(), Flush::Step).await?;
        }
        Ok(())
    }

    /// Records how the run ended and the thread's usage, durably; with the event log, in a
    /// commit that logs it (`run.finished`, after an `interrupt` event for a run that ends
    /// waiting for a person: see [`Checkpointer::parked_on`]). The lease is released when the
    /// checkpointer is dropped.
    pub(crate) async fn finish(
        &mut self,
        status: ThreadStatus,
        detail: String,
        usage: RunUsage,
    ) -> Result<(), PersistError> {
        if self.completed && status == ThreadStatus::Completed {
            return Ok(());
        }
        let detail = stored_detail(detail);
        let events = match &self.log {
            None => Vec::new(),
            Some(log) => {
                let mut events = Vec::with_capacity(2);
                if let (ThreadStatus::Interrupted, Some(pending)) = (status, &log.parked) {
                    events.push(log.interrupt(pending)?);
                }
                events.push(log.finished(status, self.seq, &detail)?);
                events
            }
        };
        self.record_status(status, detail, usage, events).await
    }

    /// Records the thread as `compensating` (its run stopped, its calls are undone next) and
    /// its usage, durably. Not the run's end: the compensation's [`Checkpointer::finish`] logs
    /// that.
    pub(crate) async fn start_compensating(&mut self, detail: String, usage: RunUsage) -> Result<(), PersistError> {
        self.record_status(ThreadStatus::Compensating, detail, usage, Vec::new()).await
    }

    /// Records the thread as `status` with the thread's usage, and `events`, durably.
    async fn record_status(
        &mut self,
        status: ThreadStatus,
        detail: String,
        usage: RunUsage,
        events: Vec<NewEvent>,
    ) -> Result<(), PersistError> {
        let writes = vec![budget_write(self.seq, &ThreadBudget { usage, ..self.budget })?];
        self.commit_raw_with(Changes { pending: writes, events, ..Changes::default() }, status, detail, Flush::Now)
            .await
    }

    /// The lease this run holds, to keep alive while a step runs.
    pub(crate) fn lease(&self) -> &LeaseGuard {
        &self.lease
    }

    async fn commit_raw(
        &mut self,
        checkpoint: Option<Checkpoint>,
        pending: Vec<PendingWrite>,
        status: ThreadStatus,
        detail: String,
        sync: Flush,
    ) -> Result<(), PersistError> {
        self.commit_raw_with(Changes { checkpoint, pending, ..Changes::default() }, status, detail, sync).await
    }

    /// [`Checkpointer::commit_raw`] with approval compare-and-sets, the records of calls whose
    /// outcome is unknown and the run's events, in the same commit. The events that wait for
    /// the run's next commit (a resumed run's `run.started`) go first, and are sent once.
    async fn commit_raw_with(
        &mut self,
        changes: Changes,
        status: ThreadStatus,
        detail: String,
        sync: Flush,
    ) -> Result<(), PersistError> {
        let Changes { checkpoint, pending, transitions, unknown, events } = changes;
        self.lease.check_not_revoked()?;
        self.check_parents_not_revoked()?;
        self.lease.renew_if_due().await?;
        let mut commit = self.prepare(checkpoint, pending, status, detail, sync);
        commit.approval_transitions = transitions;
        commit.new_approvals = unknown.records;
        commit.audit = unknown.audit;
        commit.events = match self.log.as_deref().filter(|log| !log.waiting.is_empty()) {
            Some(log) => log.waiting.iter().cloned().chain(events).collect(),
            None => events,
        };
        let durability = commit.durability;
        let wrote = Written::of(&commit);
        // A durable commit on a multi-threaded runtime is made from this task's thread, the
        // runtime's other work moved off it meanwhile: the store can then commit without a
        // hand-off to its writer thread and a wake-up of this task afterwards, so a `Sync` step
        // costs about one disk commit. Otherwise the commit is answered from the store's writer
        // thread and no runtime thread waits for the disk.
        if durability == StoreDurability::Immediate && on_multi_thread_runtime() {
            tokio::task::block_in_place(|| self.store.commit_step(commit))?;
        } else {
            let (tx, rx) = tokio::sync::oneshot::channel();
            self.store.commit_step_then(commit, Box::new(move |answer| drop(tx.send(answer))));
            rx.await.map_err(|_| PersistError::CommitDropped)??;
        }
        wrote.done().record();
        if let Some(log) = &mut self.log {
            log.waiting.clear();
        }
        Ok(())
    }

    /// The store commit that writes `checkpoint` and `pending` and records the
    /// thread as `status`, fenced by this run's lease.
    fn prepare(
        &mut self,
        checkpoint: Option<Checkpoint>,
        pending: Vec<PendingWrite>,
        status: ThreadStatus,
        detail: String,
        sync: Flush,
    ) -> StepCommit {
        let now = now_ms();
        let durability = match (self.durability, sync) {
            (_, Flush::Now) | (Durability::Sync, Flush::Step) => StoreDurability::Immediate,
            (_, Flush::Deferred) | (Durability::Async | Durability::Exit, Flush::Step) => StoreDurability::Eventual,
        };
        let detail = stored_detail(detail);
        let mut record = ThreadRecord::new(&self.thread, &self.owner, &self.fingerprint, self.version, self.created_at);
        // `updated_at` moves when the status or detail does, so a plain step
        // leaves the stored record unchanged and the store can skip it.
        if self.last_status.as_ref() != Some(&(status, detail.clone())) {
            self.updated_at = now;
            self.last_status = Some((status, detail.clone()));
        }
        record.status = status;
        record.detail = detail;
        record.updated_at = self.updated_at;
        record.parent.clone_from(&self.parent);
        record.tenant.clone_from(&self.tenant);
        record.trace.clone_from(&self.trace);
        let mut commit = StepCommit::new(record)
            .fenced_by(self.lease.holder(), now)
            .fenced_by_parents(self.parents.leases.clone())
            .with_durability(durability);
        commit.checkpoint = checkpoint;
        commit.pending_writes = pending;
        if matches!(status, ThreadStatus::Sleeping | ThreadStatus::Interrupted) {
            commit.wake_at = self.wake_at;
        }
        commit
    }

    /// The trace context stored with the thread (or set by this run), if any.
    pub(crate) fn trace(&self) -> Option<&str> {
        self.trace.as_deref()
    }

    /// Sets the thread's trace context, written with every record from now on (a store keeps
    /// the first one stored).
    pub(crate) fn set_trace(&mut self, traceparent: String) {
        self.trace = Some(traceparent);
    }

    /// Whether this is a subgraph child's thread (nested in its parent's trace, never a root).
    pub(crate) fn is_child(&self) -> bool {
        self.parent.is_some()
    }

    /// The store the thread is in.
    pub(crate) fn store_handle(&self) -> Arc<dyn Store> {
        Arc::clone(&self.store)
    }

    /// The store the thread lives in.
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Who the thread belongs to, as stored with it.
    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// Where the next step keeps its finished writes as they finish: under
    /// [`Durability::Sync`] only (see [`super::finished`]); the other durabilities keep them
    /// with the step's own commit.
    pub(crate) fn finished_writes(&self) -> Option<FinishedWrites> {
        (self.durability == Durability::Sync).then(|| FinishedWrites {
            store: Arc::clone(&self.store),
            thread: self.thread.clone(),
            seq: self.seq,
            holder: self.lease.holder().to_string(),
            revoked: self.lease.revoked(),
            parents: self.parents.clone(),
        })
    }

    /// Where the effects of the next step are journaled.
    pub(crate) fn journal(&self) -> Journal {
        Journal {
            store: Arc::clone(&self.store),
            thread: self.thread.clone(),
            seq: self.journal_seq,
            holder: Some(self.lease.holder().to_string()),
            lost: Arc::default(),
            revoked: Some(self.lease.revoked()),
            parents: self.parents.clone(),
            failed_approvals: Arc::clone(&self.failed_approvals),
            moved_to: self.moved_to,
            started_as: Arc::clone(&self.started_as),
        }
    }

    /// Fences this run's commits and what starts its effects by the leases of the runs above
    /// it too (a subgraph child's run; see [`ParentLeases`]).
    pub(crate) fn fence_parents(&mut self, parents: ParentLeases) {
        self.parents = parents;
    }

    /// A lease of a run above this one that its holder revoked counts as lost, as this run's
    /// own does ([`LeaseGuard::check_not_revoked`]).
    fn check_parents_not_revoked(&self) -> Result<(), PersistError> {
        match self.parents.revoked_lease() {
            Some((thread, holder)) => Err(PersistError::Lease(LeaseError::NotHeld {
                thread: thread.clone(),
                holder: holder.clone(),
                current: None,
            })),
            None => Ok(()),
        }
    }
}

/// The metrics of one checkpoint write: its payload's size and how long the run waited for it.
struct Written {
    bytes: Option<usize>,
    durability: &'static str,
    began: std::time::Instant,
    took: std::time::Duration,
}

impl Written {
    /// Starts timing the write of `commit`.
    fn of(commit: &StepCommit) -> Self {
        let bytes = commit
            .checkpoint
            .as_ref()
            .map(|cp| cp.delta.iter().map(Vec::len).sum::<usize>() + cp.snapshot.as_ref().map_or(0, Vec::len));
        let durability = if commit.durability == StoreDurability::Immediate { "immediate" } else { "eventual" };
        Written { bytes, durability, began: std::time::Instant::now(), took: std::time::Duration::ZERO }
    }

    /// The write returned.
    fn done(mut self) -> Self {
        self.took = self.began.elapsed();
        self
    }

    /// Records the write with the metrics recorder of the calling thread.
    fn record(&self) {
        if let Some(bytes) = self.bytes {
            ::metrics::histogram!(crate::metrics::CHECKPOINT_BYTES).record(bytes as f64);
        }
        ::metrics::histogram!(crate::metrics::CHECKPOINT_WRITE_SECONDS, "durability" => self.durability)
            .record(self.took.as_secs_f64());
    }
}

/// A status line as the thread record keeps it. A NUL byte (an error message decoded from a
/// binary body) is stored as U+FFFD: PostgreSQL `text` cannot hold it, and a refused commit
/// would leave the thread `running`. The line is kept in clear (sealed stores too) and shown
/// everywhere: an error message quoting a credential-like value keeps only its kind. (A line
/// already as stored comes back unchanged, without an allocation.)
fn stored_detail(detail: String) -> String {
    let detail = if detail.contains('\0') { detail.replace('\0', "\u{FFFD}") } else { detail };
    match crate::secret::redact_credentials(&detail) {
        std::borrow::Cow::Borrowed(_) => detail,
        std::borrow::Cow::Owned(redacted) => redacted,
    }
}

/// Whether this task runs on a multi-threaded tokio runtime, where
/// [`tokio::task::block_in_place`] may be used (it panics on a current-thread one).
fn on_multi_thread_runtime() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}
