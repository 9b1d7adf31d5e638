//! Reading and branching a thread's history: latest state, state at any
//! checkpoint, the checkpoint list, forks and manual updates. History is
//! never rewritten: a fork or an update is a new checkpoint.

use std::sync::Arc;

use agentflow_store::{
    ApprovalPatch, ApprovalStatus, ApprovalTransition, Checkpoint, CheckpointMetadata, CheckpointSource, NewAuditEntry,
    PendingWrite, QueueError, RunWait, StateChain, StepCommit, Store, ThreadRecord, ThreadStatus,
};
use serde_json::json;

use super::budget::{budget_write, stored_budget};
use super::chain::next_seq;
use super::checkpoint_version::written_by;
use super::document::refuse_credentials_skipping;
use super::error::{HistoryError, PersistError};
use super::journal::journal_seq_of;
use super::keys::{BUDGET, INTERRUPTS, JOURNAL_SEQ, MOVED, PAYLOADS};
use super::lease::{LeaseGuard, holder_id};
#[cfg(doc)]
use crate::app::App;
use crate::core::budget::{Limits, ThreadBudget};
use crate::core::clock::now_ms;
use crate::core::state::State;
use crate::interrupt::Pending;

/// The state of a thread at one checkpoint.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Snapshot<S> {
    /// The checkpoint's sequence number.
    pub seq: u64,
    /// The checkpoint it follows (`None` for the thread's input).
    pub parent: Option<u64>,
    /// The state after that checkpoint.
    pub state: S,
    /// The nodes that run next (empty once the run completed).
    pub next: Vec<String>,
    /// Step number, source and the nodes that ran.
    pub metadata: CheckpointMetadata,
    /// Unix millis.
    pub created_at: u64,
}

/// What the thread's latest checkpoint waits for: its pending interrupts, approvals and
/// sleeps (none if it has no checkpoint).
pub(crate) fn waits_for(store: &dyn Store, thread: &str) -> Result<Vec<Pending>, HistoryError> {
    let Some(latest) = store.latest_checkpoint(thread).map_err(PersistError::from)? else { return Ok(Vec::new()) };
    for w in store.pending_writes(thread, latest.seq).map_err(PersistError::from)? {
        if w.node == INTERRUPTS {
            return serde_json::from_slice(&w.value).map_err(|source| {
                HistoryError::Persist(PersistError::Decode {
                    thread: thread.to_string(),
                    seq: latest.seq,
                    what: "interrupts",
                    source,
                })
            });
        }
    }
    Ok(Vec::new())
}

/// The thread's state at its latest checkpoint (`None` if it has none).
pub(crate) fn latest_state<S: State>(store: &dyn Store, thread: &str) -> Result<Option<S>, HistoryError> {
    let Some(latest) = store.latest_checkpoint(thread).map_err(PersistError::from)? else { return Ok(None) };
    let chain = store
        .state_chain(thread, latest.seq)
        .map_err(PersistError::from)?
        .ok_or(HistoryError::UnknownCheckpoint { thread: thread.to_string(), seq: latest.seq })?;
    Ok(Some(super::chain::fold_chain(thread, &chain)?))
}

/// [`App::raise_limits`] on a store, also fenced by `fences` (`(thread, holder)` leases): the
/// limits it replaced.
pub(crate) fn raise_limits(
    store: &Arc<dyn Store>,
    thread: &str,
    limits: Limits,
    actor: &str,
    fences: Vec<(String, String)>,
) -> Result<Limits, HistoryError> {
    // Held before anything is read, so what the commit is built from is what it replaces.
    let lease = hold(store, thread)?;
    let record = store
        .thread(thread)
        .map_err(PersistError::from)?
        .ok_or(HistoryError::UnknownThread { thread: thread.to_string() })?;
    let now = now_ms();
    let latest = latest_of(store, thread)?;
    let before = stored_budget(&latest, &store.pending_writes(thread, latest.seq).map_err(PersistError::from)?)?;
    let after = ThreadBudget { limits, ..before };
    let mut commit = StepCommit::new(ThreadRecord { updated_at: now, lease: None, ..record })
        .fenced_by(lease.holder(), now)
        .fenced_by_parents(fences);
    commit.pending_writes.push(budget_write(latest.seq, &after)?);
    // The thread does not move: a sleeping or waiting thread keeps its timer.
    commit.wake_at = store.thread_timer(thread).map_err(PersistError::from)?;
    commit.audit.push(NewAuditEntry {
        at: now,
        actor: actor.to_string(),
        kind: "limits.raised".to_string(),
        detail: json!({ "from": before.limits, "to": limits, "usage": before.usage }),
    });
    store.commit_step(commit).map_err(PersistError::from)?;
    Ok(before.limits)
}

