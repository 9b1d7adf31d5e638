//! The effect journal: a side effect run at most once per key, its result
//! journaled and replayed, and an uncertain earlier run settled by a human.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Ctx;
use crate::core::error::NodeError;
use crate::durable::{Entry, Journal, UnknownCall, decode_effect};
use crate::in_flight::{Shield, ShieldGuard};
use crate::interrupt::PendingKind;
use agentflow_store::{
    ApprovalPatch, ApprovalRecord, ApprovalStatus, ApprovalTransition, EffectOutcome, NewAuditEntry,
};

impl<D> Ctx<'_, D> {
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
            .journaled(journal, &journal_key, None, uncertain, |_| crate::durable::Settling::default(), effect)
            .await?
        {
            Journaled::Done(value, _) => Ok(value),
            Journaled::Succeeded(value, by) => {
                let value: T = serde_json::from_value(value).map_err(|e| {
                    NodeError::fatal(format!(
                        "`{by}` settled effect `{key}` as succeeded with a result that does not decode as the \
                         expected type: {}",
                        crate::secret::describe_decode_error(&e)
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
        settle: impl FnOnce(&T) -> crate::durable::Settling,
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
            Entry::Open { started } => match &uncertain {
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
                        .audit(NewAuditEntry::new(crate::durable::now_ms(), actor, "effect.rerun", detail))
                        .effect(k, v);
                    started
                }
                // (A cut-off earlier run: rare, so the subject is cloned here, not up front.)
                Uncertain::Ask(subject) => match self.settle(journal, key, started, subject.clone()).await? {
                    Verdict::RunAgain => started,
                    Verdict::Succeeded(value, by) => return Ok(Journaled::Succeeded(value, by)),
                    Verdict::Failed(why) => return Ok(Journaled::Failed(why)),
                },
            },
        };
        let run = started + 1;
        self.no_effect_after_a_stop().await;
        let _shield = self.shield();
        let mut detail = serde_json::json!({ "at": crate::durable::now_ms() });
        if let Some(call) = unknown_call {
            detail[crate::durable::UNKNOWN_CALL] = serde_json::to_value(call).unwrap_or_default();
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
        if let Some(probe) = &self.scope.gateway.probe {
            probe.body_runs(&idempotency_key, rerunnable);
        }
        match effect(idempotency_key).await {
            Ok(value) => Ok(Journaled::Done(journal.record_settling(self.node, key, value, settle).await?, true)),
            Err(error) => {
                let (ran, no_answer) = {
                    let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
                    (std::mem::take(&mut signal.ran_unrecorded), std::mem::take(&mut signal.outcome_unknown))
                };
                // Sent, and no answer came back: as for a run cut off mid-call, the *started*
                // marker stays open and a human settles this run before anything else happens.
                // (The subject is who settles it: the approval, or a new record.)
                if let (true, Uncertain::Ask(subject)) = (no_answer, uncertain) {
                    return match self.settle(journal, key, run, subject).await? {
                        Verdict::RunAgain => Err(error),
                        Verdict::Succeeded(value, by) => Ok(Journaled::Succeeded(value, by)),
                        Verdict::Failed(why) => Ok(Journaled::Failed(why)),
                    };
                }
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
                let id = crate::durable::unknown_outcome_id(&journal.thread, journal.seq, self.node, key, run);
                let found = store_call(journal, move |s| s.approval(&id).map_err(|e| e.to_string())).await?;
                match found {
                    Some(record) => record,
                    None => {
                        let record = crate::durable::unknown_outcome_record(
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
                            crate::durable::now_ms(),
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
                    ..ApprovalPatch::by(format!("executor:{}", self.node), crate::durable::now_ms())
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
        let ttl_ms = u64::try_from(self.scope.gateway.approval_ttl.as_millis()).unwrap_or(u64::MAX);
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
        let mut all = Vec::with_capacity(2 + self.scope.outer_shields.len());
        all.extend(attempt);
        all.push(self.scope.shield.clone());
        all.extend(self.scope.outer_shields.iter().cloned());
        all
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
#[derive(Clone)]
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
    crate::durable::blocking(&journal.store, f)
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
        ..ApprovalPatch::by(format!("executor:{node}"), crate::durable::now_ms())
    };
    ApprovalTransition { id: id.to_string(), from: ApprovalStatus::Approved, to: ApprovalStatus::Cancelled, patch }
}
