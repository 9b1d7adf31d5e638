//! The effect journal: an effect's result is recorded once per (thread,
//! checkpoint, node, key), and a re-run of its node (a retry, a resume after a
//! crash or an interrupt) gets the recorded result back instead of running it.
//!
//! Before an effect runs, a *started* marker is journaled durably; when it
//! fails, an *ended* marker. A re-run that finds a started run with neither a
//! result nor an end knows the earlier run was cut off (a crash, a dropped run
//! future) and that whether it acted is *uncertain*. What happens then is the
//! caller's choice (see [`Ctx::effect`](crate::Ctx::effect)): an idempotent
//! effect runs again with the same idempotency key; any other waits for a
//! human's decision.

use agentflow_store::{
    ApprovalError, ApprovalRecord, ApprovalStatus, ApprovalTransition, CommitError, EffectBatch, EffectKey,
    EffectOutcome, NewAuditEntry, Store,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;

use super::cut_off::{UNKNOWN_CALL, UnknownCall};
use super::error::PersistError;
use super::io::blocking;
use super::keys::{JOURNAL_SEQ, MARK};
use crate::core::error::NodeError;

/// The checkpoint a step continuing from `latest` keys its effects and approvals by.
pub(crate) fn journal_seq_of(latest: &agentflow_store::Checkpoint) -> u64 {
    latest.metadata.extra.get(JOURNAL_SEQ).and_then(Value::as_u64).unwrap_or(latest.seq)
}

/// Where a node's effects are journaled: the thread and the checkpoint its
/// step started from.
#[derive(Clone)]
pub struct Journal {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) thread: String,
    pub(crate) seq: u64,
    /// The lease holder of the run that journals: what starts an effect is written only while
    /// it still holds the thread (see [`Journal::start_batch`]).
    pub(crate) holder: Option<String>,
    /// Set once a write fenced by `holder`'s lease was refused and the stored lease was not
    /// this run's: this run lost the thread, so nothing it concludes from there (say, that a
    /// call failed) is written.
    pub(crate) lost: Arc<std::sync::atomic::AtomicBool>,
    /// The run's lease was revoked by its holder (see [`LeaseHolder::revoked`]): a fenced write
    /// is refused here, as the store refuses one of a lost lease.
    ///
    /// [`LeaseHolder::revoked`]: super::lease::LeaseHolder
    pub(crate) revoked: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// A subgraph child's run: the runs above it, as `(thread, holder)` leases and their
    /// revocation flags. What starts an effect is written only while every one of them still
    /// holds its thread, so a parent that lost its thread does not act through a child.
    pub(crate) parents: ParentLeases,
    /// The ids of approved calls of this step that failed with a passing fault and were left
    /// `EXECUTING` for a retry of their node: the step's commit moves those still there to
    /// `FAILED` (the node finished without a retry that succeeded).
    pub(crate) failed_approvals: Arc<std::sync::Mutex<Vec<String>>>,
    /// The step continues a thread's move to this version of its graph: the model's calls its
    /// journaled replies hold may have been moved (see [`moved_calls`](super::moved_calls)).
    pub(crate) moved_to: Option<u32>,
    /// For a step that continues a thread's move to a newer graph version: the name each
    /// renamed node had when the step's attempt started (by its current name). The attempt's
    /// idempotency keys and subgraph children are named by it, so a rename moves neither.
    pub(crate) started_as: Arc<std::collections::BTreeMap<String, String>>,
}

/// The leases of the runs above a subgraph child's run (its parent's, and every one above),
/// which fence what starts its effects (see [`Journal::start_batch`]) and its checkpoints as
/// its own lease does.
#[derive(Clone, Debug, Default)]
pub(crate) struct ParentLeases {
    /// `(thread, holder)`, nearest parent last.
    pub(crate) leases: Vec<(String, String)>,
    /// Their runs' revocation flags ([`LeaseHolder::revoked`](super::lease::LeaseHolder)), one per
    /// lease, in the same order.
    pub(crate) revoked: Vec<Arc<std::sync::atomic::AtomicBool>>,
}

impl ParentLeases {
    /// Whether the holder of one of them revoked it.
    pub(crate) fn revoked(&self) -> bool {
        self.revoked.iter().any(|r| r.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// The first of them whose holder revoked it.
    pub(crate) fn revoked_lease(&self) -> Option<&(String, String)> {
        self.leases.iter().zip(&self.revoked).find(|(_, r)| r.load(std::sync::atomic::Ordering::SeqCst)).map(|(l, _)| l)
    }
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").field("thread", &self.thread).field("seq", &self.seq).finish_non_exhaustive()
    }
}

/// Where an effect stands in the journal before it runs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Entry {
    /// A result was journaled: replay it.
    Recorded(Vec<u8>),
    /// `started` runs began and every one of them ended (none, at first).
    Clear { started: u32 },
    /// Run `started` began and left neither a result nor an end: whether it
    /// acted is unknown.
    Open { started: u32 },
}

