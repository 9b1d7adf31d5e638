//! Decisions: `approve`, `edit`, `reject`, `cancel`, `settle`, through the library's
//! [`ApprovalDesk`] and [`RoleAuthorizer`] (the same checks and compare-and-set as an app's
//! own desk; this module decides nothing itself).

use std::sync::Arc;

use agentflow::Store;
use agentflow::access::Operation;
use agentflow::approval::{AnswerError, ApprovalDesk, Approver, DecisionError, RoleAuthorizer, Settlement};
use agentflow::server::inspect::edit_check::{check_edit, tool_schema};
use agentflow::server::inspect::sign_offs::sign_offs;
use agentflow::tool::Risk;
use clap::Args;

use crate::access::{Guard, denied};
use crate::inspect::approval_json;
use crate::out;
use crate::{Failure, Outcome};

/// Which decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// As requested (or with `--conditions`).
    Approve,
    /// With other arguments.
    Edit,
    /// Rejected, with a reason.
    Reject,
    /// Withdrawn.
    Cancel,
    /// An unknown outcome settled.
    Settle,
}

/// Who decides which approval, and how.
#[derive(Args, Debug)]
pub struct DecideArgs {
    /// The approval id (see `agentflow pending`). Who decides is `--as` with the roles of
    /// `--role` (recorded in the audit log); nobody may decide their own request.
    pub approval: String,
    /// Which role may decide which risk class, as RISK=ROLE pairs separated by commas
    /// (`irreversible=refunds,external=ops`). A risk class left out is decided by the role
    /// named like it (`irreversible` by `irreversible`).
    #[arg(long, env = "AGENTFLOW_ROLES", value_name = "RISK=ROLE,..")]
    pub roles_for: Option<String>,
    /// Irreversible calls need two distinct approvers (each `approve` is one sign-off).
    #[arg(long, env = "AGENTFLOW_TWO_PERSON")]
    pub two_person: bool,
    /// Why (`reject`: handed to the model; `settle --failed`: the failure).
    #[arg(long)]
    pub reason: Option<String>,
    /// `approve`: conditions (JSON) recorded and handed to the model with the result.
    #[arg(long, value_name = "JSON")]
    pub conditions: Option<String>,
    /// `edit`: the arguments to run the tool with (JSON), checked against the tool's schema.
    #[arg(long, value_name = "JSON")]
    pub args: Option<String>,
    /// `settle`: the call acted, with this result (JSON).
    #[arg(long, value_name = "JSON")]
    pub succeeded: Option<String>,
    /// `settle`: the call did not act (give the failure with --reason).
    #[arg(long)]
    pub failed: bool,
    /// `settle`: run the call again.
    #[arg(long)]
    pub run_again: bool,
}

const RISKS: [Risk; 4] = [Risk::Read, Risk::Reversible, Risk::External, Risk::Irreversible];

/// The authorizer the CLI decides with: roles by risk class from `--roles-for`, each risk
/// class left out decided by the role of its own name.
pub fn authorizer(args: &DecideArgs) -> Result<RoleAuthorizer, Failure> {
    authorizer_from(args.roles_for.as_deref(), args.two_person)
}

/// The authorizer for `--roles-for` (RISK=ROLE pairs) and `--two-person`; `serve` decides
/// with the same one.
pub fn authorizer_from(roles_for: Option<&str>, two_person: bool) -> Result<RoleAuthorizer, Failure> {
    let mut roles: Vec<(Risk, String)> = RISKS.iter().map(|r| (*r, r.to_string())).collect();
    for pair in roles_for.iter().flat_map(|s| s.split(',')).map(str::trim).filter(|p| !p.is_empty()) {
        let (risk, role) =
            pair.split_once('=').ok_or_else(|| Failure::usage(format!("--roles-for: `{pair}` is not RISK=ROLE")))?;
        let risk = RISKS.iter().find(|r| r.to_string() == risk.trim()).ok_or_else(|| {
            Failure::usage(format!(
                "--roles-for: unknown risk class `{risk}`; one of read, reversible, external, irreversible"
            ))
        })?;
        if let Some(slot) = roles.iter_mut().find(|(r, _)| r == risk) {
            slot.1 = role.trim().to_string();
        }
    }
    let mut auth = RoleAuthorizer::new();
    for (risk, role) in roles {
        auth = auth.role_for(risk, role);
    }
    if two_person {
        auth = auth.two_person_for_irreversible();
    }
    Ok(auth)
}

