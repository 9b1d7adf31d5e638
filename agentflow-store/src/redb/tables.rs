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

/// (thread id, seq, idx) -> a logged event (`kind`, `data`, `at`, as a record): each thread's
/// event log, see [`Store::read_events`](crate::Store::read_events). `seq` numbers the commits
/// that wrote events, from 1 in each thread; `idx` is an event's place in its commit. A commit
/// past the kept bound removes the thread's oldest seqs. Format 9.
pub const EVENTS: TableDefinition<(&str, u64, u32), &[u8]> = TableDefinition::new("agentflow.events");

/// thread id -> the last seq of the thread's event log when a purge emptied it (u64, as a
/// record), so the log's next commit goes on after it: a log's seqs never start again. A log
/// that holds events has its last seq in [`EVENTS`]. Format 9.
pub const EVENT_LOG_ENDS: TableDefinition<&str, &[u8]> = TableDefinition::new("agentflow.event_log_ends");

/// (scope, key) -> the run an idempotency key started (thread, request digest, when, as a
/// record), see [`NewRun::idempotency`](crate::NewRun::idempotency). Format 9.
pub const IDEMPOTENCY_KEYS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("agentflow.idempotency_keys");

/// (created unix millis, scope, key) -> (): the idempotency keys by age, oldest first, so
/// expired ones are removed without a scan. Format 9.
pub const IDEMPOTENCY_BY_TIME: TableDefinition<(u64, &str, &str), ()> =
    TableDefinition::new("agentflow.idempotency_by_time");

/// (thread id, scope, key) -> (): the idempotency keys of each thread, removed with it by a
/// purge. Format 9.
pub const IDEMPOTENCY_BY_THREAD: TableDefinition<(&str, &str, &str), ()> =
    TableDefinition::new("agentflow.idempotency_by_thread");

/// (thread id, place) -> a follow-up run waiting behind the thread's queued run (as a record),
/// the first to run at the lowest place; see
/// [`Store::enqueue_follow_up`](crate::Store::enqueue_follow_up). Format 9.
pub const FOLLOW_UPS: TableDefinition<(&str, i64), &[u8]> = TableDefinition::new("agentflow.follow_ups");

/// schedule id -> a cron schedule (`ScheduleRecord`, as a record); see
/// [`Store::put_schedule`](crate::Store::put_schedule). Format 9.
pub const SCHEDULES: TableDefinition<&str, &[u8]> = TableDefinition::new("agentflow.schedules");

/// delivery id -> a completion webhook delivery (`WebhookDelivery`, as a record); ids come from
/// `META`'s `"next_webhook_id"` (u64, little endian; absent: 1). Format 9.
pub const WEBHOOKS: TableDefinition<u64, &[u8]> = TableDefinition::new("agentflow.webhooks");

/// (thread id, delivery id) -> (): each thread's deliveries, removed with it by a purge. Format 9.
pub const WEBHOOKS_BY_THREAD: TableDefinition<(&str, u64), ()> = TableDefinition::new("agentflow.webhooks_by_thread");

/// (next attempt unix millis, delivery id) -> (): the pending deliveries by when they are due
/// (no checksum: each key is checked against its [`WEBHOOKS`] row). Format 9.
pub const WEBHOOKS_DUE: TableDefinition<(u64, u64), ()> = TableDefinition::new("agentflow.webhooks_due");
