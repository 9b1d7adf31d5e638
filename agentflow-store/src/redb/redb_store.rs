//! [`RedbStore`]: the [`Store`] on an embedded redb file; opening it ([`RedbStoreBuilder`], the
//! format check and the tables every file has) and handing its writes to the writer thread.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use redb::backends::InMemoryBackend;
use redb::{Database, DatabaseError, ReadTransaction, ReadableDatabase, TableHandle};

use crate::error::{CommitError, OpenError, StorageError};
use crate::event_wakes::EventWakes;
use crate::record::{Durability, EVENT_LOG_KEEP_COMMITS};
use crate::redb::error::{WithPath, storage_error};
use crate::redb::owner;
use crate::redb::tables;
use crate::redb::upgrade;
use crate::redb::writer::{self, Committed, Job, OpJob, Reply, Shared, Tx, WriterConfig};
use crate::store::Store;

/// Store format written in the `META` table; bump on an incompatible layout change.
/// 3: every value (records, pending writes, effect results) ends with a checksum.
/// 4: a thread record names the thread that started it as a subgraph child.
/// 5: checkpoints and snapshots are keyed by thread number, see
/// [`crate::redb::thread_numbers`]; queue rows and circuit breakers carry a checksum, see
/// [`crate::redb::upgrade`].
/// 6: audit entries carry their hash chain, see [`crate::audit_chain`]; thread records may
/// name a tenant.
/// 7: a thread record may have status `purged`, which older builds cannot read, and legal
/// holds have their table, [`tables::HOLDS`].
/// 8: a thread record may end with the trace context of the thread's root span, which older
/// builds cannot read.
/// The layout this build writes (9: each thread's event log, the idempotency keys of run
/// starts, follow-up runs, cron schedules and webhook deliveries have their tables,
/// [`tables::EVENTS`] and the ones after it; queue rows may name a follow-up and a webhook;
/// older builds would purge a thread and leave its log).
/// 10: a queue row may be held behind a thread that waits outside the queue
/// ([`RunWait::Held`](crate::RunWait::Held)), which older builds cannot read, and follow-ups put
/// at the front take negative places in the order they were put there.
const STORE_FORMAT: u32 = 10;
/// The oldest layout this build opens, and moves to [`STORE_FORMAT`] on open: format 3 differs
/// in thread records without a parent, which this build still reads, formats 3 and 4 in
/// checkpoints and snapshots keyed by thread id, which the move renumbers, and formats 3 to 5
/// in audit entries without their hash chain, which the move chains; format 6 lacks only the
/// holds table, which the move creates; format 7 differs only in thread records without a
/// trace context, which this build reads as having none (the move changes no record); format 8
/// lacks only the tables of format 9, which the move creates; format 9 differs only in that no
/// queue row is held and follow-ups put at the front went before the first (the move changes
/// no row).
const OLDEST_FORMAT: u32 = 3;
/// The first format whose checkpoints and snapshots are keyed by thread number, and whose queue
/// rows and breakers carry a checksum.
const NUMBERED_FORMAT: u32 = 5;
/// The first format whose audit entries carry their hash chain.
const CHAINED_FORMAT: u32 = 6;
const APP: &[u8] = b"agentflow-store";
const IN_MEMORY: &str = "<in-memory>";

pub(super) fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(ToString::to_string)
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// Options for opening a [`RedbStore`].
#[derive(Debug, Clone)]
pub struct RedbStoreBuilder {
    verify_on_open: bool,
    flush_interval: Option<Duration>,
    max_group: usize,
    linger: Duration,
    cache_size: Option<usize>,
    event_log_keep: u64,
}

impl Default for RedbStoreBuilder {
    fn default() -> Self {
        RedbStoreBuilder {
            verify_on_open: true,
            flush_interval: Some(Duration::from_millis(200)),
            max_group: 256,
            linger: Duration::from_micros(60),
            cache_size: None,
            event_log_keep: EVENT_LOG_KEEP_COMMITS,
        }
    }
}

