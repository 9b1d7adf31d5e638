//! The App's stored threads: reading a thread's state, history, waits and audit log, and
//! changing it (forks, manual updates, raised limits, compaction). History is never
//! rewritten: a fork or an update is a new checkpoint.

use std::sync::Arc;

use agentflow_store::{
    AuditEntry, Checkpoint, CheckpointSummary, CompactReport, Listing, StateChain, Store, ThreadRecord, ThreadStatus,
};

use crate::access::personal::{AuditMask, credential_names, personal_names, read_entry, sees_personal_data};
use crate::access::{Actor, Operation};
use crate::app::App;
use crate::core::budget::Limits;
use crate::core::state::State;
use crate::durable::history::{Migrating, Snapshot, update_thread_migrating};
use crate::durable::{HistoryError, PersistError, ResumeError, fork_thread};
use crate::durable::{fold_chain, now_ms};
use crate::interrupt::{Pending, PendingKind};

impl<S: State, D> App<S, D> {
    fn store_or_err(&self) -> Result<&Arc<dyn Store>, HistoryError> {
        self.setup.store.as_ref().ok_or(HistoryError::NoStore)
    }

    /// Whether the app's actor may perform `operation` on `thread`: `false` when the thread is
    /// not there for it (missing, or of another tenant), an error when the policy refuses.
    fn visible(&self, operation: Operation, thread: &str) -> Result<bool, HistoryError> {
        match self.check(operation, thread) {
            Ok(()) => Ok(true),
            Err(HistoryError::UnknownThread { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The thread's record (owner, status, fingerprint, lease).
    ///
    /// These history calls block on the store; they are quick reads, but call
    /// them from `spawn_blocking` if the store may be slow.
    pub fn thread(&self, thread: &str) -> Result<Option<ThreadRecord>, HistoryError> {
        self.setup.access.lookup(&**self.store_or_err()?, Operation::ReadState, thread)
    }

    /// The latest state of a thread, or `None` if there is no such thread.
    pub fn state(&self, thread: &str) -> Result<Option<Snapshot<S>>, HistoryError> {
        let store = self.store_or_err()?;
        if !self.visible(Operation::ReadState, thread)? {
            return Ok(None);
        }
        match store.latest_checkpoint(thread).map_err(PersistError::from)? {
            Some(cp) => self.snapshot_of(store, cp).map(Some),
            None => Ok(None),
        }
    }

    /// The state at checkpoint `seq`, or `None` if there is no such checkpoint.
    pub fn state_at(&self, thread: &str, seq: u64) -> Result<Option<Snapshot<S>>, HistoryError> {
        let store = self.store_or_err()?;
        if !self.visible(Operation::ReadState, thread)? {
            return Ok(None);
        }
        match store.checkpoint(thread, seq).map_err(PersistError::from)? {
            Some(cp) => self.snapshot_of(store, cp).map(Some),
            None => Ok(None),
        }
    }

    /// A typed state cannot be masked: reading one whose type has personal fields
    /// (`#[state(pii)]`) needs [`Operation::SeePersonalData`], and is audited.
    fn read_personal(&self, store: &Arc<dyn Store>, thread: &str) -> Result<(), HistoryError> {
        let personal = personal_names(S::FIELDS);
        if personal.is_empty() {
            return Ok(());
        }
        self.setup.access.allow(Operation::SeePersonalData, Some(thread))?;
        let entry = read_entry(now_ms(), &self.setup.access.actor().id, "app", &personal);
        store
            .append_audit(thread, entry)
            .map_err(|e| HistoryError::PersonalDataAudit { thread: thread.to_string(), source: Box::new(e) })?;
        Ok(())
    }

    fn snapshot_of(&self, store: &Arc<dyn Store>, cp: Checkpoint) -> Result<Snapshot<S>, HistoryError> {
        self.read_personal(store, &cp.thread)?;
        let chain = store
            .state_chain(&cp.thread, cp.seq)
            .map_err(PersistError::from)?
            .ok_or(HistoryError::UnknownCheckpoint { thread: cp.thread.clone(), seq: cp.seq })?;
        let state = fold_chain(&cp.thread, &chain)?;
        Ok(Snapshot {
            seq: cp.seq,
            parent: cp.parent,
            state,
            next: cp.cursor,
            metadata: cp.metadata,
            created_at: cp.created_at,
        })
    }

    /// What the thread waits for before it can go on: the pending items of a paused thread
    /// (interrupted or sleeping), and the question of a failed thread whose node still waits
    /// for a value (an answer of the wrong shape failed it where it asked: `resume_with`, or a
    /// person's answer, continues it). Empty otherwise. When the step asks several questions
    /// and some of them are answered on their own already, the list is those still unanswered.
    pub fn pending(&self, thread: &str) -> Result<Vec<Pending>, HistoryError> {
        let store = self.store_or_err()?;
        let Some(record) = self.setup.access.lookup::<HistoryError>(&**store, Operation::ReadState, thread)? else {
            return Err(HistoryError::UnknownThread { thread: thread.to_string() });
        };
        let waits = match record.status {
            ThreadStatus::Interrupted | ThreadStatus::Sleeping => self.waits_for(thread)?,
            ThreadStatus::Failed => {
                let mut waits = self.waits_for(thread)?;
                waits.retain(|p| p.kind == PendingKind::Interrupt);
                waits
            }
            _ => Vec::new(),
        };
        // While some questions of the step wait for their answers, one answered already (its
        // answer kept until the step's last question has one) is not listed. (Once each has
        // its answer, all are listed, as one is: the thread waits for a resume to go on.)
        let waits = crate::approval::answer::unanswered(&**store, thread, waits).map_err(PersistError::from)?;
        Ok(waits)
    }

    /// What the thread's latest checkpoint records it waits for, whatever its status: a thread
    /// whose step failed while a node waited for a value still needs one to go on.
    pub(crate) fn waits_for(&self, thread: &str) -> Result<Vec<Pending>, HistoryError> {
        crate::durable::history::waits_for(&**self.store_or_err()?, thread)
    }

    /// Every checkpoint of the thread, oldest first, without snapshots or deltas.
    pub fn history(&self, thread: &str) -> Result<Vec<CheckpointSummary>, HistoryError> {
        if !self.visible(Operation::ReadHistory, thread)? {
            return Ok(Vec::new());
        }
        Ok(self.store_or_err()?.list_checkpoints(thread).map_err(PersistError::from)?)
    }

    /// The thread's audit log, oldest first. Fails if an entry does not
    /// decode; [`App::scan_audit_log`] goes on past it.
    pub fn audit_log(&self, thread: &str) -> Result<Vec<AuditEntry>, HistoryError> {
        if !self.visible(Operation::ReadHistory, thread)? {
            return Ok(Vec::new());
        }
        let store = self.store_or_err()?;
        let mut entries = store.list_audit(thread).map_err(PersistError::from)?;
        self.mask_audit(store, thread, &mut entries)?;
        Ok(entries)
    }

    /// The thread's audit log, oldest first, with every entry that decodes;
    /// each entry that does not is reported in [`Listing::skipped`].
    pub fn scan_audit_log(&self, thread: &str) -> Result<Listing<AuditEntry>, HistoryError> {
        if !self.visible(Operation::ReadHistory, thread)? {
            return Ok(Listing::complete(Vec::new()));
        }
        let store = self.store_or_err()?;
        let mut listing = store.scan_audit(thread).map_err(PersistError::from)?;
        self.mask_audit(store, thread, &mut listing.items)?;
        Ok(listing)
    }

    /// The values `entries` (of `thread`'s log) carry of the state, masked for the app's actor
    /// (see [`AuditMask`]); an unmasked read of personal fields is audited, as [`App::state`]'s.
    fn mask_audit(&self, store: &Arc<dyn Store>, thread: &str, entries: &mut [AuditEntry]) -> Result<(), HistoryError> {
        let (personal, credential) = (personal_names(S::FIELDS), credential_names(S::FIELDS));
        if personal.is_empty() && credential.is_empty() {
            return Ok(());
        }
        let sees = sees_personal_data(&self.setup.access, Some(thread));
        let mask = AuditMask::new(&personal, &credential, sees, crate::approval::ANSWER_KIND);
        if mask.apply(entries) {
            let entry = read_entry(now_ms(), &self.setup.access.actor().id, "app audit", &personal);
            store
                .append_audit(thread, entry)
                .map_err(|e| HistoryError::PersonalDataAudit { thread: thread.to_string(), source: Box::new(e) })?;
        }
        Ok(())
    }

    /// Verifies the thread's audit log: each entry chained by hash to the one before it
    /// (`Ok(Err(link))`: the first entry changed, removed or moved since it was written). A
    /// thread that is not there for the app's actor verifies as an empty log.
    /// Checked for the app's actor ([`Operation::ReadHistory`]).
    pub fn verify_audit(
        &self,
        thread: &str,
    ) -> Result<Result<agentflow_store::ChainReport, agentflow_store::BrokenLink>, HistoryError> {
        if !self.visible(Operation::ReadHistory, thread)? {
            return Ok(agentflow_store::audit_chain::verify_chain(thread, &[]));
        }
        Ok(self.store_or_err()?.verify_audit(thread).map_err(PersistError::from)?)
    }

    /// Branches the thread at checkpoint `seq`: a new checkpoint whose parent
    /// is `seq` becomes the latest, so the next `resume` continues from the
    /// state at `seq`. The older branch stays in the history.
    ///
    /// The branch runs its steps afresh: effects journaled on the old branch
    /// run again, subgraph children run anew, and no approval of the old
    /// branch can be used on the new one. So every approval of the thread
    /// still `PENDING` or `APPROVED` is cancelled in the same commit, each
    /// with an `approval.cancelled` audit entry by `actor` saying why; those
    /// of its subgraph children are cancelled just after, the same way. The thread's budget usage carries over
    /// (a fork does not refund model or tool calls). A record of the old branch that waits for a
    /// human to settle it (`OUTCOME_UNKNOWN`: a call cut off mid-way may have acted) stays
    /// listed, and a worker-queued run parked for approvals is handed back to the workers: the
    /// new branch waits for none of the old one's records.
    ///
    /// A checkpoint written before the thread moved to a newer version of its graph gives the
    /// thread that older version back (its graph fingerprint and state version then), so its
    /// next resume moves it through the declared migrations again; a move audited by an earlier
    /// build, which did not record them, refuses such a fork with
    /// [`HistoryError::ForkAcrossVersions`].
    ///
    /// Checked for `actor` ([`Operation::Fork`]); a name alone is an actor of no roles and every
    /// tenant ([`Actor::from`]).
    pub fn fork(&self, thread: &str, seq: u64, actor: impl Into<Actor>) -> Result<u64, HistoryError> {
        let access = self.access_of(actor);
        self.check_for(&access, Operation::Fork, thread)?;
        fork_thread(self.store_or_err()?, thread, seq, &access.actor().id)
    }

    /// Writes `update` through the reducers as a new checkpoint after the
    /// latest one, with an audit entry naming `actor`. The run continues from
    /// it on the next `resume`.
    ///
    /// A thread paused or stopped mid-step keeps that step: the writes of
    /// the nodes that finished in it, what it waits for (so `resume_with`
    /// still answers an `interrupt`, and an approval pause still waits for
    /// its approval) and its journal. Effects journaled by the step are not
    /// run again, and its approvals stay valid, because the continued step
    /// keys both by the checkpoint it started from. The update applies to
    /// the state the paused nodes see when they run again; the writes of
    /// nodes that already finished were computed before it and are kept as
    /// they were.
    ///
    /// A `compensating` or `compensated` thread is refused with
    /// [`HistoryError::Undone`]: its step's journal records calls that its
    /// compensations undid, so carrying the step on would take them for
    /// done. [`fork`](Self::fork) it to run again from a checkpoint.
    ///
    /// Checked for `actor` ([`Operation::UpdateState`]). The update goes through the reducers
    /// into the state alone: approval records and the effect journal are not part of the state,
    /// so no update can approve a call or mark one done.
    pub fn update_state(&self, thread: &str, update: S::Update, actor: impl Into<Actor>) -> Result<u64, HistoryError> {
        let store = self.store_or_err()?;
        // Checked before the thread is looked up, as before.
        crate::durable::check_sealed::<S>(store.as_ref())?;
        let blob = crate::durable::state_document(&update, "the update", crate::durable::Allowed::of::<S>())?;
        let access = self.access_of(actor);
        self.check_for(&access, Operation::UpdateState, thread)?;
        let rebuild = |chain: &StateChain, stored: u32| self.migrated_with(thread, chain, stored, &blob);
        let migrating = Migrating { version: S::VERSION, rebuild: &rebuild };
        update_thread_migrating(store, thread, blob.clone(), &access.actor().id, Some(migrating))
    }

    /// The whole state of `thread` as the chain `chain` stores it at state version `stored`,
    /// migrated to the current version, with the update `blob` applied: the state an update of
    /// a thread moved to this version (before its first step here) writes.
    fn migrated_with(
        &self,
        thread: &str,
        chain: &StateChain,
        stored: u32,
        blob: &[u8],
    ) -> Result<Vec<u8>, HistoryError> {
        let refused = |source: ResumeError| HistoryError::StateMigration {
            thread: thread.to_string(),
            stored,
            current: S::VERSION,
            source: Box::new(source),
        };
        let decode = |what, seq, source| PersistError::Decode { thread: thread.to_string(), seq, what, source };
        // The state migrations take a whole state, as a resume's do.
        if let Some(step) = chain.steps.iter().rev().find(|s| !s.delta.is_empty()) {
            return Err(refused(ResumeError::NeedsSnapshot { thread: thread.to_string(), seq: step.seq, stored }));
        }
        let old =
            serde_json::from_slice(&chain.snapshot).map_err(|e| decode("state snapshot", chain.snapshot_seq, e))?;
        let migrated = self.setup.migrate(thread, stored, old).map_err(refused)?;
        let seq = chain.steps.last().map_or(chain.snapshot_seq, |s| s.seq);
        let mut state: S = serde_json::from_value(migrated).map_err(|e| decode("migrated state", seq, e))?;
        let update: S::Update = serde_json::from_slice(blob).map_err(|e| decode("update", seq, e))?;
        state.apply(update);
        Ok(crate::durable::state_document(&state, "the state", crate::durable::Allowed::of::<S>())?)
    }

    /// Sets the model-call, tool-call and token limits of a persisted thread
    /// (counted over all its runs), with a `limits.raised` audit entry by
    /// `actor` recording the old and new limits and the usage so far.
    ///
    /// A run may only tighten a thread's limits ([`Runner::limits`](crate::Runner::limits));
    /// this is how they are raised. Returns the limits it replaced. Fails
    /// with a busy lease while a run holds the thread.
    ///
    /// Checked for `actor` ([`Operation::UpdateState`]).
    pub fn raise_limits(&self, thread: &str, limits: Limits, actor: impl Into<Actor>) -> Result<Limits, HistoryError> {
        let access = self.access_of(actor);
        self.check_for(&access, Operation::UpdateState, thread)?;
        self.raise_limits_fenced(thread, limits, &access.actor().id, Vec::new())
    }

    /// [`App::raise_limits`] also fenced by `fences` (`(thread, holder)` leases): a parent run
    /// raising its subgraph child's limits writes only while it, and every run above it, still
    /// holds its thread.
    pub(crate) fn raise_limits_fenced(
        &self,
        thread: &str,
        limits: Limits,
        actor: &str,
        fences: Vec<(String, String)>,
    ) -> Result<Limits, HistoryError> {
        crate::durable::history::raise_limits(self.store_or_err()?, thread, limits, actor, fences)
    }

    /// Retention for a finished thread: keeps the `keep_last` newest
    /// checkpoints (each stays readable) and compacts the file.
    ///
    /// A thread under legal hold, or a subgraph child of a held thread, keeps its whole
    /// history: refused with [`HistoryError::Compact`] holding
    /// [`CompactError::Held`](agentflow_store::CompactError::Held), nothing changed.
    ///
    /// Checked for the app's actor ([`Operation::Compact`]).
    pub fn compact(&self, thread: &str, keep_last: usize) -> Result<CompactReport, HistoryError> {
        let store = self.store_or_err()?;
        self.check(Operation::Compact, thread)?;
        let fold = |chain: &StateChain| -> Result<Vec<u8>, agentflow_store::BoxError> {
            let state: S = fold_chain(thread, chain)?;
            Ok(crate::durable::state_document(&state, "the state", crate::durable::Allowed::of::<S>())?)
        };
        match store.compact(thread, keep_last, &fold) {
            // Said as any other read of a missing thread says it (a thread of another tenant too).
            Err(agentflow_store::CompactError::UnknownThread { thread }) => Err(HistoryError::UnknownThread { thread }),
            other => Ok(other?),
        }
    }
}
