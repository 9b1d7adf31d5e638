//! Approvals: the record, its status state machine, and the patch and transition that move it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codec::{Dec, DecodeResult, Enc};
use crate::record::payload::RECORD_VERSION;

/// Status of an approval. Legal moves: `PENDING -> APPROVED | REJECTED | EXPIRED | CANCELLED`,
/// `APPROVED -> EXECUTING | EXPIRED | CANCELLED`, `EXECUTING -> SUCCEEDED | FAILED | OUTCOME_UNKNOWN`,
/// and `OUTCOME_UNKNOWN -> SUCCEEDED | FAILED | APPROVED` (a human's decision on an uncertain
/// outcome: it happened, it did not, or run it again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum ApprovalStatus {
    /// Waiting for a decision.
    Pending,
    /// Approved; not executed yet (single use).
    Approved,
    /// Rejected by a reviewer.
    Rejected,
    /// Its time to live ran out.
    Expired,
    /// Withdrawn (run cancelled, superseded).
    Cancelled,
    /// The approved call is running.
    Executing,
    /// The approved call finished.
    Succeeded,
    /// The approved call failed.
    Failed,
    /// The call started and left no result (a crash, a dropped run): whether it acted is
    /// unknown, and a human decides. Also the status a record is created with for an
    /// uncertain outcome that had no approval (an effect, a call the policy let run).
    OutcomeUnknown,
}

impl ApprovalStatus {
    const ALL: [ApprovalStatus; 9] = [
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Rejected,
        ApprovalStatus::Expired,
        ApprovalStatus::Cancelled,
        ApprovalStatus::Executing,
        ApprovalStatus::Succeeded,
        ApprovalStatus::Failed,
        ApprovalStatus::OutcomeUnknown,
    ];

    /// Whether `self -> to` is a legal transition.
    pub fn can_move_to(self, to: ApprovalStatus) -> bool {
        use ApprovalStatus::{
            Approved, Cancelled, Executing, Expired, Failed, OutcomeUnknown, Pending, Rejected, Succeeded,
        };
        matches!(
            (self, to),
            (Pending, Approved | Rejected | Expired | Cancelled)
                | (Approved, Executing | Expired | Cancelled)
                | (Executing, Succeeded | Failed | OutcomeUnknown)
                | (OutcomeUnknown, Succeeded | Failed | Approved)
        )
    }

    /// Whether the record waits for a human: `PENDING` (a decision to run) or
    /// `OUTCOME_UNKNOWN` (a decision on what happened). The only statuses a record may be
    /// created with, and the ones [`Store::list_pending_approvals`](crate::Store::list_pending_approvals) lists.
    pub fn is_waiting(self) -> bool {
        matches!(self, ApprovalStatus::Pending | ApprovalStatus::OutcomeUnknown)
    }

    /// Whether no transition leaves this status.
    pub fn is_final(self) -> bool {
        Self::ALL.iter().all(|&to| !self.can_move_to(to))
    }

    /// The SCREAMING_SNAKE_CASE name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "PENDING",
            ApprovalStatus::Approved => "APPROVED",
            ApprovalStatus::Rejected => "REJECTED",
            ApprovalStatus::Expired => "EXPIRED",
            ApprovalStatus::Cancelled => "CANCELLED",
            ApprovalStatus::Executing => "EXECUTING",
            ApprovalStatus::Succeeded => "SUCCEEDED",
            ApprovalStatus::Failed => "FAILED",
            ApprovalStatus::OutcomeUnknown => "OUTCOME_UNKNOWN",
        }
    }

    fn from_tag(tag: u8) -> DecodeResult<Self> {
        Self::ALL.get(usize::from(tag)).copied().ok_or_else(|| format!("unknown approval status tag {tag}"))
    }
}

impl std::fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tool call waiting for (or past) a human decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// Approval id, unique in the store.
    pub id: String,
    /// Thread that asked.
    pub thread: String,
    /// Node that made the call.
    pub node: String,
    /// Tool to run.
    pub tool: String,
    /// Canonical JSON text of the arguments.
    pub args: String,
    /// Hash of `args`; the executed arguments must hash to it.
    pub args_hash: String,
    /// Risk class of the tool (`read`, `reversible`, `external`, `irreversible`).
    pub risk: String,
    /// Who asked (agent or user id).
    pub requester: String,
    /// Why approval is needed.
    pub reason: String,
    /// Unix millis of the request.
    pub created_at: u64,
    /// Unix millis after which the approval must not be used.
    pub expires_at: u64,
    /// Current status.
    pub status: ApprovalStatus,
    /// Who decided, once decided.
    pub decided_by: Option<String>,
    /// Reviewer's note (a rejection reason is fed back to the model).
    pub decision_note: Option<String>,
    /// Conditions attached to an approval, as JSON. `Some(Value::Null)` is stored as `None`:
    /// null conditions are no conditions.
    pub conditions: Option<Value>,
    /// Unix millis of the last transition.
    pub updated_at: u64,
}

