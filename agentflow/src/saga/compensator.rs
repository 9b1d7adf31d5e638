//! The compensator: undoes a failed or cancelled thread's logged calls (and its subgraph
//! children's), newest first, each once under the thread's journal; a call of unknown outcome
//! goes to a person first.

use std::sync::Arc;

use agentflow_store::{ApprovalStatus, EffectOutcome, NewAuditEntry, Store, ThreadStatus};
use serde_json::{Value, json};

use super::log::{Step, tree_logs, tree_steps};
use crate::core::error::NodeError;
use crate::durable::{Entry, Journal, PersistError, blocking, now_ms};
use crate::event::Activity;
use crate::outcome::{Outcome, Undone};
use crate::tool::{AnyDeps, Tool, ToolCx, ToolError, args_hash};

/// The audit entry kind that opens a thread's compensation, with its reason.
const STARTED: &str = "saga.compensating";
/// The checkpoint number compensations are journaled under: none of the
/// thread's checkpoints, so compaction never drops them.
const SAGA_SEQ: u64 = i64::MAX as u64;
/// The node compensations are journaled and called under.
const SAGA_NODE: &str = "saga";

/// What compensating a thread needs from the run.
pub(crate) struct Compensator<'a> {
    pub store: Arc<dyn Store>,
    pub thread: String,
    /// The forward tool called `name` in the graph.
    pub tool: &'a (dyn Fn(&str) -> Option<&'static dyn Tool> + Sync),
    pub deps: &'a AnyDeps,
    pub activity: &'a (dyn Fn(Activity) + Sync),
    /// The thread's lease, renewed between compensations.
    pub lease: &'a crate::durable::LeaseGuard,
    /// What a crash test watches (see `crate::probe`).
    pub probe: Option<&'a dyn crate::probe::Probe>,
    /// Where the App's remote tools are called, for a compensation that is one.
    pub remote: Option<&'a dyn crate::tool::RemoteTools>,
}

/// Whether a run that ended this way compensates.
pub(crate) fn triggers(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Failed { .. } | Outcome::Cancelled)
}

/// The status a thread is left in by a compensating run's outcome.
pub(crate) fn status_of(outcome: &Outcome) -> Option<ThreadStatus> {
    match outcome {
        Outcome::Compensated { .. } => Some(ThreadStatus::Compensated),
        Outcome::CompensationFailed { .. } => Some(ThreadStatus::Compensating),
        _ => None,
    }
}

