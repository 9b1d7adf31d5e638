//! Stuck threads: what no one is moving forward, as `agentflow stuck` lists them and the
//! inbox shows and counts them (the `agentflow_stuck_threads` gauge).
//!
//! - A thread waiting on a person (`interrupted`, or with an approval or unknown outcome
//!   waiting) for longer than a threshold, counted from its last update or the oldest waiting
//!   record. A subgraph child whose question its parent waits on is not listed: the parent
//!   is, as the thread to answer.
//! - A thread recorded as running (or compensating) whose lease expired, or that has none:
//!   the process that ran it died and no worker took it over. A queued run claimed by a
//!   worker whose lease expired is listed the same way; a run its worker parked (waiting for
//!   an approval, a timer or an answer: the row keeps its worker, the lease is released) is
//!   not, its thread is listed for what it waits for.
//! - A queued run its worker's build refuses for good (a declared migration refuses to move
//!   its thread), parked under a lease that keeps every worker from claiming it until then:
//!   listed as `parked`, with the holder and until when, not as an expired lease.
//! - A durable timer past its wake time by more than a threshold: no scheduler or worker woke
//!   the thread.
//! - A thread recorded as running whose lease is live but whose last step committed longer
//!   ago than a threshold (by default 10 minutes, a worker's node time limit): a node
//!   may hang (a call without a timeout). A worker stops a node attempt at its time limit
//!   (`Worker::node_time_limit`); `App::cancel_run` or `pause_run` reaches the running step at
//!   once.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentflow_store::{RunWait, Store, ThreadStatus};

use super::display::span;
use super::error::InspectError;
use super::waits::waits;
use crate::approval::{ApprovalDesk, RoleAuthorizer};
use crate::durable::is_parked_holder;
use crate::interrupt::PendingKind;

/// How long a running thread's step may run before `find` lists it (a worker's default node
/// time limit).
pub(crate) const STEP_OVERDUE_MS: u64 = 600_000;

/// One stuck thread.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stuck {
    /// The thread id.
    pub thread: String,
    /// `waiting_on_human`, `lease_expired`, `timer_overdue`, `step_overdue` or `parked`.
    pub reason: &'static str,
    /// Unix millis since when it is stuck.
    pub since: u64,
    /// What it waits for, for people.
    pub detail: String,
}

/// The kinds of stuck thread, as `Stuck::reason` names them.
pub(crate) const KINDS: [&str; 5] = ["waiting_on_human", "lease_expired", "timer_overdue", "step_overdue", PARKED];

/// The kind of a queued run parked because its worker's build refuses its thread for good.
const PARKED: &str = "parked";

/// `lease`, if it is live at `now` and only parks a queued run.
fn parked_lease(lease: Option<&agentflow_store::Lease>, now: u64) -> Option<&agentflow_store::Lease> {
    lease.filter(|l| l.expires_at > now && is_parked_holder(&l.holder))
}

/// Thread `thread`, its run parked under `lease` since `since`, as listed at `now`.
fn parked(thread: &str, lease: &agentflow_store::Lease, since: u64, now: u64) -> Stuck {
    let detail = format!(
        "its queued run is parked under {} until {} (unix ms, in {}): the worker's build refuses to move the \
         thread (its audit log's `run.parked` says why); it is tried again then, or as soon as the thread is \
         changed; a build that can move it takes it",
        lease.holder,
        lease.expires_at,
        span(lease.expires_at.saturating_sub(now))
    );
    Stuck { thread: thread.to_string(), reason: PARKED, since: since.min(now), detail }
}

/// The stuck threads at `now` ([`find_with`]), with running threads whose last step committed
/// [`STEP_OVERDUE_MS`] ago or more.
pub(crate) fn find(shared: &Arc<dyn Store>, waiting: u64, overdue: u64, now: u64) -> Result<Vec<Stuck>, InspectError> {
    find_with(shared, waiting, overdue, STEP_OVERDUE_MS, now)
}

