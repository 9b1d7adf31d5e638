//! Every redb table of a [`RedbStore`](crate::RedbStore) file, with its key/value layout.
//!
//! Values are `&[u8]` holding a record in the crate's versioned encoding (a format version byte,
//! the fields, then a CRC-32 of both); the caller's opaque bytes (pending writes, effect results,
//! snapshots) and the JSON rows (queued runs, breakers) are wrapped in such a record too. The
//! exceptions are bare numbers with no checksum: [`META`]'s entries, [`THREAD_NUMBERS`] (a
//! number is checked against the checkpoint row it finds, which names its thread) and the keys
//! of [`TIMERS`] (each is checked against the thread's [`TIMER_OF`] record). The layout is public for tools and tests that
//! inspect a file; it is not a stable API.

use redb::TableDefinition;

/// `"format"` -> store format version (u32, little endian); `"app"` -> `b"agentflow-store"`;
/// `"next_thread_number"` -> the number [`THREAD_NUMBERS`] gives the next thread (u64, little
/// endian; absent: 0). Its presence tells an agentflow store apart from another program's redb
/// file.
pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("agentflow.meta");

/// thread id -> `ThreadRecord` (without the lease: leases live in memory beside the open file).
pub const THREADS: TableDefinition<&str, &[u8]> = TableDefinition::new("agentflow.threads");

/// thread id -> the thread's number, the first part of its [`CHECKPOINTS`] and [`SNAPSHOTS`]
/// keys.
///
/// A thread gets its number when its first checkpoint is written, in that order, and keeps it;
/// numbers come from a counter (`META`'s `"next_thread_number"`), and one that already holds
/// rows is refused (a damaged counter), so none is reused. So the rows of the newest thread go
/// at the end of those tables whatever its id, as appending to a log does, where keys of ids
/// that sort anywhere would land amid older threads' rows, which costs each commit more pages
/// as the file grows. Each checkpoint row names its thread: a read that finds another thread's
/// row under a number is a decode error.
pub const THREAD_NUMBERS: TableDefinition<&str, u64> = TableDefinition::new("agentflow.thread_numbers");

/// (thread number, seq) -> `CheckpointSummary` followed by the step's delta blobs; the thread's
/// number is in [`THREAD_NUMBERS`].
///
/// A plain super-step writes one row here and nothing else, so its commit dirties one B-tree.
pub const CHECKPOINTS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("agentflow.checkpoints");

/// (thread number, seq) -> `Snapshot` (the full state bytes), for the checkpoints whose summary
/// says `has_snapshot`. Kept apart so listings and step commits never touch the large values.
pub const SNAPSHOTS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("agentflow.snapshots");

/// (thread id, checkpoint seq, node, idx) -> the write's opaque bytes, as a record.
pub const PENDING_WRITES: TableDefinition<(&str, u64, &str, u32), &[u8]> =
    TableDefinition::new("agentflow.pending_writes");

/// (thread id, checkpoint seq, node, effect key) -> the effect's opaque result bytes, as a record.
pub const EFFECTS: TableDefinition<(&str, u64, &str, &str), &[u8]> = TableDefinition::new("agentflow.effects");

/// (thread id, audit seq) -> `AuditEntry`.
pub const AUDIT: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("agentflow.audit");

/// approval id -> `ApprovalRecord`.
pub const APPROVALS: TableDefinition<&str, &[u8]> = TableDefinition::new("agentflow.approvals");

/// (thread id, approval id) -> (): index of a thread's approvals.
pub const APPROVALS_BY_THREAD: TableDefinition<(&str, &str), ()> =
    TableDefinition::new("agentflow.approvals_by_thread");

/// approval id -> (): index of the approvals whose status is `PENDING`.
pub const APPROVALS_PENDING: TableDefinition<&str, ()> = TableDefinition::new("agentflow.approvals_pending");

/// thread id -> a queued run (JSON with a version field, as a record): the run queue that
/// workers claim from.
pub const RUN_QUEUE: TableDefinition<&str, &[u8]> = TableDefinition::new("agentflow.run_queue");
/// (wake_at unix millis, thread id) -> (): the durable timers, earliest first.
pub const TIMERS: TableDefinition<(u64, &str), ()> = TableDefinition::new("agentflow.timers");

/// thread id -> wake_at (unix millis, as a record): each sleeping thread's timer. The entry of
/// [`TIMERS`] that orders it has no checksum: one this record does not confirm (damaged) is read
/// at the record's time, or skipped if the thread has no timer (a damaged key that names another
/// thread, or whose time moved later, hides its thread's timer until then).
pub const TIMER_OF: TableDefinition<&str, &[u8]> = TableDefinition::new("agentflow.timer_of");

/// tool name -> its circuit breaker (JSON with a version field, as a record), see
/// [`BreakerRecord`](crate::BreakerRecord).
pub const BREAKERS: TableDefinition<&str, &[u8]> = TableDefinition::new("agentflow.breakers");

/// graph fingerprint -> the graph's description (opaque UTF-8 text, as a record); see
/// [`Store::put_graph_description`](crate::Store::put_graph_description).
pub const GRAPHS: TableDefinition<&str, &[u8]> = TableDefinition::new("agentflow.graphs");

/// thread id -> its legal hold (`LegalHold`, as a record), see
/// [`Store::set_legal_hold`](crate::Store::set_legal_hold). Format 7.
pub const HOLDS: TableDefinition<&str, &[u8]> = TableDefinition::new("agentflow.holds");
