//! Follow-up runs, from the App: a new input for a thread that ran already (a conversation's
//! next message), queued for a [`Worker`] with a strategy for the run the thread may still have
//! in the queue ([`Multitask`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agentflow_store::{
    FollowUpQueued, FollowUpRule, NewAuditEntry, NewRun, QueueError, QueuedRun, RunControl, Store, ThreadRecord,
    ThreadStatus,
};

use crate::access::{Access, Actor, Operation};
use crate::app::App;
use crate::app::WorkerError;
use crate::app::multitask::Multitask;
use crate::app::run_controls::{RESUME_REQUESTED, RESUMED_FROM};
use crate::core::state::State;
use crate::durable::restart::{follow_up_mark, restarted_at, run_start};
use crate::durable::{StoredRelease, now_ms, stored_release};
#[cfg(doc)]
use crate::worker::Worker;
use serde_json::Value;

/// The kind of the audit entry that records a follow-up run submitted.
const SUBMITTED: &str = "run.submitted";

impl<S: State, D> App<S, D> {
    /// Queues a follow-up run of existing thread `thread` for a [`Worker`]: the worker that
    /// claims it applies `update` through the reducers as a new checkpoint after the thread's
    /// latest (source `Input`; history is never rewritten), then runs the graph from its start
    /// node, under the same lease and fence as any run. The run counts its super-steps from 0
    /// (the graph's `max_steps` bounds each run); the thread's budget carries over. A
    /// `run.submitted` audit entry (`"follow_up": true`) is written with the run, and the
    /// worker's restart writes `run.follow_up`. Blocking.
    ///
    /// With a run of the thread in the queue (running, or parked waiting for a person or its
    /// timer), `strategy` decides ([`Multitask`]); without one, the follow-up is the thread's
    /// queued run at once ([`FollowUpQueued::Now`]), except that `enqueue` for a thread that
    /// waits outside the queue (paused, at a breakpoint, for a person or its timer) waits behind
    /// a run held for it until the thread's run ends. The store decides, in the transaction that
    /// queues the follow-up, whether the thread is active and what the strategy does about it
    /// ([`Store::enqueue_follow_up_as`]). A worker that dies between the settle of the run
    /// before it and its own claim, or after its restart, leaves it queued: the next claim runs
    /// it, applying the update once.
    ///
    /// For `rollback`, the worker that claims the follow-up decides where the thread goes back
    /// to: the checkpoint the earliest run started since the submission (the one it cancelled,
    /// or the next one when that had not started) started from: the latest checkpoint whose
    /// source is `Input` or `Fork` (the thread's input, a fork, a follow-up's restart), or, for
    /// a follow-up's restart, the checkpoint before its input; for a resume queued as a run of
    /// its own ([`App::submit_resume`] of a failed, cancelled or paused thread: no such
    /// checkpoint of its own), the checkpoint its first step continued from. No run started since: nothing is
    /// rolled back. A follow-up that cannot run when claimed leaves the queue with a
    /// `run.follow_up_failed` audit entry saying why.
    ///
    /// A thread an older version of this graph wrote (the same `#[graph(id)]`, a lower
    /// `version`) takes follow-ups as any other, finished or waiting: the worker that claims
    /// the follow-up moves it to this version first, through the declared migrations, in the
    /// same commit and with the same `graph.migrated` audit entry as a resume's. A `rollback` may
    /// go back to a checkpoint from before that move: the run starts over at this version's
    /// start node. A follow-up claimed by a worker of an older build than the thread's version
    /// (a rolling deploy) stays queued for a worker of that version.
    ///
    /// Checked for `actor` ([`Operation::Resume`] and [`Operation::UpdateState`];
    /// [`Operation::Cancel`] to interrupt a run, and [`Operation::Fork`] to roll one back).
    ///
    /// # Errors
    /// [`WorkerError::UnknownThread`] for a thread that neither exists nor is queued (for the
    /// actor); [`WorkerError::FollowUpPurged`] for a purged thread;
    /// [`WorkerError::FollowUpOtherGraph`] for a thread another graph wrote, or a newer version
    /// of this one, or this version built otherwise (another fingerprint); [`WorkerError::FollowUpRefused`] for `reject` while the
    /// thread is active (a run in the queue, or a status that is not finished), and for
    /// `interrupt` or `rollback` of a run no worker has started yet (the thread does not exist
    /// yet: `enqueue` waits for it); [`WorkerError::Access`]; a store without follow-ups answers
    /// [`QueueError::Unsupported`](agentflow_store::QueueError::Unsupported).
    ///
    /// ```
    /// # use agentflow::prelude::*;
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
    /// # struct Chat { #[reduce(append)] said: Vec<String>, #[reduce(add)] turns: u32 }
    /// # #[graph(state = Chat, start = answer)]
    /// # mod chat {
    /// #     use super::*;
    /// #     #[node(goto = [END])]
    /// #     async fn answer(_c: &Chat) -> Step<Chat> { goto!(END, Chat::update().turns(1)) }
    /// # }
    /// use agentflow::{FollowUpQueued, Multitask, RedbStore, WorkerError};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let app = chat::graph().app().store(std::sync::Arc::new(RedbStore::in_memory()?));
    /// app.submit("chat-1", &Chat { said: vec!["hello".into()], turns: 0 })?;
    /// // The next message waits for the first run to end (a worker runs both).
    /// let next = Chat::update().said(vec!["and another thing".into()]);
    /// let queued = app.submit_follow_up("chat-1", &next, Multitask::Enqueue, "ada")?;
    /// assert_eq!(queued, FollowUpQueued::Behind { ahead: 0 });
    /// // `reject` refuses while the thread has a run in the queue.
    /// let refused = app.submit_follow_up("chat-1", &next, Multitask::Reject, "ada");
    /// assert!(matches!(refused, Err(WorkerError::FollowUpRefused { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub fn submit_follow_up(
        &self,
        thread: &str,
        update: &S::Update,
        strategy: Multitask,
        actor: impl Into<Actor>,
    ) -> Result<FollowUpQueued, WorkerError> {
        Ok(self.queue_follow_up(thread, update, strategy, &self.access_of(actor), None)?.queued)
    }

    /// [`App::submit_follow_up`], telling `webhook` when the follow-up run first stops (ends,
    /// or waits for a person or its timer): the worker's settle writes the delivery, which a
    /// server's dispatcher sends ([`webhook`](crate::webhook)). The URL is the caller's to check
    /// (the server refuses those its operator did not allow).
    pub fn submit_follow_up_with_webhook(
        &self,
        thread: &str,
        update: &S::Update,
        strategy: Multitask,
        actor: impl Into<Actor>,
        webhook: &str,
    ) -> Result<FollowUpQueued, WorkerError> {
        Ok(self.queue_follow_up(thread, update, strategy, &self.access_of(actor), Some(webhook))?.queued)
    }

    /// [`App::submit_follow_up`] for `access`, with the queued run's identity.
    pub(crate) fn queue_follow_up(
        &self,
        thread: &str,
        update: &S::Update,
        strategy: Multitask,
        access: &Access,
        webhook: Option<&str>,
    ) -> Result<QueuedFollowUp, WorkerError> {
        let store = self.setup.store.as_ref().ok_or(WorkerError::NoStore)?;
        crate::durable::check_sealed::<S>(store.as_ref())?;
        let blob = crate::durable::state_document(update, "the follow-up's input", crate::durable::Allowed::of::<S>())?;
        let row = store.scan_runs()?.items.into_iter().find(|r| r.thread == thread);
        let record = target(store, access, thread, row.as_ref(), strategy)?;
        let Some(record) = record else {
            // Queued, and no worker has started it: the thread does not exist yet.
            return match strategy {
                Multitask::Enqueue => {
                    let owner = Owner::of_row(row);
                    self.enqueue_at(store, access, thread, blob, None, &owner, webhook, FollowUpRule::Enqueue, strategy)
                }
                _ => Err(WorkerError::FollowUpRefused {
                    thread: thread.to_string(),
                    status: "queued, not started yet".to_string(),
                    strategy: strategy.as_str(),
                }),
            };
        };
        // Refused now rather than dropped by the worker that claims it. A thread an older
        // version of this graph wrote is moved to this one by that worker first.
        let current = self.setup.graph.fingerprint();
        if record.graph_fingerprint != current
            && !matches!(
                stored_release(&**store, thread, &record.graph_fingerprint, self.setup.graph.release())?,
                StoredRelease::Older(_)
            )
        {
            return Err(WorkerError::FollowUpOtherGraph {
                thread: thread.to_string(),
                stored: record.graph_fingerprint.clone(),
                current: current.to_string(),
            });
        }
        let fork_from = match strategy {
            Multitask::Rollback => Some(rollback_bound(&**store, &record, row.as_ref())?),
            _ => None,
        };
        // Whether the thread's run is active, and what to do about it, is decided by the store in
        // the transaction that queues the follow-up.
        let rule = match strategy {
            Multitask::Reject => FollowUpRule::Reject,
            Multitask::Enqueue => FollowUpRule::Enqueue,
            // Being undone: there is no run to cancel, and a restart now would leave the undo
            // half done. Queued as `enqueue` queues it: behind a run held for the thread, which
            // a resume wakes to finish the compensation.
            _ if record.status == ThreadStatus::Compensating => FollowUpRule::Enqueue,
            _ => {
                let detail =
                    serde_json::json!({ "control": RunControl::Cancel.as_str(), "follow_up": strategy.as_str() });
                FollowUpRule::Interrupt {
                    cancel: NewAuditEntry::new(now_ms(), &access.actor().id, "run.cancel_requested", detail),
                }
            }
        };
        let owner = Owner { owner: record.owner.clone(), tenant: record.tenant.clone() };
        self.enqueue_at(store, access, thread, blob, fork_from, &owner, webhook, rule, strategy)
    }

    /// Queues the follow-up run as `rule` decides about the thread's run.
    #[allow(clippy::too_many_arguments)]
    fn enqueue_at(
        &self,
        store: &Arc<dyn Store>,
        access: &Access,
        thread: &str,
        blob: Vec<u8>,
        fork_from: Option<u64>,
        owner: &Owner,
        webhook: Option<&str>,
        rule: FollowUpRule,
        strategy: Multitask,
    ) -> Result<QueuedFollowUp, WorkerError> {
        let at = submitted_at(&**store, thread)?;
        let mark = follow_up_mark(at, &blob);
        let graph = self.setup.graph.name();
        let mut run = NewRun::new(thread, graph, Some(blob), &owner.owner, at).as_follow_up(fork_from);
        let mut detail = serde_json::json!({
            "graph": graph,
            "owner": owner.owner,
            "follow_up": true,
            "strategy": strategy.as_str(),
        });
        if let Some(from) = fork_from {
            detail["fork_from"] = from.into();
        }
        if let Some(tenant) = &owner.tenant {
            detail["tenant"] = tenant.as_str().into();
            run = run.with_tenant(tenant.clone());
        }
        if let Some(url) = webhook {
            run = run.with_webhook(url);
        }
        let entry = NewAuditEntry::new(at, &access.actor().id, SUBMITTED, detail);
        let cancels = matches!(rule, FollowUpRule::Interrupt { .. });
        let queued = store.enqueue_follow_up_as(run, entry, rule).map_err(|e| match e {
            QueueError::Active { thread, status } => {
                WorkerError::FollowUpRefused { thread, status, strategy: strategy.as_str() }
            }
            e => e.into(),
        })?;
        if cancels {
            // A run parked (a build refused to move the thread) is claimed now to act on it.
            crate::durable::release_parked(&**store, thread)?;
        }
        Ok(QueuedFollowUp { queued, mark })
    }
}

