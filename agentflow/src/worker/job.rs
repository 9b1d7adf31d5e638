//! One claimed run, owned by its task: how it is stopped, run, and what becomes of its queue
//! row once it ended.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agentflow_store::{QueuedRun, RunControl, RunWait, Settle, Store, ThreadStatus};
use tokio_util::sync::CancellationToken;

use super::failures::{MAX_CLAIMS_ON_STORE_ERRORS, StoreFailures, store_failure_backoff};
use super::parked::{REFUSED_RETRY, park, refused_for_good};
use crate::app::App;
use crate::core::state::State;
use crate::durable::{Durability, PersistError, ResumeError, blocking, now_ms};
use crate::interrupt::{Pending, PendingKind};
use crate::outcome::{Outcome, RunError};

/// How one run ended, for the report.
pub(super) enum End {
    Completed,
    Interrupted,
    Failed,
    Controlled,
    Lost,
    Stopped,
    Sleeping,
}

/// How a running run is stopped at its next step boundary.
#[derive(Clone, Default)]
pub(super) struct Stops {
    /// Stops the run.
    pub(super) token: CancellationToken,
    /// Cancelled before `token` when the stop is a pause (a pause request, or this worker's
    /// shutdown): the run ends `Outcome::Paused`, nothing undone.
    pub(super) pause: CancellationToken,
    /// Drops the running step's nodes: a control request, or a shutdown past its deadline.
    pub(super) now: CancellationToken,
    /// The control request that stopped the run, if one did (else: shutdown).
    pub(super) asked: Arc<OnceLock<RunControl>>,
    /// Set when this worker's own claim took the thread again while the run still ran (its
    /// lease had lapsed): the run writes and starts nothing more (another executor may have
    /// run the thread in between, and the store's fence knows one holder id) and ends lost;
    /// the claim is run then.
    pub(super) revoked: Arc<std::sync::atomic::AtomicBool>,
}

impl Stops {
    /// Stops the run as `control` asks (the first request wins).
    pub(super) fn ask(&self, control: RunControl) {
        if *self.asked.get_or_init(|| control) == RunControl::Pause {
            self.pause.cancel();
        }
        self.token.cancel();
        // A request reaches the running nodes at once, a hung one included.
        self.now.cancel();
    }
}

/// One claimed run, owned by its task.
pub(super) struct Job<S: State, D> {
    pub(super) app: App<S, D>,
    pub(super) deps: Arc<D>,
    pub(super) store: Arc<dyn Store>,
    pub(super) holder: String,
    pub(super) ttl: Duration,
    pub(super) durability: Durability,
    pub(super) node_time_limit: Option<Duration>,
    pub(super) stop_grace: Duration,
    pub(super) stops: Stops,
    pub(super) store_failures: StoreFailures,
    /// The control request the run's end was decided on (read once, when it ended): the one
    /// its queue row is settled as having handled. One read later by a heartbeat is not: the
    /// store keeps it for the next claim.
    pub(super) acted_on: OnceLock<Option<RunControl>>,
    /// [`Job::cancel_now`] ran: what it left (a compensation that waits for a person, parked)
    /// is not cancelled again.
    pub(super) cancelled_now: std::sync::atomic::AtomicBool,
    /// How a follow-up left the queue without restarting its thread, and why: `follow_up_failed`
    /// (audited `run.follow_up_failed`) or `cancelled` (before it ran). Its webhook says so
    /// instead of the thread's earlier run's end.
    pub(super) not_run: OnceLock<(&'static str, String)>,
}

/// What a worker does with a run's queue row once the run ended.
/// How long a queued run this build's graph cannot continue waits before it is claimed again.
pub(super) const OTHER_BUILD_RETRY: Duration = Duration::from_secs(60);

pub(super) enum Then {
    /// Remove it: the run ended.
    Remove,
    /// Keep it, parked until what it waits for is there (no approval of the thread waits, the
    /// thread's timer is due, or an answer woke it); held (only while follow-ups wait behind it)
    /// until the thread's run ends or a resume wakes it.
    Park(RunWait),
    /// Keep it, parked until none of these approvals (the records its pause waits on) waits
    /// for a human, or its thread's timer is due.
    AwaitApprovals(Vec<String>),
    /// Leave it queued for another worker (shutdown).
    Leave,
    /// Leave it queued, claimable again after this wait (a store failure): the lease is kept
    /// that long instead of let go.
    Backoff(Duration),
    /// Leave it queued, parked for this long: its thread refused for good by this build, or
    /// being undone (why), let go at once, and tried again once someone took the thread or
    /// after the wait ([`REFUSED_RETRY`] for a refusal; see `parked`).
    Parked(Duration, String),
    /// Nothing: another worker took the thread.
    Nothing,
}

impl<S: State, D: Send + Sync + 'static> Job<S, D> {
    pub(super) async fn run(self, claim: QueuedRun) -> End {
        let (end, then) = self.run_claimed(&claim).await;
        let then = match then {
            // A store failure: the run stays queued for another try, unless it keeps failing.
            Then::Leave if matches!(end, End::Failed) => {
                let t = claim.thread.clone();
                let at = blocking(&self.store, move |s| s.latest_checkpoint(&t)).await;
                let at = at.ok().and_then(Result::ok).flatten().map(|cp| cp.seq);
                let failures = self.store_failures.failed(&claim.thread, at);
                if failures >= MAX_CLAIMS_ON_STORE_ERRORS {
                    tracing::warn!(thread = %claim.thread, failures, "a run that keeps failing on the store leaves the queue");
                    self.store_failures.clear(&claim.thread);
                    Then::Remove
                } else {
                    Then::Backoff(store_failure_backoff(failures, self.ttl))
                }
            }
            then => {
                self.store_failures.clear(&claim.thread);
                then
            }
        };
        self.finish(&claim, then).await;
        end
    }

