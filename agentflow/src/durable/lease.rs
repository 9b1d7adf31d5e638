//! A thread's lease: the holder id a run takes it under, and the guard that renews it while
//! the run goes on and releases it when dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use agentflow_store::{Lease, LeaseError, Store};

use super::error::{PersistError, ThreadError};
use super::io::blocking;
use crate::core::clock::now_ms;
pub(crate) use crate::core::process::{process_actor, process_tag};

/// How long a run's lease lasts unless [`Runner::lease_ttl`](crate::Runner::lease_ttl) says otherwise.
pub(crate) const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// How the holder id of a lease that only parks a queued run begins ([`parked_holder`]).
const PARKED: &str = "parked:";

/// The holder id under which worker `worker` parks a queued run it cannot continue (a thread
/// its build refuses to move): a lease that keeps every worker from claiming the run until it
/// expires, while nothing runs under it. Anyone else who takes the thread (a fork, a state
/// update, a resume: [`LeaseGuard`]) takes such a lease over; once they let the thread go, the
/// run is claimable again.
pub(crate) fn parked_holder(worker: &str) -> String {
    format!("{PARKED}{worker}")
}

/// Whether lease holder `holder` only parks a queued run ([`parked_holder`]).
pub(crate) fn is_parked_holder(holder: &str) -> bool {
    holder.starts_with(PARKED)
}

/// Lets go of a lease that only parks thread `thread`'s queued run ([`parked_holder`]), so that
/// a worker claims the run now (to act on a control, a resume or a follow-up asked of it):
/// `false` if there is none.
pub(crate) fn release_parked(store: &dyn Store, thread: &str) -> Result<bool, PersistError> {
    let Some(lease) = store.thread(thread)?.and_then(|r| r.lease) else { return Ok(false) };
    if !is_parked_holder(&lease.holder) {
        return Ok(false);
    }
    match store.release_lease(thread, &lease.holder) {
        Ok(()) => Ok(true),
        // Taken over, or expired and taken, meanwhile: not parked any more.
        Err(LeaseError::NotHeld { .. }) => Ok(false),
        Err(e) => Err(PersistError::Lease(e)),
    }
}

/// A lease a run's holder took before the run (a worker's claim takes the thread's lease):
/// the holder's id and when the lease expires (unix millis).
#[derive(Debug, Clone)]
pub(crate) struct LeaseHolder {
    pub(crate) id: String,
    pub(crate) until: u64,
    /// Set by the holder once it no longer trusts the lease to be this run's: a worker whose
    /// own claim took the thread again, the run's lease having lapsed. The store's fence
    /// cannot tell the two apart (one holder id), and another executor may have run the thread
    /// in between: the run then writes and starts nothing more, as after a lost lease.
    pub(crate) revoked: Arc<AtomicBool>,
}

/// A thread's lease, held by one holder until dropped.
///
/// Dropping it releases the lease at once, by a direct (blocking) call to
/// [`Store::release_lease`]: the call must work while a runtime is shutting
/// down or from a cancelled task, where nothing can be spawned any more; for
/// [`RedbStore`](agentflow_store::RedbStore) it is an in-memory map update.
/// A lease that another holder took meanwhile is left alone.
pub(crate) struct LeaseGuard {
    store: Arc<dyn Store>,
    pub(super) thread: String,
    holder: String,
    pub(super) ttl_ms: u64,
    until: AtomicU64,
    /// See [`LeaseHolder::revoked`] (never set for a lease the run took itself).
    revoked: Arc<AtomicBool>,
    /// Whether dropping the guard releases the lease: not when the holder took the lease
    /// before the run (a worker that claimed the thread releases it itself).
    release_on_drop: bool,
}

impl LeaseGuard {
    /// Takes `thread` for a new holder (blocking); a lease that only parks a queued run
    /// ([`parked_holder`]) is taken over.
    pub(crate) fn acquire_now(
        store: Arc<dyn Store>,
        thread: String,
        holder: String,
        ttl_ms: u64,
    ) -> Result<Self, LeaseError> {
        let lease = match store.acquire_lease(&thread, &holder, ttl_ms, now_ms()) {
            Err(LeaseError::ThreadBusy { holder: parked, .. }) if parked.starts_with(PARKED) => {
                // Nothing runs under it. Released by someone else meanwhile: taken as it comes.
                match store.release_lease(&thread, &parked) {
                    Ok(()) | Err(LeaseError::NotHeld { .. }) => {}
                    Err(e) => return Err(e),
                }
                store.acquire_lease(&thread, &holder, ttl_ms, now_ms())?
            }
            lease => lease?,
        };
        Ok(LeaseGuard {
            store,
            thread,
            holder,
            ttl_ms,
            until: AtomicU64::new(lease.expires_at),
            revoked: Arc::default(),
            release_on_drop: true,
        })
    }

    /// Takes `thread` for a new unique holder id (released when the guard drops), or, for a
    /// holder that already holds the lease ([`LeaseHolder`]: a worker whose claim took it),
    /// uses that lease as it is, without asking the store: the holder releases it. Its commits
    /// are fenced by the holder either way, so a lease lost between the claim and the run's
    /// first commit is refused there.
    pub(super) async fn acquire(
        store: Arc<dyn Store>,
        thread: String,
        ttl: Duration,
        holder: Option<LeaseHolder>,
    ) -> Result<Self, ThreadError> {
        if holder.is_some() {
            return LeaseGuard::take(store, thread, ttl, holder);
        }
        let s = Arc::clone(&store);
        blocking(&store, move |_| LeaseGuard::take(s, thread, ttl, holder)).await?
    }

