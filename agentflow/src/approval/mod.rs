//! Deciding approvals: who may approve which call, and the decisions
//! themselves (approve, approve with conditions, edit, reject, cancel).
//!
//! The gateway writes an approval record when the policy says a call needs a
//! human, and the run pauses. A person decides through an [`ApprovalDesk`],
//! from any process that opens the same store; then the thread is resumed
//! and the gateway runs the call with the approved arguments, after checking
//! that the record was granted for this very call (thread, node, tool,
//! arguments). The call's result is journaled; a call cut off before its
//! result was recorded is run again only if its tool is idempotent, else the
//! record becomes `OUTCOME_UNKNOWN` and a person settles it
//! ([`ApprovalDesk::settle`]).
//!
//! Every decision is a compare-and-set in one store transaction, so of two
//! concurrent decisions exactly one wins. Knowing an approval id grants
//! nothing: each decision names an [`Approver`] that the [`Authorizer`] checks.
//!
//! # What the desk guards, and what holding the store permits
//!
//! In `agentflow`, the desk is the only way to decide an approval, and it
//! asks the [`Authorizer`] before every decision. The executor itself only
//! moves an approval it is about to run (`APPROVED` to `EXECUTING` to
//! `SUCCEEDED`/`FAILED`) or one whose time ran out (to `EXPIRED`). An
//! approved call costs two durable commits (`Store::commit_effects`): the
//! claim `APPROVED -> EXECUTING` together with the call's *started* marker,
//! on disk before the tool runs; then the result together with
//! `EXECUTING -> SUCCEEDED`/`FAILED`, so a crash in between leaves a started
//! call with no result, whose outcome a human settles.
//!
//! The store below the desk checks no one. [`Store::transition_approval`]
//! (public, since the `Store` trait lives in `agentflow-store`) approves any
//! pending call with any arguments in anyone's name, and
//! [`App::backing_store`] hands the graph's store to whoever holds the
//! graph. Holding the store, or being able to open its file, permits
//! everything: deciding approvals, rewriting threads' state and journaled
//! effect results, and appending to the audit log. It is a trust boundary
//! like a database credential: give the store (and the graph) only to code
//! trusted to decide approvals, and give people the desk.
//!
//! Before it runs an `APPROVED` call, the executor checks that the stored
//! arguments match their hash and validate, and that the record names its
//! decider (`decided_by`) with an `approval.approved` audit entry by that
//! decider for those arguments; the store writes that entry in the same
//! transaction as the decision. A transition written around the desk with no
//! decider, or in another person's name, is refused (`APPROVAL_INVALID`) and
//! the call does not run. Someone holding the store can still forge both;
//! nothing below the desk can stop that.

use std::collections::BTreeMap;
mod access;
pub(crate) mod answer;
mod decided;
pub(crate) mod desk;

use std::sync::Arc;

use agentflow_store::{ApprovalError, AuditError, NewAuditEntry, ReadError, Store};
// The desk's results and errors name these; re-exported so users of
// `agentflow` need not depend on `agentflow-store` to match on them.
pub use agentflow_store::{ApprovalArgs, ApprovalPatch, ApprovalRecord, ApprovalStatus};

pub use crate::approval::answer::{
    ANSWER_FAILED_KIND, ANSWER_KIND, ANSWER_USED_KIND, AnswerError, InterruptAnswer, QuestionsAnswered,
};
pub use crate::core::person::person_key;
use serde_json::{Value, json};

use crate::access::Access;
#[cfg(doc)]
use crate::app::App;
use crate::durable::now_ms;
use crate::tool::{Risk, Tool, args_hash, canonical_json};
use decided::decided;

/// A person (or service) deciding approvals: an [`Actor`](crate::access::Actor), whose roles
/// the [`Authorizer`] checks and whose tenants scope the approvals it sees and decides.
pub use crate::access::Actor as Approver;

