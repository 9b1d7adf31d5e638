//! The App's purge and legal holds: removing a thread's data (and its subgraph children's) for
//! good, keeping tombstones of who did what when, and the holds that refuse it.

use agentflow_store::{LegalHold, NewAuditEntry, PURGED_KIND, PurgeReport, Store, ThreadRecord};
use serde_json::json;

use crate::access::{Access, Actor, Operation};
use crate::app::App;
use crate::core::state::State;
use crate::durable::{HistoryError, PersistError};

/// How long the lease a purge holds on its thread lasts: the purge is one store transaction,
/// so this only bounds how long a crashed purge keeps the thread from a run.
const PURGE_LEASE_MS: u64 = 60_000;

/// The kind of the audit entry [`App::hold_thread`] appends.
pub const HELD_KIND: &str = "thread.held";
/// The kind of the audit entry [`App::release_hold`] appends.
pub const RELEASED_KIND: &str = "thread.released";

impl<S: State, D> App<S, D> {
    /// Removes the data of `thread` and of its subgraph children, at every level, in one store
    /// transaction: their checkpoints (states and updates, interrupt payloads and answers),
    /// pending writes, effect journal (tool results), timers, queued runs, the arguments and
    /// conditions of their approvals and the details of their audit entries. What stays are
    /// tombstones: each thread's record (status `purged`, its owner, tenant and times), its
    /// approvals' statuses and who decided, and its audit log (who did what when, verifying as
    /// before: see [`Store::verify_audit`]), with a `thread.purged` entry by `actor` that
    /// counts what was removed. Purging a purged thread succeeds and removes nothing more.
    ///
    /// Refused, changing nothing: with [`HistoryError::InUse`] while a run holds the thread,
    /// a thread above it (a subgraph child goes only while no run of its parent may need it)
    /// or one of its children (cancel it first), with [`HistoryError::Purge`] holding
    /// [`PurgeError::Held`](agentflow_store::PurgeError::Held) while the thread, a child or a
    /// thread above it is under legal hold ([`App::hold_thread`]), and as an unknown thread
    /// when it is not there for `actor`.
    ///
    /// Without encryption at rest the data is gone from the live store; the bytes may stay in
    /// the store's free space (redb reuses freed pages later; PostgreSQL keeps dead rows until
    /// `VACUUM FULL`) and in backups taken before.
    ///
    /// Checked for `actor` ([`Operation::Purge`]); a name alone is an actor of no roles and
    /// every tenant ([`Actor::from`]).
    pub fn purge_thread(&self, thread: &str, actor: impl Into<Actor>) -> Result<PurgeReport, HistoryError> {
        let access = self.access_of(actor);
        self.check_for(&access, Operation::Purge, thread)?;
        purge_thread(self.store_or_none()?, thread, &access.actor().id, crate::core::clock::now_ms())
    }

    /// Places a legal hold on `thread`: until [`App::release_hold`], neither
    /// [`App::purge_thread`] nor a retention policy purges it, nor any of its subgraph children
    /// (at every level), nor any thread whose subgraph children include it, and none of them
    /// is compacted ([`App::compact`] answers
    /// [`CompactError::Held`](agentflow_store::CompactError::Held)). A `thread.held` entry by `actor` with the reason is appended to
    /// its audit log; a hold set again replaces the one before.
    ///
    /// Checked for `actor` ([`Operation::Purge`]).
    pub fn hold_thread(&self, thread: &str, reason: &str, actor: impl Into<Actor>) -> Result<LegalHold, HistoryError> {
        let access = self.access_of(actor);
        self.check_for(&access, Operation::Purge, thread)?;
        let (by, now) = (access.actor().id.clone(), crate::core::clock::now_ms());
        let hold = LegalHold::new(by.clone(), reason, now);
        let entry = NewAuditEntry::new(now, by, HELD_KIND, json!({ "reason": reason }));
        self.store_or_none()?.set_legal_hold(thread, Some(hold.clone()), entry)?;
        Ok(hold)
    }

    /// Lifts the legal hold of `thread` (the hold it had, `None` if it had none), with a
    /// `thread.released` entry by `actor` in its audit log.
    ///
    /// Checked for `actor` ([`Operation::Purge`]).
    pub fn release_hold(&self, thread: &str, actor: impl Into<Actor>) -> Result<Option<LegalHold>, HistoryError> {
        let access = self.access_of(actor);
        self.check_for(&access, Operation::Purge, thread)?;
        let store = self.store_or_none()?;
        let before = store.legal_hold(thread).map_err(PersistError::from)?;
        let now = crate::core::clock::now_ms();
        let detail = json!({ "hold": before.as_ref().map(|h| json!({ "by": h.by, "reason": h.reason, "at": h.at })) });
        store.set_legal_hold(
            thread,
            None,
            NewAuditEntry::new(now, access.actor().id.clone(), RELEASED_KIND, detail),
        )?;
        Ok(before)
    }

