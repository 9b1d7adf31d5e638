//! A thread's event log: what each commit of a run did, written in that commit, so the log is
//! exactly what was committed. A reader (a server's stream, `agentflow tail`) reads it after an
//! id and waits for more.
//!
//! The store never looks inside an event: its `kind` and JSON `data` are the runtime's
//! vocabulary. Each commit that carries events is given the next number of its thread's log
//! (`seq`, from 1), and each event its place in that commit (`idx`, from 0): ids are strictly
//! increasing, with no gap, in commit order.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How many commits' events a thread's log keeps: a commit that would make it more removes the
/// oldest commit's events in the same transaction. A reader that asks for events after an id
/// older than the oldest kept learns it from [`EventPage::oldest`].
pub const EVENT_LOG_KEEP_COMMITS: u64 = 4_096;

/// An event to write with a step commit ([`StepCommit::events`](crate::StepCommit::events)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NewEvent {
    /// What happened, in the runtime's words (`run.started`, `step.finished`, ...).
    pub kind: String,
    /// Its JSON document; opaque to the store, sealed by a sealing store like other payloads.
    pub data: Vec<u8>,
}

impl NewEvent {
    /// An event of `kind` with JSON document `data`.
    pub fn new(kind: impl Into<String>, data: Vec<u8>) -> Self {
        NewEvent { kind: kind.into(), data }
    }
}

/// Where an event stands in its thread's log: the number of the commit that wrote it (from 1 in
/// each thread) and its place in that commit (from 0). Ordered as the log is. Its text is
/// `SEQ-IDX` (as a server-sent event's `id:` and a reader's `Last-Event-ID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EventId {
    /// The commit's number in the thread's log, from 1.
    pub seq: u64,
    /// The event's place in its commit, from 0.
    pub idx: u32,
}

impl EventId {
    /// The id of event `idx` of commit `seq`.
    pub fn new(seq: u64, idx: u32) -> Self {
        EventId { seq, idx }
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.seq, self.idx)
    }
}

/// Text that is not an event id (`SEQ-IDX`, two unsigned numbers).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{text}` is not an event id: it is written SEQ-IDX, two unsigned numbers, as the `id:` lines of a stream give it"
)]
pub struct BadEventId {
    /// The text.
    pub text: String,
}

impl FromStr for EventId {
    type Err = BadEventId;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadEventId { text: text.chars().take(64).collect() };
        let (seq, idx) = text.trim().split_once('-').ok_or_else(bad)?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(seq) || !digits(idx) {
            return Err(bad());
        }
        Ok(EventId { seq: seq.parse().map_err(|_| bad())?, idx: idx.parse().map_err(|_| bad())? })
    }
}

/// An event as its thread's log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StoredEvent {
    /// Its id.
    pub id: EventId,
    /// What happened (see [`NewEvent::kind`]).
    pub kind: String,
    /// Its JSON document.
    pub data: Vec<u8>,
    /// When its commit was written (the commit's `now`, unix millis).
    pub at: u64,
}

impl StoredEvent {
    /// An event as stored.
    pub fn new(id: EventId, kind: impl Into<String>, data: Vec<u8>, at: u64) -> Self {
        StoredEvent { id, kind: kind.into(), data, at }
    }
}

/// A page of a thread's log ([`Store::read_events`](crate::Store::read_events)).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EventPage {
    /// The events after the id asked for, oldest first, at most the limit asked for.
    pub events: Vec<StoredEvent>,
    /// The oldest event the log keeps (`None`: the log is empty). A reader who asked for events
    /// after an id older than it missed the events retention removed in between.
    pub oldest: Option<EventId>,
    /// The newest event the log keeps (`None`: the log is empty).
    pub newest: Option<EventId>,
}

impl EventPage {
    /// A page of `events` of a log whose oldest and newest events are `oldest` and `newest`.
    pub fn new(events: Vec<StoredEvent>, oldest: Option<EventId>, newest: Option<EventId>) -> Self {
        EventPage { events, oldest, newest }
    }
}

/// Every event a log keeps, oldest first, read page by page through `page` (a
/// [`Store::read_events`](crate::Store::read_events) after an id).
pub(crate) fn whole_log<E>(
    mut page: impl FnMut(Option<EventId>) -> Result<EventPage, E>,
) -> Result<Vec<StoredEvent>, E> {
    let mut events: Vec<StoredEvent> = Vec::new();
    loop {
        let read = page(events.last().map(|e| e.id))?;
        if read.events.is_empty() {
            return Ok(events);
        }
        events.extend(read.events);
    }
}

/// Called with a thread's id after a commit added events to its log (see
/// [`Store::on_events`](crate::Store::on_events)). It must return quickly (it runs on the
/// committing thread or the store's listener) and never block.
pub type EventWake = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// A start's idempotency key ([`NewRun::idempotency`](crate::NewRun::idempotency)): a caller
/// that sends the same key again within [`IDEMPOTENCY_KEY_TTL_MS`] attaches to the run the
/// first request made instead of starting another.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct IdempotencyKey {
    /// Whose key it is (a caller's id): two callers' equal keys are different keys.
    pub scope: String,
    /// The key the caller sent.
    pub key: String,
    /// A digest of the request it came with: the same key with another request is refused.
    pub request: String,
}

impl IdempotencyKey {
    /// Key `key` of `scope`, sent with a request whose digest is `request`.
    pub fn new(scope: impl Into<String>, key: impl Into<String>, request: impl Into<String>) -> Self {
        IdempotencyKey { scope: scope.into(), key: key.into(), request: request.into() }
    }
}

/// How long an idempotency key is kept after the run it started was queued: 24 hours.
pub const IDEMPOTENCY_KEY_TTL_MS: u64 = 24 * 60 * 60 * 1000;

#[cfg(test)]
mod tests {
    use super::EventId;

    #[test]
    fn event_ids_read_back_from_their_text_and_order_as_the_log() {
        let id = EventId::new(12, 3);
        assert_eq!(id.to_string(), "12-3");
        assert_eq!("12-3".parse::<EventId>(), Ok(id));
        assert!(EventId::new(2, 9) < EventId::new(3, 0));
        for bad in ["", "12", "12-", "-3", "a-1", "1-b", "1--2", "+1-2", "1-2-3", "99999999999999999999-0"] {
            assert!(bad.parse::<EventId>().is_err(), "{bad:?}");
        }
    }
}
