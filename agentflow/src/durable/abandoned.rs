//! Subgraph children a step left behind: a child run by an earlier try of a step (cut off by a
//! crash, say) that the step's re-run did not call again, because its node decided otherwise
//! (a model that answers differently the second time).
//!
//! Once the step commits, no run reaches such a child again: a child is keyed by the checkpoint
//! its parent's step started from, and the parent has moved past it. What the child left open
//! would stay open for good, so the parent's run settles it as the child's own next step would:
//! - a call cut off mid-way that left no result gets an `OUTCOME_UNKNOWN` record and an
//!   `effect.outcome_unknown` audit entry ([`unknown_outcomes`]), and an
//!   approved call still `EXECUTING` becomes `OUTCOME_UNKNOWN`: it may have acted, a human
//!   settles it. Before the parent's step commit, so a crash cannot lose them (the records are
//!   true whatever the commit does: a re-run that calls the child again finds them, as its own
//!   resume would have made them).
//! - requests still `PENDING` or `APPROVED` are cancelled: no call will use them. After the
//!   parent's step commit (before it, a re-run of the step could still call the child and use
//!   them), best effort, as the parent's own are.
//!
//! Both are written under the child's lease, taken for the write by the parent's run's holder.
//! A child another holder still runs (a process finishing it after it lost the parent: the
//! child's lease outlives the parent's by up to a renewal) is waited for as a subgraph call
//! waits for it, then settled; one still held after that is left to its holder, logged.
//!
//! Best effort for the parent: a child whose records cannot be read or written (a record that
//! no longer decodes) is logged and left as it is, and the parent's step commits. (A store that
//! fails for everything fails the parent's commit too, and the next resume looks again.)

use agentflow_store::{
    ApprovalPatch, ApprovalStatus, ApprovalTransition, CommitError, EffectBatch, LeaseError, StepCommit, Store,
    ThreadRecord, ThreadStatus,
};

use super::cut_off::{UnknownOutcomes, unknown_outcomes};
use super::error::PersistError;
use super::journal::journal_seq_of;
use crate::core::clock::now_ms;

/// How long the child's lease is taken for its records (released right after).
const CHILD_LEASE_MS: u64 = 30_000;

/// The subgraph children of `thread` that the step at checkpoint `seq` started (their ids
/// name that checkpoint; `None`: any step, as a fork abandons them all) and that did not
/// complete, each with the threads under it at every level that did not complete either
/// (nothing runs them again: their parent will not run).
pub(crate) fn abandoned_children(
    s: &dyn Store,
    thread: &str,
    seq: Option<u64>,
) -> Result<Vec<ThreadRecord>, PersistError> {
    let mut stack: Vec<ThreadRecord> = s
        .child_threads(thread)?
        .items
        .into_iter()
        .filter(|t| seq.is_none_or(|seq| started_at(thread, &t.id) == Some(seq)) && !completed(t))
        .collect();
    let mut abandoned = Vec::new();
    // A chain of parents that loops back (only an edited store holds one) is walked once.
    let mut seen = std::collections::HashSet::from([thread.to_string()]);
    while let Some(t) = stack.pop() {
        if !seen.insert(t.id.clone()) {
            continue;
        }
        stack.extend(s.child_threads(&t.id)?.items.into_iter().filter(|c| !completed(c)));
        abandoned.push(t);
    }
    Ok(abandoned)
}

fn completed(t: &ThreadRecord) -> bool {
    t.status == ThreadStatus::Completed
}

/// The checkpoint of `parent` whose step started child `child`, as its id names it:
/// `{parent}/{node}[.{instance}].{checkpoint}.{call}.{graph}`.
fn started_at(parent: &str, child: &str) -> Option<u64> {
    let level = child.strip_prefix(parent)?.strip_prefix('/')?;
    let mut parts = level.rsplitn(4, '.');
    let (_graph, _call, at, _node) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    at.parse().ok()
}

/// What [`record_left_open`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Left {
    /// Recorded what the child left open (or it left nothing).
    Done,
    /// Another holder holds the child's lease until `expires_at` (unix millis): nothing written.
    Busy {
        /// When that lease expires.
        expires_at: u64,
    },
}

/// Records what abandoned child `child` left open at the journal of its latest checkpoint:
/// `OUTCOME_UNKNOWN` records for its calls cut off mid-way (one commit), then its approvals
/// still `EXECUTING` moved to `OUTCOME_UNKNOWN` (a compare-and-set each), under the child's
/// lease, taken by `holder`, and fenced by `fences` (the `(thread, holder)` leases of the run
/// that sweeps and of every run above it): a run that lost its thread writes nothing into a
/// child another run now owns.
pub(crate) fn record_left_open(
    s: &dyn Store,
    child: &ThreadRecord,
    holder: &str,
    fences: &[(String, String)],
    note: &str,
) -> Result<Left, PersistError> {
    let Some(latest) = s.latest_checkpoint(&child.id)? else { return Ok(Left::Done) };
    // The journal the child's next step would write to (an update of a thread paused
    // mid-step keeps the step's journal): where its own resume would look.
    let journal = journal_seq_of(&latest);
    let unknown = unknown_outcomes(s, &child.id, journal)?;
    let executing: Vec<String> = s
        .list_approvals(&child.id)?
        .into_iter()
        .filter(|a| a.status == ApprovalStatus::Executing)
        .map(|a| a.id)
        .collect();
    if unknown.is_empty() && executing.is_empty() {
        return Ok(Left::Done);
    }
    if let Some(busy) = take_lease(s, &child.id, holder)? {
        return Ok(busy);
    }
    let wrote = write_left_open(s, &child.id, holder, fences, note, unknown, executing);
    let _ = s.release_lease(&child.id, holder);
    wrote.map(|()| Left::Done)
}

