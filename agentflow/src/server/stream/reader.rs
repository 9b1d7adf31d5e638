//! Reading a thread's event log as a stream of AG-UI events, from where a reader stands: what
//! the server's stream route and `agentflow tail` send. Blocking (it reads the store).
//!
//! - **Bounded.** The log is read a few entries at a time (as many as about 4 MiB of entries,
//!   judged by the largest entry of the read before) and handed out in pages of at most about
//!   1 MiB of entries, a page ending after any entry that shows a snapshot: a reader holds a
//!   few entries and at most one state at a time, however large the state and long the log.
//! - **Coming back.** A reader that comes back within an entry (`SEQ-IDX-K`) gets that entry's
//!   events up to `K` again without ids (its client may hold nothing), then the rest with ids;
//!   at an entry's last event, it is past the entry.
//! - **In step.** Before the first entry a reader gets (and after a gap) its client is brought
//!   in step: a `RUN_STARTED` when the entry does not start a run, and the state and messages
//!   from before the entry; events without ids.
//! - **A gap.** A reader whose position is older than the oldest entry the log keeps (on its
//!   first read or any later one: retention may overtake a slow reader) gets a `CUSTOM`
//!   `agentflow.gap` event (`{from, to}`: its position, and the oldest entry kept), placed after
//!   the `RUN_STARTED` its client then holds, and the entries from the oldest kept on.
//! - **A position past the log's end** is refused ([`StreamError::PastNewest`]): ids never
//!   start again, so it is no id of this thread's stream.
//! - **An entry that cannot be read** (its data does not decode or open) is passed over with a
//!   `CUSTOM` `agentflow.unreadable` event in its place.
//! - **Audit.** A reader that may see personal data and is shown some is recorded once per
//!   reader in the thread's audit log (`personal_data.read`), before it is shown.

use std::collections::VecDeque;
use std::sync::Arc;

use agentflow_store::{EventId, EventPage, Store, StoredEvent, ThreadRecord};
use serde_json::Value;

use super::ag_ui::{Vocabulary, gap, unreadable};
use super::cursor::{Cursor, event_id};
use super::error::StreamError;
use super::mapper::{Cx, Mapped, Mapper, PARKED, RUN_FINISHED, RUN_STARTED, STEP};
use super::snapshot::{SnapshotFn, Snapshots, folded};
use super::unreadable::{Read, is_entrys, read_on};
use crate::access::Access;
use crate::access::personal::{personal_in_description, read_entry, sees_personal_data};
use crate::core::clock::now_ms;
use crate::server::inspect::InspectError;
use crate::server::inspect::description::description;
use crate::server::inspect::fold;

/// How many entries the first read of the log takes.
const FIRST_READ: usize = 16;
/// The most entries one read of the log takes.
const MOST_READ: usize = 256;
/// About how many bytes of entries one read of the log takes.
const READ_BYTES: usize = 4 << 20;
/// About how many bytes of entries one page hands out.
const PAGE_BYTES: usize = 1 << 20;
/// How many reads, after a read of a page failed on an entry, take one entry each.
const SINGLE_READS: usize = 32;

/// One event of a thread's stream.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Item {
    /// Its stream id, `SEQ-IDX-K`; `None` for an event that is no entry's own place (the gap
    /// notice; what brings the reader in step; an entry's events sent again to a reader coming
    /// back within it).
    pub id: Option<String>,
    /// The log entry it is an event of (`None`: the gap notice, or what brings the reader in
    /// step).
    pub entry: Option<EventId>,
    /// That entry's kind (`run.started`, `step`, `interrupt`, `run.finished`; `gap` for the
    /// gap notice, `sync` for what brings the reader in step, `unreadable` for an entry that
    /// cannot be read).
    pub kind: String,
    /// The AG-UI event.
    pub event: Value,
}

/// A page of a stream ([`LogReader::next_page`]).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Page {
    /// The events, in order.
    pub items: Vec<Item>,
    /// Whether the reader has now read every entry the log held when read.
    pub caught_up: bool,
}

