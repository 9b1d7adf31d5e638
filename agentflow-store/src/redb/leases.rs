//! Leases of a [`RedbStore`](crate::RedbStore): which executor holds which thread.
//!
//! redb lets one process at a time open a file, so a lease can only ever be seen by the process
//! that holds the file: one that survived a crash would belong to a process that is gone. They
//! are therefore kept in memory beside the open file, not in it: taking, renewing and dropping a
//! lease costs no disk write, and a reopened file starts with every thread free. A backend shared
//! by many processes (PostgreSQL, say) keeps them in the database instead.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use crate::error::LeaseError;
use crate::record::Lease;

/// The leases of one open store, by thread id.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    held: Mutex<HashMap<String, Lease>>,
}

impl Leases {
    fn held(&self) -> MutexGuard<'_, HashMap<String, Lease>> {
        // Every update below is a single map operation: a panic elsewhere cannot leave it half done.
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The thread's lease, expired or not.
    pub(crate) fn get(&self, thread: &str) -> Option<Lease> {
        self.held().get(thread).cloned()
    }

    /// Every lease held now, expired or not: for a listing, which looks up every thread it
    /// reads (one lock instead of one per thread; few threads hold a lease at a time).
    pub(crate) fn snapshot(&self) -> HashMap<String, Lease> {
        self.held().clone()
    }

    /// Whether `holder` holds `thread` at `now`.
    pub(crate) fn is_held_by(&self, thread: &str, holder: &str, now: u64) -> bool {
        self.held().get(thread).is_some_and(|l| l.holder == holder && l.expires_at > now)
    }

    pub(crate) fn acquire(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        let mut held = self.held();
        if let Some(current) = held.get(thread)
            && current.holder != holder
            && current.expires_at > now
        {
            return Err(LeaseError::ThreadBusy {
                thread: thread.to_string(),
                holder: current.holder.clone(),
                expires_at: current.expires_at,
            });
        }
        let lease = Lease { holder: holder.to_string(), expires_at: now.saturating_add(ttl_ms) };
        held.insert(thread.to_string(), lease.clone());
        Ok(lease)
    }

    pub(crate) fn renew(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        let mut held = self.held();
        match held.get_mut(thread) {
            Some(current) if current.holder == holder => {
                current.expires_at = now.saturating_add(ttl_ms);
                Ok(current.clone())
            }
            current => Err(LeaseError::NotHeld {
                thread: thread.to_string(),
                holder: holder.to_string(),
                current: current.map(|l| l.clone()),
            }),
        }
    }

    pub(crate) fn release(&self, thread: &str, holder: &str) -> Result<(), LeaseError> {
        let mut held = self.held();
        match held.get(thread) {
            None => Ok(()),
            Some(current) if current.holder == holder => {
                held.remove(thread);
                Ok(())
            }
            Some(current) => Err(LeaseError::NotHeld {
                thread: thread.to_string(),
                holder: holder.to_string(),
                current: Some(current.clone()),
            }),
        }
    }
}