/// Makes the decision and prints the record as it is now.
pub fn decide(store: &Arc<dyn Store>, guard: &Guard, kind: Kind, args: &DecideArgs, as_json: bool) -> Outcome {
    let verb = match kind {
        Kind::Approve => "approve",
        Kind::Edit => "edit",
        Kind::Reject => "reject",
        Kind::Cancel => "cancel",
        Kind::Settle => "settle",
    };
    let approver: Approver = guard.named(verb)?.clone();
    let desk = ApprovalDesk::for_store(Arc::clone(store), authorizer(args)?)
        .access_shared(guard.policy())
        .reading_as(guard.actor().clone());
    let user = approver.id.as_str();
    let id = args.approval.as_str();
    let result = match kind {
        Kind::Approve => match &args.conditions {
            Some(c) => desk.approve_with_conditions(id, &approver, out::parse_json("--conditions", c)?),
            None => desk.approve(id, &approver),
        },
        Kind::Edit => {
            let text = args.args.as_deref().ok_or_else(|| Failure::usage("edit needs --args JSON"))?;
            let edited = out::parse_json("--args", text)?;
            let schema = tool_schema(store.as_ref(), id)?;
            desk.edit_checked(id, &approver, edited, |tool, value| check_edit(tool, schema.as_ref(), value))
        }
        Kind::Reject => {
            let reason = args.reason.as_deref().ok_or_else(|| Failure::usage("reject needs --reason"))?;
            desk.reject(id, &approver, reason)
        }
        Kind::Cancel => desk.cancel(id, &approver),
        Kind::Settle => {
            let settlement = match (&args.succeeded, args.failed, args.run_again) {
                (Some(result), false, false) => Settlement::Succeeded(out::parse_json("--succeeded", result)?),
                (None, true, false) => Settlement::Failed(
                    args.reason.clone().ok_or_else(|| Failure::usage("settle --failed needs --reason"))?,
                ),
                (None, false, true) => Settlement::RunAgain,
                _ => return Err(Failure::usage("settle needs exactly one of --succeeded JSON, --failed, --run-again")),
            };
            desk.settle(id, &approver, settlement)
        }
    };
    let record = result.map_err(refusal)?;
    if as_json {
        out::json(&approval_json(&record))?;
    } else if record.status.is_waiting() {
        outln!(
            "approval {} is still {}: sign-off by {} recorded (sign-offs so far: {}); another approver must approve \
             the same arguments with the same conditions",
            record.id,
            record.status,
            user,
            sign_offs(store.as_ref(), &record)
        )?;
    } else {
        outln!("approval {} is {} (by {user}); {}", record.id, record.status, who_goes_on(store, &record))?;
    }
    Ok(())
}