/// [`App::fork`] on a store, without the graph's types (the state is not
/// decoded): the same checkpoint, cancelled approvals and audit entry.
pub fn fork_thread(store: &Arc<dyn Store>, thread: &str, seq: u64, actor: &str) -> Result<u64, HistoryError> {
    // Held before anything is read, so no run commits a step in between.
    let lease = hold(store, thread)?;
    let from = store
        .checkpoint(thread, seq)
        .map_err(PersistError::from)?
        .ok_or(HistoryError::UnknownCheckpoint { thread: thread.to_string(), seq })?;
    let latest = latest_of(store, thread)?;
    let budget = stored_budget(&latest, &store.pending_writes(thread, latest.seq).map_err(PersistError::from)?)?;
    let metadata = CheckpointMetadata {
        extra: with_payloads(json!({ BUDGET: budget }), &from.metadata),
        ..CheckpointMetadata::new(from.metadata.step, CheckpointSource::Fork, vec![])
    };
    let note = format!("the thread was forked at checkpoint {seq}: this request belongs to the abandoned branch");
    settle_abandoned_children(store, thread, lease.holder(), seq);
    let forked = append_checkpoint(
        store,
        &lease,
        thread,
        seq,
        from.cursor,
        vec![],
        metadata,
        Carry {
            writes: vec![],
            cancel_open_approvals: Some(note.clone()),
            continues_step: false,
            forked_to: Some(seq),
            rebuilt: None,
        },
        actor,
        "state.forked",
        json!({ "from": seq }),
    )?;
    cancel_children_approvals(store, thread, lease.holder(), &note, actor, u64::MAX);
    wake_parked_run(store, thread);
    Ok(forked)
}

/// Hands a worker-queued run parked for a human back to the workers, after a fork: the new
/// branch runs afresh and waits for nothing of the old one.
/// - Parked for approvals: the fork cancelled the open requests, but a record of the abandoned
///   branch that still waits for a human (an `OUTCOME_UNKNOWN` to settle, the thread's or a
///   subgraph child's) would keep the run parked for good. The record stays listed for a human.
/// - Parked for a value: the fork's branch asks for none, so no answer could be recorded to
///   wake it.
///
/// (A run parked for its timer needs nothing: the fork's commit cleared the timer, which makes
/// it claimable.) A store without a run queue has nothing to wake; a failure is logged (the run
/// then waits until its records are settled, or `submit_resume` wakes it).
fn wake_parked_run(store: &Arc<dyn Store>, thread: &str) {
    for wait in [RunWait::Approval, RunWait::Answer] {
        match store.wake_run(thread, wait) {
            Ok(_) | Err(QueueError::Unsupported { .. }) => {}
            Err(e) => tracing::warn!(thread, error = %e, "waking the forked thread's queued run"),
        }
    }
}