/// What a journaled result is written with, in its transaction: the
/// approval's compare-and-set, and an audit entry (a call's `saga.step`).
#[derive(Debug, Default)]
pub(crate) struct Settling {
    /// The approval's move, if the call runs under one.
    pub(crate) transition: Option<ApprovalTransition>,
    /// An entry for the thread's audit log.
    pub(crate) audit: Option<NewAuditEntry>,
}

impl Journal {
    /// The idempotency key of an effect, stable across re-runs: pass it to
    /// external systems that deduplicate requests.
    pub fn idempotency_key(&self, node: &str, key: &str) -> String {
        format!("{}/{}/{}/{}", self.thread, self.seq, self.started_as(node), key)
    }

    /// The name node `node` had when this step's attempt started: its own, unless the thread
    /// was moved to a newer graph version that renamed it since.
    pub(crate) fn started_as<'a>(&'a self, node: &'a str) -> &'a str {
        self.started_as.get(node).map_or(node, String::as_str)
    }

    pub(crate) fn key(&self, node: &str, key: &str) -> EffectKey {
        EffectKey { thread: self.thread.clone(), seq: self.seq, node: node.to_string(), key: key.to_string() }
    }

    fn marker(&self, node: &str, key: &str, what: &str, run: u32) -> EffectKey {
        self.key(node, &format!("{key}{MARK}{what}{MARK}{run}"))
    }

    /// Refuses a user key that could collide with a marker, or that a store cannot keep (a NUL
    /// byte: PostgreSQL `text` cannot hold one; refused on every store alike).
    pub(crate) fn check_key(key: &str) -> Result<(), NodeError> {
        if key.contains(MARK) {
            return Err(NodeError::fatal(format!(
                "effect key {key:?} contains the unit separator character (U+001F), which the journal reserves; choose another key"
            )));
        }
        if key.contains('\0') {
            return Err(NodeError::fatal(format!(
                "effect key {key:?} contains a NUL byte, which a store cannot keep as a key (PostgreSQL text cannot hold one); choose another key"
            )));
        }
        Ok(())
    }

    /// Reads the effect's result and markers.
    pub(crate) async fn entry(&self, node: &str, key: &str) -> Result<Entry, NodeError> {
        let this = self.clone();
        let (node, key) = (node.to_string(), key.to_string());
        blocking(&self.store, move |s| -> Result<Entry, agentflow_store::ReadError> {
            if let Some(bytes) = s.effect(&this.key(&node, &key))? {
                return Ok(Entry::Recorded(bytes));
            }
            let mut started = 0;
            while s.effect(&this.marker(&node, &key, "started", started + 1))?.is_some() {
                started += 1;
            }
            if started > 0 && s.effect(&this.marker(&node, &key, "ended", started))?.is_none() {
                return Ok(Entry::Open { started });
            }
            Ok(Entry::Clear { started })
        })
        .await
        .and_then(|r| Ok(r?))
        .map_err(unavailable)
    }

    /// The call run `run` of the effect was when it started without an approval (its *started*
    /// marker describes it: see [`UnknownCall`]); `None` for a run made under an approval, or
    /// an idempotent one.
    pub(crate) async fn unapproved_call(
        &self,
        node: &str,
        key: &str,
        run: u32,
    ) -> Result<Option<UnknownCall>, NodeError> {
        let marker = self.marker(node, key, "started", run);
        let detail =
            blocking(&self.store, move |s| s.effect(&marker)).await.and_then(|r| Ok(r?)).map_err(unavailable)?;
        Ok(detail
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .and_then(|detail| detail.get(UNKNOWN_CALL).cloned())
            .and_then(|call| serde_json::from_value(call).ok()))
    }

    /// Journals, durably, that run `run` of the effect started (`what =
    /// "started"`) or ended without a result (`"ended"`), with `detail`.
    pub(crate) async fn mark(
        &self,
        node: &str,
        key: &str,
        what: &str,
        run: u32,
        detail: Value,
    ) -> Result<(), NodeError> {
        let k = self.marker(node, key, what, run);
        let bytes = serde_json::to_vec(&detail).unwrap_or_default();
        blocking(&self.store, move |s| s.record_effect(&k, &bytes))
            .await
            .and_then(|r| Ok(r?))
            .map_err(unavailable)
            .map(|_| ())
    }