/// A reader of one thread's log, for one person (see the [module](self)).
pub struct LogReader {
    store: Arc<dyn Store>,
    thread: String,
    mapper: Mapper,
    /// The personal fields of the thread's state, for the audit entry.
    personal: Vec<String>,
    access: Access,
    surface: String,
    /// Where the reader stands: past the events it was handed.
    cursor: Option<Cursor>,
    /// Whether the reader's first read was made (its position checked against the log's end).
    read_once: bool,
    /// Whether the reader was handed an entry yet.
    handed: bool,
    /// The entry the reader's position was at the end of (it had every event of it): the entry
    /// before the first one it is handed.
    passed: Option<StoredEvent>,
    /// Whether the reader's client is in step with the log (not at its start, nor after a gap).
    in_step: bool,
    /// Read from the store, not handed out yet.
    pending: VecDeque<Read>,
    /// The log's newest entry when last read.
    newest: Option<EventId>,
    /// Whether the last read reached the log's newest entry.
    at_end: bool,
    /// How many entries the next read takes.
    read_limit: usize,
    /// How many reads still take one entry each.
    single: usize,
    /// The gap notice, waiting for its place.
    notice: Option<Value>,
    /// Whether the reader's read of personal data is recorded.
    audited: bool,
}

impl std::fmt::Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader").field("thread", &self.thread).field("cursor", &self.cursor).finish_non_exhaustive()
    }
}

impl LogReader {
    /// A reader of thread `thread`'s log for `access`'s actor (whose access to the thread was
    /// checked), after `from` (`None`: from the oldest entry kept), reading through `surface`
    /// (`stream`, `cli`: what an audit entry of a personal-data read names). The states it
    /// shows are folded from the stored updates through the reducers the graph's stored
    /// description names, and left out where that fold is not exact.
    ///
    /// # Errors
    ///
    /// The graph's stored description cannot be read.
    pub fn new(
        store: Arc<dyn Store>,
        access: &Access,
        thread: &ThreadRecord,
        from: Option<Cursor>,
        surface: &str,
    ) -> Result<Self, InspectError> {
        let described = description(store.as_ref(), thread)?;
        let snapshots = folded(fold::fields(described.as_ref()));
        Ok(Self::with_description(store, access, thread, from, surface, described.as_ref(), snapshots))
    }

    /// [`LogReader::new`] with the graph's description `description` and the states read by
    /// `snapshot` (a hosted graph reads them with its own types).
    pub(crate) fn with_description(
        store: Arc<dyn Store>,
        access: &Access,
        thread: &ThreadRecord,
        from: Option<Cursor>,
        surface: &str,
        description: Option<&Value>,
        snapshot: SnapshotFn,
    ) -> Self {
        let sees = sees_personal_data(access, Some(&thread.id));
        let vocabulary = Vocabulary::new(thread.id.clone(), description, sees);
        LogReader {
            store,
            thread: thread.id.clone(),
            mapper: Mapper::new(vocabulary, Snapshots::new(snapshot)),
            personal: description.map(personal_in_description).unwrap_or_default(),
            access: access.clone(),
            surface: surface.to_string(),
            cursor: from,
            read_once: false,
            handed: false,
            passed: None,
            in_step: false,
            pending: VecDeque::new(),
            newest: None,
            at_end: false,
            read_limit: FIRST_READ,
            single: 0,
            notice: None,
            audited: false,
        }
    }

    /// Where the reader stands: past every event of the entry it read last (`None`: it read
    /// none, and was given no position).
    pub fn cursor(&self) -> Option<Cursor> {
        self.cursor
    }

    /// The reader reads as `access`'s actor from now on (their permission to see personal data
    /// may have changed).
    pub fn set_access(&mut self, access: &Access) {
        self.mapper.vocabulary.set_sees_personal(sees_personal_data(access, Some(&self.thread)));
        self.access = access.clone();
    }