impl RedbStoreBuilder {
    /// Verify every page checksum when an existing file is opened (default `true`). It reads the
    /// whole file, but a damaged file is then reported as [`OpenError::Corrupted`]; without it
    /// redb trusts a cleanly closed file and damage surfaces later, when it is read: damage to a
    /// stored value (a record, a snapshot, a pending write, an effect result) is then a
    /// [`StorageError::Decode`] naming it (every value carries a CRC-32), and damage to redb's
    /// own page structure a [`StorageError::Corrupted`] or another typed error. Not covered
    /// without the verify: a flipped bit in a key that turns it into another valid key (the
    /// value then appears under that key).
    #[must_use]
    pub fn verify_on_open(mut self, verify: bool) -> Self {
        self.verify_on_open = verify;
        self
    }

    /// How long [`Durability::Eventual`] commits may stay non-durable before the writer makes
    /// them durable in the background (default 200 ms); no background flush is made when an
    /// immediate commit made since already did (redb commits in order). `None`: only an
    /// immediate commit, [`Store::flush`] or closing the store makes them durable.
    #[must_use]
    pub fn flush_interval(mut self, interval: Option<Duration>) -> Self {
        self.flush_interval = interval;
        self
    }

    /// Most requests committed in one transaction (default 256).
    #[must_use]
    pub fn max_group(mut self, max: usize) -> Self {
        self.max_group = max.max(1);
        self
    }

    /// How long the writer thread keeps polling for the next request after a commit before it
    /// sleeps (default 60 µs; at most 1 ms). The next step of a `Sync` run usually arrives
    /// within that window, so its commit starts without the 10-20 µs of waking a sleeping thread;
    /// the price is up to that much CPU time after each commit. `Duration::ZERO` never polls.
    #[must_use]
    pub fn linger(mut self, window: Duration) -> Self {
        self.linger = window.min(Duration::from_millis(1));
        self
    }

    /// redb page cache size in bytes (redb's default when unset).
    #[must_use]
    pub fn cache_size(mut self, bytes: usize) -> Self {
        self.cache_size = Some(bytes);
        self
    }

    /// How many commits' events each thread's log keeps (default and at most
    /// [`EVENT_LOG_KEEP_COMMITS`], at least 1): tests of the log's retention set a small bound.
    #[doc(hidden)]
    #[must_use]
    pub fn event_log_keep(mut self, commits: u64) -> Self {
        self.event_log_keep = commits.clamp(1, EVENT_LOG_KEEP_COMMITS);
        self
    }

    pub(super) fn redb(&self) -> redb::Builder {
        let mut builder = Database::builder();
        builder.set_check_integrity_on_open(self.verify_on_open);
        if let Some(bytes) = self.cache_size {
            builder.set_cache_size(bytes);
        }
        builder
    }

