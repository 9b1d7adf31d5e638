//! When a paused thread wakes on its own: the pure rules the executor and
//! the scheduler share (no dependency on the rest of the runtime).

use agentflow_store::{Store, ThreadStatus};

use crate::interrupt::{Pending, PendingKind};

/// The journal key prefix of a node's wake times (`sleep#1`, `sleep#2`, ..).
pub(crate) const SLEEP_KEY: &str = "sleep#";

/// The current wall-clock time in unix millis, the clock timers are set and
/// compared with.
pub fn now_ms() -> u64 {
    crate::durable::now_ms()
}

/// When a pause made only of timers is due: the latest of their wake times;
/// `None` if anything else is pending (or nothing is).
pub(crate) fn sleeping_until(pending: &[Pending]) -> Option<u64> {
    if pending.is_empty() || pending.iter().any(|p| p.kind != PendingKind::Sleep) {
        return None;
    }
    Some(pending.iter().filter_map(|p| p.payload.get("until").and_then(serde_json::Value::as_u64)).max().unwrap_or(0))
}

/// When a paused thread should be woken on its own: for a pause made only
/// of timers and approvals, the earlier of the last timer's wake time and
/// the first approval's expiry (resumed then, the gateway expires the
/// approval and the call resolves as an `APPROVAL_EXPIRED` observation the
/// node can route on). `None` when anything else is pending: a value asked
/// with `interrupt`, a breakpoint, or an unknown outcome waits for a person.
pub(crate) fn wake_time(pending: &[Pending]) -> Option<u64> {
    let at = |p: &Pending, key| p.payload.get(key).and_then(serde_json::Value::as_u64);
    let mut sleep = None::<u64>;
    let mut expiry = None::<u64>;
    for p in pending {
        match p.kind {
            PendingKind::Sleep => sleep = Some(sleep.unwrap_or(0).max(at(p, "until").unwrap_or(0))),
            PendingKind::Approval => {
                let expires = at(p, "expires_at")?;
                expiry = Some(expiry.map_or(expires, |e| e.min(expires)));
            }
            _ => return None,
        }
    }
    match (sleep, expiry) {
        (Some(s), Some(e)) => Some(s.min(e)),
        (s, e) => s.or(e),
    }
}

/// Whether `thread` still waits (sleeping, or paused for an approval) with a
/// timer due at `now` (read under its lease).
pub(crate) fn still_due(store: &dyn Store, thread: &str, now: u64) -> Result<bool, agentflow_store::ReadError> {
    let Some(record) = store.thread(thread)? else { return Ok(false) };
    if !matches!(record.status, ThreadStatus::Sleeping | ThreadStatus::Interrupted) {
        return Ok(false);
    }
    Ok(store.thread_timer(thread)?.is_some_and(|at| at <= now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(kind: PendingKind, payload: serde_json::Value) -> Pending {
        Pending { node: "n".into(), instance: None, kind, payload }
    }

    #[test]
    fn a_pause_wakes_at_its_last_timer_or_first_expiry_and_never_when_a_person_must_answer() {
        let sleep = |until: u64| p(PendingKind::Sleep, json!({ "until": until }));
        let approval = |at: u64| p(PendingKind::Approval, json!({ "approval": "a", "expires_at": at }));
        assert_eq!(wake_time(&[]), None);
        assert_eq!(sleeping_until(&[]), None);
        // Only timers: when the last is due.
        assert_eq!(wake_time(&[sleep(30), sleep(10)]), Some(30));
        assert_eq!(sleeping_until(&[sleep(30), sleep(10)]), Some(30));
        // Approvals: the first expiry; with timers, whichever comes first.
        assert_eq!(wake_time(&[approval(50), approval(40)]), Some(40));
        assert_eq!(wake_time(&[sleep(30), approval(40)]), Some(30));
        assert_eq!(wake_time(&[sleep(60), approval(40)]), Some(40));
        assert_eq!(sleeping_until(&[sleep(30), approval(40)]), None);
        // A value, a breakpoint or an unknown outcome waits for a person.
        for kind in [PendingKind::Interrupt, PendingKind::Before, PendingKind::After, PendingKind::OutcomeUnknown] {
            assert_eq!(wake_time(&[sleep(30), p(kind, serde_json::Value::Null)]), None, "{kind:?}");
        }
        // An approval payload without an expiry never wakes on its own.
        assert_eq!(wake_time(&[p(PendingKind::Approval, json!({}))]), None);
    }
}
