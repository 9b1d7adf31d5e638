//! Subgraphs: a compiled graph run as a child of a node, with its own
//! checkpoints under the parent's thread.
//!
//! A node lists the graphs it may run, `#[node(goto = [..], subgraphs =
//! [research])]`, and runs one with [`Ctx::subgraph`], written
//! `cx.subgraph(research::graph(), input)`, which returns the child's typed
//! final state:
//!
//! ```
//! use std::sync::Arc;
//! use agentflow::prelude::*;
//! use agentflow::RedbStore;
//! # use serde::{Deserialize, Serialize};
//! #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
//! pub struct Research { topic: String, notes: Vec<String> }
//!
//! #[graph(state = Research, start = search)]
//! pub mod research {
//!     use super::*;
//!     #[node(goto = [END])]
//!     async fn search(s: &Research) -> Step<Research> {
//!         goto!(END, Research::update().notes(vec![format!("notes on {}", s.topic)]))
//!     }
//! }
//!
//! #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
//! pub struct Report { topic: String, body: String }
//!
//! #[graph(state = Report, start = write)]
//! pub mod supervisor {
//!     use super::*;
//!     #[node(goto = [END], subgraphs = [research])]
//!     async fn write(s: &Report, cx: &Ctx<()>) -> Result<Step<Report>, NodeError> {
//!         let found = cx.subgraph(research::graph(), Research { topic: s.topic.clone(), notes: vec![] }).await?;
//!         Ok(goto!(END, Report::update().body(found.notes.join("; "))))
//!     }
//! }
//! # fn main() -> Result<(), agentflow::Error> {
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let app = supervisor::graph().app().store(Arc::new(RedbStore::in_memory()?));
//! let input = Report { topic: "tides".into(), body: String::new() };
//! let run = app.runner(&()).thread("r-1").run(input).await?;
//! assert_eq!(run.state.body, "notes on tides");
//! // The child's thread lives under the parent's: `r-1/write.0.0.research`.
//! assert_eq!(supervisor::DELEGATION_DEPTH, 2);
//! assert!(app.backing_store().unwrap().thread("r-1/write.0.0.research")?.is_some());
//! # Ok(())
//! # })
//! # }
//! ```
//!
//! What the macro checks: a node calls only the subgraphs it lists (a
//! compile error at the name otherwise; a call the macro cannot see, in a
//! helper fn handed the context, is refused at run time); the child is
//! written `name::graph()` so the check can see it; each graph knows how deep it
//! delegates (`DELEGATION_DEPTH`: 1, plus its deepest child's) and one deeper
//! than its `#[graph(max_depth = N)]` (default 3) does not compile, the error
//! naming the chain; a graph that contains itself, directly or through
//! others, does not compile. The child's deps type is the parent's (rustc
//! checks it at the call).
//!
//! At run time, with a store, the child runs as its own thread
//! `{parent}/{node}[.{instance}].{seq}.{call}.{graph}`, where `seq` is the
//! checkpoint the node's step started from (the step number, in a run no
//! one forked or updated between steps) and `call` counts the node's
//! subgraph calls in order, so a re-run of the node finds the same child
//! (a manual update of a thread paused mid-step keeps the step's checkpoint,
//! so it keeps the child too), while a [fork](crate::App::fork)'s branch
//! starts from a new checkpoint and runs children of its own: the old
//! branch's children, their results and their approvals, are not used.
//! The child's thread record names its parent
//! ([`ThreadRecord::parent`](agentflow_store::ThreadRecord::parent)), and
//! that, not the shape of an id, is what makes it a child: for an export,
//! a fork, an answer and the run queue. A thread of its own that happens to
//! have the id a child would get is refused, never taken for the child: the
//! node fails, naming it.
//! Within one branch:
//! - a child that completed is not run again: its final state is returned;
//! - a child that stopped (the process died, or it paused) is resumed from its
//!   last checkpoint; while another holder still has the child's lease (a
//!   process that died has it until it expires), the node waits for that
//!   lease to end (up to 8 times), and the child is not touched meanwhile;
//! - a child that pauses (an `interrupt`, an approval, an unknown outcome)
//!   pauses the parent: the parent's pending item has the child's payload
//!   with `path` (`write/review`, nested children add levels), and
//!   `subgraph` and `thread` naming the graph and thread that wait (the
//!   deepest); decide the approval and `resume` the parent, or
//!   `resume_with(value)` the parent, and the value reaches the child;
//! - a child the node's re-run after a resume no longer calls (the model
//!   answered another way after a crash) is not run again. Once the
//!   parent's step commits, what the child and the threads under it left
//!   open is settled as their own next step would: a call cut off mid-way
//!   becomes an `OUTCOME_UNKNOWN` record with an `effect.outcome_unknown`
//!   entry in the child's log, and an approved call still `EXECUTING`
//!   becomes `OUTCOME_UNKNOWN` (both before the commit, for a human to
//!   settle), and its open requests are cancelled (after it). Each under the
//!   child's lease: a child another holder still has is waited for as above,
//!   and one still held after that is left to its holder (logged); a child
//!   whose records do not read back is logged and left, and the parent goes
//!   on (`tests/tools/uncertain_outcome.rs`);
//! - what starts a child's effects (an effect's *started* marker, an
//!   approval's claim) is fenced by the child's lease and, in the same
//!   transaction, by its parent run's lease and every one above
//!   ([`EffectBatch::parent_leases`](agentflow_store::EffectBatch::parent_leases)),
//!   and so is every commit of the child's thread, its creation included
//!   ([`StepCommit::parent_leases`](agentflow_store::StepCommit::parent_leases)):
//!   a parent that lost its thread (it stalled past its lease, or its worker
//!   revoked it) neither acts through a child it starts nor moves one on;
//! - a child that sleeps makes the parent sleep until the same time; the
//!   parent's [`Scheduler`](crate::timer::Scheduler) wakes the tree (it
//!   leaves the child's own timer alone: the child is another graph's thread);
//! - a node run gets one resume value: the first that waits for one (a
//!   child, or the node's own `interrupt`) takes it, a later one pauses
//!   again; what the node's own `interrupt` returned is kept when a child
//!   then pauses the step, so the node's re-run gets the same answer and the
//!   next value goes to the child;
//! - the child's model calls, tool calls and tokens count against the
//!   parent's budgets (it runs with what the parent has left); a child
//!   resumed when its parent allows more than the child's stored limits (the
//!   parent's limits were raised, or a crash kept the child's usage from
//!   reaching the parent) has its limits raised to that, with a
//!   `limits.raised` audit entry in its log;
//! - the parent's tool policy, approval time to live, rejection rule and
//!   circuit breakers apply in the child;
//! - cancelling the parent cancels the child, and pausing it (a worker's
//!   [`App::pause_run`](crate::App::pause_run)) pauses the child (nothing is
//!   compensated); a child that fails fails the
//!   node (fatally: it is not re-run by the node's retry policy).
//!
//! Without a store the child runs in memory, and a child that pauses fails
//! the node (there is nothing to resume). At most [`DEFAULT_PARALLEL`]
//! children run at once in one run.
//!
//! Streams: everything a child does reaches the parent's
//! [stream](crate::Runner::stream) in the modes it carries, each item's
//! `namespace` naming the child's place (`["delegate.0.2.writer"]`, one
//! entry per level): model chunks and `cx.emit` values as they are, values,
//! updates and events as [`StreamPart::Child`](crate::StreamPart::Child)
//! JSON. Not yet: the parent's `on_event` sink gets none of the child's
//! events, and a child cut off by a crash has its usage counted in its own
//! thread only, not in the parent's.
//!
//! [`DEFAULT_PARALLEL`]: crate::DEFAULT_PARALLEL

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::Runner;
use crate::app::App;
use crate::budget::{Limits, RunUsage, ThreadBudget};
use crate::context::Ctx;
use crate::error::{ErrorClass, NodeError};
use crate::graph::CompiledGraph;
use crate::interrupt::{Pending, PendingKind};
use crate::outcome::{Outcome, Run, RunError};
use crate::persist::{HistoryError, PersistError, blocking};
use crate::state::State;
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
                    let pending = blocking(&store, move |s| crate::answer::unanswered(s, &thread, all))
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
            let wait = Duration::from_millis(expires_at.saturating_sub(crate::persist::now_ms()).min(MAX_BUSY_WAIT_MS))
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
        Ok(Some(crate::persist::stored_budget(&latest, &writes)?))
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
