//! What a running node can see besides the state: the dependencies, where it
//! is in the run, the run's budgets and cancellation, the effect journal, and
//! the gateway to its tools.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::budget::Budget;
use crate::budget::Meter;
use crate::error::NodeError;
use crate::event::Activity;
use crate::interrupt::{Pending, PendingKind, Signal};
use crate::model::{ChatModel, ChatReply, ChatRequest, ChunkSink};
use crate::persist::{Entry, Journal, UnknownCall, decode_effect};
use crate::shield::{Shield, ShieldGuard};
use crate::stream::{Origin, Outlet, StreamMode};
use crate::tool::{OnReject, Policy, ToolSet};
use agentflow_store::{
    ApprovalPatch, ApprovalRecord, ApprovalStatus, ApprovalTransition, EffectOutcome, NewAuditEntry,
};

/// The context handed to a node: `async fn n(s: &S, cx: &Ctx<D>) -> Step<S>`.
///
/// A node may take `deps: &D` instead when it needs nothing else.
pub struct Ctx<'a, D> {
    pub(crate) deps: &'a D,
    pub(crate) node: &'static str,
    pub(crate) step: u32,
    pub(crate) attempt: u32,
    pub(crate) scope: &'a RunScope<'a>,
    pub(crate) journal: Option<&'a Journal>,
    pub(crate) tools: ToolSet,
    /// The graphs the node may run as children.
    pub(crate) subgraphs: &'static [&'static str],
    pub(crate) may_interrupt: bool,
    pub(crate) may_sleep: bool,
    pub(crate) signal: &'a Mutex<Signal>,
    pub(crate) resume: Option<&'a serde_json::Value>,
    /// What this node's `interrupt` returned before its step paused for
    /// something else (see [`crate::interrupt::KeptAnswer`]).
    pub(crate) kept_answer: Option<&'a crate::interrupt::KeptAnswer>,
    /// For an instance of a map worker: its index and its payload.
    pub(crate) payload: Option<(u32, &'a serde_json::Value)>,
}

/// What every node of one run shares.
pub(crate) struct RunScope<'g> {
    pub(crate) cancel: CancellationToken,
    /// Drops the running step's nodes when cancelled; a subgraph's run is stopped with it.
    pub(crate) stop_now: CancellationToken,
    /// How long a stop or a node's time limit waits for a journaled effect in flight.
    pub(crate) stop_grace: std::time::Duration,
    /// The time limit of a node attempt without a `timeout` of its own (a subgraph's nodes
    /// have it too).
    pub(crate) node_time_limit: Option<std::time::Duration>,
    pub(crate) meter: Meter,
    pub(crate) policy: Arc<dyn Policy>,
    pub(crate) approval_ttl: Duration,
    pub(crate) on_reject: OnReject,
    pub(crate) owner: String,
    /// Journaled effects of the run in flight (see [`Shield`]).
    pub(crate) shield: Shield,
    /// Subgraph runs of this run's nodes in flight: a stop inside a step lets them end first
    /// (for its grace), as it lets effects.
    pub(crate) children_running: Shield,
    /// For a subgraph's run: the shields of the node attempts and runs around it.
    pub(crate) outer_shields: Vec<Shield>,
    pub(crate) activity: Box<dyn Fn(Activity) + Send + Sync + 'g>,
    /// Cancelled (before `cancel`) when the run is paused from outside; a
    /// subgraph's run is paused with it.
    pub(crate) pause: CancellationToken,
    /// Subgraphs running at once in this run: at most [`crate::DEFAULT_PARALLEL`].
    pub(crate) children: tokio::sync::Semaphore,
    /// The App's circuit breakers.
    pub(crate) breakers: Arc<crate::breaker::Breakers>,
    /// The run's stream, when it carries model chunks or custom values.
    pub(crate) outlet: Option<Arc<dyn Outlet>>,
    /// For a subgraph's run: the step of the root thread in which it was started, recorded
    /// with its calls' saga entries so a compensation orders the tree's calls as one.
    pub(crate) saga_root_step: Option<u64>,
    /// What a crash test watches (see [`crate::probe`]).
    pub(crate) probe: Option<Arc<dyn crate::probe::Probe>>,
}

impl<D> std::fmt::Debug for Ctx<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("node", &self.node)
            .field("step", &self.step)
            .field("attempt", &self.attempt)
            .field("thread", &self.thread())
            .finish_non_exhaustive()
    }
}