/// Decides who may decide which approval.
pub trait Authorizer: Send + Sync + 'static {
    /// `Ok` if `approver` may decide `approval`, else why not.
    fn authorize(&self, approver: &Approver, approval: &ApprovalRecord) -> Result<(), String>;

    /// How many distinct approvers must approve (default 1).
    fn sign_offs(&self, _approval: &ApprovalRecord) -> usize {
        1
    }
}

/// Roles by risk class, and an optional two-person rule for irreversible calls.
///
/// Nobody may approve their own request.
#[derive(Debug, Clone, Default)]
pub struct RoleAuthorizer {
    roles: BTreeMap<String, String>,
    two_person_irreversible: bool,
}

impl RoleAuthorizer {
    /// No role can approve anything yet.
    pub fn new() -> Self {
        RoleAuthorizer::default()
    }

    /// Calls of this risk may be decided by holders of `role`.
    #[must_use]
    pub fn role_for(mut self, risk: Risk, role: impl Into<String>) -> Self {
        self.roles.insert(risk.to_string(), role.into());
        self
    }

    /// Irreversible calls need two distinct approvers, who approve the same arguments (an edit
    /// needs its own two sign-offs) with the same conditions (a co-signer who leaves out the
    /// conditions the first one attached does not complete the approval). Each sign-off is an
    /// `approval.sign_off` audit entry holding the arguments it edited and its conditions.
    #[must_use]
    pub fn two_person_for_irreversible(mut self) -> Self {
        self.two_person_irreversible = true;
        self
    }
}

/// Whether two names are one person's ([`person_key`]), as the approval inbox tells its users
/// apart (so `Alice` or `аlice` cannot approve what `alice` requested, nor sign twice).
fn same_person(a: &str, b: &str) -> bool {
    person_key(a) == person_key(b)
}

impl Authorizer for RoleAuthorizer {
    fn authorize(&self, approver: &Approver, approval: &ApprovalRecord) -> Result<(), String> {
        if same_person(&approver.id, &approval.requester) {
            return Err(format!("`{}` requested this call and cannot approve it", approver.id));
        }
        let Some(role) = self.roles.get(&approval.risk) else {
            return Err(format!("no role may decide {} calls", approval.risk));
        };
        if approver.roles.iter().any(|r| r == role) {
            Ok(())
        } else {
            Err(format!("deciding {} calls needs the `{role}` role", approval.risk))
        }
    }

    fn sign_offs(&self, approval: &ApprovalRecord) -> usize {
        if self.two_person_irreversible && approval.risk == Risk::Irreversible.to_string() { 2 } else { 1 }
    }
}

/// What a human found out about a call whose outcome was unknown
/// (see [`ApprovalDesk::settle`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Settlement {
    /// It acted, with this result.
    Succeeded(Value),
    /// It did not act, for this reason.
    Failed(String),
    /// Run it again.
    RunAgain,
}

