//! Runs a thread to its end as a person would: answering its questions and deciding its
//! approvals from a script, waiting out its timers, resuming it after each pause.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentflow_store::{ApprovalRecord, ApprovalStatus};
use serde::Serialize;

use super::report::Ending;
use crate::approval::{ApprovalDesk, Approver, Authorizer};
use crate::durable::ResumeError;
use crate::durable::ThreadStatus;
use crate::interrupt::PendingKind;
use crate::{App, Durability, Limits, Outcome, RunError, State};

/// How many times a thread is resumed, at most, before the driver gives up.
const MAX_ROUNDS: usize = 200;

/// The longest durable timer the driver waits out (in real time) before it gives up.
const MAX_SLEEP_MS: u64 = 60_000;

/// The scripted people of a crash test: the answers to `cx.interrupt` questions (by node) and
/// the decisions on approvals (by tool).
///
/// By default every approval is approved by one approver, `crash-matrix`, whom an authorizer
/// lets decide everything; [`Answers::approvers`] puts the graph's own rules in its place.
/// A question without a scripted answer ends the run with [`Ending::Error`].
#[derive(Clone)]
pub struct Answers {
    interrupts: BTreeMap<String, serde_json::Value>,
    rejects: BTreeMap<String, String>,
    edits: BTreeMap<String, serde_json::Value>,
    approvers: Vec<Approver>,
    authorizer: Arc<dyn Authorizer>,
}

impl std::fmt::Debug for Answers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answers")
            .field("interrupts", &self.interrupts)
            .field("rejects", &self.rejects)
            .field("edits", &self.edits)
            .field("approvers", &self.approvers)
            .finish_non_exhaustive()
    }
}

impl Default for Answers {
    fn default() -> Self {
        Answers {
            interrupts: BTreeMap::new(),
            rejects: BTreeMap::new(),
            edits: BTreeMap::new(),
            approvers: vec![Approver::new("crash-matrix", ["crash-matrix"])],
            authorizer: Arc::new(DecidesAll),
        }
    }
}

/// Lets the scripted approver decide everything (the default of [`Answers`]).
struct DecidesAll;

impl Authorizer for DecidesAll {
    fn authorize(&self, _approver: &Approver, _approval: &ApprovalRecord) -> Result<(), String> {
        Ok(())
    }
}

/// An authorizer shared between desks.
struct Shared(Arc<dyn Authorizer>);

impl Authorizer for Shared {
    fn authorize(&self, approver: &Approver, approval: &ApprovalRecord) -> Result<(), String> {
        self.0.authorize(approver, approval)
    }

    fn sign_offs(&self, approval: &ApprovalRecord) -> usize {
        self.0.sign_offs(approval)
    }
}

impl Answers {
    /// Approves every approval; answers no question.
    pub fn new() -> Self {
        Answers::default()
    }

    /// Answers every question `node` asks with `value` (serialised as JSON).
    ///
    /// # Panics
    ///
    /// If `value` does not serialise (a map with non-string keys): a mistake in the test.
    #[must_use]
    pub fn interrupt(mut self, node: &str, value: impl Serialize) -> Self {
        let value = serde_json::to_value(value).expect("a scripted answer serialises as JSON");
        self.interrupts.insert(node.to_string(), value);
        self
    }

    /// Rejects every call of `tool` that waits for approval, with `reason`.
    #[must_use]
    pub fn reject(mut self, tool: &str, reason: &str) -> Self {
        self.rejects.insert(tool.to_string(), reason.to_string());
        self
    }

    /// Approves every call of `tool` that waits for approval with `args` in place of the
    /// arguments asked for (an edit: checked against the tool's schema, as the desk checks it).
    ///
    /// # Panics
    ///
    /// If `args` does not serialise: a mistake in the test.
    #[must_use]
    pub fn edit(mut self, tool: &str, args: impl Serialize) -> Self {
        let args = serde_json::to_value(args).expect("scripted arguments serialise as JSON");
        self.edits.insert(tool.to_string(), args);
        self
    }

    /// Approvals are decided by `approvers` (in turn, until enough signed off) under
    /// `authorizer`, the rules the graph is deployed with.
    #[must_use]
    pub fn approvers(mut self, authorizer: impl Authorizer, approvers: impl IntoIterator<Item = Approver>) -> Self {
        self.authorizer = Arc::new(authorizer);
        self.approvers = approvers.into_iter().collect();
        self
    }