impl<'a, D> Ctx<'a, D> {
    /// The user's dependencies (models, clients, configuration).
    pub fn deps(&self) -> &'a D {
        self.deps
    }

    /// The name of the running node.
    pub fn node(&self) -> &'static str {
        self.node
    }

    /// The super-step number, from 0.
    pub fn step(&self) -> u32 {
        self.step
    }

    /// The attempt number, from 1; above 1 when the node is being retried.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The thread this run belongs to, when it is persisted.
    pub fn thread(&self) -> Option<&str> {
        self.journal.map(|j| j.thread.as_str())
    }

    /// Whether the run was cancelled. The executor stops at the next step
    /// boundary; a long node may check this (or await [`Ctx::cancelled`]) to stop early.
    pub fn is_cancelled(&self) -> bool {
        self.scope.cancel.is_cancelled()
    }

    /// Completes when the run is cancelled.
    pub async fn cancelled(&self) {
        self.scope.cancel.cancelled().await;
    }

    /// Runs a side effect whose result is journaled per (thread, checkpoint,
    /// node, `key`), for an effect that is **not** safe to repeat.
    ///
    /// What is guaranteed, with a store:
    /// - Once `effect` returned `Ok`, its result is journaled durably before
    ///   this returns; every later run of the node (a retry, a resume after a
    ///   crash or an interrupt) gets that result back and `effect` is not
    ///   called again.
    /// - `effect` is never called a second time on its own after a run of it
    ///   that may have acted: a *started* marker is journaled durably before
    ///   each call, so a re-run that finds a call started with no result (the
    ///   process died or the run was dropped mid-call) does not call it. The
    ///   run pauses with [`PendingKind::OutcomeUnknown`] instead, and a human
    ///   settles it through the [`ApprovalDesk`](crate::approval::ApprovalDesk):
    ///   it succeeded (with the result, which this call then returns, decoded
    ///   as `T`), it failed (this call returns a fatal error), or run it again.
    ///   If the re-run node does not call `effect` with this key again (it
    ///   took another path) and its step commits after a resume, the same
    ///   `OUTCOME_UNKNOWN` record is created before that commit, with an
    ///   `effect.outcome_unknown` audit entry, and listed by
    ///   [`ApprovalDesk::pending`](crate::approval::ApprovalDesk::pending).
    /// - A node timeout or the run's deadline does not cut `effect` off: they
    ///   wait for it to return and journal its result, then stop. An effect
    ///   that never returns therefore holds its node past its timeout.
    /// - An error from `effect` is not journaled (an *ended* marker is): the
    ///   effect runs again on the node's next attempt.
    ///
    /// So `effect` runs at most once per key unless a human says to run it
    /// again, or it returned an error. Two executors running one step at once
    /// (one lost the thread's lease and does not know it yet) race on the
    /// *started* marker: the one that finds it already written does not run
    /// the effect (its node gets a transient error; a retry finds the call
    /// open and asks a human). `effect` receives an idempotency key,
    /// stable across re-runs, to pass on to systems that deduplicate requests.
    /// `key` may not contain the unit separator character (U+001F), which the journal reserves,
    /// nor a NUL byte, which no store keeps in a key: either fails the node (fatal), the effect
    /// not run.
    ///
    /// A key names one effect of a node attempt: a second `effect` (or
    /// [`Ctx::idempotent_effect`]) call with a key already used in the same attempt fails the
    /// node (fatal), naming the key, its effect not run (it would otherwise get the first call's
    /// result back). A retry of the node and a re-run after a resume use the same keys again.
    ///
    /// Without a store there is no journal: `effect` simply runs.
    pub async fn effect<T, F, Fut>(&self, key: &str, effect: F) -> Result<T, NodeError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<T, NodeError>>,
    {
        let subject = Subject::New {
            tool: "effect".into(),
            args: serde_json::json!({ "key": key }),
            risk: "irreversible".into(),
        };
        self.journaled_effect(key, Uncertain::Ask(subject), effect).await
    }

    /// Like [`Ctx::effect`], for an effect that honours its idempotency key
    /// (a second request with the same key does nothing more than the first).
    ///
    /// The same journal, with one difference: a call that started and left no
    /// result is run again, with the same idempotency key, and the audit log
    /// records the re-run (`effect.rerun`). The effect may therefore be
    /// *invoked* more than once per key, but always with the same key.
    pub async fn idempotent_effect<T, F, Fut>(&self, key: &str, effect: F) -> Result<T, NodeError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<T, NodeError>>,
    {
        self.journaled_effect(key, Uncertain::Rerun, effect).await
    }

    async fn journaled_effect<T, F, Fut>(&self, key: &str, uncertain: Uncertain, effect: F) -> Result<T, NodeError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<T, NodeError>>,
    {
        // A key names one effect of this node attempt. A second call under a
        // key already used would get the first call's journaled result back
        // (its own effect never run), so it is refused, with or without a
        // store. A retry of the node or a re-run after a resume is a new
        // attempt and uses its keys again, getting their journaled results.
        let fresh = self.signal.lock().unwrap_or_else(|p| p.into_inner()).effect_keys.insert(key.to_string());
        if !fresh {
            return Err(NodeError::fatal(format!(
                "effect key `{key}` was already used by another effect in this run of node `{}`; the second \
                 effect did not run. Give every effect of a node its own key (for example `charge-{{customer}}`)",
                self.node
            )));
        }
        let Some(journal) = self.journal else {
            self.no_effect_after_a_stop().await;
            return effect(format!("{}/{}", self.node, self.instance_key(key.to_string()))).await;
        };
        Journal::check_key(key)?;
        let journal_key = self.instance_key(key.to_string());
        match self
            .journaled(journal, &journal_key, None, uncertain, |_| crate::persist::Settling::default(), effect)
            .await?
        {
            Journaled::Done(value, _) => Ok(value),
            Journaled::Succeeded(value, by) => {
                let value: T = serde_json::from_value(value).map_err(|e| {
                    NodeError::fatal(format!(
                        "`{by}` settled effect `{key}` as succeeded with a result that does not decode as the \
                         expected type: {e}"
                    ))
                })?;
                journal.record(self.node, &journal_key, value).await
            }
            Journaled::Failed(why) => Err(NodeError::fatal(format!("effect `{key}` did not complete: {why}"))),
            // Only a call under an approval claims one.
            Journaled::ClaimLost(current) => {
                Err(NodeError::fatal(format!("effect `{key}`: its approval was claimed elsewhere ({current})")))
            }
        }
    }

    /// No effect starts once a stop that drops the step's nodes was asked (a cancel or pause
    /// request, a worker's shutdown past its deadline): the node waits here, as at any other
    /// await, until the stop drops it. An effect already in flight is let finish (the shield);
    /// one that would start after the stop does not, however the wake-ups fall.
    async fn no_effect_after_a_stop(&self) {
        if self.scope.stop_now.is_cancelled() {
            std::future::pending::<()>().await;
        }
    }

    /// The key under which this node run journals `key`: the instances of a
    /// map worker share a node and a step, so each keys its effects, tool
    /// calls and approvals apart (`key[i]`).
    pub(crate) fn instance_key(&self, key: String) -> String {
        crate::run::instances::instance_key(key, self.payload.map(|(i, _)| i))
    }

    /// The journal's protocol around one effect: replay a recorded result;
    /// settle an uncertain earlier run (`uncertain`); else journal *started*,
    /// run `effect` under the shield, and journal its result (or *ended*).
    ///
    /// `claim`: the effect is a call a human approved (`APPROVED -> EXECUTING`
    /// of its approval), so an uncertain earlier run is closed and a new one
    /// starts; the claim is made durable in the same transaction as the
    /// *started* marker, before the effect runs (`Journaled::ClaimLost` if
    /// another executor claimed it first). `settle`: the approval's
    /// compare-and-set derived from the result, journaled with the result
    /// (`Journaled::Done(_, true)` says it was handed the result). `key` is
    /// already this node run's ([`Ctx::instance_key`]).
    pub(crate) async fn journaled<T, F, Fut>(
        &self,
        journal: &Journal,
        key: &str,
        claim: Option<ApprovalTransition>,
        uncertain: Uncertain,
        settle: impl FnOnce(&T) -> crate::persist::Settling,
        effect: F,
    ) -> Result<Journaled<T>, NodeError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<T, NodeError>>,
    {
        let idempotency_key = journal.idempotency_key(self.node, key);
        let release = claim.is_some();
        let rerunnable = matches!(uncertain, Uncertain::Rerun);
        self.signal.lock().unwrap_or_else(|p| p.into_inner()).ended_with_error = false;
        // A non-idempotent call without an approval is described in its
        // started marker, so that if it is cut off and its node never makes
        // it again, the step's commit still asks a human about it.
        let unknown_call = match (&uncertain, &claim) {
            (Uncertain::Ask(Subject::New { tool, args, risk }), None) => {
                Some(self.unknown_call(tool.clone(), args.clone(), risk.clone()))
            }
            _ => None,
        };
        // Written in one durable transaction right before the effect runs.
        let mut start = journal.start_batch();
        let started = match journal.entry(self.node, key).await? {
            Entry::Recorded(bytes) => {
                let value = decode_effect(&bytes, key)?;
                if let Some(claim) = claim
                    && let Err(current) = journal.commit(journal.start_batch().transition(claim)).await?
                {
                    return Ok(Journaled::ClaimLost(current));
                }
                return Ok(Journaled::Done(value, false));
            }
            Entry::Clear { started } => started,
            Entry::Open { started } if release => {
                // An approval covers a call that starts under it. A run cut off while it ran
                // without one (the policy asked for none then) may have acted: a human settles
                // that first, and only "run again" lets the approved call run.
                if let Some(call) = journal.unapproved_call(self.node, key, started).await? {
                    let subject = Subject::New { tool: call.tool, args: call.args, risk: call.risk };
                    match self.settle(journal, key, started, subject).await? {
                        Verdict::RunAgain => {}
                        // Settled as done: the approved call does not run; the caller journals the
                        // settled result with the approval set aside as not used, in one write.
                        Verdict::Succeeded(value, by) => return Ok(Journaled::Succeeded(value, by)),
                        // Settled as failed (its "ended" marker is written): not used either.
                        Verdict::Failed(why) => {
                            if let Some(claim) = claim.as_ref() {
                                journal
                                    .commit(journal.start_batch().transition(set_aside(self.node, &claim.id)))
                                    .await?
                                    .ok();
                            }
                            return Ok(Journaled::Failed(why));
                        }
                    }
                }
                let (k, v) = journal.marker_effect(
                    self.node,
                    key,
                    "ended",
                    started,
                    &serde_json::json!({ "ended": "run again" }),
                );
                start = start.effect(k, v);
                started
            }
            Entry::Open { started } => match uncertain {
                Uncertain::Rerun => {
                    let detail = serde_json::json!({
                        "node": self.node,
                        "key": key,
                        "seq": journal.seq,
                        "run": started + 1,
                        "idempotency_key": idempotency_key,
                        "why": "an earlier run started and left no result; the effect is idempotent",
                    });
                    let (k, v) = journal.marker_effect(
                        self.node,
                        key,
                        "ended",
                        started,
                        &serde_json::json!({ "ended": "rerun" }),
                    );
                    let actor = format!("executor:{}", self.node);
                    start = start
                        .audit(NewAuditEntry::new(crate::persist::now_ms(), actor, "effect.rerun", detail))
                        .effect(k, v);
                    started
                }
                Uncertain::Ask(subject) => match self.settle(journal, key, started, subject).await? {
                    Verdict::RunAgain => started,
                    Verdict::Succeeded(value, by) => return Ok(Journaled::Succeeded(value, by)),
                    Verdict::Failed(why) => return Ok(Journaled::Failed(why)),
                },
            },
        };
        let run = started + 1;
        self.no_effect_after_a_stop().await;
        let _shield = self.shield();
        let mut detail = serde_json::json!({ "at": crate::persist::now_ms() });
        if let Some(call) = unknown_call {
            detail[crate::persist::UNKNOWN_CALL] = serde_json::to_value(call).unwrap_or_default();
        }
        let (k, v) = journal.marker_effect(self.node, key, "started", run, &detail);
        start = start.effect(k, v);
        if let Some(claim) = claim {
            start = start.transition(claim);
        }
        match journal.commit(start).await? {
            Err(current) => return Ok(Journaled::ClaimLost(current)),
            // The *started* marker (the batch's last effect) was already there: another executor of
            // this thread (one that took it over) started this run of the effect after this one
            // read the journal. The effect may be running there; it is not run here too.
            // Transient: a retry of the node finds the open marker and asks a human about it.
            Ok(outcomes) if matches!(outcomes.last(), Some(EffectOutcome::AlreadyRecorded(_))) => {
                return Err(NodeError::transient(format!(
                    "effect `{key}`: run {run} was started by another executor of thread `{}` (two executors held it \
                     at once); it was not run here",
                    journal.thread
                )));
            }
            Ok(_) => {}
        }
        if let Some(probe) = &self.scope.probe {
            probe.body_runs(&idempotency_key, rerunnable);
        }
        match effect(idempotency_key).await {
            Ok(value) => Ok(Journaled::Done(journal.record_settling(self.node, key, value, settle).await?, true)),
            Err(error) => {
                let ran = std::mem::take(&mut self.signal.lock().unwrap_or_else(|p| p.into_inner()).ran_unrecorded);
                if !ran {
                    let detail = serde_json::json!({ "ended": "error", "error": error.message });
                    journal.mark(self.node, key, "ended", run, detail).await?;
                    self.signal.lock().unwrap_or_else(|p| p.into_inner()).ended_with_error = true;
                }
                Err(error)
            }
        }
    }

    /// What a human decided about run `run` of effect `key`, whose outcome
    /// is unknown; pauses the run (as an error) while nobody has.
    async fn settle(&self, journal: &Journal, key: &str, run: u32, subject: Subject) -> Result<Verdict, NodeError> {
        let record = match subject {
            Subject::Approval(record) => *record,
            Subject::New { tool, args, risk } => {
                let call = self.unknown_call(tool, args, risk);
                let id = crate::persist::unknown_outcome_id(&journal.thread, journal.seq, self.node, key, run);
                let found = store_call(journal, move |s| s.approval(&id).map_err(|e| e.to_string())).await?;
                match found {
                    Some(record) => record,
                    None => {
                        let record = crate::persist::unknown_outcome_record(
                            &journal.thread,
                            journal.seq,
                            self.node,
                            key,
                            run,
                            &call,
                            format!(
                                "`{key}` started and left no result (the run stopped mid-call); whether it acted \
                                 is unknown and it is not idempotent, so it is not run again without a decision"
                            ),
                            crate::persist::now_ms(),
                        );
                        // Fenced by the run's lease (and its parents'): a run that lost the thread
                        // records nothing, as for what starts an effect.
                        journal.create_record(record.clone()).await?;
                        record
                    }
                }
            }
        };
        let by = record.decided_by.clone().unwrap_or_default();
        match record.status {
            ApprovalStatus::Executing => {
                // Fenced by the run's lease: a run that lost the thread must not take a call the
                // new holder is making right now for one cut off.
                let patch = ApprovalPatch {
                    note: Some("the call started and left no result; its outcome is unknown".into()),
                    ..ApprovalPatch::by(format!("executor:{}", self.node), crate::persist::now_ms())
                };
                let transition = ApprovalTransition {
                    id: record.id.clone(),
                    from: ApprovalStatus::Executing,
                    to: ApprovalStatus::OutcomeUnknown,
                    patch,
                };
                if let Err(current) = journal.commit(journal.start_batch().transition(transition)).await? {
                    return Err(NodeError::transient(format!(
                        "could not record the unknown outcome of `{}`: it is {current} now",
                        record.id
                    )));
                }
                // (The payload names the record, the call and why; none of that moved.)
                Err(self.pause(PendingKind::OutcomeUnknown, unknown_payload(&record)))
            }
            ApprovalStatus::OutcomeUnknown => Err(self.pause(PendingKind::OutcomeUnknown, unknown_payload(&record))),
            ApprovalStatus::Succeeded => {
                let note = record.decision_note.clone().unwrap_or_default();
                match serde_json::from_str(&note) {
                    Ok(value) => Ok(Verdict::Succeeded(value, by)),
                    Err(e) => Err(NodeError::fatal(format!(
                        "the result `{by}` recorded for `{}` is not JSON ({e}); the call is not run again",
                        record.id
                    ))),
                }
            }
            ApprovalStatus::Approved => {
                // "Run again" is a decision like an approval: one made around the desk (a raw store
                // write with no decider) does not run anything.
                if let Err(why) = journal.decision_recorded(&record).await? {
                    return Err(NodeError::fatal(format!("`{key}` is not run again: {why}")));
                }
                journal
                    .mark(self.node, key, "ended", run, serde_json::json!({ "ended": "run again", "by": by }))
                    .await?;
                Ok(Verdict::RunAgain)
            }
            status => {
                let note = record.decision_note.clone().unwrap_or_else(|| "no reason given".into());
                journal
                    .mark(self.node, key, "ended", run, serde_json::json!({ "ended": status.as_str(), "by": by }))
                    .await?;
                Ok(Verdict::Failed(format!("its outcome was unknown and `{by}` settled it as {status}: {note}")))
            }
        }
    }

    /// A call of this node, described for an `OUTCOME_UNKNOWN` record.
    fn unknown_call(&self, tool: String, args: serde_json::Value, risk: String) -> UnknownCall {
        let requester =
            if self.scope.owner.is_empty() { format!("executor:{}", self.node) } else { self.scope.owner.clone() };
        let ttl_ms = u64::try_from(self.scope.approval_ttl.as_millis()).unwrap_or(u64::MAX);
        UnknownCall { tool, args, risk, requester, ttl_ms }
    }

    /// Holds off the node's timeout and the run's deadline until dropped.
    pub(crate) fn shield(&self) -> ShieldGuard {
        ShieldGuard(self.shields().iter().map(Shield::enter).collect())
    }

    /// The shields an effect of this node attempt holds: the attempt's, the
    /// run's, and for a subgraph's run those of the attempts and runs around it.
    pub(crate) fn shields(&self) -> Vec<Shield> {
        let attempt = self.signal.lock().unwrap_or_else(|p| p.into_inner()).shield.clone();
        let mut all = vec![attempt, self.scope.shield.clone()];
        all.extend(self.scope.outer_shields.iter().cloned());
        all
    }

    /// Pauses the run for a human, handing them `payload`; returns the value
    /// they resume with.
    ///
    /// The first time, this returns an error that ends the run as
    /// `Outcome::Interrupted` (propagate it with `?`). The state is persisted
    /// and the thread waits. `runner.resume_with(value)` runs this node again
    /// from its start, and this call then returns `value`, decoded as `R`.
    /// The value answers this step's question only: if the node runs again in a
    /// later step (a loop), it asks anew. If the node's step instead pauses for
    /// something else after this returned (a tool call's approval, a
    /// [`sleep`](Ctx::sleep), its subgraph's question), the value is kept with
    /// the paused step: the node's re-run gets it back here without asking
    /// again, and a value given to the next `resume_with` goes to whatever
    /// paused the step. After an [`App::update_state`](crate::App::update_state)
    /// of the paused thread, the node asks anew (a person changed what it asked
    /// about), and the next value answers that. The answer is kept for the node,
    /// not for the payload: a re-run whose question differs for another reason
    /// (a clock, a read outside the journal, new node code) gets it back too. A
    /// step that ends failed, or out of budget, keeps no new answer (one kept
    /// before stays): the thread still waits for the value, and the next answer to
    /// the node's question is given to it. What the thread is recorded as waiting for
    /// follows that step: a node that finished in it no longer waits; one whose
    /// subgraph moved on to another question waits at that question; one whose
    /// subgraph took the value and then failed waits for nothing recorded (its
    /// re-run finds out what the child waits for now, and a child whose own step
    /// failed while it waited still gets the next value); one whose subgraph
    /// refused the value for its shape (the child failed where it asked, and
    /// still waits there) waits as it did, and the next value goes down to the
    /// child again. A value of the wrong shape, here or in such a child, fails
    /// the run with [`ErrorClass::NeedsInput`](crate::ErrorClass::NeedsInput) and
    /// starts no saga compensation.
    ///
    /// Only a `#[node(interrupt)]` may call it, once per run of the node.
    ///
    /// When several nodes (or map instances) of one step ask, each question has its own id
    /// ([`Pending::question_id`](crate::Pending::question_id)) and its own answer
    /// ([`Runner::resume_answering`](crate::Runner::resume_answering), or a person's answer to
    /// that question from the inbox or `agentflow answer --question`); the step runs again once
    /// every question has its answer. A bare `resume_with(value)` is refused then
    /// ([`RunError::SeveralQuestions`](crate::RunError::SeveralQuestions)), and one value for
    /// every question is given only with
    /// [`Runner::resume_with_all_alike`](crate::Runner::resume_with_all_alike).
    ///
    /// A review that pauses for a person, then sends through [`Ctx::effect`]
    /// (journaled: a resumed node gets the journaled receipt back):
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use agentflow::prelude::*;
    /// use agentflow::RedbStore;
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
    /// # struct Mail { draft: String, sent: Option<String> }
    /// #[derive(Default)]
    /// struct Outbox { sends: AtomicU32 }
    ///
    /// #[graph(state = Mail, deps = Outbox, start = review)]
    /// mod mail {
    ///     use super::*;
    ///     #[node(goto = [END], interrupt)]
    ///     async fn review(m: &Mail, cx: &Ctx<Outbox>) -> Result<Step<Mail>, NodeError> {
    ///         let text: String = cx.interrupt(&m.draft)?; // pauses the first time
    ///         let receipt = cx
    ///             .effect("send", |key| async move {
    ///                 cx.deps().sends.fetch_add(1, Ordering::SeqCst);
    ///                 Ok(format!("sent with key {key}"))
    ///             })
    ///             .await?;
    ///         Ok(goto!(END, Mail::update().sent(Some(format!("{text}: {receipt}")))))
    ///     }
    /// }
    /// # fn main() -> Result<(), agentflow::Error> {
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let app = mail::graph().app().store(Arc::new(RedbStore::in_memory()?));
    /// let outbox = Outbox::default();
    /// let input = Mail { draft: "Hello".into(), sent: None };
    /// let run = app.runner(&outbox).thread("m-1").run(input).await?;
    /// assert!(matches!(run.outcome, Outcome::Interrupted { .. }));
    /// assert_eq!(app.pending("m-1")?[0].payload, "Hello");
    ///
    /// let run = app.runner(&outbox).thread("m-1").resume_with("Hello, edited").await?;
    /// assert_eq!(run.outcome, Outcome::Completed);
    /// assert!(run.state.sent.unwrap().starts_with("Hello, edited: sent with key"));
    /// assert_eq!(outbox.sends.load(Ordering::SeqCst), 1);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn interrupt<P: Serialize, R: DeserializeOwned>(&self, payload: P) -> Result<R, NodeError> {
        if !self.may_interrupt {
            return Err(NodeError::fatal(format!(
                "node `{}` called `interrupt` but is not marked `#[node(interrupt)]`",
                self.node
            )));
        }
        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        if std::mem::replace(&mut signal.interrupt_called, true) {
            return Err(NodeError::fatal(format!(
                "node `{}` called `interrupt` twice in one run; ask in two nodes instead",
                self.node
            )));
        }
        let payload =
            crate::persist::encode::to_value(&payload, "payload", crate::persist::MAX_JSON_DEPTH).map_err(|e| {
                NodeError::fatal(format!("the interrupt payload of node `{}` cannot be stored: {e}", self.node))
            })?;
        match self.kept_answer {
            // Answered before the step paused for something else: the same answer, and the
            // resume value stays for whatever paused the step (the node's subgraph, say). An
            // answer kept before a manual update of the state, or one the node no longer reads
            // (its type changed), is asked for anew.
            Some(kept) => {
                if !kept.stale
                    && let Ok(decoded) = serde_json::from_value(kept.value.clone())
                {
                    signal.answered = Some(kept.value.clone());
                    return Ok(decoded);
                }
            }
            None => {
                if let Some(value) = self.resume.filter(|_| !std::mem::replace(&mut signal.resume_taken, true)) {
                    // Not a failure for good: a person answers again (nothing is compensated).
                    let decoded = serde_json::from_value(value.clone()).map_err(|e| {
                        signal.refused_resume = true;
                        NodeError::needs_input(format!(
                            "the resume value for node `{}` does not have the shape it expects ({e}); \
                             resume again with a value of the right shape",
                            self.node
                        ))
                    })?;
                    signal.answered = Some(value.clone());
                    return Ok(decoded);
                }
            }
        }
        signal.pause = Some(Pending {
            node: self.node.to_string(),
            instance: self.instance(),
            kind: PendingKind::Interrupt,
            payload,
        });
        Err(NodeError::needs_input(format!("node `{}` is waiting for a human", self.node)))
    }

    /// Waits `duration` on a durable timer, holding nothing in memory.
    ///
    /// The first time, the wake time (now + `duration`) is journaled for this
    /// node run and this returns an error that ends the run as
    /// [`Outcome::Sleeping`](crate::Outcome::Sleeping) (propagate it with
    /// `?`): the state is persisted, the thread's status is `sleeping` and its
    /// timer is stored and indexed. Resumed at or after the wake time (by a
    /// [`Scheduler`](crate::timer::Scheduler), or by hand), the node runs
    /// again from its start and this call returns `Ok(())`. The wake time is
    /// fixed by the first call: a re-run reads it back, it does not extend it.
    /// Resuming earlier runs nothing and reports the same `Sleeping` outcome.
    ///
    /// Only a `#[node(sleep)]` may call it. A node may sleep more than once
    /// (each call has its own timer, in call order); effects before a `sleep`
    /// must go through [`Ctx::effect`] so they do not run twice.
    ///
    /// Without a store there is nothing to resume: the node simply waits
    /// in memory (and returns early, with an error, if the run is cancelled).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use agentflow::prelude::*;
    /// use agentflow::RedbStore;
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
    /// # struct Reminder { sent: bool }
    /// #[graph(state = Reminder, start = remind)]
    /// mod reminder {
    ///     use super::*;
    ///     #[node(goto = [END], sleep)]
    ///     async fn remind(_s: &Reminder, cx: &Ctx<()>) -> Result<Step<Reminder>, NodeError> {
    ///         cx.sleep(Duration::from_secs(1)).await?; // the run ends here the first time
    ///         Ok(goto!(END, Reminder::update().sent(true)))
    ///     }
    /// }
    /// # fn main() -> Result<(), agentflow::Error> {
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let app = reminder::graph().app().store(Arc::new(RedbStore::in_memory()?));
    /// let run = app.runner(&()).thread("r-1").run(Reminder::default()).await?;
    /// let Outcome::Sleeping { until, .. } = run.outcome else { panic!("{:?}", run.outcome) };
    /// assert!(!run.state.sent);
    ///
    /// // A scheduler resumes the thread once it is due; wait for it to report that.
    /// let scheduler = app.scheduler(Arc::new(()));
    /// let woken = scheduler.subscribe().wait_for("r-1").await.expect("the scheduler runs");
    /// assert_eq!(woken.result, Ok(Outcome::Completed));
    /// assert!(agentflow::timer::now_ms() >= until);
    /// assert!(app.state("r-1")?.unwrap().state.sent);
    /// scheduler.shutdown().await;
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn sleep(&self, duration: Duration) -> Result<(), NodeError> {
        let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        self.sleep_at(|now| now.saturating_add(ms)).await
    }

    /// Like [`Ctx::sleep`], until the wall-clock time `at` (a time in the
    /// past returns at once).
    pub async fn sleep_until(&self, at: std::time::SystemTime) -> Result<(), NodeError> {
        let ms =
            at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.sleep_at(|_| ms).await
    }

    async fn sleep_at(&self, wake: impl FnOnce(u64) -> u64) -> Result<(), NodeError> {
        if !self.may_sleep {
            return Err(NodeError::fatal(format!(
                "node `{}` called `sleep` but is not marked `#[node(sleep)]`",
                self.node
            )));
        }
        let n = {
            let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
            signal.sleeps += 1;
            signal.sleeps
        };
        let now = crate::persist::now_ms();
        let Some(journal) = self.journal else {
            let left = Duration::from_millis(wake(now).saturating_sub(now));
            return tokio::select! {
                () = tokio::time::sleep(left) => Ok(()),
                () = self.scope.cancel.cancelled() => {
                    Err(NodeError::fatal(format!("node `{}`: the run was cancelled while it slept", self.node)))
                }
            };
        };
        // The wake time is journaled by the first call and read back by every re-run.
        let key = format!("{}{n}", crate::timer::wake::SLEEP_KEY);
        let until: u64 = match journal.entry(self.node, &key).await? {
            Entry::Recorded(bytes) => decode_effect(&bytes, &key)?,
            _ => journal.record(self.node, &key, wake(now)).await?,
        };
        if crate::persist::now_ms() >= until {
            return Ok(());
        }
        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        let payload = serde_json::json!({ "until": until });
        signal.pause =
            Some(Pending { node: self.node.to_string(), instance: self.instance(), kind: PendingKind::Sleep, payload });
        Err(NodeError::needs_input(format!("node `{}` sleeps until unix ms {until}", self.node)))
    }

    /// Calls a model, counted against the run's budgets: the call and its
    /// tokens are reserved first (a call past a limit is never sent) and
    /// settled with the usage the model reports.
    ///
    /// When the run is read as a stream with
    /// [`StreamMode::Messages`](crate::StreamMode::Messages), the model is
    /// asked with [`ChatModel::chat_stream`] and each chunk goes to the
    /// stream as it arrives (waiting while the stream's buffer is full); the
    /// call is counted the same way, from the whole reply.
    pub async fn chat<M: ChatModel + ?Sized>(&self, model: &M, request: &ChatRequest) -> Result<ChatReply, NodeError> {
        let reserve = match self.scope.meter.begin_model_call(request.max_output_tokens) {
            Ok(reserve) => reserve,
            Err(which) => return Err(self.exhausted(which)),
        };
        let site = self.scope.probe.as_ref().map(|probe| (probe, self.call_site()));
        let replayed = site.as_ref().and_then(|(probe, site)| probe.model_call(site));
        let answer = match (replayed, self.scope.outlet.as_deref().filter(|o| o.wants(StreamMode::Messages))) {
            (Some(replayed), _) => replayed,
            (None, Some(outlet)) => {
                let origin = self.origin();
                let push = move |chunk| outlet.message(origin, chunk);
                model.chat_stream(request, &ChunkSink::with_room(&push, outlet)).await
            }
            (None, None) => model.chat(request).await,
        };
        if let Some((probe, site)) = &site {
            probe.model_reply(site, &answer);
        }
        match answer {
            Ok(reply) => {
                self.scope.meter.end_model_call(reserve, reply.usage);
                (self.scope.activity)(Activity::ModelCall {
                    node: self.node,
                    model: model.name().to_string(),
                    tool_calls: reply.tool_calls.len(),
                    usage: reply.usage,
                });
                if self.scope.meter.tokens_exhausted() {
                    return Err(self.exhausted(Budget::Tokens));
                }
                Ok(reply)
            }
            Err(e) => {
                self.scope.meter.abort_model_call(reserve);
                Err(e.into())
            }
        }
    }

    /// Where the next model call of this attempt is made, for a crash test's probe.
    fn call_site(&self) -> crate::probe::CallSite {
        let call = {
            let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
            signal.model_calls += 1;
            signal.model_calls
        };
        crate::probe::CallSite {
            thread: self.journal.map(|j| j.thread.clone()).unwrap_or_default(),
            seq: self.journal.map_or(u64::from(self.step), |j| j.seq),
            node: self.node.to_string(),
            instance: self.instance(),
            attempt: self.attempt,
            answered: self.resume.is_some() || self.kept_answer.is_some(),
            call,
        }
    }

    /// Records that a budget ran out; the run ends as `BudgetExhausted`.
    pub(crate) fn exhausted(&self, which: Budget) -> NodeError {
        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        signal.exhausted.get_or_insert(which);
        NodeError::fatal(format!("the run's `{which}` budget is exhausted"))
    }

    /// Records a pause for a human's decision on an approval.
    pub(crate) fn pause_for_approval(&self, payload: serde_json::Value) -> NodeError {
        self.pause(PendingKind::Approval, payload)
    }

    fn pause(&self, kind: PendingKind, payload: serde_json::Value) -> NodeError {
        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        signal.pause = Some(Pending { node: self.node.to_string(), instance: self.instance(), kind, payload });
        let what = if kind == PendingKind::OutcomeUnknown { "a decision on an unknown outcome" } else { "an approval" };
        NodeError::needs_input(format!("node `{}` is waiting for {what}", self.node))
    }

    /// For an instance of a map worker (`goto!(each(worker, payloads))`):
    /// the index of its payload in the list the sender sent; `None` in a
    /// plain node. Effects journaled by an instance ([`Ctx::effect`]) are
    /// keyed per instance, so instances do not share results.
    pub fn instance(&self) -> Option<u32> {
        self.payload.map(|(i, _)| i)
    }

    /// Where in the run this node is, for the items it streams.
    fn origin(&self) -> Origin {
        Origin { step: self.step, node: self.node, instance: self.instance() }
    }

    /// Hands `value` to whoever reads the run as a stream with
    /// [`StreamMode::Custom`](crate::StreamMode::Custom): progress, partial
    /// results, anything a UI shows live ([`StreamPart::Custom`](crate::StreamPart::Custom),
    /// with this node, its step and its instance).
    ///
    /// `value` is serialised to JSON at once (a value that cannot be, or
    /// nests deeper than the stored values may, is a fatal error); the
    /// returned future waits while the stream's buffer is full, so a slow
    /// reader slows the node. Without such a stream this does nothing, not
    /// even serialise. Values are not journaled: a node that runs again (a
    /// retry, a resume) emits them again.
    ///
    /// ```
    /// use agentflow::prelude::*;
    /// use agentflow::{StreamMode, StreamPart};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
    /// # struct Job { done: u32 }
    /// #[graph(state = Job, start = work)]
    /// mod job {
    ///     use super::*;
    ///     #[node(goto = [END])]
    ///     async fn work(_s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
    ///         for pct in [50, 100] {
    ///             cx.emit(serde_json::json!({ "progress": pct })).await?;
    ///         }
    ///         Ok(goto!(END, Job::update().done(1)))
    ///     }
    /// }
    /// # fn main() {
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let app = job::graph().app();
    /// let mut stream = app.runner(&()).stream_modes([StreamMode::Custom]).stream(Job::default());
    /// let mut progress = Vec::new();
    /// while let Some(item) = stream.next().await {
    ///     match item.part {
    ///         StreamPart::Custom { value, .. } => progress.push(value["progress"].clone()),
    ///         StreamPart::Done(run) => assert_eq!(run.unwrap().state.done, 1),
    ///         _ => {}
    ///     }
    /// }
    /// assert_eq!(progress, [50, 100]);
    /// # });
    /// # }
    /// ```
    pub fn emit<T: Serialize>(&self, value: T) -> impl Future<Output = Result<(), NodeError>> + Send + '_ {
        let outlet = self.scope.outlet.as_deref().filter(|o| o.wants(StreamMode::Custom));
        let value = outlet.map(|_| {
            crate::persist::encode::to_value(&value, "value", crate::persist::MAX_JSON_DEPTH).map_err(|e| {
                NodeError::fatal(format!("node `{}` emitted a value that cannot be serialised: {e}", self.node))
            })
        });
        let origin = self.origin();
        async move {
            let (Some(outlet), Some(value)) = (outlet, value) else { return Ok(()) };
            let value = value?;
            crate::pace::room(outlet).await;
            outlet.custom(origin, value);
            Ok(())
        }
    }
}

