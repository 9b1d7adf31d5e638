//! Each thread's event log in a [`RedbStore`](crate::RedbStore) file: appended by the step
//! commits that carry events ([`StepCommit::events`](crate::StepCommit::events)), trimmed to the
//! newest commits in the same transaction, read by [`Store::read_events`](crate::Store::read_events)
//! and emptied by a purge.
//!
//! The log's rows are [`tables::EVENTS`], keyed by (thread, seq, idx). The thread's last seq is
//! the last row's, so a commit with events opens that one table; only the first commit of a log a
//! purge emptied also reads [`tables::EVENT_LOG_ENDS`], where the purge left the last seq, so a
//! log's seqs never start again.

use std::ops::Bound;
use std::path::Path;

use redb::{ReadTransaction, ReadableTable};

use crate::codec::{Dec, DecodeResult, Enc};
use crate::error::StorageError;
use crate::record::{EventId, EventPage, NewEvent, RECORD_VERSION, StoredEvent};
use crate::redb::error::WithPath;
use crate::redb::reads::decode;
use crate::redb::tables;
use crate::redb::writer::Tx;

/// An event as its row keeps it (its id is the row's key).
fn encode_row(kind: &str, data: &[u8], at: u64) -> Vec<u8> {
    let mut e = Enc::with_capacity(RECORD_VERSION, kind.len() + data.len() + 16);
    e.str(kind).bytes(data).u64(at);
    e.finish()
}

fn decode_row(buf: &[u8]) -> DecodeResult<(String, Vec<u8>, u64)> {
    let mut d = Dec::new(buf, RECORD_VERSION)?;
    let row = (d.str("kind")?, d.bytes("data")?, d.u64("at")?);
    d.end()?;
    Ok(row)
}

/// The last seq a purge left ([`tables::EVENT_LOG_ENDS`]), as a record.
fn encode_end(seq: u64) -> Vec<u8> {
    let mut e = Enc::new(RECORD_VERSION);
    e.u64(seq);
    e.finish()
}

fn decode_end(buf: &[u8]) -> DecodeResult<u64> {
    let mut d = Dec::new(buf, RECORD_VERSION)?;
    let seq = d.u64("last seq")?;
    d.end()?;
    Ok(seq)
}

/// The first and the last key of thread `thread`'s rows.
fn bounds(thread: &str) -> std::ops::RangeInclusive<(&str, u64, u32)> {
    (thread, 0, 0)..=(thread, u64::MAX, u32::MAX)
}

