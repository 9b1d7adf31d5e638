//! What a [`RedbStore`](crate::RedbStore) remembers about each thread between its step commits.
//!
//! Staging a step commit needs five facts about the thread before it can write: the stored
//! thread record (to skip an unchanged one), its number (the first part of its checkpoint
//! keys), the latest checkpoint seq (to refuse a seq that
//! does not increase), the thread's durable timer (to replace it) and which checkpoints have
//! pending writes (to clear the parent's). Reading them opens five tables per commit, and in
//! redb each table a write transaction opens costs work at its commit too. The writer learns
//! the facts from the commit it just made, so the next step of the same thread finds them here
//! and a plain super-step opens one table: the checkpoints.
//!
//! The facts are exact or absent, never stale:
//! - only step commits maintain them; every other write job (restore, compaction, queue,
//!   approvals, ...) clears them all before it stages (see `Job::keeps_facts`), as does thread
//!   compaction, so whatever else changes a thread's rows is never hidden;
//! - a step takes its thread's facts out of the shared map when it stages and puts the new
//!   ones in a per-transaction overlay; they reach the shared map only after the redb commit
//!   succeeded. A refused job, a failed or aborted transaction, a group re-run job by job or a
//!   panic leaves the thread without facts, and its next commit reads the tables again.
//!
//! Everything here runs on whoever holds the writer's turn (one stager at a time), so the
//! locks are never contended. Leases are not facts: the fencing check reads the live lease
//! table on every commit, as before.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// How many threads' facts are kept; past it the map is emptied (each active thread then pays
/// one full read on its next commit). Bounds memory with many sleeping threads in one file.
const MAX_THREADS: usize = 4096;

/// The facts of one thread, as of its last committed step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ThreadFacts {
    /// The stored thread record's bytes (`None`: no record).
    pub(crate) record: Option<Vec<u8>>,
    /// The thread's number (`None`: it has none yet; see [`crate::redb::thread_numbers`]). Once
    /// given, it never changes.
    pub(crate) number: Option<u64>,
    /// The highest checkpoint seq (`None`: no checkpoint).
    pub(crate) latest: Option<u64>,
    /// The thread's durable timer (`agentflow.timer_of`).
    pub(crate) timer: Option<u64>,
    /// The checkpoint seqs that have pending writes, ascending, each once.
    pub(crate) pending: Vec<u64>,
    /// The stored record's tenant and trace context, once a commit decoded them (`None`: not
    /// known yet). A commit keeps them whatever its own record says.
    pub(crate) kept: Option<Kept>,
}

/// What a step commit keeps of the stored thread record rather than take from its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    /// The tenant, fixed when the thread is created.
    pub(crate) tenant: Option<String>,
    /// The trace context: the first one stored wins, a record without one takes the commit's.
    pub(crate) trace: Option<String>,
}

impl ThreadFacts {
    /// Whether the thread has pending writes recorded against checkpoint `seq`.
    pub(crate) fn has_pending(&self, seq: u64) -> bool {
        self.pending.binary_search(&seq).is_ok()
    }

    /// Records pending writes against `seq`.
    pub(crate) fn add_pending(&mut self, seq: u64) {
        if let Err(at) = self.pending.binary_search(&seq) {
            self.pending.insert(at, seq);
        }
    }

    /// Records that `seq` has no pending writes any more.
    pub(crate) fn clear_pending(&mut self, seq: u64) {
        if let Ok(at) = self.pending.binary_search(&seq) {
            self.pending.remove(at);
        }
    }
}

/// The committed facts of every thread the store knows, shared by the store and its writer.
#[derive(Debug, Default)]
pub(crate) struct StepFacts {
    known: Mutex<HashMap<String, ThreadFacts>>,
}

impl StepFacts {
    fn known(&self) -> MutexGuard<'_, HashMap<String, ThreadFacts>> {
        // Every update is a single map operation or a clear: a panic cannot leave it half done.
        self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Forgets every thread.
    pub(crate) fn clear(&self) {
        self.known().clear();
    }

    /// Publishes the facts of a transaction that committed.
    fn publish(&self, learned: HashMap<String, ThreadFacts>) {
        if learned.is_empty() {
            return;
        }
        let mut known = self.known();
        if known.len() + learned.len() > MAX_THREADS {
            known.clear();
        }
        known.extend(learned);
    }

    /// How many threads have facts (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.known().len()
    }
}

/// What the steps staged in one write transaction learned, published by [`Learned::commit`]
/// once the transaction committed.
#[derive(Debug, Default)]
pub(crate) struct Learned {
    facts: RefCell<HashMap<String, ThreadFacts>>,
}

impl Learned {
    /// Takes the thread's facts, from this transaction or the shared map: until
    /// [`Learned::learn`] puts new ones back, the thread has none anywhere.
    pub(crate) fn take(&self, shared: &StepFacts, thread: &str) -> Option<ThreadFacts> {
        if let Some(facts) = self.facts.borrow_mut().remove(thread) {
            return Some(facts);
        }
        shared.known().remove(thread)
    }

    /// The thread's facts after the step just staged in this transaction.
    pub(crate) fn learn(&self, thread: &str, facts: ThreadFacts) {
        self.facts.borrow_mut().insert(thread.to_string(), facts);
    }

    /// Forgets every thread's facts, shared or learned: a job that maintains none is about to
    /// stage, and may change any thread's rows.
    pub(crate) fn forget_all(&self, shared: &StepFacts) {
        self.facts.borrow_mut().clear();
        shared.clear();
    }

    /// The transaction committed: its facts become the shared ones.
    pub(crate) fn commit(self, shared: &StepFacts) {
        shared.publish(self.facts.into_inner());
    }
}

#[cfg(test)]
mod tests;