    /// Journals the effect's result; if one was journaled first, that one
    /// counts and is returned.
    pub(crate) async fn record<T: Serialize + DeserializeOwned>(
        &self,
        node: &str,
        key: &str,
        value: T,
    ) -> Result<T, NodeError> {
        self.record_settling(node, key, value, |_| Settling::default()).await
    }

    /// Like [`Journal::record`], and in the same durable transaction the
    /// approval compare-and-set `settle` derives from the result (the
    /// approved call's `EXECUTING -> SUCCEEDED`/`FAILED`), so a crash leaves
    /// either both or neither. If that compare-and-set is refused (a human
    /// moved the approval meanwhile), the result is journaled alone: a result
    /// is never dropped for an approval's status.
    pub(crate) async fn record_settling<T: Serialize + DeserializeOwned>(
        &self,
        node: &str,
        key: &str,
        value: T,
        settle: impl FnOnce(&T) -> Settling,
    ) -> Result<T, NodeError> {
        // A result that would not read back (a NaN, nesting too deep) is not
        // stored changed; the effect did run, so a marker is journaled in its
        // place and the effect is never run again.
        // So is a result holding a credential: its value is never written.
        let checked = match crate::core::encode::to_bytes(&value, "result") {
            Err(e) => Err(format!(
                "effect `{key}` ran, but its result cannot be journaled ({e}); it will not run again: \
                 return a value that JSON holds exactly"
            )),
            Ok(bytes) => match super::document::refuse_credentials(&bytes, "the result", Default::default()) {
                Ok(()) => Ok(bytes),
                Err(e) => {
                    Err(format!("effect `{key}` ran, but its result was not journaled: {e}; it will not run again"))
                }
            },
        };
        let (bytes, refused) = match checked {
            Ok(bytes) => (bytes, None),
            Err(message) => {
                // The marker is journaled and the message becomes the thread's status line: a
                // credential-like part of the key or of the encoder's message is not kept.
                let message = crate::secret::redact_credentials(&message).into_owned();
                (unjournaled_marker(&message), Some(message))
            }
        };
        let Settling { transition, audit } = settle(&value);
        // What goes with the result is written with it (a result kept in its place goes alone).
        let audit = audit.filter(|_| refused.is_none());
        let alone = |audit: Option<NewAuditEntry>| {
            let batch = self.batch();
            audit.into_iter().fold(batch, EffectBatch::audit).effect(self.key(node, key), bytes.clone())
        };
        let mut batch = alone(audit.clone());
        if let Some(transition) = transition {
            batch = batch.transition(transition);
        }
        let outcome = match self.commit(batch).await? {
            Ok(mut outcomes) => outcomes.pop(),
            // The approval moved meanwhile: journal the result alone.
            Err(_) => self.commit(alone(audit)).await?.ok().and_then(|mut o| o.pop()),
        };
        match outcome {
            Some(EffectOutcome::Recorded) if refused.is_some() => Err(NodeError::fatal(refused.unwrap_or_default())),
            // Another attempt journaled first: its result is the one that counts.
            Some(EffectOutcome::AlreadyRecorded(existing)) => decode(&existing, key),
            _ => Ok(value),
        }
    }

    /// Journals, as the result of effect `key`, that it ran and its result
    /// could not be kept (`message` says why): it is never run again, and a
    /// replay fails with `message`. A result journaled first is kept.
    pub(crate) async fn record_unjournaled(
        &self,
        node: &str,
        key: &str,
        message: &str,
        audit: Option<NewAuditEntry>,
    ) -> Result<(), NodeError> {
        let batch = audit.into_iter().fold(self.batch(), EffectBatch::audit);
        let batch = batch.effect(self.key(node, key), unjournaled_marker(message));
        self.commit(batch).await?.map(|_| ()).map_err(|current| {
            NodeError::fatal(format!("effect `{key}`: an approval moved while its run was journaled ({current:?})"))
        })
    }