/// Before a fork: what the thread's unfinished subgraph children (every level) left open, their
/// calls cut off mid-way and their approved calls still `EXECUTING`, becomes `OUTCOME_UNKNOWN`
/// records for a human ([`abandoned`](super::abandoned)): the fork's branch runs children of its
/// own. Under each child's lease, taken by `holder`; best effort (a child another run still
/// holds, or whose records cannot be written, is logged and left), as the fork must go on.
pub(super) fn settle_abandoned_children(store: &Arc<dyn Store>, thread: &str, holder: &str, seq: u64) {
    let children = match super::abandoned::abandoned_children(&**store, thread, None) {
        Ok(children) => children,
        Err(e) => return tracing::warn!(thread, error = %e, "listing the forked thread's children"),
    };
    for child in &children {
        let note = format!(
            "the call started in subgraph run `{}` and left no result (the run stopped mid-call), and thread \
             `{thread}` was forked at checkpoint {seq}, away from it; whether it acted is unknown: settle it",
            child.id
        );
        // Fenced by the fork's own lease of the thread.
        let fences = [(thread.to_string(), holder.to_string())];
        match super::abandoned::record_left_open(&**store, child, holder, &fences, &note) {
            Ok(super::abandoned::Left::Done) => {}
            Ok(super::abandoned::Left::Busy { .. }) => {
                tracing::warn!(thread = %child.id, "a forked thread's child is still held by another run: left to it");
            }
            Err(e) => tracing::warn!(thread = %child.id, error = %e, "settling a forked thread's child"),
        }
    }
}

/// Cancels the open approvals of the thread's subgraph children (every
/// level), after a fork: the new branch runs children of its own, so no
/// decision on the old ones' requests would run anything. Each is its own
/// compare-and-set with an `approval.cancelled` audit entry in the child's
/// log; one that fails (decided meanwhile, the store unreachable) is left
/// as it is and logged. Fenced by the fork's lease of the thread (`holder`): a fork that lost
/// the thread cancels nothing another run's branch asked for. Only approvals requested before
/// `before` (unix millis) are cancelled: ones the new branch asked for since are its own.
pub(super) fn cancel_children_approvals(
    store: &Arc<dyn Store>,
    thread: &str,
    holder: &str,
    note: &str,
    actor: &str,
    before: u64,
) {
    let threads = match store.scan_threads() {
        Ok(listing) => listing.items,
        Err(e) => return tracing::warn!(thread, error = %e, "listing the forked thread's children"),
    };
    for child in agentflow_store::descendants(&threads, thread) {
        let approvals = match store.list_approvals(&child.id) {
            Ok(approvals) => approvals,
            Err(e) => {
                tracing::warn!(thread = %child.id, error = %e, "listing a forked child's approvals");
                continue;
            }
        };
        for a in approvals
            .into_iter()
            .filter(|a| a.created_at < before && matches!(a.status, ApprovalStatus::Pending | ApprovalStatus::Approved))
        {
            let patch = ApprovalPatch { note: Some(note.to_string()), ..ApprovalPatch::by(actor, now_ms()) };
            let transition = agentflow_store::ApprovalTransition {
                id: a.id.clone(),
                from: a.status,
                to: ApprovalStatus::Cancelled,
                patch,
            };
            let mut batch = agentflow_store::EffectBatch::new(&child.id)
                .transition(transition)
                .fenced_by_parents(vec![(thread.to_string(), holder.to_string())]);
            batch.now = now_ms();
            if let Err(e) = store.commit_effects(batch) {
                tracing::warn!(approval = %a.id, error = %e, "cancelling a forked child's approval");
            }
        }
    }
}

/// [`App::update_state`] on a store with the update already serialised
/// (`blob`: the JSON of a `State::Update`, its fields named as the state's),
/// without the graph's types: the same checkpoint and `state.updated` audit
/// entry by `actor`, whose detail is the update. The caller vouches that the
/// blob decodes as the state's update type; a resume of the thread fails on
/// one that does not.
pub fn update_thread(store: &Arc<dyn Store>, thread: &str, blob: Vec<u8>, actor: &str) -> Result<u64, HistoryError> {
    update_thread_migrating(store, thread, blob, actor, None)
}