/// A decision was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionError {
    /// No approval has this id.
    #[error("no approval `{id}`")]
    NotFound {
        /// The id asked for.
        id: String,
    },
    /// The approver may not decide it.
    #[error("`{approver}` may not decide approval `{id}`: {reason}")]
    NotAuthorized {
        /// The approval.
        id: String,
        /// Who tried.
        approver: String,
        /// Why not.
        reason: String,
    },
    /// It was already decided (or used, or expired) by someone else.
    #[error("approval `{id}` was already decided: it is {current}")]
    AlreadyDecided {
        /// The approval.
        id: String,
        /// Its status now.
        current: ApprovalStatus,
    },
    /// It expired before the decision; the call will never run.
    #[error("approval `{id}` expired before the decision; the call will not run")]
    Expired {
        /// The approval.
        id: String,
    },
    /// Edited arguments do not validate against the tool's schema.
    #[error("the edited arguments for `{tool}` do not validate: {detail}")]
    InvalidEdit {
        /// The tool.
        tool: String,
        /// What is wrong.
        detail: String,
    },
    /// The result given with [`Settlement::Succeeded`] would not read back as
    /// given (nested too deep, or a float JSON cannot hold); nothing was recorded.
    #[error("the result settled for `{id}` is not kept: {source}")]
    InvalidResult {
        /// The record.
        id: String,
        /// What is wrong with the value.
        #[source]
        source: crate::durable::ValueError,
    },
    /// The same approver signed off twice where two people are needed.
    #[error("approval `{id}` needs a second approver other than `{approver}`")]
    SameApprover {
        /// The approval.
        id: String,
        /// Who signed off already.
        approver: String,
    },
    /// Reading the approval from the store failed.
    #[error("reading the approval: {0}")]
    Read(#[from] ReadError),
    /// The store refused or failed the transition.
    #[error("recording the decision: {0}")]
    Transition(#[source] ApprovalError),
    /// Writing the decision's audit entry failed.
    #[error("auditing the decision: {0}")]
    Audit(#[from] AuditError),
    /// The desk's access policy does not let the approver decide, or list. (Appended last.)
    #[error(transparent)]
    Access(#[from] crate::access::AccessError),
}

/// Where people decide a graph's approvals.
///
/// Get one from [`App::approvals`]. A call that needs a human pauses its
/// run with an `approval` pending; approve it here (from this process or
/// any other that opens the same store), then resume the thread and the
/// gateway runs the call with the approved arguments:
///
/// ```
/// use std::sync::Arc;
/// use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
/// use agentflow::prelude::*;
/// use agentflow::{RedbStore, Store};
/// use serde::{Deserialize, Serialize};
/// use serde_json::{Value, json};
///
/// #[derive(Deserialize, schemars::JsonSchema)]
/// struct Refund {
///     order_id: String,
///     amount: u32,
/// }
///
/// /// Refunds an order. Irreversible, so every call waits for a person.
/// #[tool(risk = irreversible)]
/// async fn refund(args: Refund) -> Result<Value, ToolError> {
///     Ok(json!({ "refunded": args.amount, "order_id": args.order_id }))
/// }
///
/// #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
/// struct Pay {
///     order: String,
///     receipt: Option<Value>,
/// }
///
/// #[graph(state = Pay, start = pay)]
/// mod payments {
///     use super::*;
///
///     #[node(goto = [END], tools = [refund])]
///     async fn pay(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
///         let obs = cx.run_tool(refund, json!({ "order_id": s.order, "amount": 10 })).await?;
///         Ok(goto!(END, Pay::update().receipt(Some(obs.body))))
///     }
/// }
///
/// # fn main() {
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory()?);
/// let app = payments::graph().app().store(store);
/// let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "refunds"))?;
///
/// // The run pauses before the refund, with one approval pending.
/// let input = Pay { order: "A-1".into(), receipt: None };
/// let run = app.runner(&()).thread("t-1").owner("agent").run(input).await?;
/// assert!(matches!(run.outcome, Outcome::Interrupted { .. }));
/// let waiting = desk.pending()?;
/// assert_eq!(waiting.len(), 1);
/// assert_eq!(waiting[0].tool, "refund");
///
/// // A person with the role approves it; the resumed run makes the call.
/// let approved = desk.approve(&waiting[0].id, &Approver::new("alice", ["refunds"]))?;
/// assert_eq!(approved.status, ApprovalStatus::Approved);
/// let done = app.runner(&()).thread("t-1").resume().await?;
/// assert_eq!(done.outcome, Outcome::Completed);
/// assert_eq!(done.state.receipt.unwrap()["result"]["refunded"], 10);
/// assert!(desk.pending()?.is_empty());
/// # Ok::<(), agentflow::Error>(())
/// # }).unwrap();
/// # }
/// ```
#[derive(Clone)]
pub struct ApprovalDesk {
    store: Arc<dyn Store>,
    tools: Vec<&'static dyn Tool>,
    authorizer: Arc<dyn Authorizer>,
    /// The policy that checks deciding and answering for the approver, and reads for the
    /// desk's reader (its actor): the app's actor for a desk from [`App::approvals`].
    access: crate::access::Access,
}

impl std::fmt::Debug for ApprovalDesk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalDesk").field("tools", &self.tools).finish_non_exhaustive()
    }
}