    /// Whether an APPROVED record carries an approver's decision: a
    /// `decided_by`, and an `approval.approved` audit entry of this thread by
    /// that approver for these arguments (for a record back from
    /// `OUTCOME_UNKNOWN`, one made since: "run again" is a decision of its
    /// own). The store writes both in the transaction that approves, and the
    /// approval desk always sets them; a raw `Store::transition_approval`
    /// without a decider does not. This refuses careless writes around the
    /// desk; it does not stop someone who holds the store and forges both
    /// (see the `approval` module docs).
    pub(crate) async fn decision_recorded(&self, record: &ApprovalRecord) -> Result<Result<(), String>, NodeError> {
        let refused = |what: &str| {
            Ok(Err(format!(
                "the approval `{}` is APPROVED but holds no approver's decision ({what}); it was not decided \
                 through the approval desk, so the call does not run: decide it again through the desk",
                record.id
            )))
        };
        let Some(by) = record.decided_by.clone().filter(|by| !by.trim().is_empty()) else {
            return refused("no `decided_by`");
        };
        let (thread, id, hash) = (self.thread.clone(), record.id.clone(), record.args_hash.clone());
        let found = blocking(&self.store, move |s| {
            let log = s.list_audit(&thread)?;
            let of_this = |e: &&agentflow_store::AuditEntry| e.detail.get("approval") == Some(&serde_json::json!(id));
            let since =
                log.iter().filter(of_this).filter(|e| e.kind == "approval.outcome_unknown").map(|e| e.seq).max();
            Ok::<_, agentflow_store::ReadError>(log.iter().filter(of_this).any(|e| {
                e.kind == "approval.approved"
                    && since.is_none_or(|since| e.seq > since)
                    && e.actor == by
                    && e.detail.get("decided_by") == Some(&serde_json::json!(by))
                    && e.detail.get("args_hash") == Some(&serde_json::json!(hash))
            }))
        })
        .await
        .map_err(unavailable)?
        .map_err(|e| NodeError::transient(format!("the audit log is unavailable: {e}")))?;
        if found {
            Ok(Ok(()))
        } else {
            refused("no `approval.approved` audit entry by its decider for these arguments")
        }
    }

    /// An empty batch of this journal's thread, for [`Journal::commit`].
    pub(crate) fn batch(&self) -> EffectBatch {
        EffectBatch::new(self.thread.clone())
    }

    /// An empty batch for what starts an effect (its *started* marker, an approval's claim),
    /// fenced by the run's lease: a run that lost the thread to another holder (it stalled past
    /// its lease) does not act. What an effect returned is recorded unfenced, as a fact.
    pub(crate) fn start_batch(&self) -> EffectBatch {
        match &self.holder {
            Some(holder) => self
                .batch()
                .fenced_by(holder.clone(), crate::core::clock::now_ms())
                .fenced_by_parents(self.parents.leases.clone()),
            None => self.batch(),
        }
    }

    /// The leases a subgraph child run from this journal's node is fenced by: the ones above
    /// this run, and this run's own.
    pub(crate) fn leases_for_child(&self) -> ParentLeases {
        let mut parents = self.parents.clone();
        // Side by side: a lease and its run's revocation flag.
        if let Some(holder) = &self.holder {
            parents.leases.push((self.thread.clone(), holder.clone()));
            parents.revoked.push(self.revoked.clone().unwrap_or_default());
        }
        parents
    }