/// The whole state at the current state version with an update applied, as a stored document,
/// from the state's chain at the thread's latest checkpoint and the state version it is stored
/// at (see [`Migrating`]).
pub(crate) type Rebuild<'a> = &'a dyn Fn(&StateChain, u32) -> Result<Vec<u8>, HistoryError>;

/// How an update brings a state stored at an older state version to the current one (a thread
/// moved to a newer version of its graph whose state version changed too, before its first
/// step there): the update's checkpoint holds the whole state at the current version.
pub(crate) struct Migrating<'a> {
    /// The current state version (`S::VERSION`).
    pub(crate) version: u32,
    /// The whole state at `version` with the update applied.
    pub(crate) rebuild: Rebuild<'a>,
}

/// [`update_thread`]; with `migrating`, a state stored at another state version is rebuilt at
/// the current one under the update's lease, and the thread takes that version.
pub(crate) fn update_thread_migrating(
    store: &Arc<dyn Store>,
    thread: &str,
    blob: Vec<u8>,
    actor: &str,
    migrating: Option<Migrating<'_>>,
) -> Result<u64, HistoryError> {
    // Held before anything is read, so no run commits a step in between.
    let lease = hold(store, thread)?;
    let latest = latest_of(store, thread)?;
    let rebuilt = match migrating {
        Some(m) => {
            let record = store
                .thread(thread)
                .map_err(PersistError::from)?
                .ok_or(HistoryError::UnknownThread { thread: thread.to_string() })?;
            if record.schema_version == m.version {
                None
            } else {
                let chain = store
                    .state_chain(thread, latest.seq)
                    .map_err(PersistError::from)?
                    .ok_or(HistoryError::UnknownCheckpoint { thread: thread.to_string(), seq: latest.seq })?;
                Some(((m.rebuild)(&chain, record.schema_version)?, m.version))
            }
        }
        None => None,
    };
    // Refused before anything is written, as a run's updates are: the update's credential-like
    // text outside the fields the graph marks `#[state(credential)]` (on a store that seals).
    refuse_credentials_skipping(&blob, "the update", &credential_fields(store, thread))?;
    // The same check passed for the blob, so the detail is the same JSON.
    let detail: serde_json::Value = serde_json::from_slice(&blob).map_err(|source| PersistError::Decode {
        thread: thread.to_string(),
        seq: latest.seq,
        what: "update",
        source,
    })?;
    let writes = store.pending_writes(thread, latest.seq).map_err(PersistError::from)?;
    let budget = stored_budget(&latest, &writes)?;
    let mut extra = with_payloads(json!({ BUDGET: budget, JOURNAL_SEQ: journal_seq_of(&latest) }), &latest.metadata);
    // The update continues the step, and a move to a newer graph version it continues stays
    // with it: the names its renamed nodes started under, and the calls moved in its journal.
    if let (Some(moved), Some(map)) = (latest.metadata.extra.get(MOVED), extra.as_object_mut()) {
        map.insert(MOVED.to_string(), moved.clone());
    }
    let metadata = CheckpointMetadata {
        extra,
        ..CheckpointMetadata::new(latest.metadata.step, CheckpointSource::UpdateState, vec![])
    };
    let writes = writes.into_iter().filter(|w| w.node != BUDGET).collect();
    append_checkpoint(
        store,
        &lease,
        thread,
        latest.seq,
        latest.cursor,
        vec![blob],
        metadata,
        Carry { writes, cancel_open_approvals: None, continues_step: true, forked_to: None, rebuilt },
        actor,
        "state.updated",
        detail,
    )
}

/// `extra` with the map payloads of `from`'s next step, if it has any: a new checkpoint that
/// keeps the cursor keeps what its map workers run on.
fn with_payloads(mut extra: serde_json::Value, from: &CheckpointMetadata) -> serde_json::Value {
    if let (Some(payloads), Some(map)) = (from.extra.get(PAYLOADS), extra.as_object_mut()) {
        map.insert(PAYLOADS.to_string(), payloads.clone());
    }
    extra
}

