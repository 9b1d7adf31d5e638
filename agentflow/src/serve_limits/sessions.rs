//! Live sessions, a few per user.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Entry<S> {
    user: String,
    value: S,
    expires_at: Instant,
    /// Order of creation, to find a user's oldest session.
    seq: u64,
}

#[derive(Debug)]
struct Inner<S> {
    entries: HashMap<String, Entry<S>>,
    next: u64,
}

/// Live sessions by id, each for a time and for one user, at most `per_user` a user: a new
/// session past that ends the user's oldest. Kept in memory (a restart ends them all).
#[derive(Debug)]
pub struct SessionTable<S> {
    per_user: usize,
    inner: Mutex<Inner<S>>,
}

impl<S: Clone> SessionTable<S> {
    /// A table holding at most `per_user` sessions a user (at least 1).
    pub fn new(per_user: usize) -> Self {
        SessionTable { per_user: per_user.max(1), inner: Mutex::new(Inner { entries: HashMap::new(), next: 0 }) }
    }

    /// Adds session `id` of `user` (as the app tells people apart), living for `ttl`. Returns
    /// the ids of the user's sessions it ended (the oldest, past the cap); expired sessions
    /// are dropped too.
    pub fn insert(&self, id: String, user: &str, value: S, ttl: Duration) -> Vec<String> {
        let now = Instant::now();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.entries.retain(|_, e| e.expires_at > now);
        let mut mine: Vec<(u64, String)> =
            inner.entries.iter().filter(|(_, e)| e.user == user).map(|(id, e)| (e.seq, id.clone())).collect();
        mine.sort();
        let excess = (mine.len() + 1).saturating_sub(self.per_user);
        let ended: Vec<String> = mine.into_iter().take(excess).map(|(_, id)| id).collect();
        for old in &ended {
            inner.entries.remove(old);
        }
        let seq = inner.next;
        inner.next += 1;
        let expires_at = now.checked_add(ttl).unwrap_or(now + Duration::from_secs(86_400 * 365));
        inner.entries.insert(id, Entry { user: user.to_string(), value, expires_at, seq });
        ended
    }

    /// The live session `id`, if any.
    pub fn get(&self, id: &str) -> Option<S> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.entries.get(id).filter(|e| e.expires_at > Instant::now()).map(|e| e.value.clone())
    }

    /// Ends session `id`; returns it if it was live.
    pub fn remove(&self, id: &str) -> Option<S> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.entries.remove(id).filter(|e| e.expires_at > Instant::now()).map(|e| e.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_past_the_cap_ends_the_users_oldest_only() {
        let table = SessionTable::new(2);
        let hour = Duration::from_secs(3600);
        assert!(table.insert("a1".into(), "alice", 1, hour).is_empty());
        assert!(table.insert("b1".into(), "bob", 10, hour).is_empty());
        assert!(table.insert("a2".into(), "alice", 2, hour).is_empty());
        assert_eq!(table.insert("a3".into(), "alice", 3, hour), vec!["a1".to_string()]);
        assert_eq!(table.get("a1"), None);
        assert_eq!((table.get("a2"), table.get("a3"), table.get("b1")), (Some(2), Some(3), Some(10)));
        assert_eq!(table.remove("a2"), Some(2));
        assert_eq!(table.get("a2"), None);
        assert!(table.insert("e".into(), "eve", 0, Duration::ZERO).is_empty());
        assert_eq!(table.get("e"), None, "expired at once");
    }
}