/// A follow-up run just queued: where it stands, and its identity in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueuedFollowUp {
    /// Where it stands.
    pub(crate) queued: FollowUpQueued,
    /// Its mark ([`follow_up_mark`] of its submission time and input): the run it is, told
    /// apart from every other run of its thread, in the follow-ups behind the thread's run and
    /// once it is the thread's run ([`is_follow_up`]).
    pub(crate) mark: String,
}

/// Whether queued run `run` is the follow-up marked `mark` ([`QueuedFollowUp::mark`]).
#[cfg(feature = "server")]
pub(crate) fn is_follow_up(run: &QueuedRun, mark: &str) -> bool {
    run.follow_up && follow_up_mark(run.enqueued_at, run.input.as_deref().unwrap_or_default()) == mark
}

/// The last submission time [`submitted_at`] handed out in this process (unix millis).
static LAST_AT: AtomicU64 = AtomicU64::new(0);

/// The submission time of a new follow-up of `thread` (unix millis): now, but later than every
/// run of the thread in the queue and every follow-up this process submitted before, so that
/// the follow-up's identity (its time and input, see `durable::restart::follow_up_mark`) is
/// its own even for identical inputs submitted in the same millisecond. (Two processes that
/// submit the same input for one thread in the same millisecond, each before the other's row
/// is written, may still pick one time: the second then applies as the first.)
fn submitted_at(store: &dyn Store, thread: &str) -> Result<u64, WorkerError> {
    let queued = store.scan_runs()?.items.into_iter().filter(|r| r.thread == thread).map(|r| r.enqueued_at);
    let waiting = store.list_follow_ups(thread)?.into_iter().map(|r| r.enqueued_at);
    let after = queued.chain(waiting).max().map_or(0, |at| at.saturating_add(1));
    let mut at = now_ms().max(after);
    // `fetch_update` with a closure that always answers `Some` cannot fail.
    let _ = LAST_AT.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
        at = at.max(last.saturating_add(1));
        Some(at)
    });
    Ok(at)
}

