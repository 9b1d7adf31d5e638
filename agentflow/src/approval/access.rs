//! Who may decide and answer at a desk: the approver's tenants and the desk's access policy
//! ([`crate::access`]), checked before the [`Authorizer`].

use std::sync::Arc;

use agentflow_store::ApprovalRecord;

#[cfg(doc)]
use super::Authorizer;
use super::{AnswerError, ApprovalDesk, Approver, DecisionError};
use crate::access::{Access, AccessPolicy, Actor, Operation};

impl ApprovalDesk {
    /// The same desk checking, besides the [`Authorizer`], that `policy` lets each approver
    /// decide ([`Operation::Decide`]) and answer ([`Operation::Answer`]), and that the
    /// approval's thread is of a tenant the approver acts for (else it is not found); the
    /// desk's reads are checked for its reader ([`ApprovalDesk::reading_as`]). A desk from
    /// [`App::approvals`](crate::App::approvals) has the app's policy and actor.
    #[must_use]
    pub fn access(mut self, policy: impl AccessPolicy) -> Self {
        self.access = Access::new(policy, self.access.actor().clone());
        self
    }

    /// [`ApprovalDesk::access`] with a shared policy.
    #[must_use]
    pub fn access_shared(mut self, policy: Arc<dyn AccessPolicy>) -> Self {
        self.access = Access::shared(policy, self.access.actor().clone());
        self
    }

    /// The same desk whose reads ([`ApprovalDesk::get`], [`ApprovalDesk::pending`],
    /// [`ApprovalDesk::for_thread`]) are checked for `actor` (default: this process, of every
    /// tenant; a desk from `App::approvals` reads as the app's actor).
    #[must_use]
    pub fn reading_as(mut self, actor: impl Into<Actor>) -> Self {
        self.access = self.access.as_actor(actor);
        self
    }

    /// The desk's checks for `actor`, acting only for tenants the desk's reader acts for too
    /// (a desk of an app acting for some tenants decides for no others).
    fn access_for(&self, actor: &Actor) -> Access {
        self.access.on_behalf_of(actor)
    }

    /// Whether `access` may perform `operation` on `thread`: `false` when the thread is not
    /// there for its actor (missing, or of another tenant), an error when the policy refuses.
    pub(super) fn readable(&self, access: &Access, operation: Operation, thread: &str) -> Result<bool, DecisionError> {
        access.reaches(&*self.store, operation, thread)
    }

    /// `Ok` if the desk's reader may read `thread`'s state (what it asks, what was answered):
    /// a thread of another tenant is not found for it.
    pub(crate) fn reader_reads(&self, thread: &str) -> Result<(), AnswerError> {
        if self.access.reaches::<AnswerError>(&*self.store, Operation::ReadState, thread)? {
            Ok(())
        } else {
            Err(AnswerError::NotFound { thread: thread.to_string() })
        }
    }

    /// The records waiting for a human (as [`ApprovalDesk::pending`]) that `actor` may see (of
    /// threads of its tenants), after a check that it may list ([`Operation::List`]).
    pub fn pending_for(&self, actor: &Actor) -> Result<Vec<ApprovalRecord>, DecisionError> {
        let access = self.access_for(actor);
        access.allow(Operation::List, None)?;
        let mut records = self.store.list_pending_approvals()?;
        if !access.is_open() {
            let mut kept = Vec::with_capacity(records.len());
            for r in records {
                if self.store.thread(&r.thread)?.is_some_and(|t| access.sees(&t)) {
                    kept.push(r);
                }
            }
            records = kept;
        }
        Ok(records)
    }

    /// Whether `approver` may decide `record`: nobody without a name (the audit log would name
    /// no one, and under the two-person rule two blank names would count as two people), then
    /// what the authorizer says.
    pub(super) fn authorize(&self, approver: &Approver, record: &ApprovalRecord) -> Result<(), DecisionError> {
        let refused = |reason: String| DecisionError::NotAuthorized {
            id: record.id.clone(),
            approver: approver.id.clone(),
            reason,
        };
        if approver.id.trim().is_empty() {
            return Err(refused("an approver needs a name (who decided goes to the audit log)".to_string()));
        }
        // The approval's thread must be the approver's to see (else it is not there for them)
        // and the access policy must let them decide.
        if !self.access_for(approver).reaches::<DecisionError>(&*self.store, Operation::Decide, &record.thread)? {
            return Err(DecisionError::NotFound { id: record.id.clone() });
        }
        self.authorizer.authorize(approver, record).map_err(refused)
    }

    /// Whether `by` may answer the questions of `thread`: a thread of another tenant is not
    /// found for them, and the access policy must let them answer.
    pub(crate) fn may_answer(&self, thread: &str, by: &Approver) -> Result<(), AnswerError> {
        if self.access_for(by).reaches::<AnswerError>(&*self.store, Operation::Answer, thread)? {
            Ok(())
        } else {
            Err(AnswerError::NotFound { thread: thread.to_string() })
        }
    }
}
