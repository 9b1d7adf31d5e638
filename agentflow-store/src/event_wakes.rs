//! The wakes a store calls after a commit added events to a thread's log (see
//! [`Store::on_events`](crate::Store::on_events)), kept by `RedbStore` and `PostgresStore`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, PoisonError, RwLock};

use crate::record::EventWake;

/// The registered wakes. Calling them clones the list's handle first, so a wake may register
/// another (or be called from several threads) without a lock held across the call.
#[derive(Default)]
pub(crate) struct EventWakes {
    wakes: RwLock<Arc<Vec<EventWake>>>,
}

impl EventWakes {
    /// Registers `wake`; it is called after every later commit that adds events.
    pub(crate) fn add(&self, wake: EventWake) {
        // The guarded value is replaced whole: a panic cannot leave it half updated.
        let mut wakes = self.wakes.write().unwrap_or_else(PoisonError::into_inner);
        let mut next = Vec::with_capacity(wakes.len() + 1);
        next.extend(wakes.iter().cloned());
        next.push(wake);
        *wakes = Arc::new(next);
    }

    /// Calls every wake with `thread`. A wake that panics is skipped: the commit it reports is
    /// made, and the next wakes still run.
    pub(crate) fn wake(&self, thread: &str) {
        let wakes = Arc::clone(&self.wakes.read().unwrap_or_else(PoisonError::into_inner));
        for wake in wakes.iter() {
            let _ = catch_unwind(AssertUnwindSafe(|| wake(thread)));
        }
    }
}

impl std::fmt::Debug for EventWakes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.wakes.read().unwrap_or_else(PoisonError::into_inner).len();
        f.debug_struct("EventWakes").field("wakes", &n).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::EventWakes;

    #[test]
    fn every_wake_is_called_and_one_that_panics_stops_none_of_the_others() {
        let wakes = EventWakes::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        wakes.wake("nobody-listens");
        wakes.add(Arc::new(|_: &str| panic!("a wake that fails")));
        for n in 0..2 {
            let seen = Arc::clone(&seen);
            wakes.add(Arc::new(move |thread: &str| seen.lock().unwrap().push(format!("{n}:{thread}"))));
        }
        wakes.wake("t1");
        assert_eq!(*seen.lock().unwrap(), ["0:t1", "1:t1"]);
    }
}