    /// The legal hold of `thread`, if one is set. Checked for the app's actor
    /// ([`Operation::ReadHistory`]); `None` for a thread not there for it.
    pub fn legal_hold(&self, thread: &str) -> Result<Option<LegalHold>, HistoryError> {
        let store = self.store_or_none()?;
        if !Access::reaches::<HistoryError>(&self.setup.access, &**store, Operation::ReadHistory, thread)? {
            return Ok(None);
        }
        Ok(store.legal_hold(thread).map_err(PersistError::from)?)
    }

    fn store_or_none(&self) -> Result<&std::sync::Arc<dyn Store>, HistoryError> {
        self.setup.store.as_ref().ok_or(HistoryError::NoStore)
    }
}

/// [`App::purge_thread`] on a store without an app, in the name of `actor` at `now` (unix
/// millis), for tools that hold only the store (the `agentflow purge` command): no access
/// check is made here, the caller makes it. The lease of the thread, and of its root when it
/// is a subgraph child, is taken for the purge, so no run starts on them meanwhile; one a run
/// holds, on the thread, a thread above it or a subgraph child, refuses the purge
/// ([`HistoryError::InUse`]): a child is purged only while no run of its parent may need it.
pub fn purge_thread(
    store: &std::sync::Arc<dyn Store>,
    thread: &str,
    actor: &str,
    now: u64,
) -> Result<PurgeReport, HistoryError> {
    let holder = format!("purge:{actor}");
    let above = ancestors(store, thread)?;
    let mut leased = Vec::new();
    let purged = (|| {
        for id in above.last().map(|r| r.id.as_str()).into_iter().chain([thread]) {
            take_lease(store, id, &holder, now)?;
            leased.push(id.to_string());
        }
        for record in &above {
            refuse_leased(record, now)?;
        }
        let mut stack = vec![thread.to_string()];
        while let Some(parent) = stack.pop() {
            for child in store.child_threads(&parent).map_err(PersistError::from)?.items {
                refuse_leased(&child, now)?;
                stack.push(child.id);
            }
        }
        let entry = NewAuditEntry::new(now, actor, PURGED_KIND, json!({}));
        Ok(store.purge_thread(thread, entry)?)
    })();
    // The leases go with the purge, whatever it answered; one that expired meanwhile is gone.
    for id in leased.iter().rev() {
        let _ = store.release_lease(id, &holder);
    }
    purged
}

/// The records of the threads above `thread` (its parent first, its root last).
fn ancestors(store: &std::sync::Arc<dyn Store>, thread: &str) -> Result<Vec<ThreadRecord>, HistoryError> {
    let mut above: Vec<ThreadRecord> = Vec::new();
    let mut next = store.thread(thread).map_err(PersistError::from)?.and_then(|r| r.parent);
    while let Some(id) = next.take() {
        // A chain that loops back (only an edited store holds one) is walked once.
        if id == thread || above.iter().any(|r| r.id == id) {
            break;
        }
        let Some(record) = store.thread(&id).map_err(PersistError::from)? else { break };
        next = record.parent.clone();
        above.push(record);
    }
    Ok(above)
}

/// Takes `thread`'s lease for `holder` for the purge.
fn take_lease(store: &std::sync::Arc<dyn Store>, thread: &str, holder: &str, now: u64) -> Result<(), HistoryError> {
    match store.acquire_lease(thread, holder, PURGE_LEASE_MS, now) {
        Ok(_) => Ok(()),
        Err(agentflow_store::LeaseError::ThreadBusy { thread, holder, expires_at }) => {
            Err(HistoryError::InUse { thread, holder, expires_at })
        }
        Err(e) => Err(PersistError::from(e).into()),
    }
}

/// [`HistoryError::InUse`] if a lease unexpired at `now` holds `record`'s thread.
fn refuse_leased(record: &ThreadRecord, now: u64) -> Result<(), HistoryError> {
    match record.lease.as_ref().filter(|l| l.expires_at > now) {
        Some(lease) => Err(HistoryError::InUse {
            thread: record.id.clone(),
            holder: lease.holder.clone(),
            expires_at: lease.expires_at,
        }),
        None => Ok(()),
    }
}
