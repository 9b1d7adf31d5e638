//! Who waits for a thread's log to grow: a server's readers of thread streams each watch their
//! thread here, and the store's wake ([`Store::on_events`](agentflow_store::Store::on_events))
//! wakes the watchers of the thread a commit added events to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

/// How many entries the registry holds before it first drops those no reader watches.
const FIRST_PRUNE: usize = 64;

/// Thread id -> the [`Notify`] its readers wait on (held by the readers: an entry no reader
/// holds any more is dropped in time).
#[derive(Debug)]
pub(crate) struct Wakes {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    watched: HashMap<String, Weak<Notify>>,
    /// The size at which entries no reader holds are dropped next.
    prune_at: usize,
}

impl Default for Wakes {
    fn default() -> Self {
        Wakes { inner: Mutex::new(Inner { watched: HashMap::new(), prune_at: FIRST_PRUNE }) }
    }
}

impl Wakes {
    /// What a reader of thread `thread` waits on; shared by every reader of the thread while
    /// one holds it.
    pub(crate) fn watch(&self, thread: &str) -> Arc<Notify> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(notify) = inner.watched.get(thread).and_then(Weak::upgrade) {
            return notify;
        }
        if inner.watched.len() >= inner.prune_at {
            inner.watched.retain(|_, w| w.strong_count() > 0);
            inner.prune_at = FIRST_PRUNE.max(inner.watched.len() * 2);
        }
        let notify = Arc::new(Notify::new());
        inner.watched.insert(thread.to_string(), Arc::downgrade(&notify));
        notify
    }

    /// Wakes every reader of thread `thread` waiting now (a reader about to wait re-reads the
    /// log first: it registered its wait before reading).
    pub(crate) fn wake(&self, thread: &str) {
        let notify = {
            let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            match inner.watched.get(thread).map(Weak::upgrade) {
                Some(Some(notify)) => Some(notify),
                Some(None) => {
                    inner.watched.remove(thread);
                    None
                }
                None => None,
            }
        };
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }

    /// How many threads have an entry (some may be held by no reader any more).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).watched.len()
    }
}