    /// Opens the store file at `path`, creating it if it does not exist.
    ///
    /// A new file is created whole or not at all: it is built and synced
    /// under a temporary name in the same directory, then linked into place
    /// and the directory synced, so a process killed while creating leaves
    /// no file at `path` (at most a hidden `.<name>.creating-*` file beside
    /// it, which may be deleted) and the next open starts over. An empty file
    /// at `path` is refused ([`OpenError::Empty`]): a store file is never
    /// empty, so it is something else, or a store that lost its contents.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<RedbStore, OpenError> {
        let path = path.as_ref().to_path_buf();
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() && meta.len() == 0 => return Err(OpenError::Empty { path }),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.create_whole(&path)?,
            Err(source) => return Err(OpenError::Io { path, source }),
        }
        let builder = self.redb();
        // redb may panic on a damaged file it trusts; that is still an error here.
        let db = catch_unwind(AssertUnwindSafe(|| builder.open(&path)))
            .map_err(|panic| OpenError::Corrupted {
                path: path.clone(),
                detail: format!("redb failed reading it: {}", panic_message(&*panic)),
            })?
            .map_err(|e| open_error(&path, e))?;
        RedbStore::start(db, path, true, self)
    }

    /// Creates an initialised store file at `path`, atomically (see [`RedbStoreBuilder::open`]).
    /// If another process creates `path` first, its file is kept and this one discarded.
    pub(super) fn create_whole(&self, path: &Path) -> Result<(), OpenError> {
        let io = |source| OpenError::Io { path: path.to_path_buf(), source };
        let name = path
            .file_name()
            .ok_or_else(|| io(std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file")))?;
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let temp = dir.join(format!(".{}.creating-{}-{nanos}", name.to_string_lossy(), std::process::id()));
        let created = (|| {
            let db = self.redb().create(&temp).map_err(|e| open_error(path, e))?;
            // Commits durably: the tables and the format version are on disk.
            init(&db, path)?;
            drop(db);
            std::fs::File::open(&temp).and_then(|f| f.sync_all()).map_err(io)?;
            match std::fs::hard_link(&temp, path) {
                // Another process created the store first: use theirs.
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                // No hard links on this filesystem: rename, unless the file appeared meanwhile.
                Err(_) if !path.exists() => std::fs::rename(&temp, path).map_err(io)?,
                Err(_) => {}
            }
            sync_dir(&dir).map_err(io)
        })();
        let _ = std::fs::remove_file(&temp);
        created
    }

    /// A store in memory (redb's `InMemoryBackend`), gone when dropped. For tests.
    pub fn in_memory(&self) -> Result<RedbStore, OpenError> {
        let path = PathBuf::from(IN_MEMORY);
        let db = self.redb().create_with_backend(InMemoryBackend::new()).map_err(|e| open_error(&path, e))?;
        RedbStore::start(db, path, false, self)
    }
}

/// Makes a new directory entry durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::fs::File::open(dir)?.sync_all()
    }
    // Windows cannot open a directory as a file; its rename and link are durable with the file.
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

fn open_error(path: &Path, err: DatabaseError) -> OpenError {
    let path = path.to_path_buf();
    match err {
        DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => {
            // The server holding it, if it left its sidecar; else any process.
            let held_by = owner::read(&path).map(|o| o.describe());
            OpenError::AlreadyOpen { path, held_by }
        }
        DatabaseError::UpgradeRequired(found) => OpenError::UnsupportedFormat {
            path,
            found: format!("redb file format {found}"),
            supported: "redb file format 3".to_string(),
        },
        DatabaseError::RepairAborted => OpenError::Corrupted { path, detail: "redb could not repair it".to_string() },
        DatabaseError::Storage(redb::StorageError::Io(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
            OpenError::NotAStore { path, detail: e.to_string() }
        }
        DatabaseError::Storage(redb::StorageError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            OpenError::NotAStore { path, detail: format!("the file is shorter than a store header: {e}") }
        }
        DatabaseError::Storage(redb::StorageError::Io(source)) => OpenError::Io { path, source },
        DatabaseError::Storage(redb::StorageError::Corrupted(detail)) => OpenError::Corrupted { path, detail },
        other => OpenError::Storage(storage_error(&path, other.into())),
    }
}

/// The [`Store`] on an embedded redb file.
///
/// Reads run on the calling thread in their own read transaction. Writes go to one writer
/// thread that commits concurrent requests together (group commit, see [`Store::commit_step`]).
/// Leases live in memory beside the open file (redb lets one process at a time open it), so a
/// reopened file starts with every thread free to resume.
/// For the same reason the store remembers, from each thread's last step commit, its stored
/// record, latest checkpoint, timer and pending writes: the next step of that thread checks
/// and writes against them instead of reading four tables, so a plain super-step writes the
/// checkpoints table alone. Any other write forgets them all, so they are never stale; the
/// lease check is made on every commit as before.
/// Dropping the store flushes pending eventual commits and closes the file; [`RedbStore::close`]
/// does the same and reports errors.
/// Each thread's event log ([`Store::read_events`]) is written by the step commits that carry
/// events, in their transactions; the wakes given to [`Store::on_events`] are called after each
/// of them (the file is open in this process only, so its commits are all there is to hear).
///
/// The file is neither encrypted nor signed, and this handle checks no caller: whoever holds
/// the handle, or can open the file, can do everything [`Store`] permits, deciding approvals
/// and rewriting journaled effect results and the audit log included (see
/// [the trust boundary](Store#trust-boundary)). Its filesystem permissions are its protection.
pub struct RedbStore {
    pub(super) shared: Arc<Shared>,
    sender: Option<Sender<Box<dyn Job>>>,
    writer: Option<JoinHandle<()>>,
    /// A file, not redb's in-memory backend.
    on_disk: bool,
    /// How many commits' events each thread's log keeps.
    pub(super) event_keep: u64,
    /// Called after each commit that added events (see [`Store::on_events`]).
    pub(super) wakes: Arc<EventWakes>,
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore").field("path", &self.shared.path).finish_non_exhaustive()
    }
}