    /// Whether a write fenced by this run's lease was refused (the run lost the thread).
    pub(crate) fn lost_lease(&self) -> bool {
        self.lost.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The marker [`Journal::mark`] writes, to put in a batch instead.
    pub(crate) fn marker_effect(
        &self,
        node: &str,
        key: &str,
        what: &str,
        run: u32,
        detail: &Value,
    ) -> (EffectKey, Vec<u8>) {
        (self.marker(node, key, what, run), serde_json::to_vec(detail).unwrap_or_default())
    }

    /// Creates `record` (a call's approval request, or the `OUTCOME_UNKNOWN` record of a call cut
    /// off mid-way) in a batch fenced by the run's lease and its parents': a run that lost its
    /// thread records nothing. A record of that id made already (by another run of the same
    /// step: ids are deterministic) is no failure; whether this call created it.
    pub(crate) async fn create_record(&self, record: ApprovalRecord) -> Result<bool, NodeError> {
        self.create_record_logged(record, Vec::new()).await
    }

    /// [`Journal::create_record`] with `audit` entries written in the same batch (none if the
    /// record was made already).
    pub(crate) async fn create_record_logged(
        &self,
        record: ApprovalRecord,
        audit: Vec<NewAuditEntry>,
    ) -> Result<bool, NodeError> {
        let id = record.id.clone();
        // The arguments of a call waiting for approval are stored: none may hold a credential.
        super::document::refuse_credentials(record.args.as_bytes(), "the approval's arguments", Default::default())
            .map_err(|e| NodeError::fatal(format!("approval `{id}`: {e}")))?;
        let batch = audit.into_iter().fold(self.start_batch().new_approval(record), |batch, entry| batch.audit(entry));
        match self.commit_batch(batch).await? {
            Ok(_) => Ok(true),
            Err(CommitError::Approval(ApprovalError::AlreadyExists { .. })) => Ok(false),
            Err(e) => Err(NodeError::transient(format!("could not record the approval record `{id}`: {e}"))),
        }
    }

    /// Writes `batch` durably, all of it or (with a backend that has
    /// transactions) none. A lost approval compare-and-set is `Ok(Err(the
    /// approval's current status))`; nothing of the batch is then written.
    pub(crate) async fn commit(
        &self,
        batch: EffectBatch,
    ) -> Result<Result<Vec<EffectOutcome>, ApprovalStatus>, NodeError> {
        match self.commit_batch(batch).await? {
            Ok(outcomes) => Ok(Ok(outcomes)),
            Err(CommitError::Approval(ApprovalError::AlreadyDecided { current, .. })) => Ok(Err(current)),
            Err(e) => Err(NodeError::transient(format!("effect journal unavailable: {e}"))),
        }
    }

    /// Sends `batch`; a lost lease (this run's, or a run's above it) is the node's error, as
    /// [`Journal::commit`] says; every other answer of the store comes back as it is.
    async fn commit_batch(&self, batch: EffectBatch) -> Result<Result<Vec<EffectOutcome>, CommitError>, NodeError> {
        let revoked = self.revoked.as_ref().is_some_and(|r| r.load(std::sync::atomic::Ordering::SeqCst))
            || self.parents.revoked();
        let result = if revoked && batch.lease_holder.is_some() {
            Err(CommitError::LeaseLost {
                thread: self.thread.clone(),
                holder: batch.lease_holder.clone().unwrap_or_default(),
                current: None,
            })
        } else {
            blocking(&self.store, move |s| s.commit_effects(batch)).await.map_err(unavailable)?
        };
        match result {
            Err(CommitError::LeaseLost { thread, current, .. }) if thread != self.thread => {
                // A run above this one lost its thread: this run acts for it, so it stops too.
                self.lost.store(true, std::sync::atomic::Ordering::SeqCst);
                Err(NodeError::fatal(format!(
                    "the run of thread `{thread}` above this subgraph run no longer holds it ({}), so the \
                     effect was not started here",
                    current.map_or("its lease expired".to_string(), |l| format!("`{}` holds it", l.holder))
                )))
            }
            Err(CommitError::LeaseLost { current, .. }) => {
                let now = crate::core::clock::now_ms();
                // The stored lease is not this run's (another holder's, even expired, or none), or
                // its holder revoked it: another executor has or had the thread, so nothing this
                // run concludes from here is written. (A lease of this run's that merely lapsed
                // is renewed.)
                if revoked || current.as_ref().is_none_or(|l| self.holder.as_deref() != Some(&l.holder)) {
                    self.lost.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                let who = match current {
                    Some(lease) if lease.expires_at > now => format!("`{}` holds it now", lease.holder),
                    _ => "its lease expired".to_string(),
                };
                Err(NodeError::fatal(format!(
                    "this run no longer holds thread `{}` ({who}), so the effect was not started here",
                    self.thread
                )))
            }
            other => Ok(other),
        }
    }
}

/// The key of the marker journaled for an effect whose result could not be.
const UNJOURNALED: &str = "__agentflow_unjournaled_result__";

/// The marker journaled in place of a result that could not be, saying why.
fn unjournaled_marker(message: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ UNJOURNALED: message })).unwrap_or_default()
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8], key: &str) -> Result<T, NodeError> {
    // Checked first: a marker would decode as a `serde_json::Value` result.
    if bytes.starts_with(format!("{{\"{UNJOURNALED}\":").as_bytes()) {
        let marker: Option<serde_json::Value> = serde_json::from_slice(bytes).ok();
        if let Some(message) = marker.as_ref().and_then(|m| m.get(UNJOURNALED)).and_then(serde_json::Value::as_str) {
            return Err(NodeError::fatal(message.to_string()));
        }
    }
    serde_json::from_slice(bytes).map_err(|e| {
        NodeError::fatal(format!(
            "the journaled result of effect `{key}` does not decode as the expected type: {}",
            crate::secret::describe_decode_error(&e)
        ))
    })
}

fn unavailable(e: PersistError) -> NodeError {
    NodeError::transient(format!("effect journal unavailable: {e}"))
}
