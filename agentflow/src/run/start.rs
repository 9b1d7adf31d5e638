//! Starting a run, resuming a thread from its last checkpoint, and the checks before either.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Setup;
use crate::core::budget::ThreadBudget;
use crate::core::state::State;
use crate::durable::{Checkpointer, Durability, LeaseHolder, PersistError, Resumed, ThreadStatus};
use crate::graph::NodeId;
use crate::interrupt::PendingKind;
use crate::outcome::{Outcome, Run, RunError};

use super::Runner;

impl<'g, S: State, D: Sync> Runner<'g, S, D> {
    /// Runs the graph from `input` until it completes, fails, pauses, runs
    /// out of a budget or is cancelled. With [`Runner::thread`], starts that thread.
    pub fn run(self, input: S) -> impl Future<Output = Result<Run<S>, RunError>> {
        // Not an `async fn`, which would keep a second copy of the runner in its future: the
        // runner is boxed before the future is built, so a run in flight holds a pointer to it.
        let this = Box::new(self);
        async move {
            let setup = &this.setup;
            check_ttl(this.lease_ttl)?;
            if let Some(thread) = &this.thread {
                check_text("thread id", thread)?;
                if crate::schedule::is_reserved_thread_id(thread) {
                    return Err(RunError::ReservedThreadId { thread: thread.clone() });
                }
                check_text("owner", &this.owner)?;
                if let Some(tenant) = &this.tenant {
                    check_text("tenant", tenant)?;
                }
                if !this.trusted() {
                    setup.access.check_start(thread, this.tenant.as_deref())?;
                }
            }
            let checkpointer = match (this.thread.clone(), setup.store.clone()) {
                (None, _) => None,
                (Some(_), None) => return Err(RunError::NoStore),
                (Some(thread), Some(store)) => {
                    setup.check_owner(&this.owner)?;
                    let budget = ThreadBudget { limits: this.limits, ..ThreadBudget::default() };
                    let (owner, durability, ttl) = (this.owner.clone(), this.durability, this.lease_ttl);
                    let (holder, parent) = (this.holder.clone(), this.child_of.clone());
                    let id = thread.clone();
                    let parents = this.parent_leases.clone().unwrap_or_default();
                    let tenant = this.tenant.as_deref().map(str::to_string);
                    let ids = crate::durable::NewThread { thread, parent, owner, tenant };
                    let started =
                        Checkpointer::start(setup, store, ids, durability, ttl, budget, &input, holder, parents);
                    Some(started.await.map_err(|e| first_commit_lost(e.into(), &id))?)
                }
            };
            let start = Resumed::fresh(input, setup.graph.start());
            this.drive(start, checkpointer, Vec::new()).await
        }
    }

    /// Continues thread [`Runner::thread`] from its last checkpoint, in this
    /// or another process: after a crash, a failure, a breakpoint or a fork.
    /// Nodes that finished in a step that then stopped are not run again;
    /// their stored writes are used. A thread waiting in `cx.interrupt` needs
    /// [`Runner::resume_with`], unless a person answered it from another
    /// process ([`ApprovalDesk::answer_interrupt`](crate::approval::ApprovalDesk::answer_interrupt),
    /// the approval inbox, `agentflow answer`): then it continues with that
    /// answer, exactly as `resume_with(answer)` would. If that run ends
    /// [`Outcome::Failed`] (a value of the wrong shape), the answer is spent: the
    /// next plain resume asks for a value again, and a person may answer anew.
    pub async fn resume(self) -> Result<Run<S>, RunError> {
        self.resume_check().run().await?;
        let (checkpointer, start) =
            open(&self.setup, self.thread.clone(), self.durability, self.lease_ttl, self.holder.clone()).await?;
        // A thread that stopped while undoing its calls continues undoing them.
        if checkpointer.opened_as == Some(ThreadStatus::Compensating) {
            return self.compensate_only(start, checkpointer).await;
        }
        // A resume whose cancel token is cancelled already ends the thread `cancelled` at its
        // first step boundary, even one that waits for a value or a timer.
        let cancelled = self.cancel.is_cancelled() && !self.pause.is_cancelled();
        if start.interrupts.iter().any(|p| p.kind == PendingKind::Interrupt) && !cancelled {
            // Answered from another process (the inbox, `agentflow answer`): continue with those
            // answers, once every question of the step has its own.
            return self.continue_answered(start, checkpointer, false).await;
        }
        // Woken before its timer is due: nothing runs and nothing is written.
        // (A thread whose step failed is run again now: what it waits for is the failed step's,
        // and no timer of it is armed.)
        if let Some(until) = crate::durable::wake::sleeping_until(&start.interrupts)
            && checkpointer.opened_as == Some(ThreadStatus::Sleeping)
            && crate::durable::now_ms() < until
            && !cancelled
        {
            let usage = checkpointer.budget.usage;
            let outcome = Outcome::Sleeping {
                thread: checkpointer.thread.clone(),
                until: crate::outcome::unix_ms::to_time(until),
            };
            return Ok(Run {
                outcome,
                state: start.state,
                steps: start.step,
                usage,
                usage_this_run: Default::default(),
            });
        }
        Box::new(self).drive(start, Some(checkpointer), Vec::new()).await
    }

