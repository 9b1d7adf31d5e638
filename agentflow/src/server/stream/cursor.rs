//! Where a reader of a thread's stream stands: the id of the last server-sent event it got
//! (`Last-Event-ID`), and the ids the stream gives its events.
//!
//! Each entry of a thread's event log (`SEQ-IDX`, see [`EventId`]) maps to a few AG-UI events;
//! the stream's event `K` (from 0) of log entry `SEQ-IDX` has the id `SEQ-IDX-K`. A reader comes
//! back with the last id it got: `SEQ-IDX-K` goes on with event `K + 1` of that entry, `SEQ-IDX`
//! with the entry after it.

use std::fmt;
use std::str::FromStr;

use agentflow_store::EventId;

/// The longest id text read (a longer one is refused unread).
const MAX_ID_LEN: usize = 64;

/// Where a reader stands in a thread's stream (see the [module](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cursor {
    /// The log entry the reader got (some of) the events of.
    pub entry: EventId,
    /// The last of its events the reader got (`K` of `SEQ-IDX-K`); `None`: all of them.
    pub sent: Option<u32>,
}

impl Cursor {
    /// Past every event of log entry `entry`.
    pub fn after(entry: EventId) -> Self {
        Cursor { entry, sent: None }
    }

    /// Past event `k` of log entry `entry`.
    pub fn within(entry: EventId, k: u32) -> Self {
        Cursor { entry, sent: Some(k) }
    }

    /// The id a log read starts after: the entry before [`Cursor::entry`] when the reader got
    /// only some of its events (the entry is read again, its events up to `K` skipped), else
    /// the entry itself. `None`: from the start of the log.
    pub fn read_after(&self) -> Option<EventId> {
        match self.sent {
            None => Some(self.entry),
            Some(_) => before(self.entry),
        }
    }

    /// How many of log entry `entry`'s events the reader has already got.
    pub fn skip_of(&self, entry: EventId) -> usize {
        match self.sent {
            Some(k) if entry == self.entry => usize::try_from(k).map_or(usize::MAX, |k| k.saturating_add(1)),
            _ => 0,
        }
    }

    /// Whether the reader has got every event of log entry `entry` (an entry before its own).
    pub fn has_passed(&self, entry: EventId) -> bool {
        match self.sent {
            None => entry <= self.entry,
            Some(_) => entry < self.entry,
        }
    }
}

/// The id just before `id` in log order, whatever entries the log holds: `(seq, idx - 1)`, or
/// the end of commit `seq - 1`; `None` before `1-0`.
fn before(id: EventId) -> Option<EventId> {
    if id.idx > 0 {
        Some(EventId::new(id.seq, id.idx - 1))
    } else if id.seq > 0 {
        Some(EventId::new(id.seq - 1, u32::MAX))
    } else {
        None
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.sent {
            Some(k) => write!(f, "{}-{k}", self.entry),
            None => write!(f, "{}", self.entry),
        }
    }
}

/// Text that is not a stream position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{text}` is not an event id of a stream: send the `id:` of the last event received, `SEQ-IDX-K` (or a log \
     entry's `SEQ-IDX`), three or two unsigned numbers joined by `-`"
)]
#[non_exhaustive]
pub struct BadCursor {
    /// The text (its first 64 characters).
    pub text: String,
}

impl FromStr for Cursor {
    type Err = BadCursor;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadCursor { text: text.chars().take(MAX_ID_LEN).collect() };
        let text = text.trim();
        if text.len() > MAX_ID_LEN {
            return Err(bad());
        }
        let parts: Vec<&str> = text.split('-').collect();
        let number = |s: &str| -> Option<u64> {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
        };
        let small = |s: &str| number(s).and_then(|n| u32::try_from(n).ok());
        match parts.as_slice() {
            [seq, idx] => Ok(Cursor::after(EventId::new(number(seq).ok_or_else(bad)?, small(idx).ok_or_else(bad)?))),
            [seq, idx, k] => Ok(Cursor::within(
                EventId::new(number(seq).ok_or_else(bad)?, small(idx).ok_or_else(bad)?),
                small(k).ok_or_else(bad)?,
            )),
            _ => Err(bad()),
        }
    }
}

/// The stream id of event `k` of log entry `entry`: `SEQ-IDX-K`.
pub fn event_id(entry: EventId, k: usize) -> String {
    format!("{entry}-{k}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_event_ids_read_as_an_entry_or_an_event_within_one() {
        assert_eq!("12-3".parse::<Cursor>(), Ok(Cursor::after(EventId::new(12, 3))));
        assert_eq!(" 12-3-4 ".parse::<Cursor>(), Ok(Cursor::within(EventId::new(12, 3), 4)));
        assert_eq!(Cursor::within(EventId::new(12, 3), 4).to_string(), "12-3-4");
        assert_eq!(Cursor::after(EventId::new(12, 3)).to_string(), "12-3");
        assert_eq!(event_id(EventId::new(7, 0), 2), "7-0-2");
        assert_eq!(event_id(EventId::new(7, 0), 2).parse::<Cursor>(), Ok(Cursor::within(EventId::new(7, 0), 2)));
        for bad in [
            "",
            "12",
            "12-",
            "-3",
            "a-1",
            "1-b",
            "1--2",
            "+1-2",
            "1-2-3-4",
            "1-2-x",
            "1-4294967296",
            "1-2-4294967296",
            "99999999999999999999-0",
        ] {
            let refused = bad.parse::<Cursor>().expect_err(bad);
            assert!(refused.to_string().contains("SEQ-IDX-K"), "{refused}");
        }
        // Whitespace around an id is trimmed, as a header's is.
        assert_eq!("1-2-3\n".parse::<Cursor>(), Ok(Cursor::within(EventId::new(1, 2), 3)));
        let long = "1".repeat(100);
        assert_eq!(long.parse::<Cursor>().unwrap_err().text.len(), 64, "the text kept is bounded");
    }

    #[test]
    fn a_reader_within_an_entry_reads_it_again_and_skips_what_it_got() {
        let within = Cursor::within(EventId::new(5, 2), 3);
        assert_eq!(within.read_after(), Some(EventId::new(5, 1)));
        assert_eq!(within.skip_of(EventId::new(5, 2)), 4);
        assert_eq!(within.skip_of(EventId::new(5, 3)), 0);
        assert!(within.has_passed(EventId::new(5, 1)));
        assert!(!within.has_passed(EventId::new(5, 2)));
        // At a commit's first entry, the read starts after every entry of the commit before.
        let first = Cursor::within(EventId::new(5, 0), 0);
        assert_eq!(first.read_after(), Some(EventId::new(4, u32::MAX)));
        assert_eq!(Cursor::within(EventId::new(0, 0), 0).read_after(), None);
        let after = Cursor::after(EventId::new(5, 2));
        assert_eq!(after.read_after(), Some(EventId::new(5, 2)));
        assert_eq!(after.skip_of(EventId::new(5, 2)), 0);
        assert!(after.has_passed(EventId::new(5, 2)));
        assert!(!after.has_passed(EventId::new(5, 3)));
        let all = usize::try_from(u64::from(u32::MAX) + 1).unwrap_or(usize::MAX);
        assert_eq!(Cursor::within(EventId::new(1, 0), u32::MAX).skip_of(EventId::new(1, 0)), all);
    }
}