impl ApprovalDesk {
    /// A desk on `store` without the graph, for tools that open a store
    /// directly (the `agentflow` command-line tool). It decides exactly as a
    /// desk from [`App::approvals`] (the same [`Authorizer`] checks and
    /// compare-and-set), but it knows no tools, so [`ApprovalDesk::edit`]
    /// refuses every edit; use [`ApprovalDesk::edit_checked`].
    pub fn for_store(store: Arc<dyn Store>, authorizer: impl Authorizer) -> Self {
        ApprovalDesk { store, tools: Vec::new(), authorizer: Arc::new(authorizer), access: Access::default() }
    }

    /// A desk on `store` that knows `tools`, the graph's ([`App::approvals`]).
    pub(crate) fn with_tools(
        store: Arc<dyn Store>,
        tools: Vec<&'static dyn Tool>,
        authorizer: Arc<dyn Authorizer>,
    ) -> Self {
        ApprovalDesk { store, tools, authorizer, access: Access::default() }
    }

    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }
}

/// What one sign-off of a decision under a rule of several approvers approves.
#[derive(Clone, Copy)]
struct SignOff<'a> {
    /// The hash of the arguments approved (or what a run-again sign-off is for).
    hash: &'a str,
    /// The edited arguments' canonical text, for an edit.
    args: Option<&'a str>,
    /// The conditions attached.
    conditions: Option<&'a Value>,
}

/// What a decision changes besides the status.
struct Change {
    note: Option<String>,
    conditions: Option<Value>,
    args: Option<ApprovalArgs>,
}

impl ApprovalDesk {
    /// One approval.
    ///
    /// Read for the desk's reader ([`ApprovalDesk::reading_as`]): an approval of a thread of
    /// another tenant is not there for it.
    pub fn get(&self, id: &str) -> Result<Option<ApprovalRecord>, DecisionError> {
        let Some(record) = self.store.approval(id)? else { return Ok(None) };
        Ok(self.readable(&self.access, crate::access::Operation::ReadState, &record.thread)?.then_some(record))
    }

    /// Every record waiting for a human in the store: approvals to decide
    /// (`PENDING`) and unknown outcomes to settle (`OUTCOME_UNKNOWN`).
    ///
    /// Listed for the desk's reader ([`ApprovalDesk::reading_as`]; see
    /// [`ApprovalDesk::pending_for`]).
    pub fn pending(&self) -> Result<Vec<ApprovalRecord>, DecisionError> {
        self.pending_for(self.access.actor())
    }

    /// The approvals of one thread.
    ///
    /// Read for the desk's reader ([`ApprovalDesk::reading_as`]): a thread of another tenant
    /// has none for it.
    pub fn for_thread(&self, thread: &str) -> Result<Vec<ApprovalRecord>, DecisionError> {
        if !self.readable(&self.access, crate::access::Operation::ReadState, thread)? {
            return Ok(Vec::new());
        }
        Ok(self.store.list_approvals(thread)?)
    }

    /// Approves the call as requested.
    ///
    /// Where the [`Authorizer`] asks for more than one sign-off, each
    /// approver's sign-off is recorded in the audit log and the record comes
    /// back still `PENDING` until enough distinct approvers signed off on the
    /// same arguments.
    pub fn approve(&self, id: &str, approver: &Approver) -> Result<ApprovalRecord, DecisionError> {
        self.decide(id, approver, ApprovalStatus::Approved, Change { note: None, conditions: None, args: None })
    }

    /// Approves the call under conditions, recorded and handed to the model
    /// with the tool's result.
    pub fn approve_with_conditions(
        &self,
        id: &str,
        approver: &Approver,
        conditions: Value,
    ) -> Result<ApprovalRecord, DecisionError> {
        self.decide(
            id,
            approver,
            ApprovalStatus::Approved,
            Change { note: None, conditions: Some(conditions), args: None },
        )
    }