/// What to do when an effect's earlier run started and left no result.
pub(crate) enum Uncertain {
    /// Run it again with the same idempotency key; the audit log records it.
    Rerun,
    /// A human decides, on this approval record or on a new record.
    Ask(Subject),
}

/// The record a human settles an unknown outcome on.
pub(crate) enum Subject {
    /// The approval the call ran under.
    Approval(Box<ApprovalRecord>),
    /// A new `OUTCOME_UNKNOWN` record describing the call.
    New { tool: String, args: serde_json::Value, risk: String },
}

/// How [`Ctx::journaled`] ended.
pub(crate) enum Journaled<T> {
    /// The effect ran now, or earlier and its result was journaled; whether
    /// the `settle` compare-and-set went with the result.
    Done(T, bool),
    /// Another executor claimed the approval first (its status now); the
    /// effect did not run.
    ClaimLost(ApprovalStatus),
    /// A human settled an unknown outcome as succeeded with this result (by whom).
    Succeeded(serde_json::Value, String),
    /// A human settled an unknown outcome as failed (why).
    Failed(String),
}

enum Verdict {
    RunAgain,
    Succeeded(serde_json::Value, String),
    Failed(String),
}

fn unknown_payload(record: &ApprovalRecord) -> serde_json::Value {
    serde_json::json!({
        "approval": record.id,
        "outcome": "unknown",
        "tool": record.tool,
        "args": serde_json::from_str::<serde_json::Value>(&record.args).unwrap_or(serde_json::Value::Null),
        "risk": record.risk,
        "reason": record.reason,
    })
}

async fn store_call<T: Send + 'static>(
    journal: &Journal,
    f: impl FnOnce(&dyn agentflow_store::Store) -> Result<T, String> + Send + 'static,
) -> Result<T, NodeError> {
    crate::persist::blocking(&journal.store, f)
        .await
        .map_err(|e| NodeError::transient(e.to_string()))?
        .map_err(|e| NodeError::transient(format!("store: {e}")))
}

/// The move that sets approval `id` (`APPROVED`) aside as not used: the call it approved was cut
/// off earlier while it ran without an approval, and a human settled that run, so the approved
/// call is not made. Fenced with the rest of its write; one decided meanwhile keeps that
/// decision.
pub(crate) fn set_aside(node: &str, id: &str) -> ApprovalTransition {
    let patch = ApprovalPatch {
        note: Some(
            "not used: the call was cut off earlier while it ran without an approval, and a human settled that run"
                .into(),
        ),
        ..ApprovalPatch::by(format!("executor:{node}"), crate::persist::now_ms())
    };
    ApprovalTransition { id: id.to_string(), from: ApprovalStatus::Approved, to: ApprovalStatus::Cancelled, patch }
}