    fn desk<S: State, D>(&self, app: &App<S, D>) -> Result<ApprovalDesk, String> {
        // The matrix answers for the app's people as a harness: its reads and decisions are not
        // the app's access policy's to refuse (the authorizer still decides who may approve).
        let desk = app.approvals(Shared(Arc::clone(&self.authorizer))).map_err(|e| e.to_string())?;
        Ok(desk.access(crate::access::AllowAll).reading_as(crate::access::Actor::process()))
    }

    fn first_approver(&self) -> Result<&Approver, String> {
        self.approvers.first().ok_or_else(|| "the crash test's answers name no approver".to_string())
    }

    /// Records an answer to every question the thread waits on, and a decision on every
    /// approval of it (or of its subgraph children) that waits.
    fn answer_all<S: State, D>(&self, app: &App<S, D>, thread: &str) -> Result<(), String> {
        let desk = self.desk(app)?;
        let mut undecided = Vec::new();
        if let Ok((checkpoint, questions)) = desk.waiting_questions(thread) {
            for (question, answered) in questions {
                if answered.is_some() {
                    continue;
                }
                let Some(value) = self.interrupts.get(&question.node) else {
                    return Err(format!(
                        "node `{}` asks a question and the crash test's answers have none for it \
                         (add `Answers::interrupt(\"{}\", value)`)",
                        question.node, question.node
                    ));
                };
                desk.answer_question(
                    thread,
                    checkpoint,
                    &question.question_id(),
                    value.clone(),
                    self.first_approver()?,
                )
                .map_err(|e| e.to_string())?;
            }
        }
        let child = format!("{thread}/");
        let waiting = desk.pending().map_err(|e| e.to_string())?;
        for record in waiting {
            if record.status != ApprovalStatus::Pending
                || !(record.thread == thread || record.thread.starts_with(&child))
            {
                continue;
            }
            if let Some(reason) = self.rejects.get(&record.tool) {
                desk.reject(&record.id, self.first_approver()?, reason).map_err(|e| e.to_string())?;
                continue;
            }
            let mut status = record.status;
            for approver in &self.approvers {
                status = match self.edits.get(&record.tool) {
                    Some(args) => desk.edit(&record.id, approver, args.clone()),
                    None => desk.approve(&record.id, approver),
                }
                .map_err(|e| e.to_string())?
                .status;
                if status != ApprovalStatus::Pending {
                    break;
                }
            }
            if status == ApprovalStatus::Pending {
                undecided.push(format!("`{}` (a call of `{}`)", record.id, record.tool));
            }
        }
        if !undecided.is_empty() {
            return Err(format!(
                "the crash test's approvers could not decide approval {}: give `Answers::approvers` enough \
                 approvers whom the authorizer lets decide it",
                undecided.join(", ")
            ));
        }
        Ok(())
    }
}

/// How a run ended, named by the status it leaves its thread in (`completed`, `failed`,
/// `compensated`, ...): what a resume of a thread that ended before the cut reads back too.
fn status_name(outcome: &Outcome) -> String {
    let status = match outcome {
        Outcome::Completed => ThreadStatus::Completed,
        Outcome::BudgetExhausted { .. } => ThreadStatus::BudgetExhausted,
        Outcome::Cancelled => ThreadStatus::Cancelled,
        Outcome::Failed { .. } => ThreadStatus::Failed,
        other => crate::saga::status_of(other).unwrap_or(ThreadStatus::Failed),
    };
    status.as_str().to_string()
}

/// What a driven run is: its thread, who it acts for, its limits, the people who answer it.
pub(crate) struct Plan<'a> {
    pub(crate) thread: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) tenant: Option<&'a str>,
    pub(crate) limits: Option<Limits>,
    pub(crate) answers: &'a Answers,
}

/// Runs (`fresh`) or resumes the plan's thread to its end; see the module docs.
pub(crate) async fn drive<S: State, D: Sync>(
    app: &App<S, D>,
    deps: &D,
    input: &S,
    plan: &Plan<'_>,
    fresh: bool,
) -> Ending {
    drive_from(app, deps, Some(input), plan, fresh).await
}