    /// A runner for the claimed thread, under the claim's lease.
    pub(super) fn runner<'a>(
        &'a self,
        claim: &QueuedRun,
        cancel: CancellationToken,
        pause: CancellationToken,
    ) -> crate::Runner<'a, S, D> {
        let until = claim.lease.as_ref().map_or(0, |l| l.expires_at);
        let mut runner = self
            .app
            .runner(&*self.deps)
            .thread(claim.thread.clone())
            .owner(claim.owner.clone())
            .durability(self.durability)
            .lease_ttl(self.ttl)
            .cancel_token(cancel)
            .pause_token(pause)
            .stop_now_token(self.stops.now.clone())
            .stop_grace(self.stop_grace)
            .lease_holder(self.holder.clone(), until, Arc::clone(&self.stops.revoked));
        // A run submitted for a tenant creates its thread for that tenant.
        if let Some(tenant) = &claim.tenant {
            runner = runner.tenant(tenant.clone());
        }
        match self.node_time_limit {
            Some(limit) => runner.node_time_limit(limit),
            None => runner,
        }
    }

    async fn run_claimed(&self, claim: &QueuedRun) -> (End, Then) {
        if claim.held {
            match self.ended_without_the_queue(claim).await {
                Ok(Some(end)) => {
                    tracing::debug!(thread = %claim.thread, "a held run's thread ended without the queue; it leaves the queue");
                    // A control request set on the row is moot: the run it would stop ended.
                    let _ = self.acted_on.set(claim.control);
                    return (end, Then::Remove);
                }
                Ok(None) => {}
                Err(end) => return end,
            }
        }
        if claim.follow_up {
            return self.run_follow_up(claim).await;
        }
        let thread = claim.thread.clone();
        match claim.control {
            // Cancelled while nobody ran it: a thread that exists is resumed already cancelled,
            // so it ends `cancelled` at its first step boundary (its calls undone as a cancel
            // undoes them); a thread never started just leaves the queue.
            Some(RunControl::Cancel) => {
                self.stops.ask(RunControl::Cancel);
                // A fresh pause token: a cancel wins over this worker's shutdown asking for a pause.
                let runner = self.runner(claim, self.stops.token.clone(), CancellationToken::new());
                return match runner.resume().await {
                    Err(RunError::Resume(ResumeError::UnknownThread { .. })) => (End::Controlled, Then::Remove),
                    result => self.ended(claim, result).await,
                };
            }
            // Paused while nobody ran it: the run stops at its first step boundary, before any
            // step, so the thread (created first if it is new) is left `paused`.
            Some(control) => self.stops.ask(control),
            None => {}
        }
        let result = match &claim.input {
            Some(input) => match serde_json::from_slice::<S>(input) {
                Ok(input) => {
                    match self.runner(claim, self.stops.token.clone(), self.stops.pause.clone()).run(input).await {
                        // Started by a worker that stopped or died since: continued from its last step.
                        Err(RunError::ThreadExists { .. }) => {
                            self.runner(claim, self.stops.token.clone(), self.stops.pause.clone()).resume().await
                        }
                        other => other,
                    }
                }
                Err(e) => {
                    let error = crate::secret::describe_decode_error(&e);
                    tracing::error!(thread = %thread, %error, "the queued input does not decode as the graph's state");
                    return (End::Failed, Then::Remove);
                }
            },
            None => self.runner(claim, self.stops.token.clone(), self.stops.pause.clone()).resume().await,
        };
        self.ended(claim, result).await
    }

    /// For a run claimed while held ([`QueuedRun::held`]): how its thread's run ended without
    /// the queue (the thread is finished), for the report; the row then leaves the queue (its
    /// first follow-up takes its place) and the thread is not resumed, so a step that failed,
    /// or a run that was cancelled, is not run again. `Ok(None)`: the thread is resumed as any
    /// claim's (a control request or its due timer made the row claimable, or a run of it
    /// stopped midway); `Err` with how the run ends when the thread cannot be read, or, for a
    /// compensating thread, held again (a control request is moot there).
    async fn ended_without_the_queue(&self, claim: &QueuedRun) -> Result<Option<End>, (End, Then)> {
        let thread = claim.thread.clone();
        let status = match blocking(&self.store, move |s| s.thread(&thread)).await {
            Ok(Ok(record)) => record.map(|r| r.status),
            Ok(Err(e)) => return Err(self.store_failure(claim, &PersistError::from(e))),
            Err(e) => return Err(self.store_failure(claim, &e)),
        };
        Ok(match status {
            // Being undone (a cancel or a failure's compensation waits for a person or a retry):
            // its run has not ended, whatever control request made the row claimable (a cancel
            // is moot, the thread is being undone already). Held again, so the follow-ups
            // behind it wait for the compensation's end.
            Some(ThreadStatus::Compensating) => {
                // Answered: the settle parks the row without the request.
                let _ = self.acted_on.set(claim.control);
                return Err((End::Interrupted, Then::Park(RunWait::Held)));
            }
            Some(ThreadStatus::Cancelled) => Some(End::Controlled),
            Some(ThreadStatus::Failed | ThreadStatus::BudgetExhausted) => Some(End::Failed),
            Some(status) if status.is_finished() => Some(End::Completed),
            _ => None,
        })
    }

    /// What a run's end means for the report and the queue row.
    pub(super) async fn ended(
        &self,
        claim: &QueuedRun,
        result: Result<crate::outcome::Run<S>, RunError>,
    ) -> (End, Then) {
        let asked = *self.acted_on.get_or_init(|| self.stops.asked.get().copied());
        let (end, then) = self.end_of(claim, result, asked).await;
        match then {
            // Waiting (for people, a value, its timer), but a cancel was asked: the cancel wins
            // (unless the cancelled run is what waits: its compensation, for a person).
            Then::Park(_) | Then::AwaitApprovals(_)
                if asked == Some(RunControl::Cancel)
                    && !self.cancelled_now.load(std::sync::atomic::Ordering::SeqCst) =>
            {
                self.cancel_now(claim).await
            }
            then => (end, then),
        }
    }

    /// [`Job::ended`] before a cancel asked of a waiting run is applied; `asked` is the control
    /// request the run was asked, if any.
    async fn end_of(
        &self,
        claim: &QueuedRun,
        result: Result<crate::outcome::Run<S>, RunError>,
        asked: Option<RunControl>,
    ) -> (End, Then) {
        let thread = &claim.thread;
        match result {
            Ok(run) => match run.outcome {
                Outcome::Completed => (End::Completed, Then::Remove),
                Outcome::Cancelled | Outcome::Paused if asked.is_none() => (End::Stopped, Then::Leave),
                // A cancel request that came after this worker's shutdown had asked the run to
                // pause: the cancel wins, the paused thread is cancelled now.
                Outcome::Paused if asked == Some(RunControl::Cancel) => self.cancel_now(claim).await,
                // Paused as asked: a person resumes it. Follow-ups queued behind it wait until its
                // run ends (`Settle::hold`: the row leaves the queue when none waits).
                Outcome::Paused => (End::Controlled, Then::Park(RunWait::Held)),
                Outcome::Cancelled => (End::Controlled, Then::Remove),
                // Cancelled as asked, its calls undone.
                Outcome::Compensated { .. } if asked == Some(RunControl::Cancel) => (End::Controlled, Then::Remove),
                // Waiting (for people, a breakpoint, its timer), but a cancel was asked: the
                // cancel wins. (A step that failed or ran out of budget as the cancel came ends
                // the run cancelled itself.)
                Outcome::Sleeping { .. } | Outcome::Interrupted { .. } if asked == Some(RunControl::Cancel) => {
                    self.cancel_now(claim).await
                }
                // Waiting for a human (an approval, or a call cut off mid-way to settle): parked,
                // even if decided meanwhile (then it is claimable at once).
                Outcome::Interrupted { pending, .. }
                    if pending
                        .iter()
                        .any(|p| matches!(p.kind, PendingKind::Approval | PendingKind::OutcomeUnknown)) =>
                {
                    (End::Interrupted, awaiting(&pending))
                }
                // Waiting for a person's value (`cx.interrupt`): parked until an answer is
                // recorded (`ApprovalDesk::answer_interrupt` wakes it), then claimed and continued
                // with that answer.
                Outcome::Interrupted { pending, .. } if pending.iter().any(|p| p.kind == PendingKind::Interrupt) => {
                    (End::Interrupted, Then::Park(RunWait::Answer))
                }
                // Stopped at a breakpoint: held as a paused run is.
                Outcome::Interrupted { .. } => (End::Interrupted, Then::Park(RunWait::Held)),
                // A durable timer: parked until it is due, then claimed and resumed by a worker.
                Outcome::Sleeping { .. } => (End::Sleeping, Then::Park(RunWait::Timer)),
                // The run failed after taking an answer (a value of the wrong shape, say): the
                // thread waits where it was answered, the answer is spent, and a person may
                // answer again, which wakes the parked run.
                Outcome::Failed { .. } if self.still_waits_in_interrupt(thread).await => {
                    (End::Failed, Then::Park(RunWait::Answer))
                }
                _ => (End::Failed, Then::Remove),
            },
            Err(RunError::LeaseLost { .. } | RunError::ThreadBusy { .. }) => (End::Lost, Then::Nothing),
            Err(RunError::Resume(ResumeError::Finished { .. })) => (End::Completed, Then::Remove),
            // It waits for a person's value (`cx.interrupt`), which a worker cannot give: not a
            // failure; parked until an answer is recorded, as above.
            Err(RunError::ValueRequired { .. }) => (End::Interrupted, Then::Park(RunWait::Answer)),
            Err(RunError::Persist(e)) => self.store_failure(claim, &e),
            // A thread whose declared migrations this build refuses for good: parked, the thread
            // let go at once (see `parked`).
            // Asked to cancel: the queued run leaves the queue, the thread as it was (this
            // build cannot move it to cancel it).
            Err(RunError::Resume(e)) if refused_for_good(&e) && asked == Some(RunControl::Cancel) => {
                tracing::warn!(thread = %thread, error = %e, "a cancelled run this build refuses for good leaves the queue");
                (End::Controlled, Then::Remove)
            }
            Err(RunError::Resume(e)) if refused_for_good(&e) => {
                tracing::warn!(thread = %thread, error = %e, "a queued run this build refuses for good; parked");
                (End::Failed, Then::Parked(REFUSED_RETRY, e.to_string()))
            }
            // A thread this build's graph cannot continue: moved on by a newer version (a worker
            // of that version takes it), or a deploy that declares no way for it. It stays
            // queued, retried after a while, for a worker of a build that can run it.
            Err(
                e @ RunError::Resume(
                    ResumeError::GraphNewer { .. }
                    | ResumeError::GraphChanged { .. }
                    | ResumeError::NodeUnmapped { .. },
                ),
            ) => {
                tracing::warn!(thread = %thread, error = %e, "a queued run this build cannot continue; retried later");
                (End::Failed, Then::Backoff(OTHER_BUILD_RETRY))
            }
            Err(e) => {
                tracing::warn!(thread = %thread, error = %e, "a queued run could not be run; it leaves the queue");
                (End::Failed, Then::Remove)
            }
        }
    }

    /// Whether `thread` (which just ended `failed`) still waits in `cx.interrupt`; `false` when
    /// that cannot be read.
    async fn still_waits_in_interrupt(&self, thread: &str) -> bool {
        let t = thread.to_string();
        matches!(blocking(&self.store, move |s| crate::approval::answer::waiting(s, &t).is_ok()).await, Ok(true))
    }

    /// Resumes the claimed thread already cancelled, so it ends `cancelled` at its first step
    /// boundary: a cancel request that came when the run had stopped for something else.
    async fn cancel_now(&self, claim: &QueuedRun) -> (End, Then) {
        self.cancelled_now.store(true, std::sync::atomic::Ordering::SeqCst);
        let cancel = CancellationToken::new();
        cancel.cancel();
        match Box::pin(self.runner(claim, cancel, CancellationToken::new()).resume()).await {
            // Cancelled, its calls undone if it made any.
            Ok(run) if matches!(run.outcome, Outcome::Cancelled | Outcome::Compensated { .. }) => {
                (End::Controlled, Then::Remove)
            }
            // Its compensation waits for a person (a call cut off mid-way to settle): parked for
            // that, as any run is, so the decision wakes it and the compensation goes on.
            Ok(run) if matches!(&run.outcome, Outcome::Interrupted { .. }) => {
                Box::pin(self.end_of(claim, Ok(run), None)).await
            }
            Err(RunError::LeaseLost { .. } | RunError::ThreadBusy { .. }) => (End::Lost, Then::Nothing),
            Err(RunError::Persist(e)) => self.store_failure(claim, &e),
            other => {
                let how = match other {
                    Ok(run) => run.outcome.to_string(),
                    Err(e) => e.to_string(),
                };
                tracing::warn!(thread = %claim.thread, how, "a stopped run could not be cancelled");
                (End::Controlled, Then::Remove)
            }
        }
    }

    /// A store failure: the run stays queued for another try (see [`MAX_CLAIMS_ON_STORE_ERRORS`]).
    pub(super) fn store_failure(&self, claim: &QueuedRun, e: &PersistError) -> (End, Then) {
        tracing::warn!(thread = %claim.thread, error = %e, claims = claim.claims, "a queued run failed on the store");
        (End::Failed, Then::Leave)
    }

    /// Updates the queue row as `then` says and releases the lease, in one store call (one
    /// commit on PostgreSQL, [`Store::settle_run_and_release`]). The run left the lease held,
    /// so no other worker claims the thread between the run's end and the queue update; if the
    /// lease was lost meanwhile, the row is the new holder's and is left alone.
    ///
    /// The control request this worker acted on goes with it ([`Settle::handled`]): a cancel
    /// asked since (after the last read of the row's requests) keeps the row claimable, so the
    /// next claim ends the thread cancelled; a pause is moot once the run stopped (a run asked
    /// to pause that reached a wait first stays parked for what it waits for).
    async fn finish(&self, claim: &QueuedRun, then: Then) {
        let thread = claim.thread.as_str();
        let settle = match then {
            Then::Nothing => return,
            Then::Leave => {
                let (t, holder) = (thread.to_string(), self.holder.clone());
                // Taken over meanwhile: not ours to release; otherwise it expires by itself.
                let _ = blocking(&self.store, move |s| s.release_lease(&t, &holder)).await;
                return;
            }
            Then::Backoff(wait) => {
                let (t, holder) = (thread.to_string(), self.holder.clone());
                let wait = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                // The lease, held that long more, keeps every worker from claiming the run until
                // then. Taken over meanwhile: not ours; a renewal that fails (the store is still
                // failing) leaves the lease to expire when it would have.
                let _ = blocking(&self.store, move |s| s.renew_lease(&t, &holder, wait, now_ms())).await;
                return;
            }
            Then::Parked(wait, why) => {
                let (t, holder) = (thread.to_string(), self.holder.clone());
                match blocking(&self.store, move |s| park(s, &t, &holder, wait, &why)).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => tracing::warn!(thread = %thread, error = %e, "could not park the queued run"),
                    Err(e) => tracing::warn!(thread = %thread, error = %e, "could not park the queued run"),
                }
                return;
            }
            Then::Remove => Settle::remove(),
            Then::Park(RunWait::Held) => Settle::hold(),
            Then::Park(wait) => Settle::park(wait),
            Then::AwaitApprovals(awaits) => Settle::await_approvals(awaits),
        };
        // What the run's end was decided on; a run that ended before that (a claim it could not
        // start) handled what it was asked so far.
        let handled = match self.acted_on.get() {
            Some(acted_on) => *acted_on,
            None => self.stops.asked.get().copied(),
        };
        let mut settle = settle.handled(handled);
        // The run's webhook: its delivery is written by the settle that first ends or parks it.
        if let Some(url) = &claim.webhook {
            let delivery = match self.not_run.get() {
                // Nothing of this run ran: what the thread holds is an earlier run's end.
                Some((status, why)) => crate::webhook::not_run(thread, &claim.graph, url, status, why),
                None => {
                    let (t, graph, to) = (thread.to_string(), claim.graph.clone(), url.clone());
                    let read = blocking(&self.store, move |s| crate::webhook::delivery::<S>(s, &t, &graph, &to));
                    read.await.unwrap_or_else(|_| crate::webhook::bare(thread, &claim.graph, url))
                }
            };
            settle = settle.with_webhook(delivery);
        }
        let (t, holder) = (thread.to_string(), self.holder.clone());
        // `settle_run_and_release` changes the row only while it is still this worker's claim:
        // a worker that claimed the thread since (its lease had expired) owns the row, and its
        // lease is left alone.
        // Parked for an answer: one recorded after the run stopped but before the row was
        // parked found no row to wake, so this worker wakes it (an answer recorded after the
        // park wakes it itself).
        // If that cannot be read, it is woken anyway: a needless wake costs one claim (the run
        // finds no answer and parks again), a missed one would leave the run parked for good.
        let answer = settle.park == Some(RunWait::Answer);
        let settled = blocking(&self.store, move |s| -> Result<(), agentflow_store::BoxError> {
            if s.settle_run_and_release(&t, &holder, &settle)?
                && answer
                && crate::approval::answer::answered_now(s, &t).unwrap_or(true)
            {
                s.wake_run(&t, RunWait::Answer)?;
            }
            Ok(())
        });
        match settled.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(thread = %thread, error = %e, "could not update the run queue"),
            Err(e) => tracing::warn!(thread = %thread, error = %e, "could not update the run queue"),
        }
    }
}