    /// Resumes a sleeping thread whose timer is due, checked under its
    /// lease; `Ok(None)` when it is not sleeping, not due, or finished.
    pub(crate) async fn resume_due(self) -> Result<Option<Run<S>>, RunError> {
        let opened = open(&self.setup, self.thread.clone(), self.durability, self.lease_ttl, self.holder.clone()).await;
        let (checkpointer, start) = match opened {
            Err(RunError::Resume(crate::durable::ResumeError::Finished { .. })) => return Ok(None),
            other => other?,
        };
        let (thread, now) = (checkpointer.thread.clone(), crate::durable::now_ms());
        let store = Arc::clone(checkpointer.store());
        let due = crate::durable::blocking(&store, move |s| crate::durable::wake::still_due(s, &thread, now))
            .await?
            .map_err(PersistError::from)?;
        if !due || crate::durable::wake::wake_time(&start.interrupts).is_none_or(|at| at > now) {
            return Ok(None);
        }
        Box::new(self).drive(start, Some(checkpointer), Vec::new()).await.map(Some)
    }

    /// What refuses a resume the app's access policy does not allow its actor (a run the app
    /// starts for itself is not checked); built before the await, so the resume's future holds
    /// no reference to the runner. An open policy for an actor of every tenant reads nothing.
    pub(crate) fn resume_check(&self) -> ResumeCheck {
        let access = &self.setup.access;
        let checked = !self.trusted() && !access.is_open();
        ResumeCheck {
            access: checked.then(|| access.clone()),
            store: self.setup.store.clone(),
            thread: self.thread.clone(),
            answering: false,
        }
    }

    pub(super) fn node_set(&self, names: &[String]) -> Result<HashSet<NodeId>, RunError> {
        names
            .iter()
            .map(|n| {
                self.setup.graph.node_id(n).ok_or_else(|| RunError::UnknownBreakpoint {
                    node: n.clone(),
                    nodes: self.setup.graph.node_names(),
                })
            })
            .collect()
    }
}

/// Opens the thread to resume. A free function, so the future of a resume
/// holds no reference to the (non-`Sync`) runner across an await.
pub(super) async fn open<S: State, D>(
    setup: &Setup<S, D>,
    thread: Option<String>,
    durability: Durability,
    lease_ttl: Duration,
    holder: Option<LeaseHolder>,
) -> Result<(Checkpointer, Resumed<S>), RunError> {
    check_ttl(lease_ttl)?;
    let (Some(thread), Some(store)) = (thread.clone(), setup.store.clone()) else {
        return Err(match thread {
            None => RunError::ResumeNeedsThread,
            Some(_) => RunError::NoStore,
        });
    };
    let graph = setup.graph.inner.spec.name;
    let began = Instant::now();
    let tool_risk = |name: &str| setup.graph.tool(name).map(|t| t.risk().to_string());
    let versions = crate::durable::Versions { release: setup.graph.release(), tool_risk: &tool_risk };
    let opened = Checkpointer::resume(setup, &versions, store, thread, durability, lease_ttl, holder).await?;
    ::metrics::counter!(crate::metrics::RECOVERIES, "graph" => graph).increment(1);
    ::metrics::histogram!(crate::metrics::RECOVERY_SECONDS, "graph" => graph).record(began.elapsed().as_secs_f64());
    Ok(opened)
}

/// The shortest lease a run accepts: renewals every third of it must be possible.
const MIN_LEASE_TTL: Duration = Duration::from_millis(30);

fn check_ttl(ttl: Duration) -> Result<(), RunError> {
    if ttl < MIN_LEASE_TTL {
        return Err(RunError::LeaseTtlTooShort { min: MIN_LEASE_TTL, asked: ttl });
    }
    Ok(())
}

/// Refuses a new thread's id or owner that holds a NUL byte (PostgreSQL `text` cannot hold
/// one): the same on every store, before anything is written.
fn check_text(what: &'static str, value: &str) -> Result<(), RunError> {
    if value.contains('\0') {
        return Err(RunError::NulByte { what, value: value.to_string() });
    }
    Ok(())
}

/// A new thread's first commit (its input checkpoint) refused because another holder has the
/// thread is a lost lease too: a worker's claim took the lease, and it can be lost before the
/// run writes anything.
fn first_commit_lost(e: RunError, thread: &str) -> RunError {
    use agentflow_store::{CommitError, LeaseError};
    match &e {
        RunError::Persist(
            PersistError::Commit(CommitError::LeaseLost { current, .. })
            | PersistError::Lease(LeaseError::NotHeld { current, .. }),
        ) => RunError::LeaseLost { thread: thread.to_string(), holder: current.as_ref().map(|l| l.holder.clone()) },
        _ => e,
    }
}

/// The access check of a resume (see [`Runner::resume_check`]).
pub(crate) struct ResumeCheck {
    access: Option<crate::access::Access>,
    store: Option<Arc<dyn agentflow_store::Store>>,
    thread: Option<String>,
    /// The resume gives a value: the actor must also be allowed to answer.
    answering: bool,
}

impl ResumeCheck {
    /// The check of a resume that gives a value: [`Operation::Answer`](crate::access::Operation::Answer)
    /// as well as [`Operation::Resume`](crate::access::Operation::Resume).
    pub(super) fn answering(mut self) -> Self {
        self.answering = true;
        self
    }

    pub(crate) async fn run(self) -> Result<(), RunError> {
        let (Some(access), Some(thread), Some(store)) = (self.access, self.thread, self.store) else {
            return Ok(());
        };
        let id = thread.clone();
        let record = crate::durable::blocking(&store, move |s| s.thread(&id)).await?.map_err(PersistError::from)?;
        match record {
            Some(record) if access.sees(&record) => {
                if self.answering {
                    access.check(crate::access::Operation::Answer, &record)?;
                }
                Ok(access.check(crate::access::Operation::Resume, &record)?)
            }
            // Not there for this actor, exactly as a thread that does not exist.
            _ => Err(crate::durable::ResumeError::UnknownThread { thread }.into()),
        }
    }
}
