//! Reading on past log entries that cannot be read (data that does not decode, a sealed entry
//! whose key is gone): a read of a page of the log fails as a whole, so the reader then reads
//! one entry at a time, and where even that fails, finds the first position after which the log
//! reads again and passes over the entry before it, telling its client
//! ([`unreadable`](super::ag_ui::unreadable)).
//!
//! A store's read does not say which entry failed, so the entry is found by reading after
//! positions one by one: a read after position `p` that works while the read after the
//! position before failed means the entry right after that position cannot be read. Ids run
//! without a gap inside a commit and from commit to commit, so the positions tried are the end
//! of the reader's commit, then each entry of the next commit and its end, and so on. Where the
//! entry is the first of a commit, the log cannot tell whether the reader's commit held more
//! entries after the reader's (they would not read either): the notice then says from where
//! entries were passed over.

use agentflow_store::{EventId, EventPage, ReadError, StorageError, StoredEvent};

/// How many positions one search tries before it passes over every entry up to the last.
const PROBES: usize = 64;
/// How many entries of a commit are tried one by one before its end is.
const PER_COMMIT: u32 = 8;

/// Whether `error` is an entry's, not the store's: a record that does not decode, or a sealed
/// one that does not open.
pub(crate) fn is_entrys(error: &ReadError) -> bool {
    matches!(
        error,
        ReadError::Storage(StorageError::Corrupted { .. } | StorageError::Decode { .. } | StorageError::Sealed { .. })
    )
}

/// What a read after a position gave.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Read {
    /// An entry.
    Entry(StoredEvent),
    /// Entry `id` cannot be read (`error`); every entry after `from` up to it was passed over
    /// (`None`: it alone).
    Unreadable { id: EventId, from: Option<EventId>, error: String },
}

/// The reads after position `after` (`None`: from the start) once a read of a page after it
/// failed with `error`, and the log's ends: the next entry read alone, or, when it cannot be
/// read, the notice of the entries passed over. `read` reads the thread's log (a store's
/// `read_events`: after a position, at most a number of entries).
///
/// # Errors
///
/// The store fails (not an entry: see [`is_entrys`]).
pub(crate) fn read_on(
    read: &mut dyn FnMut(Option<EventId>, usize) -> Result<EventPage, ReadError>,
    after: Option<EventId>,
    error: &ReadError,
) -> Result<(Vec<Read>, EventPage), ReadError> {
    match read(after, 1) {
        Ok(mut page) => {
            let reads = std::mem::take(&mut page.events).into_iter().map(Read::Entry).collect();
            return Ok((reads, page));
        }
        Err(e) if !is_entrys(&e) => return Err(e),
        Err(_) => {}
    }
    // No entry is decoded: a failure here is the store's.
    let ends = read(after, 0)?;
    let Some(newest) = ends.newest else { return Ok((Vec::new(), ends)) };
    let mut from = after.unwrap_or(EventId::new(0, u32::MAX));
    if let Some(oldest) = ends.oldest.and_then(before)
        && from < oldest
    {
        from = oldest;
    }
    if from >= newest {
        return Ok((Vec::new(), ends));
    }
    let mut passed = from;
    for _ in 0..PROBES {
        let probe = next_position(from, passed).min(newest);
        match read(Some(probe), 1) {
            Ok(_) => {
                let id = after_position(passed);
                let read = Read::Unreadable { id, from: (passed != from).then_some(from), error: error.to_string() };
                return Ok((vec![read], ends));
            }
            Err(e) if !is_entrys(&e) => return Err(e),
            Err(_) => passed = probe,
        }
    }
    // Every position tried failed: the entries up to the last are passed over.
    Ok((vec![Read::Unreadable { id: passed, from: Some(from), error: error.to_string() }], ends))
}

/// The id right after position `p`: the next entry of its commit, or the first of the next.
fn after_position(p: EventId) -> EventId {
    if p.idx == u32::MAX { EventId::new(p.seq.saturating_add(1), 0) } else { EventId::new(p.seq, p.idx + 1) }
}

/// The position tried after `passed`, in a search that started at `from`: first the end of
/// `from`'s commit (the entry that cannot be read is in it when the log reads after it), then
/// each of the next commit's first [`PER_COMMIT`] entries and its end, and so on.
fn next_position(from: EventId, passed: EventId) -> EventId {
    if passed.idx == u32::MAX {
        EventId::new(passed.seq.saturating_add(1), 0)
    } else if passed == from || passed.idx.saturating_add(1) >= PER_COMMIT {
        EventId::new(passed.seq, u32::MAX)
    } else {
        EventId::new(passed.seq, passed.idx + 1)
    }
}

