//! How many streams each user holds open on a server, at most
//! [`ServeLimits::streams_per_user`](crate::serve_limits::ServeLimits::streams_per_user).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The streams open per user.
#[derive(Debug)]
pub(crate) struct OpenStreams {
    per_user: usize,
    open: Mutex<HashMap<String, usize>>,
}

/// One open stream of a user: dropping it (the stream ended, the client went away) frees it.
#[derive(Debug)]
pub(crate) struct StreamSlot {
    streams: Arc<OpenStreams>,
    user: String,
}

impl OpenStreams {
    /// At most `per_user` open streams a user (at least 1).
    pub(crate) fn new(per_user: usize) -> Self {
        OpenStreams { per_user: per_user.max(1), open: Mutex::new(HashMap::new()) }
    }

    /// How many streams a user may hold open.
    pub(crate) fn per_user(&self) -> usize {
        self.per_user
    }

    /// A slot for one more stream of `user`; `None` when they hold as many as they may.
    pub(crate) fn open(self: &Arc<Self>, user: &str) -> Option<StreamSlot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(user.to_string()).or_insert(0);
        if *count >= self.per_user {
            return None;
        }
        *count += 1;
        Some(StreamSlot { streams: Arc::clone(self), user: user.to_string() })
    }

    /// How many streams `user` holds open.
    #[cfg(test)]
    pub(crate) fn of(&self, user: &str) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).get(user).copied().unwrap_or(0)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.streams.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.user) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.user);
            }
        }
    }
}