    /// Approves the call with other arguments. They are validated against
    /// the tool's schema and their hash is recorded; the tool runs with them.
    pub fn edit(&self, id: &str, approver: &Approver, args: Value) -> Result<ApprovalRecord, DecisionError> {
        let tools = &self.tools;
        self.edit_checked(id, approver, args, |name, args| {
            let tool = tools.iter().find(|t| t.name() == name).ok_or("the tool is not part of this graph")?;
            tool.validate(args).map_err(|e| e.0)
        })
    }

    /// Like [`ApprovalDesk::edit`], but the edited arguments are checked by
    /// `check` (given the tool's name and the arguments; `Err` says what is
    /// wrong) instead of by the graph's tool: for a caller that knows the
    /// tool only by its stored JSON schema, such as a desk made with
    /// [`ApprovalDesk::for_store`]. Everything else (the authorizer, the
    /// compare-and-set, the re-hash, the sign-offs) is as for `edit`.
    pub fn edit_checked(
        &self,
        id: &str,
        approver: &Approver,
        args: Value,
        check: impl FnOnce(&str, &Value) -> Result<(), String>,
    ) -> Result<ApprovalRecord, DecisionError> {
        let record = self.load(id)?;
        // Who may decide comes first: an approval another tenant's approver cannot see is not
        // there for them, whatever the arguments.
        self.authorize(approver, &record)?;
        check(&record.tool, &args)
            .map_err(|detail| DecisionError::InvalidEdit { tool: record.tool.clone(), detail })?;
        // The edited arguments are stored with the approval: none may hold a credential.
        if let Some(hit) = crate::secret::scan_value(&args) {
            let detail = format!(
                "`{}` looks like {}; keep the secret in a secret store and pass its reference \
                 (`{{\"secretRef\": \"scheme:name\"}}`)",
                hit.pointer,
                hit.kind.with_article()
            );
            return Err(DecisionError::InvalidEdit { tool: record.tool.clone(), detail });
        }
        let edited = ApprovalArgs { canonical: canonical_json(&args), hash: args_hash(&args) };
        let note = format!("arguments edited from {} to {}", record.args, edited.canonical);
        self.decide(
            id,
            approver,
            ApprovalStatus::Approved,
            Change { note: Some(note), conditions: None, args: Some(edited) },
        )
    }

    /// Rejects the call; the reason reaches the model (or ends the run, per
    /// the graph's `on_reject`).
    pub fn reject(&self, id: &str, approver: &Approver, reason: &str) -> Result<ApprovalRecord, DecisionError> {
        self.decide(
            id,
            approver,
            ApprovalStatus::Rejected,
            Change { note: Some(reason.into()), conditions: None, args: None },
        )
    }

