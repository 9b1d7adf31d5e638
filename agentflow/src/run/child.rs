//! A subgraph's run under a node: a compiled graph is the [`ChildGraph`] a node's
//! [`Ctx::subgraph`] runs. Its thread, under the parent's, is found again on a re-run, its
//! limits follow the parent's, and its pauses, answers and busy leases pass to the node.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use agentflow_store::{LeaseError, Store, ThreadStatus};

use super::{Runner, Setup};
use crate::core::budget::{Limits, RunUsage, ThreadBudget};
use crate::core::error::{ErrorClass, NodeError};
use crate::core::state::State;
use crate::ctx::Ctx;
use crate::ctx::subgraph::{ChildGraph, sealed};
use crate::durable::history::{latest_state, raise_limits};
use crate::durable::{HistoryError, PersistError, blocking};
use crate::graph::CompiledGraph;
use crate::interrupt::{Pending, PendingKind};
use crate::outcome::{Outcome, RunError};

impl<S: State, D> sealed::Sealed for CompiledGraph<S, D> {}

impl<S: State, D: Send + Sync> ChildGraph<D> for CompiledGraph<S, D> {
    type State = S;

    fn name(&self) -> &'static str {
        CompiledGraph::name(self)
    }

    fn run_under<'a>(
        self,
        cx: &'a Ctx<'_, D>,
        input: S,
    ) -> Pin<Box<dyn Future<Output = Result<S, NodeError>> + Send + 'a>>
    where
        D: Sync,
    {
        Box::pin(run_child(cx, self, input))
    }
}