    /// [`LeaseGuard::acquire`], blocking.
    pub(super) fn take(
        store: Arc<dyn Store>,
        thread: String,
        ttl: Duration,
        holder: Option<LeaseHolder>,
    ) -> Result<Self, ThreadError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if let Some(LeaseHolder { id, until, revoked }) = holder {
            let until = AtomicU64::new(until);
            return Ok(LeaseGuard { store, thread, holder: id, ttl_ms, until, revoked, release_on_drop: false });
        }
        LeaseGuard::acquire_now(store, thread, holder_id(), ttl_ms).map_err(lease_error)
    }

    /// Who holds the lease (the value commits are fenced by).
    pub(crate) fn holder(&self) -> &str {
        &self.holder
    }

    /// The flag its holder sets once the lease is no longer trusted to be this run's (see
    /// [`LeaseHolder::revoked`]).
    pub(crate) fn revoked(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.revoked)
    }

    /// A lease its holder revoked counts as lost (another executor may have the thread).
    pub(crate) fn check_not_revoked(&self) -> Result<(), PersistError> {
        if self.revoked.load(Ordering::SeqCst) {
            return Err(PersistError::Lease(LeaseError::NotHeld {
                thread: self.thread.clone(),
                holder: self.holder.clone(),
                current: None,
            }));
        }
        Ok(())
    }

    /// Extends the lease by its TTL from now.
    async fn renew(&self) -> Result<(), PersistError> {
        self.check_not_revoked()?;
        let (thread, holder, ttl, now) = (self.thread.clone(), self.holder.clone(), self.ttl_ms, now_ms());
        let lease = blocking(&self.store, move |s| s.renew_lease(&thread, &holder, ttl, now)).await??;
        self.until.store(lease.expires_at, Ordering::SeqCst);
        Ok(())
    }

    /// Renews the lease when less than half its TTL is left.
    pub(crate) async fn renew_if_due(&self) -> Result<(), PersistError> {
        if now_ms().saturating_add(self.ttl_ms / 2) >= self.until.load(Ordering::SeqCst) {
            self.renew().await
        } else {
            Ok(())
        }
    }

    /// Before a step: renews the lease when it is due. Another holder having
    /// it ends the run; a store that cannot be reached is waited out while
    /// the lease has not expired (the policy of [`LeaseGuard::tolerate`], as
    /// while a step runs).
    pub(crate) async fn check_before_step(&self) -> Result<(), PersistError> {
        match self.renew_if_due().await {
            Ok(()) => Ok(()),
            Err(e) => self.tolerate(e, "before a step"),
        }
    }

    /// Renews the lease every third of its TTL; completes only when the lease
    /// is lost (another holder has it, or it could not be renewed before it
    /// expired), with the error that ends the run.
    pub(crate) async fn keep_alive(&self) -> ThreadError {
        let every = Duration::from_millis((self.ttl_ms / 3).max(1));
        loop {
            tokio::time::sleep(every).await;
            let Err(failed) = self.renew().await else { continue };
            match self.tolerate(failed, "while a step runs") {
                Ok(()) => {}
                Err(PersistError::Lease(LeaseError::NotHeld { current, .. })) => return self.lost(current),
                Err(_) => return self.lost(None),
            }
        }
    }

    /// The one policy for a renewal that failed, before a step and while one
    /// runs: another holder having the lease, or the lease having expired
    /// unrenewed, ends the run (the error comes back); any other failure (a
    /// store that does not answer) is logged and waited out, as the lease
    /// still keeps every other holder off until it expires.
    fn tolerate(&self, failed: PersistError, when: &'static str) -> Result<(), PersistError> {
        match failed {
            e @ PersistError::Lease(LeaseError::NotHeld { .. }) => Err(e),
            e if now_ms() >= self.until.load(Ordering::SeqCst) => Err(e),
            e => {
                tracing::warn!(parent: None, thread = %self.thread, error = %e, "could not renew the thread's lease {when}");
                Ok(())
            }
        }
    }

    pub(crate) fn lost(&self, current: Option<Lease>) -> ThreadError {
        ThreadError::LeaseLost { thread: self.thread.clone(), holder: current.map(|l| l.holder) }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if !self.release_on_drop {
            return;
        }
        match self.store.release_lease(&self.thread, &self.holder) {
            Ok(()) => {}
            // Taken over after it expired: it is not ours to release.
            Err(LeaseError::NotHeld { .. }) => {}
            // A lease we cannot release expires by itself; nothing is lost.
            Err(e) => {
                tracing::warn!(parent: None, thread = %self.thread, error = %e, "could not release the thread's lease")
            }
        }
    }
}

/// A lease holder id unique to this run: the process's [`process_tag`] and a counter.
pub(crate) fn holder_id() -> String {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{}-{}", process_tag(), NEXT.fetch_add(1, Ordering::Relaxed))
}

fn lease_error(e: LeaseError) -> ThreadError {
    match e {
        LeaseError::ThreadBusy { thread, holder, expires_at } => ThreadError::Busy { thread, holder, expires_at },
        other => ThreadError::Persist(other.into()),
    }
}
