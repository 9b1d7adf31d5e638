//! [`RedbStore`]: the [`Store`] on an embedded redb file.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use redb::backends::InMemoryBackend;
use redb::{Database, DatabaseError, ReadTransaction, ReadableDatabase, TableHandle};

use crate::breaker::{BreakerAnswer, BreakerError, BreakerRecord, BreakerUpdate};
use crate::dump::ThreadDump;
use crate::error::{
    ApprovalError, AuditError, CommitError, CompactError, EffectError, LeaseError, OpenError, ReadError, StorageError,
};
use crate::queue::{NewRun, QueueError, QueuedRun, RunControl, RunWait, Settle};
use crate::record::{
    ApprovalPatch, ApprovalRecord, ApprovalStatus, AuditEntry, Checkpoint, CheckpointSummary, CommitReceipt,
    CompactReport, Durability, EffectBatch, EffectKey, EffectOutcome, Lease, NewAuditEntry, Payload, PendingWrite,
    Snapshot, StateChain, StepCommit, ThreadRecord, Timer,
};
use crate::redb::approvals::{stage_put_approval, stage_transition};
use crate::redb::audit::stage_append_audit;
use crate::redb::breakers;
use crate::redb::effects::{effect_key, remove_effects_below, stage_effect_batch, stage_record_effect};
use crate::redb::error::{WithPath, storage_error};
use crate::redb::queue;
use crate::redb::reads;
use crate::redb::step_commit::{CommitOut, remove_pending, stage_commit};
use crate::redb::tables;
use crate::redb::thread_numbers::{self, ByNumber, Numbered};
use crate::redb::upgrade;
use crate::redb::writer::{self, Committed, Job, OpJob, Reply, Shared, Tx, WriterConfig};
use crate::store::{CommitCallback, FoldFn, Listing, Store};

/// Store format written in the `META` table; bump on an incompatible layout change.
/// 3: every value (records, pending writes, effect results) ends with a checksum.
/// 4: a thread record names the thread that started it as a subgraph child.
/// The layout this build writes (5: checkpoints and snapshots are keyed by thread number, see
/// [`crate::redb::thread_numbers`]; queue rows and circuit breakers carry a checksum, see
/// [`crate::redb::upgrade`]).
const STORE_FORMAT: u32 = 5;
/// The oldest layout this build opens, and moves to [`STORE_FORMAT`] on open: format 3 differs
/// in thread records without a parent, which this build still reads, and formats 3 and 4 in
/// checkpoints and snapshots keyed by thread id, which the move renumbers.
const OLDEST_FORMAT: u32 = 3;
/// The first format whose checkpoints and snapshots are keyed by thread number, and whose queue
/// rows and breakers carry a checksum.
const NUMBERED_FORMAT: u32 = 5;
const APP: &[u8] = b"agentflow-store";
const IN_MEMORY: &str = "<in-memory>";

fn panic_message(payload: &(dyn Any + Send)) -> String {
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
}