impl RedbStore {
    /// Opens the store file at `path` with default options, creating it if needed.
    ///
    /// Fails with [`OpenError::AlreadyOpen`] if another process (or another `RedbStore` in this
    /// one) has the file open, and with a typed error naming the path for a file that is not a
    /// store, damaged, or from a newer version.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        RedbStoreBuilder::default().open(path)
    }

    /// A store in memory, for tests.
    pub fn in_memory() -> Result<Self, OpenError> {
        RedbStoreBuilder::default().in_memory()
    }

    /// Options for opening a store.
    pub fn builder() -> RedbStoreBuilder {
        RedbStoreBuilder::default()
    }

    /// The file path (`<in-memory>` for an in-memory store).
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Makes pending commits durable, stops the writer and closes the file.
    pub fn close(self) -> Result<(), StorageError> {
        let path = self.path_buf();
        let flushed = self.flush().map_err(|e| match e {
            CommitError::Storage(s) => s,
            other => StorageError::Backend { path: path.clone(), detail: other.to_string() },
        });
        let shared = Arc::clone(&self.shared);
        // Stops the writer thread, which holds the other reference.
        drop(self);
        flushed?;
        match Arc::try_unwrap(shared) {
            Ok(shared) => shared.db.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner).close().ctx(&path),
            Err(_) => Ok(()),
        }
    }

    pub(super) fn start(
        db: Database,
        path: PathBuf,
        on_disk: bool,
        options: &RedbStoreBuilder,
    ) -> Result<Self, OpenError> {
        init(&db, &path)?;
        let shared = Arc::new(Shared::new(db, path));
        let (sender, receiver) = mpsc::channel::<Box<dyn Job>>();
        let config = WriterConfig {
            max_group: options.max_group,
            flush_interval: options.flush_interval,
            linger: options.linger,
        };
        let for_writer = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("agentflow-store-writer".to_string())
            .spawn(move || writer::run(&for_writer, &receiver, config))
            .map_err(|source| OpenError::Io { path: shared.path.clone(), source })?;
        Ok(RedbStore {
            shared,
            sender: Some(sender),
            writer: Some(writer),
            on_disk,
            event_keep: options.event_log_keep,
            wakes: Arc::new(EventWakes::default()),
        })
    }

    pub(super) fn stop_writer(&mut self) {
        self.sender = None;
        if let Some(handle) = self.writer.take() {
            let _ = handle.join();
        }
    }

    pub(super) fn path_buf(&self) -> PathBuf {
        self.shared.path.clone()
    }

    /// Whether the store is a file (not redb's in-memory backend).
    pub(super) fn on_disk(&self) -> bool {
        self.on_disk
    }

    /// Refuses a request once the store was closed.
    pub(super) fn open_or_closed(&self) -> Result<(), StorageError> {
        match self.sender {
            Some(_) => Ok(()),
            None => Err(self.closed("the store was closed")),
        }
    }

    pub(super) fn closed(&self, detail: &str) -> StorageError {
        StorageError::Closed { path: self.path_buf(), detail: detail.to_string() }
    }

    /// Sends a write to the writer thread and waits for its answer.
    pub(super) fn submit<O, E, F>(&self, durability: Durability, op: F) -> Result<(O, Committed), E>
    where
        O: Send + 'static,
        E: From<StorageError> + Send + 'static,
        F: FnMut(&Tx<'_>) -> Result<O, E> + Send + 'static,
    {
        self.submit_job(durability, false, op)
    }

    /// [`RedbStore::submit`] for a job that keeps the thread facts exact (a step commit).
    pub(super) fn submit_job<O, E, F>(
        &self,
        durability: Durability,
        keeps_facts: bool,
        mut op: F,
    ) -> Result<(O, Committed), E>
    where
        O: Send + 'static,
        E: From<StorageError> + Send + 'static,
        F: FnMut(&Tx<'_>) -> Result<O, E> + Send + 'static,
    {
        let sender = self.sender.as_ref().ok_or_else(|| self.closed("the store was closed"))?;
        // An immediate commit waits for the disk anyway: made on this thread when the store is
        // idle, it saves the two thread hand-offs of going through the writer.
        if durability == Durability::Immediate
            && let Some(answer) = writer::commit_inline(&self.shared, keeps_facts, &mut op)
        {
            return answer;
        }
        let (reply, answer) = mpsc::sync_channel(1);
        let job = OpJob::new(durability, op, reply);
        let job: Box<dyn Job> = Box::new(if keeps_facts { job.keeping_facts() } else { job });
        sender.send(job).map_err(|_| self.closed("the writer thread stopped"))?;
        answer.recv().map_err(|_| E::from(self.closed("the writer thread failed on this request")))?
    }

    /// Sends a step commit to the writer thread; `reply` is called with the answer.
    pub(super) fn submit_step_then<O, E, F>(&self, durability: Durability, op: F, reply: Reply<O, E>)
    where
        O: Send + 'static,
        E: From<StorageError> + Send + 'static,
        F: FnMut(&Tx<'_>) -> Result<O, E> + Send + 'static,
    {
        let job: Box<dyn Job> = Box::new(OpJob::with_reply(durability, op, reply).keeping_facts());
        let Some(sender) = self.sender.as_ref() else {
            return job.finish(Err(self.closed("the store was closed")));
        };
        if let Err(mpsc::SendError(job)) = sender.send(job) {
            job.finish(Err(self.closed("the writer thread stopped")));
        }
    }

    /// Runs a read in its own read transaction; a panic inside redb becomes an error.
    pub(super) fn read<T, E: From<StorageError>>(
        &self,
        f: impl FnOnce(&ReadTransaction, &Path) -> Result<T, E>,
    ) -> Result<T, E> {
        let path = self.shared.path.as_path();
        let db = self.shared.db();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let txn = db.begin_read().ctx(path)?;
            f(&txn, path)
        }));
        outcome.unwrap_or_else(|panic| {
            Err(E::from(StorageError::Corrupted {
                path: path.to_path_buf(),
                detail: format!("redb failed reading it: {}", panic_message(&*panic)),
            }))
        })
    }

    /// Forgets what the step commits knew about their threads, so the next commit of each
    /// reads its tables (tests compare both paths).
    #[cfg(test)]
    pub(crate) fn forget_facts(&self) {
        self.shared.facts.clear();
    }

    /// How many threads the store holds facts about (tests).
    #[cfg(test)]
    pub(crate) fn facts_len(&self) -> usize {
        self.shared.facts.len()
    }

    /// Compacts the file (redb `Database::compact`), waiting for in-flight transactions.
    pub(super) fn compact_file(&self) -> Result<bool, StorageError> {
        let path = self.shared.path.as_path();
        let mut db = self.shared.db.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut compacted = false;
        // Each pass moves pages down; a handful of passes reaches the fixed point.
        for _ in 0..8 {
            if !db.compact().ctx(path)? {
                break;
            }
            compacted = true;
        }
        Ok(compacted)
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        self.stop_writer();
    }
}