    /// Settles a call (or effect) whose outcome is unknown: it started, and
    /// the run stopped before its result was recorded (a crash, a dropped
    /// run), and it is not idempotent, so it is not run again on its own.
    /// The record is `OUTCOME_UNKNOWN` and the thread waits with
    /// [`PendingKind::OutcomeUnknown`](crate::PendingKind::OutcomeUnknown);
    /// find out what happened (the payment provider's dashboard, the
    /// ticket tracker), settle it, then resume the thread:
    ///
    /// - [`Settlement::Succeeded`]: it acted; the value is recorded as its
    ///   result (in the record's `decision_note`, as JSON) and the run goes
    ///   on with it, without running the call.
    /// - [`Settlement::Failed`]: it did not act; the call is reported failed
    ///   with the reason (an approval is used up; an effect's node fails).
    /// - [`Settlement::RunAgain`]: run it again (the record goes back to
    ///   `APPROVED`, with a fresh time to live as long as the first one, so a
    ///   call settled after its first approval expired still runs). This approves the call again,
    ///   so it takes as many distinct sign-offs as approving it does
    ///   ([`Authorizer::sign_offs`]); until the last one, the record is
    ///   returned still `OUTCOME_UNKNOWN`.
    ///
    /// The [`Authorizer`] decides who may settle, as for approvals.
    pub fn settle(
        &self,
        id: &str,
        approver: &Approver,
        settlement: Settlement,
    ) -> Result<ApprovalRecord, DecisionError> {
        let record = self.load(id)?;
        self.authorize(approver, &record)?;
        if record.status != ApprovalStatus::OutcomeUnknown {
            return Err(DecisionError::AlreadyDecided { id: id.into(), current: record.status });
        }
        let now = now_ms();
        let (to, note) = match settlement {
            Settlement::Succeeded(result) => {
                // Read back by the run as the call's result: refused here, while a human can give
                // another, rather than failing every resume of the thread.
                crate::durable::check_json(&result, "result")
                    .map_err(|source| DecisionError::InvalidResult { id: id.into(), source })?;
                (ApprovalStatus::Succeeded, canonical_json(&result))
            }
            Settlement::Failed(reason) => (ApprovalStatus::Failed, reason),
            Settlement::RunAgain => {
                // Running the call again is approving it again: it takes the sign-offs an approval
                // of it takes, counted for this unknown outcome only (`updated_at` is when the
                // record became `OUTCOME_UNKNOWN`), never those of the first approval.
                let occurrence = format!("run-again@{}:{}", record.updated_at, record.args_hash);
                if !self.enough_sign_offs(
                    &record,
                    approver,
                    SignOff { hash: &occurrence, args: None, conditions: None },
                    now,
                )? {
                    return Ok(record);
                }
                (ApprovalStatus::Approved, "run again".to_string())
            }
        };
        // Approved again: its time to live starts again (the gateway expires an approved call
        // past it, which would refuse the run a human just asked for).
        let expires_at = (to == ApprovalStatus::Approved)
            .then(|| now.saturating_add(record.expires_at.saturating_sub(record.created_at)));
        let patch = ApprovalPatch {
            decided_by: Some(approver.id.clone()),
            note: Some(note),
            expires_at,
            ..ApprovalPatch::by(&approver.id, now)
        };
        match self.store.transition_approval(id, ApprovalStatus::OutcomeUnknown, to, patch) {
            Ok(record) => Ok(decided(self.store.as_ref(), record, false)),
            Err(ApprovalError::AlreadyDecided { current, .. }) => {
                Err(DecisionError::AlreadyDecided { id: id.into(), current })
            }
            Err(ApprovalError::NotFound { .. }) => Err(DecisionError::NotFound { id: id.into() }),
            Err(other) => Err(DecisionError::Transition(other)),
        }
    }

    /// Withdraws the request; the call will not run.
    pub fn cancel(&self, id: &str, approver: &Approver) -> Result<ApprovalRecord, DecisionError> {
        self.decide(id, approver, ApprovalStatus::Cancelled, Change { note: None, conditions: None, args: None })
    }

    fn load(&self, id: &str) -> Result<ApprovalRecord, DecisionError> {
        self.store.approval(id)?.ok_or_else(|| DecisionError::NotFound { id: id.into() })
    }