/// Resumes the plan's thread, stored already (by another version of its graph, say), to its
/// end.
pub(crate) async fn drive_stored<S: State, D: Sync>(app: &App<S, D>, deps: &D, plan: &Plan<'_>) -> Ending {
    drive_from(app, deps, None, plan, false).await
}

async fn drive_from<S: State, D: Sync>(
    app: &App<S, D>,
    deps: &D,
    input: Option<&S>,
    plan: &Plan<'_>,
    mut fresh: bool,
) -> Ending {
    let (thread, answers) = (plan.thread, plan.answers);
    for _ in 0..MAX_ROUNDS {
        // A short lease: a killed process's lease on a store that keeps leases (PostgreSQL)
        // holds the thread only that long.
        let mut runner =
            app.runner(deps).thread(thread).durability(Durability::Sync).lease_ttl(std::time::Duration::from_secs(1));
        if let Some(tenant) = plan.tenant {
            runner = runner.tenant(tenant);
        }
        let result = match (fresh.then_some(input).flatten(), plan.limits) {
            (Some(input), Some(limits)) => runner.owner(plan.owner).limits(limits).run(input.clone()).await,
            (Some(input), None) => runner.owner(plan.owner).run(input.clone()).await,
            (None, _) if fresh => return Ending::Error { error: format!("thread `{thread}` is not stored") },
            (None, _) => runner.resume().await,
        };
        let started = fresh;
        fresh = false;
        let answered = match result {
            Ok(run) => match run.outcome {
                Outcome::Sleeping { until, .. } => {
                    let wait = crate::outcome::unix_ms::of(until).saturating_sub(crate::durable::now_ms());
                    if wait > MAX_SLEEP_MS {
                        return Ending::Error {
                            error: format!(
                                "the thread sleeps {} s on a durable timer; the crash test waits timers out in real \
                                 time, at most {} s: give the graph a shorter timer in the test (from its deps)",
                                wait / 1000,
                                MAX_SLEEP_MS / 1000
                            ),
                        };
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                    Ok(())
                }
                // A compensation cut off mid-call that is not idempotent: whether it acted is
                // unknown, and the thread waits for a person to settle its record.
                Outcome::CompensationFailed { approval: Some(_), error, .. } => {
                    return Ending::WaitsForHuman { reason: error };
                }
                Outcome::Paused => Ok(()),
                Outcome::Interrupted { pending, .. } => {
                    if let Some(unknown) = pending.iter().find(|p| p.kind == PendingKind::OutcomeUnknown) {
                        let reason = unknown.payload["reason"].as_str().unwrap_or("an unknown outcome").to_string();
                        return Ending::WaitsForHuman { reason };
                    }
                    answers.answer_all(app, thread)
                }
                outcome => {
                    let state = serde_json::to_value(&run.state).unwrap_or_else(|e| serde_json::json!(e.to_string()));
                    return Ending::Finished { outcome: status_name(&outcome), state };
                }
            },
            Err(RunError::ValueRequired { .. } | RunError::SeveralQuestions { .. }) => answers.answer_all(app, thread),
            // The lease of a process that died holds the thread until it expires.
            Err(RunError::ThreadBusy { expires_at, .. }) => {
                let wait = expires_at.saturating_sub(crate::durable::now_ms()) + 10;
                tokio::time::sleep(std::time::Duration::from_millis(wait.min(60_000))).await;
                Ok(())
            }
            // The run finished before the process died: the store holds how it ended.
            Err(RunError::Resume(ResumeError::Finished { status, .. })) => {
                return match app.state(thread) {
                    Ok(Some(snapshot)) => {
                        let state =
                            serde_json::to_value(&snapshot.state).unwrap_or_else(|e| serde_json::json!(e.to_string()));
                        Ending::Finished { outcome: status, state }
                    }
                    Ok(None) => {
                        Ending::Error { error: format!("thread `{thread}` ended ({status}) with no checkpoint") }
                    }
                    Err(e) => Ending::Error { error: e.to_string() },
                };
            }
            // The cut came before the thread's first commit: it never started, so it starts again.
            Err(RunError::Resume(ResumeError::UnknownThread { .. })) if !started => {
                fresh = true;
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        };
        if let Err(error) = answered {
            return Ending::Error { error };
        }
    }
    Ending::Error { error: format!("the thread did not end within {MAX_ROUNDS} resumes") }
}