/// Checks that `db` is an agentflow store (or empty) and creates the tables.
fn init(db: &Database, path: &Path) -> Result<(), OpenError> {
    let names: Vec<String> = {
        let txn = db.begin_read().ctx(path)?;
        txn.list_tables().ctx(path)?.map(|t| t.name().to_string()).collect()
    };
    let fresh = names.is_empty();
    let mut format = STORE_FORMAT;
    if !fresh && !names.iter().any(|n| n == tables::META.name()) {
        return Err(OpenError::Foreign { path: path.to_path_buf(), tables: names });
    }
    if !fresh {
        let txn = db.begin_read().ctx(path)?;
        let meta = txn.open_table(tables::META).ctx(path)?;
        let app = redb::ReadableTable::get(&meta, "app").ctx(path)?;
        if app.as_ref().map(redb::AccessGuard::value) != Some(APP) {
            return Err(OpenError::Foreign { path: path.to_path_buf(), tables: names });
        }
        let stored = redb::ReadableTable::get(&meta, "format").ctx(path)?;
        format = stored.as_ref().and_then(|v| <[u8; 4]>::try_from(v.value()).ok()).map(u32::from_le_bytes).ok_or_else(
            || OpenError::Corrupted {
                path: path.to_path_buf(),
                detail: "the store format version is missing or malformed".to_string(),
            },
        )?;
        if !(OLDEST_FORMAT..=STORE_FORMAT).contains(&format) {
            return Err(OpenError::UnsupportedFormat {
                path: path.to_path_buf(),
                found: format.to_string(),
                supported: format!("{OLDEST_FORMAT} to {STORE_FORMAT}"),
            });
        }
    }
    let txn = db.begin_write().ctx(path)?;
    {
        let mut meta = txn.open_table(tables::META).ctx(path)?;
        if fresh {
            meta.insert("app", APP).ctx(path)?;
        }
        drop(meta);
        if format < NUMBERED_FORMAT {
            upgrade::to_format_5(&txn, path)?;
        }
        if format < CHAINED_FORMAT {
            upgrade::to_format_6(&txn, path)?;
        }
        let mut meta = txn.open_table(tables::META).ctx(path)?;
        // An older file is moved to this build's format: from then on, builds that cannot
        // read its new thread records refuse it by its format, not by a record.
        meta.insert("format", STORE_FORMAT.to_le_bytes().as_slice()).ctx(path)?;
        txn.open_table(tables::THREADS).ctx(path)?;
        txn.open_table(tables::THREAD_NUMBERS).ctx(path)?;
        txn.open_table(tables::CHECKPOINTS).ctx(path)?;
        txn.open_table(tables::SNAPSHOTS).ctx(path)?;
        txn.open_table(tables::PENDING_WRITES).ctx(path)?;
        txn.open_table(tables::EFFECTS).ctx(path)?;
        txn.open_table(tables::AUDIT).ctx(path)?;
        txn.open_table(tables::APPROVALS).ctx(path)?;
        txn.open_table(tables::APPROVALS_BY_THREAD).ctx(path)?;
        txn.open_table(tables::APPROVALS_PENDING).ctx(path)?;
        txn.open_table(tables::RUN_QUEUE).ctx(path)?;
        txn.open_table(tables::TIMERS).ctx(path)?;
        txn.open_table(tables::TIMER_OF).ctx(path)?;
        txn.open_table(tables::BREAKERS).ctx(path)?;
        txn.open_table(tables::GRAPHS).ctx(path)?;
        txn.open_table(tables::HOLDS).ctx(path)?;
        txn.open_table(tables::EVENTS).ctx(path)?;
        txn.open_table(tables::EVENT_LOG_ENDS).ctx(path)?;
        txn.open_table(tables::IDEMPOTENCY_KEYS).ctx(path)?;
        txn.open_table(tables::IDEMPOTENCY_BY_TIME).ctx(path)?;
        txn.open_table(tables::IDEMPOTENCY_BY_THREAD).ctx(path)?;
        txn.open_table(tables::FOLLOW_UPS).ctx(path)?;
        txn.open_table(tables::SCHEDULES).ctx(path)?;
        txn.open_table(tables::WEBHOOKS).ctx(path)?;
        txn.open_table(tables::WEBHOOKS_BY_THREAD).ctx(path)?;
        txn.open_table(tables::WEBHOOKS_DUE).ctx(path)?;
    }
    txn.commit().ctx(path)?;
    Ok(())
}