    fn decide(
        &self,
        id: &str,
        approver: &Approver,
        to: ApprovalStatus,
        change: Change,
    ) -> Result<ApprovalRecord, DecisionError> {
        let record = self.load(id)?;
        self.authorize(approver, &record)?;
        if record.status != ApprovalStatus::Pending {
            return Err(DecisionError::AlreadyDecided { id: id.into(), current: record.status });
        }
        let now = now_ms();
        if now >= record.expires_at {
            let _ = self.store.transition_approval(
                id,
                ApprovalStatus::Pending,
                ApprovalStatus::Expired,
                ApprovalPatch {
                    note: Some("expired before a decision".into()),
                    ..ApprovalPatch::by(&approver.id, now)
                },
            );
            return Err(DecisionError::Expired { id: id.into() });
        }
        // The arguments this decision approves: the edited ones, or those requested.
        let hash = change.args.as_ref().map_or(record.args_hash.as_str(), |a| a.hash.as_str()).to_string();
        // Null conditions are no conditions (as the store keeps them).
        let conditions = change.conditions.filter(|c| !c.is_null());
        let co_signed = to == ApprovalStatus::Approved && self.authorizer.sign_offs(&record) > 1;
        let sign_off = SignOff {
            hash: &hash,
            args: change.args.as_ref().map(|a| a.canonical.as_str()),
            conditions: conditions.as_ref(),
        };
        if to == ApprovalStatus::Approved && !self.enough_sign_offs(&record, approver, sign_off, now)? {
            return Ok(record);
        }
        let edited = change.args.is_some();
        let patch = ApprovalPatch {
            decided_by: Some(approver.id.clone()),
            note: change.note,
            conditions,
            args: change.args,
            ..ApprovalPatch::by(&approver.id, now)
        };
        match self.store.transition_approval(id, ApprovalStatus::Pending, to, patch) {
            Ok(record) => Ok(decided(self.store.as_ref(), record, edited)),
            // Two co-signers finished at once: the other one's transition
            // approved the same arguments, so this sign-off is part of it.
            Err(ApprovalError::AlreadyDecided { current: ApprovalStatus::Approved, .. })
                if co_signed && self.load(id)?.args_hash == hash =>
            {
                self.load(id)
            }
            Err(ApprovalError::AlreadyDecided { current, .. }) => {
                Err(DecisionError::AlreadyDecided { id: id.into(), current })
            }
            Err(ApprovalError::NotFound { .. }) => Err(DecisionError::NotFound { id: id.into() }),
            Err(other) => Err(DecisionError::Transition(other)),
        }
    }

    /// Records a sign-off on the arguments hashing to `sign_off.hash` with `sign_off.conditions`;
    /// whether enough distinct approvers have now signed off on those same arguments with those
    /// same conditions. A sign-off on other arguments (before an edit) or other conditions does
    /// not count, so one person can neither change what another approved nor drop the conditions
    /// another attached. The entry keeps the edited arguments and the conditions: nothing a
    /// co-signer proposed is lost while the decision waits for the next.
    fn enough_sign_offs(
        &self,
        record: &ApprovalRecord,
        approver: &Approver,
        sign_off: SignOff<'_>,
        now: u64,
    ) -> Result<bool, DecisionError> {
        let SignOff { hash, args, conditions } = sign_off;
        let conditions_json = conditions.cloned().unwrap_or(Value::Null);
        let needed = self.authorizer.sign_offs(record);
        if needed <= 1 {
            return Ok(true);
        }
        let signed = || -> Result<Vec<String>, DecisionError> {
            let who: Vec<String> = self
                .store
                .list_audit(&record.thread)?
                .into_iter()
                .filter(|e| {
                    e.kind == "approval.sign_off"
                        && e.detail.get("approval") == Some(&json!(record.id))
                        && e.detail.get("args_hash") == Some(&json!(hash))
                        && e.detail.get("conditions").unwrap_or(&Value::Null) == &conditions_json
                })
                .map(|e| e.actor)
                .collect();
            // One person, however their name is cased or spelled alike (the inbox's users are).
            let mut who: Vec<String> = who.iter().map(|w| person_key(w)).collect();
            who.sort();
            who.dedup();
            Ok(who)
        };
        if signed()?.contains(&person_key(&approver.id)) {
            return Err(DecisionError::SameApprover { id: record.id.clone(), approver: approver.id.clone() });
        }
        let entry = NewAuditEntry {
            at: now,
            actor: approver.id.clone(),
            kind: "approval.sign_off".into(),
            detail: {
                let mut detail = json!({ "approval": record.id, "needed": needed, "args_hash": hash });
                if let Some(args) = args {
                    detail["args"] = json!(args);
                }
                if let Some(conditions) = conditions {
                    detail["conditions"] = conditions.clone();
                }
                detail
            },
        };
        self.store.append_audit(&record.thread, entry)?;
        // Count again with this entry in: of two concurrent sign-offs, the
        // later append sees both, so the approval cannot be left waiting.
        Ok(signed()?.len() >= needed)
    }
}
