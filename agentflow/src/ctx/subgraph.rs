//! Running a subgraph: a compiled graph run as a child of a node, with its own
//! checkpoints under the parent's thread (see [the module docs](crate::subgraph)).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::Ctx;
use crate::Runner;
use crate::app::App;
use crate::core::budget::{Limits, RunUsage, ThreadBudget};
use crate::core::error::{ErrorClass, NodeError};
use crate::core::state::State;
use crate::durable::{HistoryError, PersistError, blocking};
use crate::graph::CompiledGraph;
use crate::interrupt::{Pending, PendingKind};
use crate::outcome::{Outcome, Run, RunError};
use agentflow_store::{LeaseError, Store, ThreadStatus};

impl<D: Sync> Ctx<'_, D> {
    /// Runs `child` from `input` as a child of this node and returns its
    /// final state. See [the module docs](crate::subgraph) for what is
    /// durable, how pauses and budgets pass between parent and child, and
    /// what the macro checks (the node must list `child` in its
    /// `subgraphs = [..]`).
    pub async fn subgraph<S2: State>(&self, child: CompiledGraph<S2, D>, input: S2) -> Result<S2, NodeError> {
        let name = child.name();
        // The macro checks the calls it sees; a call made elsewhere (a helper
        // fn handed the context) is checked here.
        if !self.subgraphs.contains(&name) {
            return Err(NodeError::fatal(format!(
                "node `{}` ran subgraph `{name}`, which is not in its `subgraphs` list; list it: \
                 `#[node(.., subgraphs = [{name}])]`",
                self.node
            )));
        }
        let index = {
            let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
            let i = signal.subgraph_calls;
            signal.subgraph_calls += 1;
            i
        };
        let _permit = self.scope.children.acquire().await.map_err(|_| NodeError::fatal("the run is over"))?;
        // A stop that reaches this run's step waits (for its grace) for the child, which is
        // stopped with it, to record how it ended: dropped before that, it would stay `running`.
        let _stopping = self.scope.children_running.enter();
        let mut app = child.app();
        app.gateway.policy = Arc::clone(&self.scope.policy);
        app.gateway.approval_ttl = self.scope.approval_ttl;
        app.gateway.on_reject = self.scope.on_reject;
        // The parent's circuit breakers guard the same tools in the child.
        app.gateway.breakers = Arc::clone(&self.scope.breakers);
        app.gateway.probe = self.scope.probe.clone();
        let remaining = self.scope.meter.remaining();
        let cancel = self.scope.cancel.child_token();
        let pause = self.scope.pause.child_token();
        let instance = self.instance().map(|i| format!(".{i}")).unwrap_or_default();
        // Keyed by the checkpoint the node's step started from (its step
        // number in a run without forks or updates between steps): a re-run
        // of the node finds the same child, and a fork's branch, which starts
        // from a new checkpoint, runs its own.
        let at = self.journal.map_or(u64::from(self.step), |j| j.seq);
        let level = format!("{}{instance}.{at}.{index}.{name}", self.node);
        let outlet = self.scope.outlet.clone();
        let Some(journal) = self.journal else {
            let runner = self
                .stops(app.runner(self.deps).limits(remaining).cancel_token(cancel).pause_token(pause))
                .nested_in(outlet, level, self.shields());
            let run = runner.run(input).await;
            return self.child_result(name, None, run);
        };
        let store = Arc::clone(&journal.store);
        app = app.store(Arc::clone(&store));
        let id = format!("{}/{level}", journal.thread);
        let mut busy_waits = 0;
        let run = loop {
            let mut runner = self
                .stops(app.runner(self.deps))
                .thread(id.clone())
                .child_of(journal.thread.clone())
                .saga_root_step(self.scope.saga_root_step.unwrap_or(journal.seq))
                .fenced_by_parents(journal.leases_for_child())
                .cancel_token(cancel.clone())
                .pause_token(pause.clone())
                .nested_in(outlet.clone(), level.clone(), self.shields());
            if !self.scope.owner.is_empty() {
                runner = runner.owner(self.scope.owner.clone());
            }
            let lookup = id.clone();
            let existing = blocking(&store, move |s| s.thread(&lookup))
                .await
                .map_err(|e| store_error(name, &e))?
                .map_err(|e| store_error(name, &e))?;
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
            let mut took_resume = false;
            let run = match existing {
                None => runner.limits(remaining).run(input.clone()).await,
                Some(t) if t.status == ThreadStatus::Completed => {
                    let done = app.state(&id).map_err(|e| NodeError::fatal(format!("subgraph `{}`: {e}", name)))?;
                    return done.map(|s| s.state).ok_or_else(|| {
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
                        raise_child_limits(&app, &id, &budget.limits, &wanted, &journal.thread, fences, name)?
                    {
                        break 'resumed Err(busy);
                    }
                    let runner = runner.limits(wanted);
                    // Read whatever the child's status: one that failed while it waited for a
                    // value (a sibling's error, say) still waits for it.
                    let pending =
                        app.waits_for(&id).map_err(|e| NodeError::fatal(format!("subgraph `{}`: {e}", name)))?;
                    // Of a step asking several questions, those answered already wait no more.
                    let (thread, all) = (id.clone(), pending);
                    let pending = blocking(&store, move |s| crate::approval::answer::unanswered(s, &thread, all))
                        .await
                        .map_err(|e| store_error(name, &e))?
                        .map_err(|e| store_error(name, &e))?;
                    // The node run's resume value goes to the first that waits for one.
                    let waits = pending.iter().any(|p| p.kind == PendingKind::Interrupt);
                    let resume = self.resume.filter(|_| {
                        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
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
                                && app.waits_for(&id).is_ok_and(|p| p.iter().any(|p| p.kind == PendingKind::Interrupt));
                            let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
                            if refused {
                                signal.refused_resume = true;
                            } else if !matches!(run, Err(RunError::ThreadBusy { .. })) {
                                signal.child_took_resume = true;
                            }
                            drop(signal);
                            run
                        }
                        // Resumed without a value: still waiting for one.
                        (true, None) => return Err(self.wait_on_child(name, &id, &pending)),
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
                self.signal.lock().unwrap_or_else(|p| p.into_inner()).resume_taken = false;
            }
            let wait = Duration::from_millis(expires_at.saturating_sub(crate::durable::now_ms()).min(MAX_BUSY_WAIT_MS))
                + Duration::from_millis(20);
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = cancel.cancelled() => {}
                () = pause.cancelled() => {}
            }
        };
        self.child_result(name, Some(&id), run)
    }

    /// A subgraph's runner stopped as this run is: inside a step when this run is, with the
    /// same grace and node time limit.
    pub(crate) fn stops<'r, S: State>(&self, runner: Runner<'r, S, D>) -> Runner<'r, S, D>
    where
        D: Sync,
    {
        let runner = runner.stop_now_token(self.scope.stop_now.child_token()).stop_grace(self.scope.stop_grace);
        match self.scope.node_time_limit {
            Some(limit) => runner.node_time_limit(limit),
            None => runner,
        }
    }

    /// What the child's run means for this node.
    fn child_result<S2: State>(
        &self,
        name: &str,
        thread: Option<&str>,
        run: Result<Run<S2>, RunError>,
    ) -> Result<S2, NodeError> {
        let run = match run {
            Ok(run) => run,
            Err(e @ RunError::ThreadBusy { .. }) => {
                return Err(NodeError::transient(format!("subgraph `{name}`: {e}")));
            }
            Err(e) => return Err(NodeError::fatal(format!("subgraph `{name}`: {e}"))),
        };
        self.scope.meter.charge(&run.usage_this_run);
        match run.outcome {
            Outcome::Completed => Ok(run.state),
            Outcome::Interrupted { pending, .. } => match thread {
                Some(thread) => Err(self.wait_on_child(name, thread, &pending)),
                None => Err(NodeError::fatal(format!(
                    "subgraph `{name}` paused for a human, but this run has no store to pause in; \
                     run the parent on a thread (`.thread(..)` with a store)"
                ))),
            },
            Outcome::Sleeping { until, thread } => {
                let payload = json!({ "until": until, "subgraph": name, "thread": thread });
                let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
                signal.pause = Some(Pending {
                    node: self.node.to_string(),
                    instance: self.instance(),
                    kind: PendingKind::Sleep,
                    payload,
                });
                Err(NodeError::needs_input(format!("node `{}` waits on its subgraph `{name}`, asleep", self.node)))
            }
            // The child's step bound is its own, not a budget it shares with the parent: a plain
            // failure of the node (which may catch it), not the parent's budget running out.
            Outcome::BudgetExhausted { which: crate::Budget::Steps } => Err(NodeError::fatal(format!(
                "subgraph `{name}` reached its step bound (`max_steps`) without finishing"
            ))),
            Outcome::BudgetExhausted { which } => Err(self.exhausted(which)),
            // The parent is being paused too; it resumes the child where it stopped.
            Outcome::Paused => Err(NodeError::fatal(format!("subgraph `{name}` was paused with its parent"))),
            // A child that failed where a person answers again (an answer of the wrong shape)
            // fails its parent's node the same way: the parent waits too, nothing undone.
            Outcome::Failed { node, error } => {
                let class =
                    if error.class == ErrorClass::NeedsInput { ErrorClass::NeedsInput } else { ErrorClass::Fatal };
                Err(NodeError::new(class, format!("subgraph `{name}` failed in node `{node}`: {}", error.message)))
            }
            other => Err(NodeError::fatal(format!("subgraph `{name}` ended: {other}"))),
        }
    }

    /// Pauses this node on the child's first pending item, its path
    /// prefixed with this node.
    fn wait_on_child(&self, name: &str, thread: &str, pending: &[Pending]) -> NodeError {
        let Some(first) =
            pending.iter().find(|p| p.kind == PendingKind::Interrupt).or_else(|| pending.first()).cloned()
        else {
            return NodeError::fatal(format!("subgraph `{name}` paused with nothing pending"));
        };
        let child_path = first.payload.get("path").and_then(Value::as_str).map_or(first.node.clone(), str::to_string);
        let mut payload = match first.payload {
            Value::Object(map) => map,
            other => {
                let mut map = serde_json::Map::new();
                map.insert("payload".into(), other);
                map
            }
        };
        payload.insert("path".into(), Value::String(format!("{}/{child_path}", self.node)));
        payload.entry("thread").or_insert_with(|| Value::String(thread.to_string()));
        payload.entry("subgraph").or_insert_with(|| Value::String(name.to_string()));
        let kind = first.kind;
        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        signal.pause = Some(Pending {
            node: self.node.to_string(),
            instance: self.instance(),
            kind,
            payload: Value::Object(payload),
        });
        NodeError::needs_input(format!("node `{}` waits on its subgraph `{name}` ({kind:?})", self.node))
    }
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
fn raise_child_limits<S2: State, D>(
    app: &App<S2, D>,
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
    match app.raise_limits_fenced(id, raised, &format!("parent thread {parent}"), fences) {
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