/// Who a follow-up's run belongs to: its thread's owner and tenant.
struct Owner {
    owner: String,
    tenant: Option<String>,
}

impl Owner {
    /// The owner and tenant a queued run was submitted with.
    fn of_row(row: Option<QueuedRun>) -> Self {
        match row {
            Some(row) => Owner { owner: row.owner, tenant: row.tenant },
            None => Owner { owner: String::new(), tenant: None },
        }
    }
}

/// The thread a follow-up is for, checked for `access`: its record, or `None` for a thread
/// queued (`row`) that no worker has started yet.
fn target(
    store: &Arc<dyn Store>,
    access: &Access,
    thread: &str,
    row: Option<&QueuedRun>,
    strategy: Multitask,
) -> Result<Option<ThreadRecord>, WorkerError> {
    let unknown = || WorkerError::UnknownThread { thread: thread.to_string() };
    let mut operations = vec![Operation::Resume, Operation::UpdateState];
    if strategy.cancels() {
        operations.push(Operation::Cancel);
    }
    if strategy == Multitask::Rollback {
        operations.push(Operation::Fork);
    }
    if let Some(record) = store.thread(thread)? {
        if !access.sees(&record) {
            return Err(unknown());
        }
        for operation in operations {
            access.check(operation, &record)?;
        }
        if record.status == ThreadStatus::Purged {
            return Err(WorkerError::FollowUpPurged { thread: thread.to_string() });
        }
        return Ok(Some(record));
    }
    // A run submitted for a new thread that no worker has started: its queue row says its tenant.
    let row = row.ok_or_else(unknown)?;
    if !access.actor().acts_for(row.tenant.as_deref()) {
        return Err(unknown());
    }
    for operation in operations {
        access.allow(operation, Some(thread))?;
    }
    Ok(None)
}