/// The seqs of the oldest and newest rows of `thread`'s log, if it has any.
fn ends(
    path: &Path,
    table: &impl ReadableTable<(&'static str, u64, u32), &'static [u8]>,
    thread: &str,
) -> Result<Option<(EventId, EventId)>, StorageError> {
    let mut rows = table.range(bounds(thread)).ctx(path)?;
    let Some(first) = rows.next() else { return Ok(None) };
    let (k, _) = first.ctx(path)?;
    let (_, seq, idx) = k.value();
    let oldest = EventId::new(seq, idx);
    let newest = match rows.next_back() {
        None => oldest,
        Some(last) => {
            let (k, _) = last.ctx(path)?;
            let (_, seq, idx) = k.value();
            EventId::new(seq, idx)
        }
    };
    Ok(Some((oldest, newest)))
}

/// Appends `events` to `thread`'s log as its next commit, written at `at`, and removes the
/// oldest commits past `keep`; the seq the events were given. The caller validated the commit
/// (see [`crate::checks`]) and counted its writes.
pub(crate) fn append(tx: &Tx<'_>, thread: &str, events: &[NewEvent], at: u64, keep: u64) -> Result<u64, StorageError> {
    let path = tx.path;
    let mut table = tx.txn.open_table(tables::EVENTS).ctx(path)?;
    let (oldest, last) = match ends(path, &table, thread)? {
        Some((oldest, newest)) => (Some(oldest.seq), newest.seq),
        None => {
            let ended = tx.txn.open_table(tables::EVENT_LOG_ENDS).ctx(path)?;
            let end = match ended.get(thread).ctx(path)? {
                None => 0,
                Some(v) => decode(path, tables::EVENT_LOG_ENDS, || format!("{thread:?}"), v.value(), decode_end)?,
            };
            (None, end)
        }
    };
    let seq = last.checked_add(1).ok_or_else(|| StorageError::Decode {
        path: path.to_path_buf(),
        table: redb::TableHandle::name(&tables::EVENTS).to_string(),
        key: format!("{thread:?}"),
        reason: format!("the log's last seq {last} leaves no next one"),
    })?;
    for (idx, event) in (0u32..).zip(events) {
        table.insert((thread, seq, idx), encode_row(&event.kind, &event.data, at).as_slice()).ctx(path)?;
    }
    // The log's seqs run without a gap from its oldest to `seq`: past `keep` of them, the
    // oldest go.
    if let Some(oldest) = oldest
        && seq - oldest >= keep
    {
        let first_kept = seq - keep + 1;
        table.retain_in((thread, oldest, 0)..(thread, first_kept, 0), |_, _| false).ctx(path)?;
    }
    Ok(seq)
}

/// A page of `thread`'s log (see [`Store::read_events`](crate::Store::read_events)).
pub(crate) fn read(
    txn: &ReadTransaction,
    path: &Path,
    thread: &str,
    after: Option<EventId>,
    limit: usize,
) -> Result<EventPage, StorageError> {
    let table = txn.open_table(tables::EVENTS).ctx(path)?;
    let Some((oldest, newest)) = ends(path, &table, thread)? else { return Ok(EventPage::default()) };
    let start = match after {
        None => Some((0, 0)),
        Some(id) if id.idx < u32::MAX => Some((id.seq, id.idx + 1)),
        Some(id) => id.seq.checked_add(1).map(|seq| (seq, 0)),
    };
    let mut events = Vec::new();
    if let Some((seq, idx)) = start
        && limit > 0
    {
        let range = (Bound::Included((thread, seq, idx)), Bound::Included((thread, u64::MAX, u32::MAX)));
        for row in table.range::<(&str, u64, u32)>(range).ctx(path)?.take(limit) {
            let (k, v) = row.ctx(path)?;
            let (_, seq, idx) = k.value();
            let key = || format!("({thread:?}, {seq}, {idx})");
            let (kind, data, at) = decode(path, tables::EVENTS, key, v.value(), decode_row)?;
            events.push(StoredEvent::new(EventId::new(seq, idx), kind, data, at));
        }
    }
    Ok(EventPage::new(events, Some(oldest), Some(newest)))
}

/// Every event `thread`'s log keeps, oldest first (a dump's).
pub(crate) fn all(txn: &ReadTransaction, path: &Path, thread: &str) -> Result<Vec<StoredEvent>, StorageError> {
    let table = txn.open_table(tables::EVENTS).ctx(path)?;
    let mut events = Vec::new();
    for row in table.range(bounds(thread)).ctx(path)? {
        let (k, v) = row.ctx(path)?;
        let (_, seq, idx) = k.value();
        let key = || format!("({thread:?}, {seq}, {idx})");
        let (kind, data, at) = decode(path, tables::EVENTS, key, v.value(), decode_row)?;
        events.push(StoredEvent::new(EventId::new(seq, idx), kind, data, at));
    }
    Ok(events)
}

/// Writes a restored thread's log as it was, ids and all (the dump's check ordered them): the
/// log's next commit goes on after its newest. The caller counted its writes and checked that
/// the thread is new to this store.
pub(crate) fn restore(tx: &Tx<'_>, thread: &str, events: &[StoredEvent]) -> Result<(), StorageError> {
    if events.is_empty() {
        return Ok(());
    }
    let mut table = tx.txn.open_table(tables::EVENTS).ctx(tx.path)?;
    for e in events {
        table.insert((thread, e.id.seq, e.id.idx), encode_row(&e.kind, &e.data, e.at).as_slice()).ctx(tx.path)?;
    }
    Ok(())
}

/// Removes `thread`'s log, keeping its last seq for the commits after (see
/// [`tables::EVENT_LOG_ENDS`]); how many events were removed.
pub(crate) fn purge(tx: &Tx<'_>, thread: &str) -> Result<u64, StorageError> {
    let path = tx.path;
    let mut table = tx.txn.open_table(tables::EVENTS).ctx(path)?;
    let Some((_, newest)) = ends(path, &table, thread)? else { return Ok(0) };
    let mut removed = 0u64;
    table
        .retain_in(bounds(thread), |_, _| {
            removed += 1;
            false
        })
        .ctx(path)?;
    let mut ended = tx.txn.open_table(tables::EVENT_LOG_ENDS).ctx(path)?;
    ended.insert(thread, encode_end(newest.seq).as_slice()).ctx(path)?;
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use crate::conformance::{self, NOW, thread};
    use crate::{EVENT_LOG_KEEP_COMMITS, EventId, NewAuditEntry, NewEvent, RedbStore, StepCommit, Store};

    #[test]
    fn a_log_keeps_the_newest_event_log_keep_commits_by_default() {
        let store = RedbStore::in_memory().unwrap();
        conformance::event_log_keeps_the_newest_commits(&store, EVENT_LOG_KEEP_COMMITS);
    }

    #[test]
    fn a_log_keeps_the_bound_its_store_was_built_with() {
        for keep in [1, 3] {
            let store = RedbStore::builder().event_log_keep(keep).in_memory().unwrap();
            conformance::event_log_keeps_the_newest_commits(&store, keep);
        }
    }

    #[test]
    fn a_logs_seqs_go_on_after_a_purge_and_a_reopen() {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("agentflow-event-log-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("store.redb");
        let commit = |store: &RedbStore| {
            let events = vec![NewEvent::new("step", b"{}".to_vec())];
            store.commit_step(StepCommit::new(thread("t")).with_events(events)).unwrap();
        };
        {
            let store = RedbStore::open(&path).unwrap();
            commit(&store);
            commit(&store);
            store.close().unwrap();
        }
        {
            let store = RedbStore::open(&path).unwrap();
            assert_eq!(store.read_events("t", None, 10).unwrap().newest, Some(EventId::new(2, 0)));
            let entry = NewAuditEntry::new(NOW, "dpo", crate::PURGED_KIND, serde_json::json!({}));
            assert_eq!(store.purge_thread("t", entry).unwrap().events, 2);
            store.close().unwrap();
        }
        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.read_events("t", None, 10).unwrap().newest, None);
        commit(&store);
        let page = store.read_events("t", None, 10).unwrap();
        assert_eq!((page.oldest, page.newest), (Some(EventId::new(3, 0)), Some(EventId::new(3, 0))));
        store.close().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