    /// The next events: those of at most `limit` log entries (at least 1), fewer when they are
    /// large or one of them shows a snapshot (see the [module](self)).
    ///
    /// # Errors
    ///
    /// The reader's position is past the log's newest entry (on the first read); the store
    /// failed; or the reader is shown personal data and its read cannot be recorded in the
    /// audit log (nothing is shown then).
    pub fn next_page(&mut self, limit: usize) -> Result<Page, StreamError> {
        let limit = limit.max(1);
        let mut out = Page::default();
        let (mut entries, mut bytes) = (0_usize, 0_usize);
        loop {
            if self.pending.is_empty() {
                if entries > 0 {
                    out.caught_up = self.at_end;
                    return Ok(out);
                }
                self.fill()?;
                if self.pending.is_empty() {
                    if let Some(notice) = self.notice.take() {
                        out.items.push(Item { id: None, entry: None, kind: "gap".into(), event: notice });
                    }
                    out.caught_up = true;
                    return Ok(out);
                }
            }
            let Some(read) = self.pending.pop_front() else { continue };
            let (size, snapshots) = match read {
                Read::Entry(entry) => {
                    if self.cursor.is_some_and(|c| c.has_passed(entry.id)) {
                        continue;
                    }
                    // A position at an entry's last event is past the entry.
                    let skip = self.cursor.map_or(0, |c| c.skip_of(entry.id));
                    if skip > 0 && skip >= self.mapper.places(&entry) {
                        self.cursor = Some(Cursor::after(entry.id));
                        self.passed = Some(entry);
                        continue;
                    }
                    let size = entry.data.len();
                    (size, self.hand_out(&entry, &mut out.items)?)
                }
                Read::Unreadable { id, from, error } => {
                    if !self.cursor.is_some_and(|c| c.has_passed(id) || c.skip_of(id) > 0) {
                        let from = from.map(|f| f.to_string());
                        let event = unreadable(&id.to_string(), from.as_deref(), &error);
                        out.items.push(Item {
                            id: Some(event_id(id, 0)),
                            entry: Some(id),
                            kind: "unreadable".into(),
                            event,
                        });
                    }
                    self.mapper.passed_unreadable(id);
                    self.cursor = Some(Cursor::after(id));
                    (0, false)
                }
            };
            entries += 1;
            bytes = bytes.saturating_add(size);
            if snapshots || entries >= limit || bytes >= PAGE_BYTES {
                out.caught_up = self.pending.is_empty() && self.at_end;
                return Ok(out);
            }
        }
    }

    /// Hands out the events of `entry` (and what brings the reader in step before it) into
    /// `items`; whether they show a snapshot.
    fn hand_out(&mut self, entry: &StoredEvent, items: &mut Vec<Item>) -> Result<bool, StreamError> {
        let skip = self.cursor.map_or(0, |c| c.skip_of(entry.id));
        let mut prelude = Mapped::default();
        let held_run = self.mapper.holds_run();
        if !self.in_step {
            if !self.handed {
                let before = match self.passed.take() {
                    Some(passed) => Some(passed),
                    None => self.entry_before(entry.id),
                };
                self.mapper.look_back(before.as_ref());
            }
            let checkpoint = self.commit_checkpoint(entry);
            let cx = Cx { store: self.store.as_ref(), newest: self.newest };
            prelude = self.mapper.sync(cx, entry, checkpoint);
            self.in_step = true;
        }
        let cx = Cx { store: self.store.as_ref(), newest: self.newest };
        let mapped = self.mapper.entry(cx, entry);
        if (prelude.shows_personal || mapped.shows_personal) && !self.audited {
            self.record_personal_read()?;
        }
        let at = i64::try_from(entry.at).ok();
        let mut out: Vec<Item> = Vec::with_capacity(prelude.before.len() + mapped.before.len() + mapped.slots.len());
        let sync = |event| Item { id: None, entry: None, kind: "sync".into(), event };
        out.extend(prelude.before.into_iter().map(sync));
        let kind = &entry.kind;
        out.extend(mapped.before.into_iter().map(|event| Item {
            id: None,
            entry: Some(entry.id),
            kind: kind.clone(),
            event,
        }));
        for (k, slot) in mapped.slots.into_iter().enumerate() {
            let Some(event) = slot else { continue };
            // Sent again without an id to a reader coming back within the entry.
            let id = (k >= skip).then(|| event_id(entry.id, k));
            out.push(Item { id, entry: Some(entry.id), kind: kind.clone(), event });
        }
        for item in &mut out {
            if let (Value::Object(map), Some(at)) = (&mut item.event, at) {
                map.insert("timestamp".into(), Value::from(at));
            }
        }
        if let Some(notice) = self.notice.take() {
            // After the `RUN_STARTED` the client then holds (a stream starts with one).
            let place = if held_run {
                0
            } else {
                out.iter().position(|i| i.event["type"] == "RUN_STARTED").map_or(0, |p| p + 1)
            };
            out.insert(place, Item { id: None, entry: None, kind: "gap".into(), event: notice });
        }
        items.extend(out);
        self.cursor = Some(Cursor::after(entry.id));
        self.handed = true;
        Ok(prelude.snapshots || mapped.snapshots)
    }