/// What makes the thread of decided approval `record` go on: a worker, by itself, when the run
/// of the thread (or of the parent thread it is a subgraph child of) is in the store's run queue
/// (submitted to workers, it stays queued while it waits for approvals); otherwise the app's
/// resume of that thread. Either waits for the approvals and questions still open anywhere in
/// the tree of that thread (its own and its subgraph children's, at every level).
fn who_goes_on(store: &Arc<dyn Store>, record: &agentflow::approval::ApprovalRecord) -> String {
    // A subgraph child goes on with its parent: the top thread is the one resumed or queued.
    let mut top = record.thread.clone();
    for _ in 0..64 {
        match store.thread(&top) {
            Ok(Some(t)) => match t.parent {
                Some(parent) => top = parent,
                None => break,
            },
            _ => break,
        }
    }
    let once = still_waiting(store, &top, &record.id);
    let queued = match store.scan_runs() {
        Ok(runs) => runs.items.iter().any(|r| r.thread == top),
        Err(agentflow_store::QueueError::Unsupported { .. }) => false,
        Err(e) => {
            return format!(
                "resume thread {top} to go on{once}, unless workers run it (the run queue could not be read: {e})"
            );
        }
    };
    if queued {
        format!("a worker resumes thread {top} by itself (its run is in the run queue){once}; nothing to resume")
    } else {
        format!("resume thread {top} to go on{once} (it is not in the run queue, so no worker resumes it)")
    }
}

/// `" once the other 2 waiting approvals are decided"` when the tree of thread `top` still
/// waits for approvals other than `decided`, or for answers; else `""`. What cannot be read
/// counts as nothing waiting.
fn still_waiting(store: &Arc<dyn Store>, top: &str, decided: &str) -> String {
    // The tree, parents before children; a chain that loops back (an edited store) is walked
    // once, and a tree past a bound is read no further.
    let mut tree = vec![top.to_string()];
    let mut seen = std::collections::HashSet::from([top.to_string()]);
    let mut next = 0;
    while next < tree.len() && tree.len() < 10_000 {
        if let Ok(children) = store.child_threads(&tree[next]) {
            tree.extend(children.items.into_iter().map(|t| t.id).filter(|id| seen.insert(id.clone())));
        }
        next += 1;
    }
    let approvals: usize = tree
        .iter()
        .filter_map(|thread| store.list_approvals(thread).ok())
        .map(|all| all.iter().filter(|a| a.id != decided && a.status.is_waiting()).count())
        .sum();
    // A question asked inside a subgraph waits as its top thread's.
    let desk = ApprovalDesk::for_store(Arc::clone(store), RoleAuthorizer::new());
    let questions = desk.waiting_questions(top).map_or(0, |(_, asks)| asks.iter().filter(|(_, a)| a.is_none()).count());
    let mut parts = Vec::new();
    match approvals {
        0 => {}
        1 => parts.push("the other waiting approval is decided".to_string()),
        n => parts.push(format!("the other {n} waiting approvals are decided")),
    }
    match questions {
        0 => {}
        1 => parts.push("its waiting question is answered".to_string()),
        n => parts.push(format!("its {n} waiting questions are answered")),
    }
    if parts.is_empty() {
        return String::new();
    }
    format!(" once {}", parts.join(" and "))
}

/// Who answers which thread's interrupt, with what.
#[derive(Args, Debug)]
pub struct AnswerArgs {
    /// The thread waiting in `cx.interrupt` (see `agentflow pending`).
    pub thread: String,
    /// The answer (JSON): the value the node's `interrupt` call returns on resume. Who
    /// answers is `--as` (recorded in the audit log).
    #[arg(long, value_name = "JSON")]
    pub value: String,
    /// The checkpoint the answer is for (`pending --json` shows it); refused if the thread
    /// has moved on. Default: the checkpoint it waits at now.
    #[arg(long, value_name = "SEQ")]
    pub checkpoint: Option<u64>,
    /// The question the answer is for (`show THREAD` or `pending --json` shows its id);
    /// refused if the thread asks another question by then, even at the same checkpoint (a
    /// subgraph's next one). When its step asks several questions (two nodes, map instances),
    /// each is answered on its own this way, and the thread goes on once each has its answer.
    /// Default: the one question the thread asks now (refused when it asks several).
    #[arg(long, value_name = "ID", conflicts_with = "all_alike")]
    pub question: Option<String>,
    /// Answer every question of the step that has no answer yet with this one value: only
    /// when they all ask the very same thing (refused otherwise).
    #[arg(long)]
    pub all_alike: bool,
}