/// The position just before id `id`.
fn before(id: EventId) -> Option<EventId> {
    if id.idx > 0 {
        Some(EventId::new(id.seq, id.idx - 1))
    } else {
        id.seq.checked_sub(1).map(|seq| EventId::new(seq, u32::MAX))
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// A log of `ids`, those in `bad` unreadable, read as a store reads it.
    fn log(
        ids: &[(u64, u32)],
        bad: &[(u64, u32)],
    ) -> impl FnMut(Option<EventId>, usize) -> Result<EventPage, ReadError> {
        let ids: Vec<EventId> = ids.iter().map(|&(s, i)| EventId::new(s, i)).collect();
        let bad: Vec<EventId> = bad.iter().map(|&(s, i)| EventId::new(s, i)).collect();
        move |after, limit| {
            let next: Vec<EventId> =
                ids.iter().copied().filter(|id| after.is_none_or(|a| *id > a)).take(limit).collect();
            if next.iter().any(|id| bad.contains(id)) {
                return Err(ReadError::Storage(StorageError::Decode {
                    path: PathBuf::from("log"),
                    table: "events".into(),
                    key: "k".into(),
                    reason: "bad".into(),
                }));
            }
            let events = next.into_iter().map(|id| StoredEvent::new(id, "step", b"{}".to_vec(), 0)).collect();
            Ok(EventPage::new(events, ids.first().copied(), ids.last().copied()))
        }
    }

    fn unreadable_of(reads: &[Read]) -> Vec<(String, Option<String>)> {
        reads
            .iter()
            .filter_map(|r| match r {
                Read::Unreadable { id, from, .. } => Some((id.to_string(), from.map(|f| f.to_string()))),
                Read::Entry(_) => None,
            })
            .collect()
    }

    #[test]
    fn the_entry_that_cannot_be_read_is_found_and_passed_over() {
        let ids = [(1, 0), (1, 1), (2, 0), (2, 1), (2, 2), (3, 0), (4, 0)];
        let error = ReadError::Storage(StorageError::Closed { path: PathBuf::from("x"), detail: "d".into() });
        // One bad entry: found exactly.
        let mut read = log(&ids, &[(2, 1)]);
        let (reads, _) = read_on(&mut read, Some(EventId::new(2, 0)), &error).unwrap();
        assert_eq!(unreadable_of(&reads), [("2-1".to_string(), None)]);
        // A readable next entry is read alone.
        let (reads, page) = read_on(&mut read, Some(EventId::new(1, 1)), &error).unwrap();
        assert!(matches!(&reads[..], [Read::Entry(e)] if e.id == EventId::new(2, 0)));
        assert_eq!(page.newest, Some(EventId::new(4, 0)));
        // The first entry of a commit, after the last of the commit before: whether that commit
        // held more entries, the log cannot tell, so the notice says from where.
        let mut read = log(&ids, &[(3, 0)]);
        let (reads, _) = read_on(&mut read, Some(EventId::new(2, 2)), &error).unwrap();
        assert_eq!(unreadable_of(&reads), [("3-0".to_string(), Some("2-2".to_string()))]);
        // From the start of the log.
        let mut read = log(&ids, &[(1, 0)]);
        let (reads, _) = read_on(&mut read, None, &error).unwrap();
        assert_eq!(unreadable_of(&reads), [("1-0".to_string(), None)]);
        // Bad entries in a row: passed over up to the last, said so.
        let mut read = log(&ids, &[(2, 1), (2, 2), (3, 0)]);
        let (reads, _) = read_on(&mut read, Some(EventId::new(2, 0)), &error).unwrap();
        assert_eq!(unreadable_of(&reads), [("3-0".to_string(), Some("2-0".to_string()))]);
        // The newest entry bad: passed over too.
        let mut read = log(&ids, &[(4, 0)]);
        let (reads, _) = read_on(&mut read, Some(EventId::new(3, 0)), &error).unwrap();
        assert_eq!(unreadable_of(&reads), [("4-0".to_string(), Some("3-0".to_string()))]);
        // Two in a commit: one at a time, each exactly.
        let mut read = log(&ids, &[(2, 1), (2, 2)]);
        let (reads, _) = read_on(&mut read, Some(EventId::new(2, 0)), &error).unwrap();
        assert_eq!(unreadable_of(&reads), [("2-1".to_string(), None)]);
        let (reads, _) = read_on(&mut read, Some(EventId::new(2, 1)), &error).unwrap();
        assert_eq!(unreadable_of(&reads), [("2-2".to_string(), None)]);
    }

    #[test]
    fn a_failure_of_the_store_is_no_entrys() {
        let closed = ReadError::Storage(StorageError::Closed { path: PathBuf::from("x"), detail: "d".into() });
        assert!(!is_entrys(&closed));
        let mut read = |_: Option<EventId>, _: usize| -> Result<EventPage, ReadError> { Err(closed.clone()) };
        assert!(read_on(&mut read, None, &closed).is_err());
    }

    #[test]
    fn positions_run_through_a_commit_then_to_its_end_then_on() {
        let from = EventId::new(3, 1);
        let mut p = from;
        let mut tried = Vec::new();
        for _ in 0..12 {
            p = next_position(from, p);
            tried.push(p.to_string());
        }
        assert_eq!(
            tried,
            ["3-4294967295", "4-0", "4-1", "4-2", "4-3", "4-4", "4-5", "4-6", "4-7", "4-4294967295", "5-0", "5-1"]
        );
        assert_eq!(after_position(EventId::new(3, u32::MAX)), EventId::new(4, 0));
        assert_eq!(before(EventId::new(4, 0)), Some(EventId::new(3, u32::MAX)));
        assert_eq!(before(EventId::new(0, 0)), None);
    }
}