/// What bounds a rollback's run (see [`NewRun::fork_from`]; the worker that claims the
/// follow-up decides where the thread goes back to): the checkpoint that started the thread's
/// current run while it has one under way, else the thread's next checkpoint (the run queued
/// for it has not started: the run that starts next is the one replaced, if any does before
/// the follow-up's claim).
fn rollback_bound(store: &dyn Store, record: &ThreadRecord, row: Option<&QueuedRun>) -> Result<u64, WorkerError> {
    let checkpoints = store.list_checkpoints(&record.id)?;
    let next = checkpoints.last().map_or(0, |c| c.seq.saturating_add(1));
    let unstarted = row.filter(|r| r.follow_up).is_some_and(|row| {
        let mark = follow_up_mark(row.enqueued_at, row.input.as_deref().unwrap_or_default());
        restarted_at(&checkpoints, &mark).is_none()
    });
    if record.status.is_finished() || unstarted {
        return Ok(next);
    }
    // A resume queued as a run of its own (a failed run retried, a cancelled or paused one
    // continued) starts without a checkpoint that starts a run: the run replaced began after
    // where the resume was asked for, not at the thread's last input.
    let resumed = resumed_after(store, &record.id)?;
    Ok(match (run_start(&checkpoints), resumed) {
        (Some(start), Some(resumed)) => start.max(resumed),
        (start, resumed) => start.or(resumed).unwrap_or(next),
    })
}

/// The first checkpoint the latest resume of thread `thread` queued as a run of its own may
/// have written: the one after the thread's latest checkpoint when it was asked for (recorded
/// in its `run.resume_requested` audit entry). `None`: no such resume (or only ones recorded
/// before that was).
fn resumed_after(store: &dyn Store, thread: &str) -> Result<Option<u64>, WorkerError> {
    let audit = store.list_audit(thread)?;
    let from = audit.iter().rev().filter(|e| e.kind == RESUME_REQUESTED).find_map(|e| e.detail.get(RESUMED_FROM));
    Ok(match from {
        Some(Value::Null) => Some(0),
        Some(seq) => seq.as_u64().map(|seq| seq.saturating_add(1)),
        None => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_follow_up_is_submitted_after_the_thread_s_queued_runs_and_the_one_before() {
        let store = agentflow_store::RedbStore::in_memory().unwrap();
        let later = now_ms() + 2_000;
        store.enqueue_run(NewRun::new("t", "g", None, "ada", later)).unwrap();
        let first = submitted_at(&store, "t").unwrap();
        assert!(first > later, "after the queued run: {first} vs {later}");
        // In a tight loop (within one millisecond, likely): each time its own.
        let mut times = vec![submitted_at(&store, "other").unwrap()];
        for _ in 0..3 {
            times.push(submitted_at(&store, "other").unwrap());
        }
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    }
}