/// Runs `child` from `input` as a child of the node `cx` runs: on a thread under the node's
/// own when the run has one (found again when the node runs again), in memory otherwise.
async fn run_child<S2: State, D: Sync>(
    cx: &Ctx<'_, D>,
    child: CompiledGraph<S2, D>,
    input: S2,
) -> Result<S2, NodeError> {
    let name = child.name();
    let index = cx.next_subgraph_call();
    let _permit = cx.scope.children.acquire().await.map_err(|_| NodeError::fatal("the run is over"))?;
    // A stop that reaches this run's step waits (for its grace) for the child, which is
    // stopped with it, to record how it ended: dropped before that, it would stay `running`.
    let _stopping = cx.scope.children_running.enter();
    let mut setup = Setup::new(child);
    // The parent's gateway governs the child's calls: its policy, circuit breakers (guarding
    // the same tools), probe and remote tools (MCP servers).
    setup.gateway = Arc::clone(&cx.scope.gateway);
    // A child's thread has an event log if its parent's has.
    setup.event_log = cx.scope.event_log;
    let remaining = cx.scope.meter.remaining();
    let cancel = cx.scope.cancel.child_token();
    let pause = cx.scope.pause.child_token();
    let instance = cx.instance().map(|i| format!(".{i}")).unwrap_or_default();
    // Keyed by the checkpoint the node's step started from (its step
    // number in a run without forks or updates between steps): a re-run
    // of the node finds the same child, and a fork's branch, which starts
    // from a new checkpoint, runs its own.
    let at = cx.journal.map_or(u64::from(cx.step), |j| j.seq);
    // Named by the node the step's attempt started in: a thread moved to a newer graph version
    // that renamed the node continues the child it had.
    let node = cx.journal.map_or(cx.node, |j| j.started_as(cx.node));
    let level = format!("{node}{instance}.{at}.{index}.{name}");
    let outlet = cx.scope.outlet.clone();
    let Some(journal) = cx.journal else {
        let runner =
            stops(cx, Runner::new(setup.clone(), cx.deps).limits(remaining).cancel_token(cancel).pause_token(pause))
                .nested_in(outlet, level, cx.shields());
        let run = runner.run(input).await;
        return cx.child_result(name, None, run);
    };
    let store = Arc::clone(&journal.store);
    setup.store = Some(Arc::clone(&store));
    let id = format!("{}/{level}", journal.thread);
    let mut busy_waits = 0;
    let run = loop {
        let mut runner = stops(cx, Runner::new(setup.clone(), cx.deps))
            .thread(id.clone())
            .child_of(journal.thread.clone())
            .saga_root_step(cx.scope.saga_root_step.unwrap_or(journal.seq))
            .fenced_by_parents(journal.leases_for_child())
            .cancel_token(cancel.clone())
            .pause_token(pause.clone())
            .nested_in(outlet.clone(), level.clone(), cx.shields());
        if !cx.scope.owner.is_empty() {
            runner = runner.owner(cx.scope.owner.clone());
        }
        // The child's thread, if it exists, and its parent's tenant (read here, not carried by
        // every run: only a subgraph's child needs it).
        let (lookup, parent) = (id.clone(), journal.thread.clone());
        let (existing, tenant) = blocking(&store, move |s| -> Result<_, agentflow_store::ReadError> {
            let tenant = s.thread(&parent)?.and_then(|p| p.tenant);
            Ok((s.thread(&lookup)?, tenant))
        })
        .await
        .map_err(|e| store_error(name, &e))?
        .map_err(|e| store_error(name, &e))?;
        // A child belongs to its parent's tenant.
        if let Some(tenant) = &tenant {
            runner = runner.tenant(tenant.clone());
        }
        // A thread of its own that merely has the child's id is not taken for the child: its
        // state is not the child's result, and it is not run as the child.
        if let Some(t) = &existing
            && t.parent.as_deref() != Some(journal.thread.as_str())
        {
            let parent = t.parent.as_deref().map_or("none".to_string(), |p| format!("`{p}`"));
            return Err(NodeError::fatal(format!(
                "subgraph `{name}`: thread `{id}`, where this call keeps its child, exists and is not a \
                 child of thread `{}` (its parent: {parent}); ids of that shape belong to subgraph \
                 children: run the parent on a thread id that no other thread extends",
                journal.thread
            )));
        }
        // Nor is a child of another tenant (a child's tenant is its parent's; one planted under
        // this parent with another tenant would carry this run's data out of its tenant).
        if let Some(t) = &existing
            && t.tenant != tenant
        {
            let theirs = t.tenant.as_deref().map_or("none".to_string(), |p| format!("`{p}`"));
            return Err(NodeError::fatal(format!(
                "subgraph `{name}`: thread `{id}`, where this call keeps its child, belongs to tenant {theirs}, \
                 not to its parent's; a child belongs to its parent's tenant: remove thread `{id}`"
            )));
        }
        let mut took_resume = false;
        let run = match existing {
            None => runner.limits(remaining).run(input.clone()).await,
            Some(t) if t.status == ThreadStatus::Completed => {
                let thread = id.clone();
                let done = blocking(&store, move |s| latest_state::<S2>(s, &thread))
                    .await
                    .map_err(|e| store_error(name, &e))?
                    .map_err(|e| NodeError::fatal(format!("subgraph `{name}`: {e}")))?;
                return done.ok_or_else(|| {
                    NodeError::fatal(format!("subgraph `{}`: thread `{id}` completed but has no state", name))
                });
            }
            Some(_) => 'resumed: {
                // The child's stored limits already count what it used; it
                // may use what the parent has left on top of that.
                let budget = child_budget(&store, &id).await?;
                let wanted = remaining.plus(&budget.usage);
                let fences = journal.leases_for_child().leases;
                if let Err(busy) =
                    raise_child_limits(&store, &id, &budget.limits, &wanted, &journal.thread, fences, name)?
                {
                    break 'resumed Err(busy);
                }
                let runner = runner.limits(wanted);
                // Read whatever the child's status: one that failed while it waited for a
                // value (a sibling's error, say) still waits for it.
                let pending = waits_for(&store, &id).await?;
                // Of a step asking several questions, those answered already wait no more.
                let (thread, all) = (id.clone(), pending);
                let pending = blocking(&store, move |s| crate::approval::answer::unanswered(s, &thread, all))
                    .await
                    .map_err(|e| store_error(name, &e))?
                    .map_err(|e| store_error(name, &e))?;
                // The node run's resume value goes to the first that waits for one.
                let waits = pending.iter().any(|p| p.kind == PendingKind::Interrupt);
                let resume = cx.resume.filter(|_| {
                    let mut signal = cx.signal.lock().unwrap_or_else(|p| p.into_inner());
                    waits && !std::mem::replace(&mut signal.resume_taken, true)
                });
                match (waits, resume) {
                    (true, Some(value)) => {
                        took_resume = true;
                        let before = latest_seq(&store, &id).await;
                        let run = runner.resume_child_with(value.clone()).await;
                        // Refused for its shape: the child failed without a step, and still
                        // waits for a value where it asked (so does this node).
                        let refused = matches!(&run, Ok(r) if matches!(&r.outcome,
                                Outcome::Failed { error, .. } if error.class == ErrorClass::NeedsInput))
                            && before.is_some()
                            && latest_seq(&store, &id).await == before
                            && waits_for(&store, &id)
                                .await
                                .is_ok_and(|p| p.iter().any(|p| p.kind == PendingKind::Interrupt));
                        let mut signal = cx.signal.lock().unwrap_or_else(|p| p.into_inner());
                        if refused {
                            signal.refused_resume = true;
                        } else if !matches!(run, Err(RunError::ThreadBusy { .. })) {
                            signal.child_took_resume = true;
                        }
                        drop(signal);
                        run
                    }
                    // Resumed without a value: still waiting for one.
                    (true, None) => return Err(cx.wait_on_child(name, &id, &pending)),
                    (false, _) => runner.resume().await,
                }
            }
        };
        // Another holder has the child: a process that died running it
        // (its lease outlives the parent's by up to a heartbeat), or one
        // finishing it after it lost the parent. Wait for that lease to
        // end, then look again; the child was not touched.
        let Err(RunError::ThreadBusy { expires_at, .. }) = &run else { break run };
        if busy_waits == BUSY_WAITS || cancel.is_cancelled() || pause.is_cancelled() {
            break run;
        }
        busy_waits += 1;
        if took_resume {
            cx.signal.lock().unwrap_or_else(|p| p.into_inner()).resume_taken = false;
        }
        let wait = Duration::from_millis(expires_at.saturating_sub(crate::durable::now_ms()).min(MAX_BUSY_WAIT_MS))
            + Duration::from_millis(20);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = cancel.cancelled() => {}
            () = pause.cancelled() => {}
        }
    };
    cx.child_result(name, Some(&id), run)
}