    /// Reads the next entries from the store into `pending`.
    fn fill(&mut self) -> Result<(), StreamError> {
        let after = self.cursor.and_then(|c| c.read_after());
        let limit = if self.single > 0 { 1 } else { self.read_limit };
        let (reads, page) = match self.store.read_events(&self.thread, after, limit) {
            Ok(mut page) => {
                self.single = self.single.saturating_sub(1);
                let largest = page.events.iter().map(|e| e.data.len()).max().unwrap_or(0).max(1);
                self.read_limit = (READ_BYTES / largest).clamp(1, MOST_READ);
                let reads: Vec<Read> = std::mem::take(&mut page.events).into_iter().map(Read::Entry).collect();
                (reads, page)
            }
            Err(e) if is_entrys(&e) => {
                tracing::warn!(thread = %self.thread, error = %e, "a stream reads its log one entry at a time");
                self.single = SINGLE_READS;
                let (store, thread) = (self.store.as_ref(), self.thread.as_str());
                let mut read = |after, limit| store.read_events(thread, after, limit);
                read_on(&mut read, after, &e).map_err(InspectError::store)?
            }
            Err(e) => return Err(InspectError::store(e).into()),
        };
        let EventPage { oldest, newest, .. } = page;
        if !self.read_once {
            self.read_once = true;
            if let Some(at) = self.cursor
                && newest.is_none_or(|n| at.entry > n)
            {
                return Err(StreamError::PastNewest {
                    thread: self.thread.clone(),
                    position: at.to_string(),
                    newest: newest.map(|n| n.to_string()),
                });
            }
        }
        // Retention removes whole commits: a position in a commit older than the oldest kept
        // may have missed entries (which, the log can no longer tell).
        if let (Some(at), Some(oldest)) = (self.cursor, oldest)
            && at.entry.seq < oldest.seq
        {
            self.notice = Some(gap(&at.to_string(), &oldest.to_string()));
            self.in_step = false;
            self.mapper.forget_previous();
        }
        let last = reads.last().map(|r| match r {
            Read::Entry(e) => e.id,
            Read::Unreadable { id, .. } => *id,
        });
        self.at_end = last.is_none_or(|id| newest.is_none_or(|n| id >= n));
        self.newest = newest;
        self.pending.extend(reads);
        Ok(())
    }

    /// The entry just before `id` in the log (`None`: there is none, or it cannot be read).
    fn entry_before(&self, id: EventId) -> Option<StoredEvent> {
        let read = |after: Option<EventId>, limit| self.store.read_events(&self.thread, after, limit).ok();
        if id.idx > 0 {
            let target = EventId::new(id.seq, id.idx - 1);
            let after = if target.idx > 0 {
                Some(EventId::new(id.seq, target.idx - 1))
            } else {
                id.seq.checked_sub(1).map(|s| EventId::new(s, u32::MAX))
            };
            return read(after, 1)?.events.into_iter().next().filter(|e| e.id == target);
        }
        // The last entry of the commit before.
        let commit = id.seq.checked_sub(1).filter(|s| *s > 0)?;
        let mut after = commit.checked_sub(1).map(|s| EventId::new(s, u32::MAX));
        let mut last = None;
        for _ in 0..16 {
            let page = read(after, 16)?;
            let full = page.events.len() == 16;
            for e in page.events {
                if e.id.seq != commit {
                    return last;
                }
                after = Some(e.id);
                last = Some(e);
            }
            if !full {
                break;
            }
        }
        last
    }

    /// The checkpoint `entry`'s commit names when the entry names none (an `interrupt` entry:
    /// the `run.finished` after it names it).
    fn commit_checkpoint(&self, entry: &StoredEvent) -> Option<u64> {
        if [RUN_STARTED, STEP, RUN_FINISHED].contains(&entry.kind.as_str()) {
            return None;
        }
        let named = |e: &StoredEvent| {
            (e.id.seq == entry.id.seq && e.kind == RUN_FINISHED)
                .then(|| serde_json::from_slice::<Value>(&e.data).ok()?.get("checkpoint")?.as_u64())
                .flatten()
        };
        let queued = self.pending.iter().find_map(|r| match r {
            Read::Entry(e) => named(e),
            Read::Unreadable { .. } => None,
        });
        if queued.is_some() || entry.kind != PARKED {
            return queued;
        }
        let page = self.store.read_events(&self.thread, Some(entry.id), 4).ok()?;
        page.events.iter().find_map(named)
    }

    /// Records the reader's read of personal data, once.
    fn record_personal_read(&mut self) -> Result<(), StreamError> {
        let entry = read_entry(now_ms(), &self.access.actor().id, &self.surface, &self.personal);
        self.store.append_audit(&self.thread, entry).map_err(|e| {
            InspectError::Store(format!(
                "thread `{}` holds personal data and its read could not be recorded in the audit log, so it is \
                 not shown: {e}",
                self.thread
            ))
        })?;
        self.audited = true;
        Ok(())
    }
}
