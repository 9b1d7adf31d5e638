//! A queued run its worker's build refuses for good: a declared migration refuses to move its
//! thread (an argument mapping refuses a pending approval's or a journaled call's arguments, a
//! direct call's mapped arguments cannot be known, two nodes would merge). No retry by the same
//! build changes that, so the run is parked rather than tried again every minute under the
//! thread's lease: the claim's lease is let go at once, and a lease that only parks the run
//! ([`parked_holder`]) keeps every worker from claiming it for [`REFUSED_RETRY`]. The run stays
//! queued. Anyone who takes the thread meanwhile (a fork, a state update, a resume) takes that
//! lease over, so the thread is not busy for them, and once they let it go the run is
//! claimable again: a thread that changed is tried again at once. The thread's audit log says
//! why (`run.parked`, with `reason` and `until`).

use std::time::Duration;

use agentflow_store::{LeaseError, NewAuditEntry, Store};

use crate::durable::{ResumeError, now_ms, parked_holder};

/// How long a queued run whose thread this build refuses for good stays parked, unless its
/// thread is taken (and changed) meanwhile.
pub(super) const REFUSED_RETRY: Duration = Duration::from_secs(15 * 60);

/// The audit entry kind of a run parked so.
pub(super) const RUN_PARKED: &str = "run.parked";

/// Whether `e` refuses the thread for good for this build (the same thread, the same build,
/// the same refusal), rather than for a worker of another build to take it.
pub(super) fn refused_for_good(e: &ResumeError) -> bool {
    matches!(
        e,
        ResumeError::ArgsRefused { .. }
            | ResumeError::CallArgsRefused { .. }
            | ResumeError::DirectCallArgsUnknown { .. }
            | ResumeError::NodesMerged { .. }
    )
}

/// Parks `thread`'s queued run, claimed by worker `holder`, for `wait`, saying `why` in the
/// thread's audit log. `Ok(false)` when the thread is not this worker's to park any more (its
/// lease was taken over, or the run claimed again, meanwhile).
///
/// # Errors
/// The store's, releasing or taking the lease or appending the entry.
pub(super) fn park(
    s: &dyn Store,
    thread: &str,
    holder: &str,
    wait: Duration,
    why: &str,
) -> Result<bool, agentflow_store::BoxError> {
    match s.release_lease(thread, holder) {
        Ok(()) => {}
        Err(LeaseError::NotHeld { .. }) => return Ok(false),
        Err(e) => return Err(e.into()),
    }
    let now = now_ms();
    let wait = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    let lease = match s.acquire_lease(thread, &parked_holder(holder), wait, now) {
        Ok(lease) => lease,
        // Claimed, or taken, in between: theirs now.
        Err(LeaseError::ThreadBusy { .. }) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let detail = serde_json::json!({ "reason": why, "until": lease.expires_at });
    s.append_audit(thread, NewAuditEntry::new(now, holder, RUN_PARKED, detail))?;
    Ok(true)
}