#[allow(clippy::too_many_arguments)]
fn append_checkpoint(
    store: &Arc<dyn Store>,
    lease: &LeaseGuard,
    thread: &str,
    parent: u64,
    cursor: Vec<String>,
    delta: Vec<Vec<u8>>,
    metadata: CheckpointMetadata,
    carry: Carry,
    actor: &str,
    kind: &str,
    detail: serde_json::Value,
) -> Result<u64, HistoryError> {
    let record = store
        .thread(thread)
        .map_err(PersistError::from)?
        .ok_or(HistoryError::UnknownThread { thread: thread.to_string() })?;
    if carry.continues_step && matches!(record.status, ThreadStatus::Compensating | ThreadStatus::Compensated) {
        // Its step's journal says the calls ran, and they were undone (or are being undone):
        // carried on, the step would take the undone calls for done.
        return Err(HistoryError::Undone { thread: thread.to_string(), status: record.status.as_str() });
    }
    // Forked to a checkpoint an older version of the graph wrote: the thread takes that version
    // again, and its next resume moves it as the first move did.
    let mut detail = detail;
    let record = match carry.forked_to.map(|seq| written_by(&**store, &record, seq)).transpose()?.flatten() {
        Some(by) => {
            if let Some(d) = detail.as_object_mut() {
                d.insert("graph_fingerprint".into(), json!(by.fingerprint));
            }
            ThreadRecord { graph_fingerprint: by.fingerprint, schema_version: by.schema_version, ..record }
        }
        None => record,
    };
    let (snapshot, record) = match carry.rebuilt {
        Some((state, version)) => (Some(state), ThreadRecord { schema_version: version, ..record }),
        None => (None, record),
    };
    let now = now_ms();
    let last = store.list_checkpoints(thread).map_err(PersistError::from)?.last().map_or(0, |c| c.seq);
    let seq = next_seq(thread, last)?;
    let checkpoint = Checkpoint {
        thread: thread.to_string(),
        seq,
        parent: Some(parent),
        cursor,
        snapshot,
        delta,
        metadata,
        created_at: now,
    };
    // A new head with work left makes the thread resumable again. A step
    // carried over that waits on timers keeps waiting (and its timer).
    let waits: Vec<Pending> = carry
        .writes
        .iter()
        .find(|w| w.node == INTERRUPTS)
        .and_then(|w| serde_json::from_slice(&w.value).ok())
        .unwrap_or_default();
    let status = match (checkpoint.cursor.is_empty(), crate::durable::wake::sleeping_until(&waits)) {
        (true, _) => record.status,
        (false, Some(_)) => ThreadStatus::Sleeping,
        (false, None) => ThreadStatus::Interrupted,
    };
    let mut commit = StepCommit::new(ThreadRecord { updated_at: now, lease: None, status, ..record })
        .with_checkpoint(checkpoint)
        .fenced_by(lease.holder(), now);
    commit.wake_at = if status.is_finished() { None } else { crate::durable::wake::wake_time(&waits) };
    commit.audit.push(NewAuditEntry { at: now, actor: actor.to_string(), kind: kind.to_string(), detail });
    // The carried writes move to the new head (the commit drops the parent's).
    commit.pending_writes = carry.writes.into_iter().map(|w| PendingWrite { seq, ..w }).collect();
    if let Some(note) = carry.cancel_open_approvals {
        abandon_head(store, thread, parent, actor, &note, now, &mut commit)?;
    }
    let receipt = store.commit_step(commit).map_err(PersistError::from)?;
    Ok(receipt.checkpoint.unwrap_or(seq))
}