impl ApprovalRecord {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new(RECORD_VERSION);
        e.str(&self.id)
            .str(&self.thread)
            .str(&self.node)
            .str(&self.tool)
            .str(&self.args)
            .str(&self.args_hash)
            .str(&self.risk)
            .str(&self.requester)
            .str(&self.reason)
            .u64(self.created_at)
            .u64(self.expires_at)
            .u8(self.status as u8)
            .opt_str(self.decided_by.as_deref())
            .opt_str(self.decision_note.as_deref())
            // Null conditions are no conditions (a JSON form of the record cannot tell them apart).
            .opt_json(self.conditions.as_ref().filter(|c| !c.is_null()))
            .u64(self.updated_at);
        e.finish()
    }

    pub(crate) fn decode(buf: &[u8]) -> DecodeResult<Self> {
        let mut d = Dec::new(buf, RECORD_VERSION)?;
        let record = ApprovalRecord {
            id: d.str("id")?,
            thread: d.str("thread")?,
            node: d.str("node")?,
            tool: d.str("tool")?,
            args: d.str("args")?,
            args_hash: d.str("args_hash")?,
            risk: d.str("risk")?,
            requester: d.str("requester")?,
            reason: d.str("reason")?,
            created_at: d.u64("created_at")?,
            expires_at: d.u64("expires_at")?,
            status: ApprovalStatus::from_tag(d.u8("status")?)?,
            decided_by: d.opt_str("decided_by")?,
            decision_note: d.opt_str("decision_note")?,
            // Null conditions are no conditions, also in a record written before they were
            // stored as none.
            conditions: d.opt_json("conditions")?.filter(|c| !c.is_null()),
            updated_at: d.u64("updated_at")?,
        };
        d.end()?;
        Ok(record)
    }
}

impl ApprovalRecord {
    /// Moves the record to `to` with what `patch` changes (decider, note, conditions, edited
    /// arguments); every backend's compare-and-set applies a transition through this.
    pub(crate) fn apply_patch(&mut self, to: ApprovalStatus, patch: &ApprovalPatch) {
        self.status = to;
        self.updated_at = patch.at;
        if let Some(by) = &patch.decided_by {
            self.decided_by = Some(by.clone());
        }
        if let Some(note) = &patch.note {
            self.decision_note = Some(note.clone());
        }
        if let Some(conditions) = &patch.conditions {
            self.conditions = Some(conditions.clone()).filter(|c| !c.is_null());
        }
        if let Some(args) = &patch.args {
            self.args.clone_from(&args.canonical);
            self.args_hash.clone_from(&args.hash);
        }
        if let Some(expires_at) = patch.expires_at {
            self.expires_at = expires_at;
        }
    }
}

/// Edited arguments recorded with a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalArgs {
    /// New canonical JSON text of the arguments.
    pub canonical: String,
    /// Hash of `canonical`.
    pub hash: String,
}

/// What a transition changes besides the status. `None` fields keep their value.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ApprovalPatch {
    /// Who makes the transition (written to the audit entry).
    pub actor: String,
    /// Unix millis of the transition.
    pub at: u64,
    /// Sets `decided_by`.
    pub decided_by: Option<String>,
    /// Sets `decision_note`.
    pub note: Option<String>,
    /// Sets `conditions` (`Some(Value::Null)` clears them).
    pub conditions: Option<Value>,
    /// Replaces `args` and `args_hash` (an edit).
    pub args: Option<ApprovalArgs>,
    /// Sets `expires_at` (a call settled to run again gets a fresh time to live). (Appended
    /// last.)
    #[serde(default)]
    pub expires_at: Option<u64>,
}

impl ApprovalPatch {
    /// A patch that only records who moved the approval and when.
    pub fn by(actor: impl Into<String>, at: u64) -> Self {
        ApprovalPatch { actor: actor.into(), at, ..ApprovalPatch::default() }
    }
}

/// A compare-and-set on an approval's status, carried in a [`StepCommit`](crate::StepCommit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalTransition {
    /// Approval id.
    pub id: String,
    /// Status the caller believes the approval has.
    pub from: ApprovalStatus,
    /// Status to move to.
    pub to: ApprovalStatus,
    /// Other changes.
    pub patch: ApprovalPatch,
}
