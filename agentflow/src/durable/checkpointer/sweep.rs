//! What a step's commit settles that the runs before it left: calls cut off mid-way (their
//! outcome unknown), approvals still open or still executing, and the subgraph runs the step
//! no longer calls.

use std::time::Duration;

use agentflow_store::{
    ApprovalError, ApprovalPatch, ApprovalStatus, ApprovalTransition, Checkpoint, CommitError, EffectBatch, NewEvent,
    Store, ThreadRecord, ThreadStatus,
};

use super::{Changes, Checkpointer, Flush};
use crate::core::clock::now_ms;
use crate::durable::cut_off::UnknownOutcomes;
use crate::durable::error::PersistError;
use crate::durable::io::blocking;

/// How many times settling an abandoned subgraph run waits for another holder's lease on it
/// (as many as a subgraph call waits for a busy child, `subgraph::BUSY_WAITS`), and how long at most each time (never
/// more than a third of this run's own lease, which is renewed after each wait: the step's
/// nodes have finished, its commit waits).
const CHILD_BUSY_WAITS: u32 = 8;
const CHILD_BUSY_WAIT_MS: u64 = 5_000;

impl Checkpointer {
    /// [`Checkpointer::commit_raw_with`] of a step that moves approved calls cut off mid-way to
    /// `OUTCOME_UNKNOWN`: one that another run moved meanwhile (its call's result came in from
    /// the run that made it) keeps that move, and the step commits without it instead of
    /// failing. Each try carries the step's `events`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn commit_with_cut_off(
        &mut self,
        checkpoint: Checkpoint,
        mut cut_off: Vec<ApprovalTransition>,
        unknown: UnknownOutcomes,
        events: Vec<NewEvent>,
        status: ThreadStatus,
        detail: String,
        flush: Flush,
    ) -> Result<(), PersistError> {
        loop {
            let changes = Changes {
                checkpoint: Some(checkpoint.clone()),
                transitions: cut_off.clone(),
                unknown: unknown.clone(),
                events: events.clone(),
                ..Changes::default()
            };
            match self.commit_raw_with(changes, status, detail.clone(), flush).await {
                Err(PersistError::Commit(CommitError::Approval(ApprovalError::AlreadyDecided { id, .. })))
                    if cut_off.iter().any(|t| t.id == id) =>
                {
                    cut_off.retain(|t| t.id != id);
                }
                answer => return answer,
            }
        }
    }

    /// The subgraph children the step at checkpoint `step_seq` started and its re-run did not
    /// call again ([`abandoned`](crate::durable::abandoned)): records what they left open (calls cut
    /// off mid-way, approved calls still `EXECUTING`) before the step's commit, and returns
    /// them for [`Checkpointer::cancel_abandoned_requests`] after it. A child another holder
    /// still runs is waited for, as a subgraph call waits for it. Best effort: a child that
    /// cannot be settled is logged and left.
    pub(super) async fn record_abandoned_children(&self, step_seq: u64) -> Result<Vec<ThreadRecord>, PersistError> {
        if !self.runs_subgraphs {
            return Ok(Vec::new());
        }
        self.lease.check_not_revoked()?;
        let thread = self.thread.clone();
        let listed =
            blocking(&self.store, move |s| crate::durable::abandoned::abandoned_children(s, &thread, Some(step_seq)))
                .await?;
        let children = match listed {
            Ok(children) => children,
            Err(e) => {
                tracing::warn!(parent: None, thread = %self.thread, error = %e, "could not list the subgraph runs the step left");
                return Ok(Vec::new());
            }
        };
        let mut settled = Vec::with_capacity(children.len());
        for child in children {
            let note = format!(
                "the call started in subgraph run `{}` and left no result (the run stopped mid-call), and the step \
                 of thread `{}` at checkpoint {step_seq} finished without running that subgraph again; whether it \
                 acted is unknown: settle it",
                child.id, self.thread
            );
            let fences = self.sweep_fences();
            let done = self
                .with_child_lease(&child, move |s, child, holder| {
                    crate::durable::abandoned::record_left_open(s, child, holder, &fences, &note)
                })
                .await?;
            if done {
                settled.push(child);
            }
        }
        Ok(settled)
    }

    /// What fences this run's writes into an abandoned child: its own lease and those of the
    /// runs above it. A run that lost its thread writes nothing into a child another run owns.
    fn sweep_fences(&self) -> Vec<(String, String)> {
        let mut fences = self.parents.leases.clone();
        fences.push((self.thread.clone(), self.lease.holder().to_string()));
        fences
    }

    /// Runs `act` on abandoned child `child` with this run's holder id, waiting while another
    /// holder has the child's lease (up to [`CHILD_BUSY_WAITS`] times, renewing this run's
    /// lease in between). Whether it was done; a failure, or a child still held, is logged.
    async fn with_child_lease<F>(&self, child: &ThreadRecord, act: F) -> Result<bool, PersistError>
    where
        F: Fn(&dyn Store, &ThreadRecord, &str) -> Result<crate::durable::abandoned::Left, PersistError>
            + Clone
            + Send
            + 'static,
    {
        for wait in 0..=CHILD_BUSY_WAITS {
            let (c, holder, act) = (child.clone(), self.lease.holder().to_string(), act.clone());
            match blocking(&self.store, move |s| act(s, &c, &holder)).await? {
                Ok(crate::durable::abandoned::Left::Done) => return Ok(true),
                Ok(crate::durable::abandoned::Left::Busy { expires_at }) if wait < CHILD_BUSY_WAITS => {
                    let most = CHILD_BUSY_WAIT_MS.min(self.lease.ttl_ms / 3);
                    let left = expires_at.saturating_sub(now_ms()).min(most);
                    tokio::time::sleep(Duration::from_millis(left + 20)).await;
                    if let Err(e) = self.lease.renew_if_due().await {
                        // The step's commit finds out whether the thread is still this run's.
                        tracing::warn!(parent: None, thread = %child.id, error = %e, "stopped waiting for an abandoned subgraph run");
                        return Ok(false);
                    }
                }
                Ok(crate::durable::abandoned::Left::Busy { .. }) => {
                    tracing::warn!(parent: None, thread = %child.id,
                        "an abandoned subgraph run is still held by another run: left as it is (its records are \
                         not settled; a resume of the parent before its next step commits looks again)"
                    );
                    return Ok(false);
                }
                Err(e) => {
                    tracing::warn!(parent: None, thread = %child.id, error = %e, "could not settle an abandoned subgraph run");
                    return Ok(false);
                }
            }
        }
        Ok(false)
    }

    /// Cancels the requests still open in the children [`Checkpointer::record_abandoned_children`]
    /// settled, once the step at checkpoint `step_seq` committed: no call will use them. Best
    /// effort, as [`Checkpointer::cancel_orphaned_approvals`].
    pub(super) async fn cancel_abandoned_requests(&self, children: Vec<ThreadRecord>, step_seq: u64) {
        if self.lease.check_not_revoked().is_err() {
            return;
        }
        let note = format!(
            "the step of thread `{}` at checkpoint {step_seq} finished without running this subgraph again; the \
             request can no longer be used",
            self.thread
        );
        for child in children {
            let (note, fences) = (note.clone(), self.sweep_fences());
            let cancelled = self
                .with_child_lease(&child, move |s, child, holder| {
                    crate::durable::abandoned::cancel_requests(s, child, holder, &fences, &note)
                })
                .await;
            if let Err(e) = cancelled {
                tracing::warn!(parent: None, thread = %child.id, error = %e, "could not cancel the requests of an abandoned subgraph run");
            }
        }
    }

    /// The calls of the journal of checkpoint `step_seq` cut off mid-way (before the resume) and
    /// not made again by the step, whose outcome is unknown (see
    /// [`unknown_outcomes`](crate::durable::cut_off::unknown_outcomes)).
    pub(super) async fn unknown_outcomes(&self, step_seq: u64) -> Result<UnknownOutcomes, PersistError> {
        let thread = self.thread.clone();
        blocking(&self.store, move |s| crate::durable::cut_off::unknown_outcomes(s, &thread, step_seq)).await?
    }

    /// Records, before a compensation, the calls of the failed step at checkpoint `step_seq`
    /// cut off mid-way in an earlier run and not made again (their outcome is unknown), so
    /// the compensation lists them and a human is asked about them. In one commit of the
    /// thread record, fenced by the lease, keeping the thread's status; nothing to record,
    /// nothing written.
    pub(crate) async fn record_unknown_outcomes(&mut self, step_seq: u64) -> Result<(), PersistError> {
        let unknown = self.unknown_outcomes(step_seq).await?;
        if unknown.is_empty() {
            return Ok(());
        }
        let (status, detail) = self
            .last_status
            .clone()
            .unwrap_or_else(|| (ThreadStatus::Compensating, "resumed while compensating".to_string()));
        self.commit_raw_with(Changes { unknown, ..Changes::default() }, status, detail, Flush::Now).await
    }

    /// The moves that go with the commit of the step at checkpoint `step_seq`: an approval of
    /// the thread still `EXECUTING` belongs to a call cut off mid-way (before the resume) that
    /// the step finished without making again. It may have acted, so it becomes
    /// `OUTCOME_UNKNOWN` (listed for a human to settle, audited), never cancelled. In the step's
    /// own commit, fenced by the run's lease: a crash right after the commit cannot leave it
    /// `EXECUTING` for good (no later step would look at it again), and a run that lost the
    /// thread moves nothing.
    pub(super) async fn cut_off_approvals(&self, step_seq: u64) -> Result<Vec<ApprovalTransition>, PersistError> {
        let thread = self.thread.clone();
        let executing = blocking(&self.store, move |s| s.list_approvals(&thread)).await??;
        let note = format!(
            "the call started and left no result (the run stopped mid-call), and the step at checkpoint {step_seq} \
             finished without asking for it again; whether it acted is unknown: settle it"
        );
        Ok(executing
            .into_iter()
            .filter(|a| a.status == ApprovalStatus::Executing)
            .map(|a| ApprovalTransition {
                id: a.id,
                from: ApprovalStatus::Executing,
                to: ApprovalStatus::OutcomeUnknown,
                patch: ApprovalPatch { note: Some(note.clone()), ..ApprovalPatch::by("agentflow", now_ms()) },
            })
            .collect())
    }

    /// Before the thread is compensated after a failed step: an approved call cut off mid-way
    /// that the step did not make again would stay `EXECUTING` for good (no step of a
    /// compensated thread runs again). It may have acted, so it becomes `OUTCOME_UNKNOWN`, for
    /// a human to settle and for the outcome to list. Each move is its own compare-and-set,
    /// fenced by the run's lease (one another run moved meanwhile keeps that move).
    pub(crate) async fn settle_cut_off_approvals(&self, step_seq: u64) -> Result<(), PersistError> {
        self.lease.check_not_revoked()?;
        for transition in self.cut_off_approvals(step_seq).await? {
            let batch =
                EffectBatch::new(self.thread.clone()).transition(transition).fenced_by(self.lease.holder(), now_ms());
            match blocking(&self.store, move |s| s.commit_effects(batch)).await? {
                Ok(_) | Err(CommitError::Approval(ApprovalError::AlreadyDecided { .. })) => {}
                Err(e) => return Err(PersistError::Commit(e)),
            }
        }
        Ok(())
    }

    /// Cancels the thread's approvals still `PENDING` or `APPROVED` once the
    /// step they were asked in has committed: their ids are keyed by that
    /// step's checkpoint, so no later call can use them (the model asked for
    /// other calls, or other arguments, when the step ran again). Each gets
    /// an `approval.cancelled` audit entry. (One still `EXECUTING` was made
    /// `OUTCOME_UNKNOWN` in the step's commit.) Best effort, one compare-and-set
    /// each, fenced by the run's lease (a run that lost the thread cancels
    /// nothing the new holder asked for): an approval a human decides at the
    /// same moment keeps that decision, and a crash before it leaves requests
    /// no call can use.
    pub(super) async fn cancel_orphaned_approvals(&self, step_seq: u64) {
        if self.lease.check_not_revoked().is_err() {
            return;
        }
        let (thread, holder) = (self.thread.clone(), self.lease.holder().to_string());
        let swept = blocking(&self.store, move |s| -> Result<usize, PersistError> {
            let note = format!(
                "the step at checkpoint {step_seq} finished without this call (the model asked for other calls \
                 or arguments); the request can no longer be used"
            );
            let mut cancelled = 0;
            for approval in s.list_approvals(&thread)? {
                if !matches!(approval.status, ApprovalStatus::Pending | ApprovalStatus::Approved) {
                    continue;
                }
                let now = now_ms();
                let patch = ApprovalPatch { note: Some(note.clone()), ..ApprovalPatch::by("agentflow", now) };
                let transition = ApprovalTransition {
                    id: approval.id.clone(),
                    from: approval.status,
                    to: ApprovalStatus::Cancelled,
                    patch,
                };
                // Fenced by the lease: a run that lost the thread after its commit does not
                // cancel what the new holder asked for since.
                let batch = EffectBatch::new(thread.clone()).transition(transition).fenced_by(holder.clone(), now);
                match s.commit_effects(batch) {
                    Ok(_) => cancelled += 1,
                    Err(e @ CommitError::LeaseLost { .. }) => return Err(PersistError::Commit(e)),
                    Err(e) => tracing::info!(parent: None, thread = %thread, approval = %approval.id, error = %e, "left as decided"),
                }
            }
            Ok(cancelled)
        })
        .await;
        match swept {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => {
                tracing::info!(parent: None, thread = %self.thread, cancelled = n, "cancelled approvals of a finished step")
            }
            Ok(Err(e)) | Err(e) => {
                tracing::warn!(parent: None, thread = %self.thread, error = %e, "could not cancel the approvals of a finished step");
            }
        }
    }
}