/// The stuck threads at `now`: waiting on a person for `waiting` millis or more, with an
/// expired lease, with a timer more than `overdue` millis past its wake time, running with
/// its last step committed `running` millis ago or more, or with its queued run parked
/// (a worker's build refuses to move it); oldest first.
pub fn find_with(
    shared: &Arc<dyn Store>,
    waiting: u64,
    overdue: u64,
    running: u64,
    now: u64,
) -> Result<Vec<Stuck>, InspectError> {
    let store = shared.as_ref();
    let desk = ApprovalDesk::for_store(Arc::clone(shared), RoleAuthorizer::new());
    let mut found: Vec<Stuck> = Vec::new();

    // Oldest waiting approval per thread.
    let mut oldest: BTreeMap<String, (u64, String)> = BTreeMap::new();
    for a in store.scan_pending_approvals().map_err(InspectError::store)?.items {
        let e = oldest.entry(a.thread.clone()).or_insert((a.created_at, a.id.clone()));
        if a.created_at < e.0 {
            *e = (a.created_at, a.id.clone());
        }
    }
    let threads = store.scan_threads().map_err(InspectError::store)?.items;
    for t in &threads {
        match t.status {
            ThreadStatus::Interrupted => {
                // A subgraph run whose question its parent waits on counts as the parent's; one
                // whose parent moved on (a fork) waits for no one.
                if desk.parent_waiting_on(&t.id).map_err(InspectError::store)?.is_some()
                    || desk.parent_moved_on(&t.id).map_err(InspectError::store)?.is_some()
                {
                    continue;
                }
                let (since, what) = match oldest.get(&t.id) {
                    Some((at, id)) => (*at, format!("approval {id} waits for a decision")),
                    None => {
                        // A thread whose records cannot be read is listed with why, not a failure
                        // of the whole list.
                        let what = match waits(store, &t.id) {
                            Ok((_, waits)) => {
                                let decided = waits
                                    .iter()
                                    .any(|p| matches!(p.kind, PendingKind::Approval | PendingKind::OutcomeUnknown));
                                if decided {
                                    "its approvals are decided; nobody resumed it".to_string()
                                } else {
                                    "paused for a person's input".to_string()
                                }
                            }
                            Err(e) => format!("what it waits for cannot be read: {e}"),
                        };
                        (t.updated_at, what)
                    }
                };
                if now.saturating_sub(since) >= waiting {
                    found.push(Stuck { thread: t.id.clone(), reason: "waiting_on_human", since, detail: what });
                }
            }
            // Its resume failed on an answer of the wrong shape: it waits in its interrupt for a
            // new one (the inbox lists it).
            ThreadStatus::Failed
                if now.saturating_sub(t.updated_at) >= waiting
                    && desk.waiting_interrupt(&t.id).is_ok()
                    && desk.parent_waiting_on(&t.id).map_err(InspectError::store)?.is_none()
                    && desk.parent_moved_on(&t.id).map_err(InspectError::store)?.is_none() =>
            {
                let detail = "an answer of the wrong shape failed it; it waits for a new one".to_string();
                found.push(Stuck { thread: t.id.clone(), reason: "waiting_on_human", since: t.updated_at, detail });
            }
            ThreadStatus::Running | ThreadStatus::Compensating => {
                // Nothing runs under a lease that only parks a queued run.
                if let Some(lease) = parked_lease(t.lease.as_ref(), now) {
                    found.push(parked(&t.id, lease, t.updated_at, now));
                    continue;
                }
                let live = t.lease.as_ref().is_some_and(|l| l.expires_at > now);
                if live && t.status == ThreadStatus::Running {
                    // A step that runs far longer than any should: a node may hang.
                    let last = store.latest_checkpoint(&t.id).map_err(InspectError::store)?.map(|c| c.created_at);
                    let since = last.unwrap_or(t.updated_at).max(t.updated_at);
                    if now.saturating_sub(since) >= running {
                        let holder = t.lease.as_ref().map_or("", |l| l.holder.as_str());
                        let detail = format!(
                            "a step has run for {} under {holder}; a node may hang (cancel_run or pause_run reaches it)",
                            span(now.saturating_sub(since))
                        );
                        found.push(Stuck { thread: t.id.clone(), reason: "step_overdue", since, detail });
                    }
                }
                if !live {
                    let (since, detail) = match &t.lease {
                        Some(l) => (l.expires_at, format!("lease of {} expired", l.holder)),
                        None => (t.updated_at, "no process holds its lease".to_string()),
                    };
                    found.push(Stuck { thread: t.id.clone(), reason: "lease_expired", since, detail });
                }
            }
            _ => {}
        }
    }
    // Queued runs claimed by a worker that stopped heartbeating (stores with a run queue). A
    // parked run keeps the worker that parked it, with no lease: it waits for what its wait
    // names, and a worker claims it again then. A run its worker's build refuses keeps its
    // worker too, under a lease that only parks it.
    if let Ok(runs) = store.scan_runs() {
        for r in runs.items {
            let Some(holder) = &r.holder else { continue };
            if r.wait != RunWait::Ready {
                continue;
            }
            if let Some(lease) = parked_lease(r.lease.as_ref(), now) {
                if !found.iter().any(|s| s.thread == r.thread && s.reason == PARKED) {
                    found.push(parked(&r.thread, lease, r.heartbeat_at.unwrap_or(r.enqueued_at), now));
                }
                continue;
            }
            let live = r.lease.as_ref().is_some_and(|l| l.expires_at > now && &l.holder == holder);
            if !live && !found.iter().any(|s| s.thread == r.thread && s.reason == "lease_expired") {
                let since = r.lease.as_ref().map_or(r.heartbeat_at.unwrap_or(r.enqueued_at), |l| l.expires_at);
                found.push(Stuck {
                    thread: r.thread.clone(),
                    reason: "lease_expired",
                    since,
                    detail: format!("claimed by worker {holder}, whose lease expired"),
                });
            }
        }
    }
    for timer in store.due_timers(now.saturating_sub(overdue), 1000).map_err(InspectError::store)? {
        found.push(Stuck {
            thread: timer.thread.clone(),
            reason: "timer_overdue",
            since: timer.wake_at,
            detail: format!("timer due {} ago; no scheduler woke it", span(now.saturating_sub(timer.wake_at))),
        });
    }
    found.sort_by(|a, b| (a.since, &a.thread).cmp(&(b.since, &b.thread)));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use agentflow_store::{
        Checkpoint, CheckpointMetadata, CheckpointSource, NewRun, RedbStore, StepCommit, ThreadRecord,
    };

    use super::*;

    #[test]
    fn a_running_thread_whose_step_runs_past_the_limit_is_listed_as_overdue() {
        let now = 1_700_000_000_000;
        let shared: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
        for (thread, committed_ago) in [("hung", 11 * 60_000), ("busy", 60_000)] {
            let record = ThreadRecord::new(thread, "owner", "fp", 1, now - committed_ago);
            let checkpoint = Checkpoint {
                thread: thread.to_string(),
                seq: 0,
                parent: None,
                cursor: vec!["work".to_string()],
                snapshot: Some(b"{}".to_vec()),
                delta: Vec::new(),
                metadata: CheckpointMetadata::new(0, CheckpointSource::Input, Vec::new()),
                created_at: now - committed_ago,
            };
            shared.commit_step(StepCommit::new(record).with_checkpoint(checkpoint)).unwrap();
            shared.acquire_lease(thread, "worker-1", 60_000, now).unwrap();
        }
        let found = find_with(&shared, 3_600_000, 60_000, STEP_OVERDUE_MS, now).unwrap();
        let listed: Vec<(&str, &str)> = found.iter().map(|s| (s.thread.as_str(), s.reason)).collect();
        assert_eq!(listed, [("hung", "step_overdue")], "only the step past the limit");
        assert!(found[0].detail.contains("worker-1"), "{}", found[0].detail);
    }

    /// A queued run its worker's build refuses, parked under `parked:<worker>` while the row
    /// keeps `<worker>`: listed as parked until its lease expires, not as an expired lease or a
    /// hanging step.
    #[test]
    fn a_run_parked_by_its_workers_build_is_listed_as_parked() {
        let now = 1_700_000_000_000;
        let until = now + 14 * 60_000;
        let shared: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
        for (thread, status) in [("t-running", ThreadStatus::Running), ("t-done", ThreadStatus::Completed)] {
            let mut record = ThreadRecord::new(thread, "owner", "fp", 1, now - 20 * 60_000);
            record.status = status;
            shared.commit_step(StepCommit::new(record)).unwrap();
            shared.enqueue_run(NewRun::new(thread, "agent", None, "owner", now - 60_000)).unwrap();
            assert_eq!(shared.claim_runs("agent", "w-1", 60_000, now - 60_000, 1).unwrap().len(), 1);
            shared.release_lease(thread, "w-1").unwrap();
            let holder = crate::durable::parked_holder("w-1");
            shared.acquire_lease(thread, &holder, until - (now - 60_000), now - 60_000).unwrap();
        }
        let found = find_with(&shared, 3_600_000, 60_000, 60_000, now).unwrap();
        let listed: Vec<(&str, &str)> = found.iter().map(|s| (s.thread.as_str(), s.reason)).collect();
        assert_eq!(listed, [("t-running", "parked"), ("t-done", "parked")], "{found:?}");
        for stuck in &found {
            assert!(stuck.since <= now, "{stuck:?}");
            assert!(stuck.detail.contains("parked:w-1") && stuck.detail.contains(&until.to_string()), "{stuck:?}");
        }
        // Once the parked lease expires, a run no worker claims again is stuck as before.
        let later = find_with(&shared, 3_600_000, 60_000, 60_000, until + 1).unwrap();
        assert!(later.iter().all(|s| s.reason == "lease_expired"), "{later:?}");
        assert_eq!(later.len(), 2, "{later:?}");
    }
}