impl Default for RedbStoreBuilder {
    fn default() -> Self {
        RedbStoreBuilder {
            verify_on_open: true,
            flush_interval: Some(Duration::from_millis(200)),
            max_group: 256,
            linger: Duration::from_micros(60),
            cache_size: None,
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

    fn redb(&self) -> redb::Builder {
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
        RedbStore::start(db, path, self)
    }

    /// Creates an initialised store file at `path`, atomically (see [`RedbStoreBuilder::open`]).
    /// If another process creates `path` first, its file is kept and this one discarded.
    fn create_whole(&self, path: &Path) -> Result<(), OpenError> {
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
        RedbStore::start(db, path, self)
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
        DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => OpenError::AlreadyOpen { path },
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
///
/// The file is neither encrypted nor signed, and this handle checks no caller: whoever holds
/// the handle, or can open the file, can do everything [`Store`] permits, deciding approvals
/// and rewriting journaled effect results and the audit log included (see
/// [the trust boundary](Store#trust-boundary)). Its filesystem permissions are its protection.
pub struct RedbStore {
    shared: Arc<Shared>,
    sender: Option<Sender<Box<dyn Job>>>,
    writer: Option<JoinHandle<()>>,
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

    fn start(db: Database, path: PathBuf, options: &RedbStoreBuilder) -> Result<Self, OpenError> {
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
        Ok(RedbStore { shared, sender: Some(sender), writer: Some(writer) })
    }

    fn stop_writer(&mut self) {
        self.sender = None;
        if let Some(handle) = self.writer.take() {
            let _ = handle.join();
        }
    }

    fn path_buf(&self) -> PathBuf {
        self.shared.path.clone()
    }

    /// Refuses a request once the store was closed.
    fn open_or_closed(&self) -> Result<(), StorageError> {
        match self.sender {
            Some(_) => Ok(()),
            None => Err(self.closed("the store was closed")),
        }
    }

    fn closed(&self, detail: &str) -> StorageError {
        StorageError::Closed { path: self.path_buf(), detail: detail.to_string() }
    }

    /// Sends a write to the writer thread and waits for its answer.
    fn submit<O, E, F>(&self, durability: Durability, op: F) -> Result<(O, Committed), E>
    where
        O: Send + 'static,
        E: From<StorageError> + Send + 'static,
        F: FnMut(&Tx<'_>) -> Result<O, E> + Send + 'static,
    {
        self.submit_job(durability, false, op)
    }

    /// [`RedbStore::submit`] for a job that keeps the thread facts exact (a step commit).
    fn submit_job<O, E, F>(&self, durability: Durability, keeps_facts: bool, mut op: F) -> Result<(O, Committed), E>
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
    fn submit_step_then<O, E, F>(&self, durability: Durability, op: F, reply: Reply<O, E>)
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
    fn read<T, E: From<StorageError>>(&self, f: impl FnOnce(&ReadTransaction, &Path) -> Result<T, E>) -> Result<T, E> {
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
    fn compact_file(&self) -> Result<bool, StorageError> {
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
    }
    txn.commit().ctx(path)?;
    Ok(())
}

impl Store for RedbStore {
    fn thread(&self, id: &str) -> Result<Option<ThreadRecord>, ReadError> {
        self.read(|txn, path| {
            let threads = txn.open_table(tables::THREADS).ctx(path)?;
            Ok(reads::thread_record(path, &threads, &self.shared.leases, id)?)
        })
    }

    fn list_threads(&self) -> Result<Vec<ThreadRecord>, ReadError> {
        self.threads(Scan::Strict).map(|l| l.items)
    }

    fn scan_threads(&self) -> Result<Listing<ThreadRecord>, ReadError> {
        self.threads(Scan::Skip)
    }

    fn child_threads(&self, parent: &str) -> Result<Listing<ThreadRecord>, ReadError> {
        self.threads_under(parent)
    }

    fn commit_step(&self, commit: StepCommit) -> Result<CommitReceipt, CommitError> {
        let (out, committed) =
            self.submit_job(commit.durability, true, move |tx: &Tx<'_>| stage_commit(tx, &commit))?;
        Ok(CommitReceipt {
            checkpoint: out.checkpoint,
            audit_seqs: out.audit_seqs,
            durable: committed.durable,
            group_size: committed.group_size,
        })
    }

    fn commit_step_then(&self, commit: StepCommit, done: CommitCallback) {
        let reply: Reply<CommitOut, CommitError> = Box::new(move |answer| {
            done(answer.map(|(out, committed)| CommitReceipt {
                checkpoint: out.checkpoint,
                audit_seqs: out.audit_seqs,
                durable: committed.durable,
                group_size: committed.group_size,
            }))
        });
        self.submit_step_then(commit.durability, move |tx: &Tx<'_>| stage_commit(tx, &commit), reply);
    }

    fn flush(&self) -> Result<(), CommitError> {
        self.submit(Durability::Immediate, |_: &Tx<'_>| Ok::<_, CommitError>(()))?;
        Ok(())
    }

    fn checkpoint(&self, thread: &str, seq: u64) -> Result<Option<Checkpoint>, ReadError> {
        self.read(|txn, path| {
            let thread = numbered(txn, path, thread)?;
            let checkpoints = txn.open_table(tables::CHECKPOINTS).ctx(path)?;
            let snapshots = txn.open_table(tables::SNAPSHOTS).ctx(path)?;
            load_checkpoint(path, &checkpoints, &snapshots, thread, seq)
        })
    }

    fn latest_checkpoint(&self, thread: &str) -> Result<Option<Checkpoint>, ReadError> {
        self.read(|txn, path| {
            let thread = numbered(txn, path, thread)?;
            let checkpoints = txn.open_table(tables::CHECKPOINTS).ctx(path)?;
            let snapshots = txn.open_table(tables::SNAPSHOTS).ctx(path)?;
            match reads::latest_checkpoint_seq(path, &checkpoints, thread)? {
                None => Ok(None),
                Some(seq) => load_checkpoint(path, &checkpoints, &snapshots, thread, seq),
            }
        })
    }

    fn list_checkpoints(&self, thread: &str) -> Result<Vec<CheckpointSummary>, ReadError> {
        self.read(|txn, path| {
            let thread = numbered(txn, path, thread)?;
            let checkpoints = txn.open_table(tables::CHECKPOINTS).ctx(path)?;
            Ok(reads::summaries(path, &checkpoints, thread)?)
        })
    }

    fn state_chain(&self, thread: &str, seq: u64) -> Result<Option<StateChain>, ReadError> {
        self.read(|txn, path| {
            let thread = numbered(txn, path, thread)?;
            let checkpoints = txn.open_table(tables::CHECKPOINTS).ctx(path)?;
            let snapshots = txn.open_table(tables::SNAPSHOTS).ctx(path)?;
            reads::state_chain(path, &checkpoints, &snapshots, thread, seq)
        })
    }

    fn pending_writes(&self, thread: &str, seq: u64) -> Result<Vec<PendingWrite>, ReadError> {
        self.read(|txn, path| Ok(pending_writes_in(txn, path, thread, Some(seq))?))
    }

    fn acquire_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        self.open_or_closed()?;
        self.shared.leases.acquire(thread, holder, ttl_ms, now)
    }

    fn renew_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        self.open_or_closed()?;
        self.shared.leases.renew(thread, holder, ttl_ms, now)
    }

    fn release_lease(&self, thread: &str, holder: &str) -> Result<(), LeaseError> {
        self.open_or_closed()?;
        self.shared.leases.release(thread, holder)
    }

    fn effect(&self, key: &EffectKey) -> Result<Option<Vec<u8>>, ReadError> {
        self.read(|txn, path| {
            let effects = txn.open_table(tables::EFFECTS).ctx(path)?;
            let k = (key.thread.as_str(), key.seq, key.node.as_str(), key.key.as_str());
            match redb::ReadableTable::get(&effects, k).ctx(path)? {
                None => Ok(None),
                Some(v) => {
                    Ok(Some(reads::decode(path, tables::EFFECTS, || effect_key(key), v.value(), Payload::decode)?))
                }
            }
        })
    }

    fn effect_keys(&self, thread: &str, seq: u64) -> Result<Vec<EffectKey>, ReadError> {
        self.read(|txn, path| {
            let effects = txn.open_table(tables::EFFECTS).ctx(path)?;
            let mut keys = Vec::new();
            for entry in redb::ReadableTable::range(&effects, (thread, seq, "", "")..).ctx(path)? {
                let (k, _) = entry.ctx(path)?;
                let (t, s, node, key) = k.value();
                if t != thread || s != seq {
                    break;
                }
                keys.push(EffectKey::new(t, s, node, key));
            }
            Ok(keys)
        })
    }

    /// One range scan of the effects table over the thread's keys.
    fn thread_effects(&self, thread: &str) -> Result<Vec<(EffectKey, Vec<u8>)>, ReadError> {
        self.read(|txn, path| Ok(thread_effects_in(txn, path, thread)?))
    }

    /// Every part in one read transaction: the dump is the thread at one moment.
    fn dump_thread(&self, thread: &str) -> Result<Option<ThreadDump>, ReadError> {
        self.read(|txn, path| {
            let threads = txn.open_table(tables::THREADS).ctx(path)?;
            let Some(record) = reads::thread_record(path, &threads, &self.shared.leases, thread)? else {
                return Ok(None);
            };
            let mut dump = ThreadDump::new(record);
            dump.wake_at = timer_in(txn, path, thread)?;
            let numbered = numbered(txn, path, thread)?;
            let checkpoints = txn.open_table(tables::CHECKPOINTS).ctx(path)?;
            let snapshots = txn.open_table(tables::SNAPSHOTS).ctx(path)?;
            for summary in reads::summaries(path, &checkpoints, numbered)? {
                dump.checkpoints.extend(load_checkpoint(path, &checkpoints, &snapshots, numbered, summary.seq)?);
            }
            // The pending writes of the thread's checkpoints (a store keeps none of others).
            let seqs: BTreeSet<u64> = dump.checkpoints.iter().map(|c| c.seq).collect();
            dump.pending_writes = pending_writes_in(txn, path, thread, None)?;
            dump.pending_writes.retain(|w| seqs.contains(&w.seq));
            dump.effects = thread_effects_in(txn, path, thread)?;
            dump.audit = audit_in(txn, path, thread, Scan::Strict)?.items;
            dump.approvals = approvals_in(txn, path, thread, Scan::Strict)?.items;
            Ok(Some(dump))
        })
    }

    fn record_effect(&self, key: &EffectKey, result: &[u8]) -> Result<EffectOutcome, EffectError> {
        let (key, result) = (key.clone(), result.to_vec());
        let (outcome, _) = self.submit(Durability::Immediate, move |tx: &Tx<'_>| {
            stage_record_effect(tx, &key, &result).map_err(EffectError::from)
        })?;
        Ok(outcome)
    }

    fn commit_effects(&self, batch: EffectBatch) -> Result<Vec<EffectOutcome>, CommitError> {
        let (outcomes, _) = self.submit(Durability::Immediate, move |tx: &Tx<'_>| stage_effect_batch(tx, &batch))?;
        Ok(outcomes)
    }

    fn append_audit(&self, thread: &str, entry: NewAuditEntry) -> Result<u64, AuditError> {
        let thread = thread.to_string();
        let (seq, _) =
            self.submit(Durability::Immediate, move |tx: &Tx<'_>| stage_append_audit(tx, &thread, &entry))?;
        Ok(seq)
    }

    fn list_audit(&self, thread: &str) -> Result<Vec<AuditEntry>, ReadError> {
        self.audit(thread, Scan::Strict).map(|l| l.items)
    }

    fn scan_audit(&self, thread: &str) -> Result<Listing<AuditEntry>, ReadError> {
        self.audit(thread, Scan::Skip)
    }

    fn put_approval(&self, approval: ApprovalRecord, actor: &str) -> Result<(), ApprovalError> {
        let actor = actor.to_string();
        self.submit(Durability::Immediate, move |tx: &Tx<'_>| stage_put_approval(tx, &approval, &actor))?;
        Ok(())
    }

    fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, ReadError> {
        self.read(|txn, path| {
            let approvals = txn.open_table(tables::APPROVALS).ctx(path)?;
            Ok(reads::get_str(path, &approvals, tables::APPROVALS, id, ApprovalRecord::decode)?)
        })
    }

    fn list_approvals(&self, thread: &str) -> Result<Vec<ApprovalRecord>, ReadError> {
        self.approvals_of(thread, Scan::Strict).map(|l| l.items)
    }

    fn scan_approvals(&self, thread: &str) -> Result<Listing<ApprovalRecord>, ReadError> {
        self.approvals_of(thread, Scan::Skip)
    }

    fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, ReadError> {
        self.pending_approvals(Scan::Strict).map(|l| l.items)
    }

    fn scan_pending_approvals(&self) -> Result<Listing<ApprovalRecord>, ReadError> {
        self.pending_approvals(Scan::Skip)
    }

    fn transition_approval(
        &self,
        id: &str,
        expected: ApprovalStatus,
        to: ApprovalStatus,
        patch: ApprovalPatch,
    ) -> Result<ApprovalRecord, ApprovalError> {
        let id = id.to_string();
        let (record, _) =
            self.submit(Durability::Immediate, move |tx: &Tx<'_>| stage_transition(tx, &id, expected, to, &patch))?;
        Ok(record)
    }

    fn compact(&self, thread: &str, keep_last: usize, fold: &FoldFn<'_>) -> Result<CompactReport, CompactError> {
        let (dropped, folded) = self.compact_thread(thread, keep_last.max(1), fold)?;
        let file_compacted = if dropped > 0 { self.compact_file()? } else { false };
        Ok(CompactReport { dropped, folded, file_compacted })
    }

    fn enqueue_run(&self, run: NewRun) -> Result<(), QueueError> {
        self.submit(Durability::Immediate, move |tx: &Tx<'_>| queue::stage_enqueue(tx, &run))?;
        Ok(())
    }

    /// Made by the store's one writer thread, so claims in this process never overlap.
    fn claim_runs(
        &self,
        graph: &str,
        holder: &str,
        ttl_ms: u64,
        now: u64,
        max: usize,
    ) -> Result<Vec<QueuedRun>, QueueError> {
        let (graph, holder) = (graph.to_string(), holder.to_string());
        let (runs, _) = self.submit(Durability::Immediate, move |tx: &Tx<'_>| {
            queue::stage_claim(tx, &graph, &holder, ttl_ms, now, max)
        })?;
        Ok(runs)
    }

    fn heartbeat_runs(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
        let holder = holder.to_string();
        let (controls, _) =
            self.submit(Durability::Eventual, move |tx: &Tx<'_>| queue::stage_heartbeat(tx, &holder, now))?;
        Ok(controls)
    }

    fn settle_run(&self, thread: &str, holder: &str, settle: &Settle) -> Result<bool, QueueError> {
        let (thread, holder, settle) = (thread.to_string(), holder.to_string(), settle.clone());
        let (settled, _) =
            self.submit(Durability::Immediate, move |tx: &Tx<'_>| queue::stage_settle(tx, &thread, &holder, &settle))?;
        Ok(settled)
    }

    fn control_run(&self, thread: &str, control: RunControl) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        let (set, _) =
            self.submit(Durability::Immediate, move |tx: &Tx<'_>| queue::stage_control(tx, &thread, control))?;
        Ok(set)
    }

    fn wake_run(&self, thread: &str, wait: RunWait) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        let (woken, _) = self.submit(Durability::Immediate, move |tx: &Tx<'_>| queue::stage_wake(tx, &thread, wait))?;
        Ok(woken)
    }

    fn list_runs(&self) -> Result<Vec<QueuedRun>, QueueError> {
        Ok(self.read(|txn, path| queue::list(path, txn, &self.shared.leases))?)
    }

    fn run_controls(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
        Ok(self.read(|txn, path| queue::controls(path, txn, &self.shared.leases, holder, now))?)
    }

    fn due_timers(&self, until: u64, limit: usize) -> Result<Vec<Timer>, ReadError> {
        self.read(|txn, path| {
            let timers = txn.open_table(tables::TIMERS).ctx(path)?;
            let of = txn.open_table(tables::TIMER_OF).ctx(path)?;
            let (mut out, mut corrected) = (Vec::new(), Vec::new());
            for entry in redb::ReadableTable::iter(&timers).ctx(path)? {
                if out.len() >= limit {
                    break;
                }
                let (k, _) = entry.ctx(path)?;
                let (wake_at, thread) = k.value();
                if wake_at > until {
                    break;
                }
                // The index's key has no checksum; the thread's record (which has one) is the
                // timer. A key it does not confirm (damaged) is read at the record's time, or
                // skipped when the thread has no timer. A record that does not decode is listed
                // at the key's time: waking that thread fails on its own record, and the other
                // timers still run. (A damaged key that names no sleeping thread, or whose time
                // moved past `until`, hides its thread's timer until then: the index has no
                // checksum to tell.)
                match crate::redb::step_commit::timer_of(path, &of, thread) {
                    Ok(Some(at)) if at == wake_at => out.push(Timer { wake_at, thread: thread.to_string() }),
                    Ok(Some(at)) if at <= until => corrected.push(Timer { wake_at: at, thread: thread.to_string() }),
                    Ok(_) => {}
                    Err(StorageError::Decode { .. }) => out.push(Timer { wake_at, thread: thread.to_string() }),
                    Err(e) => return Err(e.into()),
                }
            }
            // Corrected entries take their place by time (and a thread is listed once).
            if !corrected.is_empty() {
                out.extend(corrected);
                out.sort_by(|a, b| (a.wake_at, &a.thread).cmp(&(b.wake_at, &b.thread)));
                out.dedup_by(|a, b| a.thread == b.thread);
                out.truncate(limit);
            }
            Ok(out)
        })
    }

    fn thread_timer(&self, thread: &str) -> Result<Option<u64>, ReadError> {
        self.read(|txn, path| Ok(timer_in(txn, path, thread)?))
    }

    fn breaker(&self, tool: &str) -> Result<Option<BreakerRecord>, ReadError> {
        Ok(self.read(|txn, path| breakers::read(path, txn, tool))?)
    }

    /// Made by the store's one writer thread, so concurrent updates never interleave.
    fn update_breaker(&self, update: BreakerUpdate) -> Result<BreakerAnswer, BreakerError> {
        let (answer, _) = self.submit(Durability::Immediate, move |tx: &Tx<'_>| breakers::stage_update(tx, &update))?;
        Ok(answer)
    }

    fn put_graph_description(&self, fingerprint: &str, description: &str) -> Result<(), StorageError> {
        let (fingerprint, row) = (fingerprint.to_string(), Payload::encode(description.as_bytes()));
        self.submit(Durability::Immediate, move |tx: &Tx<'_>| -> Result<(), StorageError> {
            let mut graphs = tx.txn.open_table(tables::GRAPHS).ctx(tx.path)?;
            tx.wrote();
            graphs.insert(fingerprint.as_str(), row.as_slice()).ctx(tx.path)?;
            Ok(())
        })?;
        Ok(())
    }

    /// One write transaction.
    fn enqueue_run_audited(&self, run: NewRun, entry: NewAuditEntry) -> Result<(), QueueError> {
        self.submit(Durability::Immediate, move |tx: &Tx<'_>| {
            queue::stage_enqueue(tx, &run)?;
            stage_append_audit(tx, &run.thread, &entry)?;
            Ok::<_, QueueError>(())
        })?;
        Ok(())
    }

    fn restore_thread(&self, dump: crate::ThreadDump) -> Result<(), CommitError> {
        self.submit(Durability::Immediate, move |tx: &Tx<'_>| crate::redb::restore::stage_restore(tx, &dump))?;
        Ok(())
    }

    /// One write transaction.
    fn restore_threads(&self, dumps: Vec<crate::ThreadDump>) -> Result<(), CommitError> {
        crate::dump::check_distinct(&dumps)?;
        self.submit(Durability::Immediate, move |tx: &Tx<'_>| {
            dumps.iter().try_for_each(|dump| crate::redb::restore::stage_restore(tx, dump))
        })?;
        Ok(())
    }

    fn graph_description(&self, fingerprint: &str) -> Result<Option<String>, ReadError> {
        self.read(|txn, path| {
            let graphs = txn.open_table(tables::GRAPHS).ctx(path)?;
            let bytes = reads::get_str(path, &graphs, tables::GRAPHS, fingerprint, Payload::decode)?;
            Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
        })
    }

    /// One write transaction.
    fn wake_run_audited(&self, thread: &str, wait: RunWait, entry: NewAuditEntry) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        let (woken, _) = self.submit(Durability::Immediate, move |tx: &Tx<'_>| {
            let woken = queue::stage_wake(tx, &thread, wait)?;
            if woken {
                stage_append_audit(tx, &thread, &entry)?;
            }
            Ok::<_, QueueError>(woken)
        })?;
        Ok(woken)
    }

    /// One write transaction.
    fn control_run_audited(&self, thread: &str, control: RunControl, entry: NewAuditEntry) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        let (set, _) = self.submit(Durability::Immediate, move |tx: &Tx<'_>| {
            let set = queue::stage_control(tx, &thread, control)?;
            if set {
                stage_append_audit(tx, &thread, &entry)?;
            }
            Ok::<_, QueueError>(set)
        })?;
        Ok(set)
    }
}

/// What a listing does with a record that does not decode.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// Fail the listing.
    Strict,
    /// Skip it and report it in [`Listing::skipped`].
    Skip,
}

/// Collects a listing's records.
struct Collect<T> {
    scan: Scan,
    listing: Listing<T>,
}

impl<T> Collect<T> {
    fn new(scan: Scan) -> Self {
        Collect { scan, listing: Listing::complete(Vec::new()) }
    }

    /// Adds a decoded record, or handles a decode failure as the scan says; any other failure
    /// of the file fails the listing.
    fn push(&mut self, record: Result<T, StorageError>) -> Result<(), StorageError> {
        match record {
            Ok(item) => self.listing.items.push(item),
            Err(e @ StorageError::Decode { .. }) if self.scan == Scan::Skip => self.listing.skipped.push(e),
            Err(e) => return Err(e),
        }
        Ok(())
    }
}

impl RedbStore {
    fn threads(&self, scan: Scan) -> Result<Listing<ThreadRecord>, ReadError> {
        self.read(|txn, path| {
            let threads = txn.open_table(tables::THREADS).ctx(path)?;
            let mut out = Collect::new(scan);
            for entry in redb::ReadableTable::iter(&threads).ctx(path)? {
                let (k, v) = entry.ctx(path)?;
                let id = k.value();
                let record =
                    reads::decode(path, tables::THREADS, || format!("{id:?}"), v.value(), ThreadRecord::decode).map(
                        |mut record| {
                            record.lease = self.shared.leases.get(id);
                            record
                        },
                    );
                out.push(record)?;
            }
            Ok(out.listing)
        })
    }

    /// The children of `parent`: a child's id extends its parent's with `/` and one level
    /// (`{node}.{seq}.{call}.{graph}`, no `/`), so they are among the ids one level under
    /// `parent/` (a thread of its own with such an id is not one: its record names no parent).
    fn threads_under(&self, parent: &str) -> Result<Listing<ThreadRecord>, ReadError> {
        let prefix = format!("{parent}/");
        self.read(|txn, path| {
            let threads = txn.open_table(tables::THREADS).ctx(path)?;
            let mut out = Collect::new(Scan::Skip);
            for entry in threads.range(prefix.as_str()..).ctx(path)? {
                let (k, v) = entry.ctx(path)?;
                let id = k.value();
                let Some(level) = id.strip_prefix(&prefix) else { break };
                // Deeper down: a child's own children, unless its record names `parent` (an id
                // whose level holds a `/`), as PostgreSQL selects them by that field.
                let deeper = level.contains('/');
                let record =
                    reads::decode(path, tables::THREADS, || format!("{id:?}"), v.value(), ThreadRecord::decode).map(
                        |mut record| {
                            record.lease = self.shared.leases.get(id);
                            record
                        },
                    );
                if record.as_ref().is_ok_and(|r| r.parent.as_deref() != Some(parent)) {
                    continue;
                }
                // An unreadable record further down is its own parent's to report.
                if deeper && record.is_err() {
                    continue;
                }
                out.push(record)?;
            }
            Ok(out.listing)
        })
    }

    fn audit(&self, thread: &str, scan: Scan) -> Result<Listing<AuditEntry>, ReadError> {
        self.read(|txn, path| Ok(audit_in(txn, path, thread, scan)?))
    }

    fn approvals_of(&self, thread: &str, scan: Scan) -> Result<Listing<ApprovalRecord>, ReadError> {
        self.read(|txn, path| Ok(approvals_in(txn, path, thread, scan)?))
    }

    fn pending_approvals(&self, scan: Scan) -> Result<Listing<ApprovalRecord>, ReadError> {
        self.read(|txn, path| {
            let index = txn.open_table(tables::APPROVALS_PENDING).ctx(path)?;
            let approvals = txn.open_table(tables::APPROVALS).ctx(path)?;
            let mut out = Collect::new(scan);
            for entry in redb::ReadableTable::iter(&index).ctx(path)? {
                let (k, _) = entry.ctx(path)?;
                if let Some(record) =
                    reads::get_str(path, &approvals, tables::APPROVALS, k.value(), ApprovalRecord::decode).transpose()
                {
                    out.push(record)?;
                }
            }
            Ok(out.listing)
        })
    }

    /// The data part of [`Store::compact`], in one immediate write transaction taken on the
    /// calling thread (the fold callback cannot travel to the writer thread).
    fn compact_thread(&self, thread: &str, keep: usize, fold: &FoldFn<'_>) -> Result<(usize, usize), CompactError> {
        let path = self.shared.path.as_path();
        // Made outside the writer: hold its turn, so no job stages meanwhile, and forget the
        // thread facts, which this changes under the step commits (see `step_facts`).
        let _turn = self.shared.turn();
        self.shared.facts.clear();
        let db = self.shared.db();
        let txn = db.begin_write().ctx(path)?;
        let mut folded = 0;
        let mut dropped_seqs = Vec::new();
        'compact: {
            let threads = txn.open_table(tables::THREADS).ctx(path)?;
            let record = reads::thread_record(path, &threads, &self.shared.leases, thread)?
                .ok_or_else(|| CompactError::UnknownThread { thread: thread.to_string() })?;
            if !record.status.is_finished() {
                return Err(CompactError::NotFinished { thread: thread.to_string(), status: record.status });
            }
            // A resume of the thread may still look its journal up under a dropped checkpoint's
            // seq (see `Store::compact`): only a thread no resume runs loses its effects.
            let drop_effects = !record.status.is_resumable();
            let number = thread_numbers::number_of(path, &txn.open_table(tables::THREAD_NUMBERS).ctx(path)?, thread)?;
            let numbered = number.map(|number| Numbered { id: thread, number });
            let mut checkpoints = txn.open_table(tables::CHECKPOINTS).ctx(path)?;
            let mut snapshots = txn.open_table(tables::SNAPSHOTS).ctx(path)?;
            let all = reads::summaries(path, &checkpoints, numbered)?;
            let split = all.len().saturating_sub(keep);
            // No resume runs: the journal below the oldest retained checkpoint goes, what this
            // compaction drops and what earlier ones kept for a resume that has happened since.
            if drop_effects && let Some(oldest) = all.get(split) {
                let mut effects = txn.open_table(tables::EFFECTS).ctx(path)?;
                remove_effects_below(path, &mut effects, thread, oldest.seq)?;
            }
            let Some(numbered) = numbered.filter(|_| split > 0) else {
                break 'compact;
            };
            let dropped: BTreeSet<u64> = all[..split].iter().map(|s| s.seq).collect();
            let mut by_seq: BTreeMap<u64, CheckpointSummary> = all.into_iter().map(|s| (s.seq, s)).collect();
            let retained: Vec<u64> = by_seq.keys().copied().skip(split).collect();
            // Ascending order: a retained parent is made self-sufficient before its children.
            for seq in retained {
                if !needs_fold(&by_seq, &dropped, seq) {
                    continue;
                }
                let chain =
                    reads::state_chain(path, &checkpoints, &snapshots, Some(numbered), seq)?.ok_or_else(|| {
                        ReadError::BrokenChain {
                            path: path.to_path_buf(),
                            thread: thread.to_string(),
                            seq,
                            missing: seq,
                        }
                    })?;
                let snapshot =
                    fold(&chain).map_err(|source| CompactError::Fold { thread: thread.to_string(), seq, source })?;
                let (mut summary, delta) = reads::row(path, &checkpoints, numbered, seq)?.ok_or_else(|| {
                    ReadError::BrokenChain { path: path.to_path_buf(), thread: thread.to_string(), seq, missing: seq }
                })?;
                summary.has_snapshot = true;
                summary.payload_bytes = (snapshot.len() + delta.iter().map(Vec::len).sum::<usize>()) as u64;
                snapshots.insert(numbered.key(seq), Snapshot::encode(&snapshot).as_slice()).ctx(path)?;
                checkpoints.insert(numbered.key(seq), summary.encode_row(&delta).as_slice()).ctx(path)?;
                by_seq.insert(seq, summary);
                folded += 1;
            }
            let mut pending = txn.open_table(tables::PENDING_WRITES).ctx(path)?;
            for &seq in &dropped {
                checkpoints.remove(numbered.key(seq)).ctx(path)?;
                snapshots.remove(numbered.key(seq)).ctx(path)?;
                remove_pending(path, &mut pending, thread, seq)?;
                dropped_seqs.push(seq);
            }
        }
        txn.commit().ctx(path)?;
        Ok((dropped_seqs.len(), folded))
    }
}

/// The pending writes of `thread` at checkpoint `seq`, or at every checkpoint (`None`), ordered
/// by seq, node and index.
fn pending_writes_in(
    txn: &ReadTransaction,
    path: &Path,
    thread: &str,
    seq: Option<u64>,
) -> Result<Vec<PendingWrite>, StorageError> {
    let pending = txn.open_table(tables::PENDING_WRITES).ctx(path)?;
    let mut out = Vec::new();
    for entry in redb::ReadableTable::range(&pending, (thread, seq.unwrap_or(0), "", 0u32)..).ctx(path)? {
        let (k, v) = entry.ctx(path)?;
        let (t, s, node, idx) = k.value();
        if t != thread || seq.is_some_and(|seq| s != seq) {
            break;
        }
        let key = || format!("({thread:?}, {s}, {node:?}, {idx})");
        let value = reads::decode(path, tables::PENDING_WRITES, key, v.value(), Payload::decode)?;
        out.push(PendingWrite { seq: s, node: node.to_string(), idx, value });
    }
    Ok(out)
}

/// The whole effect journal of `thread`, in one range scan.
fn thread_effects_in(
    txn: &ReadTransaction,
    path: &Path,
    thread: &str,
) -> Result<Vec<(EffectKey, Vec<u8>)>, StorageError> {
    let effects = txn.open_table(tables::EFFECTS).ctx(path)?;
    let mut journal = Vec::new();
    for entry in redb::ReadableTable::range(&effects, (thread, 0u64, "", "")..).ctx(path)? {
        let (k, v) = entry.ctx(path)?;
        let (t, seq, node, key) = k.value();
        if t != thread {
            break;
        }
        let key = EffectKey::new(t, seq, node, key);
        let result = reads::decode(path, tables::EFFECTS, || effect_key(&key), v.value(), Payload::decode)?;
        journal.push((key, result));
    }
    Ok(journal)
}

/// The durable timer of `thread`, if it has one.
fn timer_in(txn: &ReadTransaction, path: &Path, thread: &str) -> Result<Option<u64>, StorageError> {
    crate::redb::step_commit::timer_of(path, &txn.open_table(tables::TIMER_OF).ctx(path)?, thread)
}

/// The audit log of `thread`, oldest first.
fn audit_in(txn: &ReadTransaction, path: &Path, thread: &str, scan: Scan) -> Result<Listing<AuditEntry>, StorageError> {
    let audit = txn.open_table(tables::AUDIT).ctx(path)?;
    let mut out = Collect::new(scan);
    reads::thread_range(path, &audit, thread, |seq, bytes| {
        out.push(reads::decode(path, tables::AUDIT, || format!("({thread:?}, {seq})"), bytes, AuditEntry::decode))
    })?;
    Ok(out.listing)
}

/// The approvals of `thread`, ordered by id.
fn approvals_in(
    txn: &ReadTransaction,
    path: &Path,
    thread: &str,
    scan: Scan,
) -> Result<Listing<ApprovalRecord>, StorageError> {
    let index = txn.open_table(tables::APPROVALS_BY_THREAD).ctx(path)?;
    let approvals = txn.open_table(tables::APPROVALS).ctx(path)?;
    let mut out = Collect::new(scan);
    for entry in redb::ReadableTable::range(&index, (thread, "")..).ctx(path)? {
        let (k, _) = entry.ctx(path)?;
        let (t, id) = k.value();
        if t != thread {
            break;
        }
        if let Some(record) =
            reads::get_str(path, &approvals, tables::APPROVALS, id, ApprovalRecord::decode).transpose()
        {
            out.push(record)?;
        }
    }
    Ok(out.listing)
}

/// Whether the chain of retained checkpoint `seq` reaches a dropped checkpoint before a
/// snapshot.
fn needs_fold(by_seq: &BTreeMap<u64, CheckpointSummary>, dropped: &BTreeSet<u64>, seq: u64) -> bool {
    let mut cur = seq;
    loop {
        let Some(summary) = by_seq.get(&cur) else {
            return false;
        };
        if summary.has_snapshot {
            return false;
        }
        match summary.parent {
            Some(parent) if dropped.contains(&parent) => return true,
            Some(parent) if parent < cur => cur = parent,
            _ => return false,
        }
    }
}

/// The thread as the checkpoint tables key it (`None`: it has no checkpoint).
fn numbered<'a>(txn: &ReadTransaction, path: &Path, thread: &'a str) -> Result<Option<Numbered<'a>>, StorageError> {
    Ok(thread_numbers::number_in(txn, path, thread)?.map(|number| Numbered { id: thread, number }))
}

fn load_checkpoint(
    path: &Path,
    checkpoints: &impl ByNumber,
    snapshots: &impl ByNumber,
    thread: Option<Numbered<'_>>,
    seq: u64,
) -> Result<Option<Checkpoint>, ReadError> {
    let Some(thread) = thread else { return Ok(None) };
    let Some((summary, delta)) = reads::row(path, checkpoints, thread, seq)? else {
        return Ok(None);
    };
    let snapshot = if summary.has_snapshot { Some(reads::snapshot(path, snapshots, thread, seq)?) } else { None };
    Ok(Some(Checkpoint::from_parts(summary, snapshot, delta)))
}