/// Takes `child`'s lease for `holder`; `Some(Left::Busy)` if another holder has it.
fn take_lease(s: &dyn Store, child: &str, holder: &str) -> Result<Option<Left>, PersistError> {
    match s.acquire_lease(child, holder, CHILD_LEASE_MS, now_ms()) {
        Ok(_) => Ok(None),
        Err(LeaseError::ThreadBusy { expires_at, .. }) => Ok(Some(Left::Busy { expires_at })),
        Err(e) => Err(e.into()),
    }
}

fn write_left_open(
    s: &dyn Store,
    child: &str,
    holder: &str,
    fences: &[(String, String)],
    note: &str,
    unknown: UnknownOutcomes,
    executing: Vec<String>,
) -> Result<(), PersistError> {
    if !unknown.is_empty() {
        // The child's record as it is now (status, detail, timer): only the records are new.
        let Some(record) = s.thread(child)? else { return Ok(()) };
        let mut commit = StepCommit::new(ThreadRecord { lease: None, ..record })
            .fenced_by(holder, now_ms())
            .fenced_by_parents(fences.to_vec());
        commit.wake_at = s.thread_timer(child)?;
        commit.new_approvals = unknown.records;
        commit.audit = unknown.audit;
        s.commit_step(commit)?;
    }
    for id in executing {
        let patch = ApprovalPatch { note: Some(note.to_string()), ..ApprovalPatch::by("agentflow", now_ms()) };
        let transition =
            ApprovalTransition { id, from: ApprovalStatus::Executing, to: ApprovalStatus::OutcomeUnknown, patch };
        let batch = EffectBatch::new(child)
            .transition(transition)
            .fenced_by(holder, now_ms())
            .fenced_by_parents(fences.to_vec());
        match s.commit_effects(batch) {
            // Moved meanwhile (its call's result came in): that move stands.
            Ok(_) | Err(CommitError::Approval(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Cancels abandoned child `child`'s requests still `PENDING` or `APPROVED`: no call will use
/// them. Under the child's lease, taken by `holder` (a child another holder holds is left to
/// it: `Left::Busy`), fenced by `fences` as [`record_left_open`]. One compare-and-set each with
/// its `approval.cancelled` entry; one decided meanwhile keeps that decision.
pub(crate) fn cancel_requests(
    s: &dyn Store,
    child: &ThreadRecord,
    holder: &str,
    fences: &[(String, String)],
    note: &str,
) -> Result<Left, PersistError> {
    let open: Vec<_> = s
        .list_approvals(&child.id)?
        .into_iter()
        .filter(|a| matches!(a.status, ApprovalStatus::Pending | ApprovalStatus::Approved))
        .collect();
    if open.is_empty() {
        return Ok(Left::Done);
    }
    if let Some(busy) = take_lease(s, &child.id, holder)? {
        return Ok(busy);
    }
    for a in open {
        let patch = ApprovalPatch { note: Some(note.to_string()), ..ApprovalPatch::by("agentflow", now_ms()) };
        let transition = ApprovalTransition { id: a.id, from: a.status, to: ApprovalStatus::Cancelled, patch };
        let batch = EffectBatch::new(&child.id)
            .transition(transition)
            .fenced_by(holder, now_ms())
            .fenced_by_parents(fences.to_vec());
        match s.commit_effects(batch) {
            // Decided meanwhile: that decision stands.
            Ok(_) | Err(CommitError::Approval(_)) => {}
            Err(e) => {
                let _ = s.release_lease(&child.id, holder);
                return Err(e.into());
            }
        }
    }
    let _ = s.release_lease(&child.id, holder);
    Ok(Left::Done)
}

#[cfg(test)]
mod tests {
    use super::started_at;

    #[test]
    fn a_childs_id_names_the_checkpoint_its_parents_step_started_from() {
        assert_eq!(started_at("t", "t/pay.3.0.payer"), Some(3));
        assert_eq!(started_at("t", "t/pay.2.12.1.payer"), Some(12), "a map worker's instance");
        assert_eq!(started_at("acct/x", "acct/x/write.0.0.review"), Some(0));
        assert_eq!(started_at("t", "t/pay.x.0.payer"), None);
        assert_eq!(started_at("t", "u/pay.3.0.payer"), None);
        assert_eq!(started_at("t", "t/payer"), None);
        assert_eq!(started_at("t", "tt/pay.3.0.payer"), None);
    }
}