/// A subgraph's runner stopped as this run is: inside a step when this run is, with the
/// same grace and node time limit.
fn stops<'r, S: State, D: Sync>(cx: &Ctx<'_, D>, runner: Runner<'r, S, D>) -> Runner<'r, S, D> {
    let runner = runner.stop_now_token(cx.scope.stop_now.child_token()).stop_grace(cx.scope.stop_grace);
    match cx.scope.node_time_limit {
        Some(limit) => runner.node_time_limit(limit),
        None => runner,
    }
}

/// What the child thread waits for, read from its latest checkpoint.
async fn waits_for(store: &Arc<dyn Store>, thread: &str) -> Result<Vec<Pending>, NodeError> {
    let id = thread.to_string();
    blocking(store, move |s| crate::durable::history::waits_for(s, &id))
        .await
        .map_err(|e| store_error(thread, &e))?
        .map_err(|e| NodeError::fatal(format!("subgraph thread `{thread}`: {e}")))
}

/// How many times a node waits for another holder's lease on its child
/// before the node fails with the busy error (transient).
const BUSY_WAITS: u32 = 8;

/// The longest one wait for another holder's lease on a child.
const MAX_BUSY_WAIT_MS: u64 = 120_000;

/// The seq of `thread`'s latest checkpoint (`None` if there is none or it cannot be read).
async fn latest_seq(store: &Arc<dyn Store>, thread: &str) -> Option<u64> {
    let thread = thread.to_string();
    blocking(store, move |s| s.latest_checkpoint(&thread)).await.ok()?.ok()?.map(|cp| cp.seq)
}

/// The child thread's stored limits and what it consumed so far, from its latest checkpoint.
async fn child_budget(store: &Arc<dyn Store>, thread: &str) -> Result<ThreadBudget, NodeError> {
    let id = thread.to_string();
    let read = blocking(store, move |s| -> Result<Option<ThreadBudget>, PersistError> {
        let Some(latest) = s.latest_checkpoint(&id)? else { return Ok(None) };
        let writes = s.pending_writes(&id, latest.seq)?;
        Ok(Some(crate::durable::stored_budget(&latest, &writes)?))
    })
    .await
    .map_err(|e| store_error(thread, &e))?;
    Ok(read.map_err(|e| store_error(thread, &e))?.unwrap_or_default())
}

/// Raises a resumed child's stored limits where its parent now allows more
/// (the child's usage never reached the parent because a crash cut it off,
/// or the parent's limits were raised), with a `limits.raised` audit entry
/// in the child's log naming the parent; a run may only tighten a thread's
/// limits. `Ok(Err(busy))`: another holder has the child.
fn raise_child_limits(
    store: &Arc<dyn Store>,
    id: &str,
    stored: &Limits,
    wanted: &Limits,
    parent: &str,
    fences: Vec<(String, String)>,
    name: &str,
) -> Result<Result<(), RunError>, NodeError> {
    if wanted.raises(stored).is_none() {
        return Ok(Ok(()));
    }
    fn higher<T: Ord + Copy>(wanted: Option<T>, stored: Option<T>) -> Option<T> {
        match (wanted, stored) {
            (Some(w), Some(s)) if w > s => Some(w),
            _ => stored,
        }
    }
    let raised = Limits {
        model_calls: higher(wanted.model_calls, stored.model_calls),
        tool_calls: higher(wanted.tool_calls, stored.tool_calls),
        tokens: higher(wanted.tokens, stored.tokens),
        ..*stored
    };
    match raise_limits(store, id, raised, &format!("parent thread {parent}"), fences) {
        Ok(_) => Ok(Ok(())),
        Err(HistoryError::Persist(PersistError::Lease(LeaseError::ThreadBusy { thread, holder, expires_at }))) => {
            Ok(Err(RunError::ThreadBusy { thread, holder, expires_at }))
        }
        Err(e) => Err(NodeError::transient(format!("subgraph `{name}`: raising its limits to its parent's: {e}"))),
    }
}

/// A store that failed while a subgraph was looked up: try again later.
fn store_error(what: &str, e: &dyn std::fmt::Display) -> NodeError {
    NodeError::transient(format!("subgraph `{what}`: the store failed: {e}"))
}

impl Limits {
    /// These limits raised by `used` (unset limits stay unset).
    fn plus(&self, used: &RunUsage) -> Limits {
        Limits {
            model_calls: self.model_calls.map(|n| n.saturating_add(used.model_calls)),
            tool_calls: self.tool_calls.map(|n| n.saturating_add(used.tool_calls)),
            tokens: self.tokens.map(|n| n.saturating_add(used.tokens)),
            ..*self
        }
    }
}