/// Records an answer to a thread's interrupt; the app's next `resume()` (or a worker, for a
/// run parked in the queue) continues with it.
pub fn answer(store: &Arc<dyn Store>, guard: &Guard, args: &AnswerArgs, as_json: bool) -> Outcome {
    let by: Approver = guard.named("answer")?.clone();
    let desk = ApprovalDesk::for_store(Arc::clone(store), RoleAuthorizer::new())
        .access_shared(guard.policy())
        .reading_as(guard.actor().clone());
    let value = out::parse_json("--value", &args.value)?;
    // A thread of another tenant is not there, as a missing one; the desk checks again as it
    // records the answer.
    guard.thread(store.as_ref(), Operation::Answer, &args.thread)?;
    let refused = |e: AnswerError| match e {
        AnswerError::Read(_)
        | AnswerError::Audit(_)
        | AnswerError::NotReadBack { .. }
        | AnswerError::NotWoken { .. }
        | AnswerError::Lease { .. } => Failure::store(e),
        AnswerError::Anonymous | AnswerError::Value(_) | AnswerError::AnswerTheParent { .. } => {
            Failure::usage(e.to_string())
        }
        // A run holds the thread: busy, as for `update` and `fork`.
        AnswerError::Busy { .. } => Failure::new(crate::code::BUSY, e.to_string()),
        AnswerError::Access(e) => denied(e),
        other => Failure::not_found(other.to_string()),
    };
    let checkpoint = match args.checkpoint {
        Some(seq) => seq,
        None => desk.waiting_interrupt(&args.thread).map_err(refused)?.0,
    };
    let answers = match &args.question {
        _ if args.all_alike => desk.answer_all_alike(&args.thread, checkpoint, value, &by),
        Some(question) => desk.answer_question(&args.thread, checkpoint, question, value, &by).map(|a| vec![a]),
        None => desk.answer_interrupt(&args.thread, checkpoint, value, &by).map(|a| vec![a]),
    };
    let answers = answers.map_err(refused)?;
    // The questions of the step still without an answer: the thread goes on once there are none.
    let open: Vec<String> = match desk.waiting_questions(&args.thread) {
        Ok((_, asks)) => asks.into_iter().filter(|(_, a)| a.is_none()).map(|(p, _)| p.question_id()).collect(),
        Err(_) => Vec::new(),
    };
    if as_json {
        let one = |a: &agentflow::approval::InterruptAnswer| {
            serde_json::json!({
                "thread": a.thread, "checkpoint": a.checkpoint, "node": a.node, "instance": a.instance,
                "question": a.question, "value": a.value, "by": a.by, "at": a.at,
            })
        };
        let mut v = match answers.as_slice() {
            [a] => one(a),
            all => serde_json::json!({ "answers": all.iter().map(one).collect::<Vec<_>>() }),
        };
        v["unanswered"] = serde_json::json!(open);
        out::json(&v)?;
        return Ok(());
    }
    for a in &answers {
        let instance = a.instance.map(|i| format!(" instance {i}")).unwrap_or_default();
        outln!("thread {} answered at node {}{instance} (checkpoint {}) by {}", a.thread, a.node, a.checkpoint, a.by)?;
    }
    if open.is_empty() {
        outln!("the app's next resume() (or a worker, for a queued run) continues with the answers")?;
    } else {
        outln!(
            "still unanswered at this step: {} (answer each with `--question ID`); the thread goes on once each has its answer",
            open.join(", ")
        )?;
    }
    Ok(())
}

/// A refused decision: exit code 1 with the desk's message, or a store failure.
fn refusal(e: DecisionError) -> Failure {
    match e {
        DecisionError::Access(e) => denied(e),
        DecisionError::Read(_) | DecisionError::Transition(_) | DecisionError::Audit(_) => Failure::store(e),
        other => Failure::not_found(other.to_string()),
    }
}