/// The head's step is abandoned (a fork, a follow-up run that starts over): what it left open
/// goes with `commit`, the new head's. Its calls cut off mid-way (started, no result) will not
/// be made again and no run reads its journal any more: they may have acted, so each becomes an
/// `OUTCOME_UNKNOWN` record for a human, as the step's own commit would have made it; an
/// approved call still `EXECUTING` becomes `OUTCOME_UNKNOWN`; every approval still `PENDING` or
/// `APPROVED` is cancelled with `note`. `parent` is the checkpoint the new head follows.
pub(super) fn abandon_head(
    store: &Arc<dyn Store>,
    thread: &str,
    parent: u64,
    actor: &str,
    note: &str,
    now: u64,
    commit: &mut StepCommit,
) -> Result<(), HistoryError> {
    let head = store.latest_checkpoint(thread).map_err(PersistError::from)?;
    if let Some(head) = head {
        let unknown = super::cut_off::unknown_outcomes(&**store, thread, journal_seq_of(&head))?;
        commit.new_approvals = unknown.records;
        commit.audit.splice(0..0, unknown.audit);
    }
    let unknown_note = format!(
        "the call started and left no result (the run stopped mid-call), and the thread was forked at \
         checkpoint {parent}, away from the step that made it; whether it acted is unknown: settle it"
    );
    for approval in store.list_approvals(thread).map_err(PersistError::from)? {
        if approval.status == ApprovalStatus::Executing {
            commit.approval_transitions.push(ApprovalTransition {
                id: approval.id,
                from: ApprovalStatus::Executing,
                to: ApprovalStatus::OutcomeUnknown,
                patch: ApprovalPatch { note: Some(unknown_note.clone()), ..ApprovalPatch::by(actor, now) },
            });
            continue;
        }
        if matches!(approval.status, ApprovalStatus::Pending | ApprovalStatus::Approved) {
            commit.approval_transitions.push(ApprovalTransition {
                id: approval.id,
                from: approval.status,
                to: ApprovalStatus::Cancelled,
                patch: ApprovalPatch { note: Some(note.to_string()), ..ApprovalPatch::by(actor, now) },
            });
        }
    }
    Ok(())
}

/// What a new checkpoint takes over from the thread's head.
struct Carry {
    /// Pending writes of the head's step, moved to the new checkpoint.
    writes: Vec<PendingWrite>,
    /// Cancel every open approval of the thread, with this note.
    cancel_open_approvals: Option<String>,
    /// The new head carries on the head's step (its journal and waits), so a thread whose
    /// calls were compensated is refused.
    continues_step: bool,
    /// The checkpoint a fork goes back to: the thread takes the version of its graph that
    /// wrote it ([`checkpoint_version`](super::checkpoint_version)).
    forked_to: Option<u64>,
    /// The whole state the new checkpoint holds, and the state version the thread takes with it.
    rebuilt: Option<(Vec<u8>, u32)>,
}

/// The JSON pointers of the fields the stored description of `thread`'s graph marks as
/// holding credentials; none on a store that keeps payloads in clear, or without a readable
/// description.
pub(super) fn credential_fields(store: &Arc<dyn Store>, thread: &str) -> Vec<String> {
    if !store.seals_payloads() {
        return Vec::new();
    }
    let Ok(Some(record)) = store.thread(thread) else { return Vec::new() };
    let Ok(Some(text)) = store.graph_description(&record.graph_fingerprint) else { return Vec::new() };
    let Ok(description) = serde_json::from_str::<serde_json::Value>(&text) else { return Vec::new() };
    crate::access::personal::credential_in_description(&description)
        .into_iter()
        .map(|name| format!("/{}", name.replace('~', "~0").replace('/', "~1")))
        .collect()
}

pub(super) fn latest_of(store: &Arc<dyn Store>, thread: &str) -> Result<Checkpoint, HistoryError> {
    store
        .latest_checkpoint(thread)
        .map_err(PersistError::from)?
        .ok_or(HistoryError::UnknownThread { thread: thread.to_string() })
}

/// Takes the thread's lease for one write; dropping the guard releases it.
fn hold(store: &Arc<dyn Store>, thread: &str) -> Result<LeaseGuard, HistoryError> {
    let holder = format!("history-{}", holder_id());
    Ok(LeaseGuard::acquire_now(Arc::clone(store), thread.to_string(), holder, 10_000).map_err(PersistError::from)?)
}