/// How a run paused for people is parked: until the approvals its pause names (requests and
/// records of unknown outcomes, its own or its subgraph children's) are decided. A record it
/// does not wait on (left from an earlier step for a human to settle) then does not hold it.
/// A pause on such an item without a record id waits on every record of the thread instead.
fn awaiting(pending: &[Pending]) -> Then {
    let mut awaits = Vec::new();
    for p in pending.iter().filter(|p| matches!(p.kind, PendingKind::Approval | PendingKind::OutcomeUnknown)) {
        match p.payload.get("approval").and_then(serde_json::Value::as_str) {
            Some(id) => awaits.push(id.to_string()),
            None => return Then::Park(RunWait::Approval),
        }
    }
    if awaits.is_empty() { Then::Park(RunWait::Approval) } else { Then::AwaitApprovals(awaits) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pause_for_people_parks_on_the_records_it_names() {
        use super::{Then, awaiting};
        use crate::interrupt::{Pending, PendingKind};
        use agentflow_store::RunWait;
        let pending = |kind, payload| Pending { node: "n".into(), instance: None, kind, payload };
        let asked = pending(PendingKind::Approval, serde_json::json!({ "approval": "apr-1" }));
        let unknown = pending(PendingKind::OutcomeUnknown, serde_json::json!({ "approval": "unk-2" }));
        let value = pending(PendingKind::Interrupt, serde_json::json!("name?"));
        let named = |then| match then {
            Then::AwaitApprovals(ids) => Some(ids),
            Then::Park(RunWait::Approval) => None,
            _ => panic!("parked otherwise"),
        };
        assert_eq!(named(awaiting(&[asked.clone(), value, unknown])), Some(vec!["apr-1".into(), "unk-2".into()]));
        // One it cannot name: every waiting record of the thread holds the run, as before.
        let unnamed = pending(PendingKind::Approval, serde_json::json!({}));
        assert_eq!(named(awaiting(&[asked, unnamed])), None);
    }
}