impl Compensator<'_> {
    /// Runs the compensation of every recorded step not yet compensated,
    /// newest first; stops at the first that fails.
    /// `reason`: how the run ended, for a compensation that starts now; a
    /// compensation that continues keeps the reason it started with.
    pub(crate) async fn run(&self, reason: String) -> Result<Outcome, PersistError> {
        let thread = self.thread.clone();
        let logs = blocking(&self.store, move |s| tree_logs(s, &thread)).await??;
        let log = &logs[0].1;
        let started = log.iter().rev().find(|e| e.kind == STARTED).and_then(|e| e.detail["reason"].as_str());
        let reason = match started {
            Some(r) => r.to_string(),
            None => {
                self.audit(STARTED, json!({ "reason": reason })).await?;
                reason
            }
        };
        // One per call: two executors of the thread that raced to journal the same result may
        // both have logged it.
        let mut seen = std::collections::HashSet::new();
        let steps: Vec<Step> = tree_steps(&logs).into_iter().filter(|step| seen.insert(step.id.clone())).collect();
        let journal = Journal {
            store: Arc::clone(&self.store),
            thread: self.thread.clone(),
            seq: SAGA_SEQ,
            holder: Some(self.lease.holder().to_string()),
            lost: Arc::default(),
            revoked: Some(self.lease.revoked()),
            parents: crate::durable::ParentLeases::default(),
            failed_approvals: Arc::default(),
            moved_to: None,
            started_as: Arc::default(),
        };
        let mut undone = Vec::new();
        for step in steps.iter().rev() {
            let done = Undone {
                node: step.node.clone(),
                call_id: step.call_id.clone(),
                tool: step.tool.clone(),
                compensation: step.compensation.clone(),
            };
            self.lease.renew_if_due().await?;
            let span = crate::telemetry::spans::compensate(&step.compensation, &step.tool);
            let undo = tracing::Instrument::instrument(self.undo(&journal, step), span.clone()).await;
            if !matches!(undo, Ok(Ok(()))) {
                crate::telemetry::spans::failed(&span, "compensation_failed");
            }
            match undo? {
                Ok(()) => undone.push(done),
                Err((error, approval)) => {
                    let detail = json!({
                        "id": step.id,
                        "tool": step.tool,
                        "compensation": step.compensation,
                        "error": error,
                        "approval": approval,
                    });
                    let thread = self.thread.clone();
                    let entry = NewAuditEntry::new(now_ms(), "agentflow", "saga.compensation_failed", detail);
                    blocking(&self.store, move |s| s.append_audit(&thread, entry))
                        .await?
                        .map_err(|e| PersistError::Saga(e.to_string()))?;
                    (self.activity)(Activity::Compensation {
                        tool: step.tool.clone(),
                        compensation: step.compensation.clone(),
                        call_id: step.call_id.clone(),
                        result: "failed".into(),
                    });
                    return Ok(Outcome::CompensationFailed {
                        reason,
                        compensation: step.compensation.clone(),
                        tool: step.tool.clone(),
                        call_id: step.call_id.clone(),
                        error,
                        approval,
                        undone,
                    });
                }
            }
        }
        // The calls of unknown outcome, in the thread and in its subgraph children.
        let threads: Vec<String> = logs.iter().map(|(c, _)| c.clone().unwrap_or_else(|| self.thread.clone())).collect();
        let unknown = blocking(&self.store, move |s| -> Result<Vec<_>, agentflow_store::ReadError> {
            let mut all = Vec::new();
            for thread in &threads {
                all.extend(s.list_approvals(thread)?);
            }
            Ok(all)
        })
        .await??;
        let unknown = unknown
            .into_iter()
            .filter(|r| r.status == ApprovalStatus::OutcomeUnknown && r.node != SAGA_NODE)
            .map(|r| format!("{} ({})", r.tool, r.id))
            .collect();
        Ok(Outcome::Compensated { reason, undone, unknown })
    }

    /// Undoes one step: `Ok(Err((why, approval)))` if it could not.
    #[allow(clippy::type_complexity)]
    async fn undo(&self, journal: &Journal, step: &Step) -> Result<Result<(), (String, Option<String>)>, PersistError> {
        let fail = |why: String| Ok(Err((why, None)));
        let key = format!("compensate:{}", &args_hash(&json!(step.id))[..24]);
        let Some(compensation) = (self.tool)(&step.tool).and_then(|t| t.compensation()) else {
            return fail(format!(
                "the graph has no tool `{}` naming a compensation; resume with the graph that made the call",
                step.tool
            ));
        };
        let tool = compensation.tool();
        let (Some(args), None) = (&step.args, &step.error) else {
            return fail(step.error.clone().unwrap_or_else(|| "no arguments were recorded".into()));
        };
        let started = match journal.entry(SAGA_NODE, &key).await.map_err(journal_error)? {
            Entry::Recorded(_) => return Ok(Ok(())),
            Entry::Clear { started } => started,
            Entry::Open { started } if tool.idempotent() => {
                let detail = json!({ "ended": "rerun" });
                journal.mark(SAGA_NODE, &key, "ended", started, detail).await.map_err(journal_error)?;
                let detail = json!({
                    "key": key,
                    "seq": SAGA_SEQ,
                    "run": started + 1,
                    "compensation": tool.name(),
                    "idempotency_key": journal.idempotency_key(SAGA_NODE, &key),
                    "why": "an earlier run of the compensation started and left no result; it is idempotent",
                });
                self.audit("effect.rerun", detail).await?;
                started
            }
            Entry::Open { started } => match self.settled(journal, &key, started, tool, args).await? {
                Settled::Acted => return Ok(Ok(())),
                Settled::RunAgain => started,
                Settled::Waiting(approval) => {
                    return Ok(Err((
                        format!(
                            "`{}` was cut off mid-call and is not idempotent; whether it acted is unknown: \
                             settle the OUTCOME_UNKNOWN record `{approval}` with the approval desk (succeeded if \
                             it acted, run again if it did not), then resume the thread",
                            tool.name()
                        ),
                        Some(approval),
                    )));
                }
                Settled::Failed(approval, note) => {
                    return Ok(Err((
                        format!("`{}` was settled as failed by a human: {note}; undo the call by hand", tool.name()),
                        Some(approval),
                    )));
                }
                Settled::Refused(approval, why) => {
                    return Ok(Err((
                        format!("`{}` is not run again: {why}; undo the call by hand", tool.name()),
                        Some(approval),
                    )));
                }
            },
        };
        let run = started + 1;
        let idempotency_key = journal.idempotency_key(SAGA_NODE, &key);
        let call = crate::durable::UnknownCall {
            tool: tool.name().to_string(),
            args: args.clone(),
            risk: tool.risk().to_string(),
            requester: "agentflow".into(),
            ttl_ms: 7 * 24 * 3_600_000,
        };
        let detail = json!({ "at": now_ms(), crate::durable::UNKNOWN_CALL: call });
        let (marker, value) = journal.marker_effect(SAGA_NODE, &key, "started", run, &detail);
        // Fenced by the run's lease: a run that lost the thread ends with `LeaseLost`, undoing nothing.
        let batch = journal.start_batch().effect(marker, value);
        // (A run its worker revoked is refused here, before the store, which knows one holder.)
        self.lease.check_not_revoked()?;
        let started = blocking(&self.store, move |s| s.commit_effects(batch)).await?.map_err(PersistError::Commit);
        // The *started* marker was already there: another executor of this thread (one that took
        // it over) started this run of the compensation after this one read the journal. It may
        // be running there; it is not run here too (a later resume finds the run open and asks a
        // human, unless it is idempotent).
        if matches!(started?.as_slice(), [.., EffectOutcome::AlreadyRecorded(_)]) {
            return Err(PersistError::Saga(format!(
                "compensation `{}`: run {run} was started by another executor of thread `{}` (two executors held \
                 it at once); it was not run here",
                tool.name(),
                self.thread
            )));
        }
        let cx = ToolCx::new(&step.id, &idempotency_key, SAGA_NODE, self.deps);
        let cx = cx.with_remote(self.remote);
        if let Some(probe) = self.probe {
            probe.body_runs(&idempotency_key, tool.idempotent());
        }
        let result = match tool.validate(args) {
            Err(e) => Err(format!("its recorded arguments do not validate: {}", e.0)),
            Ok(()) => match tool.invoke(args.clone(), &cx).await {
                Ok(value) => Ok(value),
                // It ran: done, though what it returned cannot be kept.
                Err(ToolError::Unrecorded(why)) => Ok(json!({ "unrecorded": why })),
                Err(ToolError::Correctable(m) | ToolError::Transient(m) | ToolError::Fatal(m)) => Err(m),
                Err(ToolError::OutcomeUnknown(m)) => Err(format!("no answer came back, its outcome is unknown: {m}")),
            },
        };
        match result {
            Ok(value) => {
                let detail = json!({
                    "id": step.id,
                    "node": step.node,
                    "call_id": step.call_id,
                    "tool": step.tool,
                    "compensation": tool.name(),
                    "run": run,
                    "idempotency_key": idempotency_key,
                });
                let bytes = serde_json::to_vec(&value).unwrap_or_default();
                record_compensated(journal, &key, bytes, detail).await?;
                (self.activity)(Activity::Compensation {
                    tool: step.tool.clone(),
                    compensation: tool.name().to_string(),
                    call_id: step.call_id.clone(),
                    result: "ok".into(),
                });
                Ok(Ok(()))
            }
            Err(why) => {
                let detail = json!({ "ended": "error", "error": why });
                journal.mark(SAGA_NODE, &key, "ended", run, detail).await.map_err(journal_error)?;
                Ok(Err((format!("`{}` failed: {why}", tool.name()), None)))
            }
        }
    }

    /// A compensation cut off mid-call that is not idempotent: whether a
    /// human settled it, through the `OUTCOME_UNKNOWN` record this creates.
    async fn settled(
        &self,
        journal: &Journal,
        key: &str,
        run: u32,
        tool: &dyn Tool,
        args: &Value,
    ) -> Result<Settled, PersistError> {
        let id = crate::durable::unknown_outcome_id(&self.thread, SAGA_SEQ, SAGA_NODE, key, run);
        let found = {
            let id = id.clone();
            blocking(&self.store, move |s| s.approval(&id)).await??
        };
        let Some(record) = found else {
            let call = crate::durable::UnknownCall {
                tool: tool.name().to_string(),
                args: args.clone(),
                risk: tool.risk().to_string(),
                requester: "agentflow".into(),
                ttl_ms: 7 * 24 * 3_600_000,
            };
            let reason = format!(
                "the compensation `{}` started and left no result (the process stopped mid-call); whether it \
                 acted is unknown: settle it as succeeded if it did, run again if it did not",
                tool.name()
            );
            let record = crate::durable::unknown_outcome_record(
                &self.thread,
                SAGA_SEQ,
                SAGA_NODE,
                key,
                run,
                &call,
                reason,
                now_ms(),
            );
            // Fenced by the run's lease, with its audit entry: a run that lost the thread records
            // nothing.
            let entry = NewAuditEntry::new(
                now_ms(),
                "agentflow",
                "effect.outcome_unknown",
                json!({ "approval": id, "key": key, "seq": SAGA_SEQ, "run": run, "tool": tool.name() }),
            );
            journal.create_record_logged(record, vec![entry]).await.map_err(journal_error)?;
            return Ok(Settled::Waiting(id));
        };
        match record.status {
            ApprovalStatus::Succeeded => {
                let bytes = serde_json::to_vec(&Value::Null).unwrap_or_default();
                let detail = json!({ "key": key, "compensation": tool.name(), "settled_by": record.decided_by });
                record_compensated(journal, key, bytes, detail).await?;
                Ok(Settled::Acted)
            }
            // "Run again": the cut-off run is closed and a new one starts. A decision like an
            // approval: one written around the desk (a raw store write with no decider) runs
            // nothing.
            ApprovalStatus::Approved => {
                if let Err(why) = journal.decision_recorded(&record).await.map_err(journal_error)? {
                    return Ok(Settled::Refused(id, why));
                }
                let detail = json!({ "ended": "settled: run again", "approval": id });
                journal.mark(SAGA_NODE, key, "ended", run, detail).await.map_err(journal_error)?;
                Ok(Settled::RunAgain)
            }
            ApprovalStatus::Failed => Ok(Settled::Failed(id, record.decision_note.unwrap_or_default())),
            _ => Ok(Settled::Waiting(id)),
        }
    }

    async fn audit(&self, kind: &'static str, detail: Value) -> Result<(), PersistError> {
        let thread = self.thread.clone();
        let entry = NewAuditEntry::new(now_ms(), "agentflow", kind, detail);
        blocking(&self.store, move |s| s.append_audit(&thread, entry))
            .await?
            .map_err(|e| PersistError::Saga(e.to_string()))?;
        Ok(())
    }
}

/// What a human decided about a compensation cut off mid-call.
enum Settled {
    /// It acted: count it as done.
    Acted,
    /// It did not: run it again.
    RunAgain,
    /// Nobody decided yet: the record's id.
    Waiting(String),
    /// It failed: the record's id and the human's note.
    Failed(String, String),
    /// "Run again" that nobody decided through the desk (a raw store write): the record's id
    /// and why it runs nothing.
    Refused(String, String),
}

/// Journals a compensation's result under `key` with its `saga.compensated` audit entry, in
/// one commit.
async fn record_compensated(journal: &Journal, key: &str, bytes: Vec<u8>, detail: Value) -> Result<(), PersistError> {
    let entry = NewAuditEntry::new(now_ms(), "agentflow", "saga.compensated", detail);
    let batch = journal.batch().effect(journal.key(SAGA_NODE, key), bytes).audit(entry);
    journal.commit(batch).await.map_err(journal_error)?.map_err(|current| {
        PersistError::Saga(format!("an approval moved while recording a compensation ({current:?})"))
    })?;
    Ok(())
}

fn journal_error(e: NodeError) -> PersistError {
    PersistError::Saga(e.message)
}
