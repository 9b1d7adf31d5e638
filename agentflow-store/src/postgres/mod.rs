//! [`PostgresStore`]: the [`Store`] on a PostgreSQL server, shared by any number of processes
//! (feature `postgres`).

mod approvals;
mod breakers;
mod commit;
mod compact;
mod effects;
pub(crate) mod error;
mod io;
mod leases;
mod queue;
mod reads;
mod restore;
mod schema;
mod sql;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use crate::breaker::{BreakerAnswer, BreakerError, BreakerRecord, BreakerUpdate};
use crate::error::{
    ApprovalError, AuditError, CommitError, CompactError, EffectError, LeaseError, OpenError, ReadError, StorageError,
};
use crate::postgres::error::{Fail, MAX_ATTEMPTS, classify, is_conflict, pool_error};
use crate::postgres::io::IoThread;
use crate::queue::{NewRun, QueueError, QueuedRun, RunControl, RunWait, Settle};
use crate::record::{
    ApprovalPatch, ApprovalRecord, ApprovalStatus, AuditEntry, Checkpoint, CheckpointSummary, CommitReceipt,
    CompactReport, Durability, EffectBatch, EffectKey, EffectOutcome, Lease, NewAuditEntry, PendingWrite, StateChain,
    StepCommit, ThreadRecord, Timer,
};
use crate::store::{CommitCallback, FoldFn, Listing, Store};

pub use schema::POSTGRES_SCHEMA_VERSION;

/// The PostgreSQL schema that holds the tables unless [`PostgresStoreBuilder::schema`] names another.
pub const POSTGRES_DEFAULT_SCHEMA: &str = "agentflow";

/// The most connections a pool keeps (see [`PostgresStoreBuilder::max_connections`]).
const MAX_POOL: usize = 10_000;

/// How long a call waits for a free pooled connection before it fails.
const POOL_WAIT: Duration = Duration::from_secs(60);

/// How often a compaction is planned again when the thread's history changed under it.
const COMPACT_ATTEMPTS: u32 = 3;

/// Runs `$body` (an expression of type `Result<T, Fail<E>>` that may use `$tx`, an open
/// transaction) in a transaction of a pooled connection and commits it. A serialization failure
/// or deadlock runs everything again, up to [`MAX_ATTEMPTS`](error::MAX_ATTEMPTS) times; a refusal or any other
/// failure rolls back and answers `Result<T, E>`.
macro_rules! in_transaction {
    ($ctx:expr, $durability:expr, |$tx:ident| $body:expr) => {{
        let ctx: &$crate::postgres::PgPool = $ctx;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let outcome = async {
                let mut client = ctx.client().await?;
                let $tx = client.transaction().await?;
                if $durability == $crate::record::Durability::Eventual {
                    $tx.batch_execute("SET LOCAL synchronous_commit = off").await?;
                }
                let out = $body?;
                $tx.commit().await?;
                Ok(out)
            }
            .await;
            if let Some(answer) = ctx.settle(outcome, attempt).await {
                break answer;
            }
        }
    }};
}

/// Runs `$body` (an expression of type `Result<T, Fail<E>>`, outside a transaction) and runs it
/// again on a serialization failure or deadlock, like [`in_transaction`]; answers `Result<T, E>`.
macro_rules! retrying {
    ($ctx:expr, $body:expr) => {{
        let ctx: &$crate::postgres::PgPool = $ctx;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let outcome = async { $body }.await;
            if let Some(answer) = ctx.settle(outcome, attempt).await {
                break answer;
            }
        }
    }};
}

/// What every operation of a store shares: the pool and the store's name for errors.
pub(crate) struct PgPool {
    pool: Pool,
    pub(crate) path: PathBuf,
}

impl PgPool {
    /// A pooled connection (its `search_path` is the store's schema).
    pub(crate) async fn client(&self) -> Result<Object, StorageError> {
        self.pool.get().await.map_err(|e| pool_error(&self.path, e))
    }

    /// The typed error for a database failure outside a retried transaction.
    pub(crate) fn db(&self, e: &tokio_postgres::Error) -> StorageError {
        classify(&self.path, e, 1)
    }

    /// A conflict that retrying did not resolve.
    pub(crate) fn conflict(&self, detail: &str) -> StorageError {
        StorageError::Conflict { path: self.path.clone(), attempts: MAX_ATTEMPTS, detail: detail.to_string() }
    }

    /// The answer of attempt `attempt` of a transaction, or `None` to run it again (after a
    /// jittered pause that grows with the attempts).
    pub(crate) async fn settle<T, E: From<StorageError>>(
        &self,
        outcome: Result<T, Fail<E>>,
        attempt: u32,
    ) -> Option<Result<T, E>> {
        match outcome {
            Ok(v) => Some(Ok(v)),
            Err(Fail::Refused(e)) => Some(Err(e)),
            Err(Fail::Storage(e)) => Some(Err(e.into())),
            Err(Fail::Db(e)) if is_conflict(&e) && attempt < MAX_ATTEMPTS => {
                tokio::time::sleep(error::backoff(attempt)).await;
                None
            }
            Err(Fail::Db(e)) => Some(Err(classify(&self.path, &e, attempt).into())),
        }
    }
}
/// How long the server lets a session of this store sit idle inside a transaction.
const IDLE_IN_TRANSACTION: &str = "idle_in_transaction_session_timeout=10000";

/// Options for opening a [`PostgresStore`].
#[derive(Debug, Clone)]
pub struct PostgresStoreBuilder {
    schema: String,
    max_connections: usize,
    connect_timeout: Duration,
}

impl Default for PostgresStoreBuilder {
    fn default() -> Self {
        PostgresStoreBuilder {
            schema: POSTGRES_DEFAULT_SCHEMA.to_string(),
            max_connections: 8,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

impl PostgresStoreBuilder {
    /// The PostgreSQL schema that holds the store's tables (default `agentflow`): a lowercase
    /// identifier (`[a-z_][a-z0-9_]*`, at most 63 bytes). Stores in different schemas of one
    /// database are independent.
    #[must_use]
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Most connections the store keeps open (default 8, at least 1, at most 10,000: a server
    /// admits far fewer, so a larger figure means "as many as it admits"). Concurrent calls
    /// beyond it wait for a free connection.
    #[must_use]
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.clamp(1, MAX_POOL);
        self
    }

    /// How long opening a connection may take (default 10 s).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Connects to the server at `url` (`postgres://user:password@host:port/database`, or the
    /// `key=value` form libpq takes; TLS is not supported), creates the schema if needed and
    /// applies the migrations it lacks.
    ///
    /// # Errors
    /// [`OpenError::UnsupportedFormat`] if the schema was written by a newer agentflow-store;
    /// [`OpenError::Storage`] with [`StorageError::Unreachable`] if the server cannot be reached,
    /// [`StorageError::Authentication`] if it refuses the login, [`StorageError::Backend`] for a
    /// malformed URL or schema name or any other failure.
    pub fn open(&self, url: &str) -> Result<PostgresStore, OpenError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            OpenError::Storage(StorageError::Backend {
                path: PathBuf::from("postgres://?"),
                detail: format!(
                    "the URL does not parse ({e}); write it as postgres://user:password@host:port/database"
                ),
            })
        })?;
        let path = error::location(&config, &self.schema);
        if !schema::valid_schema_name(&self.schema) {
            return Err(OpenError::Storage(StorageError::Backend {
                path,
                detail: format!(
                    "`{}` is not a usable schema name; use lowercase letters, digits and `_`, starting with a letter or `_`",
                    self.schema
                ),
            }));
        }
        // A session left idle inside a transaction is ended by the server after 10 s, so a
        // process stopped mid-commit (SIGSTOP, a long GC pause) cannot hold the rows it locked,
        // a lease row among them, while another worker waits to take the thread over; its
        // commit then fails when it wakes. The URL's own server options (`?options=-c ...`)
        // come after, so they may change it; the search path is added last.
        let options = match config.get_options() {
            Some(given) if !given.trim().is_empty() => {
                format!("-c {IDLE_IN_TRANSACTION} {given} -c search_path={}", self.schema)
            }
            _ => format!("-c {IDLE_IN_TRANSACTION} -c search_path={}", self.schema),
        };
        config.options(options).application_name("agentflow").connect_timeout(self.connect_timeout);
        let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(self.max_connections)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(self.connect_timeout.saturating_add(Duration::from_secs(1))))
            .wait_timeout(Some(POOL_WAIT))
            .build()
            .map_err(|e| OpenError::Storage(StorageError::Backend { path: path.clone(), detail: e.to_string() }))?;
        let io = IoThread::start(path.clone())?;
        let ctx = Arc::new(PgPool { pool, path: path.clone() });
        let (c, schema_name) = (ctx.clone(), self.schema.clone());
        io.run(async move {
            let mut client = c.client().await.map_err(OpenError::Storage)?;
            schema::migrate(&mut client, &schema_name, &c.path).await
        })??;
        Ok(PostgresStore { ctx, io, schema: self.schema.clone() })
    }
}

/// The [`Store`] on a PostgreSQL server (15 or newer), shared by any number of processes.
///
/// A [`RedbStore`](crate::RedbStore) file is open in one process at a time: a second process
/// (an approval CLI next to a running agent, a second worker) gets
/// [`OpenError::AlreadyOpen`], and its leases live in that one process's memory. Every process
/// may open a `PostgresStore` on the same database and schema at once: leases are rows in the
/// database, so they exclude executors in different processes and on different machines;
/// approvals can be decided, and threads listed, from any process.
///
/// # Guarantees
/// - [`Store::commit_step`] is one transaction; a fenced commit locks the lease row
///   (`SELECT .. FOR UPDATE`) and is refused with [`CommitError::LeaseLost`] if its holder's
///   lease expired or was taken over, even by another process.
/// - Approval transitions are compare-and-sets on the row (`UPDATE .. WHERE status =
///   $expected` under a row lock) with the audit entry in the same transaction.
/// - The effect journal has a unique key; a second result for a key is dropped and the first
///   returned.
/// - [`Store::commit_effects`] is one transaction: a refused part (a lost compare-and-set, an
///   approval of another thread) leaves nothing of the batch written.
/// - Each lease carries a fencing token ([`PostgresStore::lease_token`]) that grows on every
///   takeover and never goes back.
/// - An operation that fails on a serialization failure or a deadlock is run again (the whole
///   transaction), up to 10 times with a growing, jittered pause, then
///   [`StorageError::Conflict`] is returned. Under READ COMMITTED (PostgreSQL's default) the row
///   locks above leave little to retry; with `default_transaction_isolation = serializable` on
///   the server or role, races end in serialization failures and the retries keep every
///   guarantee above (the conformance suite runs that way too).
/// - [`Durability::Eventual`] commits with `synchronous_commit = off` (visible at once, durable
///   within the server's `wal_writer_delay`, or at the next [`Store::flush`]).
///
/// Times (`now`, lease expiries) are the callers' clocks, as with redb: processes that share
/// a store need clocks that agree to well within the lease TTL.
///
/// Calls block the calling thread; they are safe inside an async runtime too (the store runs
/// its connections on a runtime of its own, on one dedicated thread, and never blocks on the
/// caller's).
///
/// ```no_run
/// use agentflow_store::{PostgresStore, StepCommit, Store, ThreadRecord};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let url = std::env::var("AGENTFLOW_PG_URL")?; // postgres://user:password@127.0.0.1:5432/agentflow
/// let store = PostgresStore::builder().schema("agentflow").open(&url)?;
/// let now = 1_700_000_000_000;
/// store.acquire_lease("t1", "worker-a", 30_000, now)?;
/// let thread = ThreadRecord::new("t1", "alice", "fp-1", 1, now);
/// store.commit_step(StepCommit::new(thread).fenced_by("worker-a", now))?;
/// // Another process with its own store on the same URL sees the thread and its lease.
/// assert_eq!(store.thread("t1")?.and_then(|t| t.lease).map(|l| l.holder).as_deref(), Some("worker-a"));
/// # Ok(())
/// # }
/// ```
pub struct PostgresStore {
    ctx: Arc<PgPool>,
    io: IoThread,
    schema: String,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").field("location", &self.ctx.path).finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Options for opening a store.
    pub fn builder() -> PostgresStoreBuilder {
        PostgresStoreBuilder::default()
    }

    /// Opens the store in schema `agentflow` at `url` with default options; see
    /// [`PostgresStoreBuilder::open`].
    pub fn open(url: &str) -> Result<Self, OpenError> {
        Self::builder().open(url)
    }

    /// The store's name in errors: the URL without its password, and the schema.
    pub fn location(&self) -> &Path {
        &self.ctx.path
    }

    /// The schema holding the tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The fencing token of the thread's lease: it starts at 1 and grows by one each time the
    /// thread passes to another holder (after a release or an expiry); a re-acquire or renewal
    /// by the holder keeps it. `None` if the thread never had a lease.
    pub fn lease_token(&self, thread: &str) -> Result<Option<u64>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::lease_token(&ctx, &thread).await?) })
    }

    /// Runs the future made by `f` on the I/O thread and waits for its answer.
    fn call<T, E, Fut>(&self, f: impl FnOnce(Arc<PgPool>) -> Fut) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StorageError> + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        self.io.run(f(self.ctx.clone()))?
    }
}

/// A step commit: one transaction whose `BEGIN` is pipelined with its statements, run again on
/// a serialization failure or deadlock like [`in_transaction`]. A plain step (see
/// [`commit::guardable`]) goes in one round trip with its `COMMIT` ([`commit::stage_guarded`]);
/// when that guard refuses, or for other steps, the checks are read before `COMMIT`
/// ([`commit::stage`]), which names the refusal.
async fn commit(ctx: &PgPool, c: StepCommit) -> Result<CommitReceipt, CommitError> {
    // JSON the reads would refuse is refused before anything is sent, as on redb.
    crate::checks::check_depths(&c)?;
    let durability = c.durability;
    let begin = match durability {
        Durability::Eventual => "BEGIN; SET LOCAL synchronous_commit = off",
        _ => "BEGIN",
    };
    let mut guarded = commit::guardable(&c);
    let out = retrying!(ctx, {
        if guarded {
            let mut open = OpenTx { client: Some(ctx.client().await?) };
            let staged = match &open.client {
                Some(client) => commit::stage_guarded(ctx, client, &c, begin).await,
                None => Err(Fail::Storage(released(ctx))),
            };
            match staged {
                Ok(out) => {
                    // Committed in the pipeline: the connection goes back to the pool.
                    open.client.take();
                    return Ok(out);
                }
                Err(e) => {
                    // The pipeline's `COMMIT` ended the transaction; this makes sure of it.
                    let _ = open.end("ROLLBACK").await;
                    if !commit::is_guard_refusal(&e) {
                        return Err(e);
                    }
                    // Refused: the checked path below names why (from now on, also on retries).
                    guarded = false;
                }
            }
        }
        // Held by the guard from before `BEGIN` is sent: a commit dropped half-way closes the
        // connection rather than pooling it inside a transaction.
        let mut open = OpenTx { client: Some(ctx.client().await?) };
        let staged = match &open.client {
            Some(client) => commit::stage(ctx, client, &c, begin).await,
            None => Err(Fail::Storage(released(ctx))),
        };
        match staged {
            Ok(out) => open.end("COMMIT").await.map(|()| out).map_err(Fail::Db),
            Err(e) => {
                // The statements' failure is the answer, whatever the rollback does.
                let _ = open.end("ROLLBACK").await;
                Err(e)
            }
        }
    })?;
    Ok(CommitReceipt::new(out.checkpoint, out.audit_seqs, durability == Durability::Immediate, 1))
}

/// The error for an [`OpenTx`] whose connection is gone before its statements ran (cannot
/// happen: it is set when made).
fn released(ctx: &PgPool) -> StorageError {
    StorageError::Closed {
        path: ctx.path.clone(),
        detail: "the transaction's connection was released early".to_string(),
    }
}

/// A pooled connection in a transaction opened by hand (its `BEGIN` pipelined with the first
/// statements). Dropped before [`OpenTx::end`] succeeded (a failure, a dropped future), the
/// connection is closed instead of going back to the pool, which ends the transaction on the
/// server.
struct OpenTx {
    client: Option<Object>,
}

impl OpenTx {
    /// Ends the transaction with `statement` (`COMMIT` or `ROLLBACK`); the connection goes
    /// back to the pool only if that worked. A `COMMIT` that fails ends the transaction too;
    /// a `ROLLBACK` is sent after it to be sure the connection is clean.
    async fn end(&mut self, statement: &str) -> Result<(), tokio_postgres::Error> {
        let Some(client) = self.client.as_ref() else { return Ok(()) };
        let ended = client.batch_execute(statement).await;
        let clean = match &ended {
            Ok(()) => true,
            Err(_) => client.batch_execute("ROLLBACK").await.is_ok(),
        };
        if clean {
            // Back to the pool when dropped.
            let _ = self.client.take();
        }
        ended
    }
}

impl Drop for OpenTx {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            drop(Object::take(client));
        }
    }
}

/// Calls a commit callback exactly once: with the answer, or with an error if the I/O thread
/// dropped the commit unanswered (the store was closed).
struct Answer {
    done: Option<CommitCallback>,
    path: PathBuf,
}

impl Answer {
    fn send(mut self, answer: Result<CommitReceipt, CommitError>) {
        if let Some(done) = self.done.take() {
            done(answer);
        }
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done(Err(CommitError::Storage(StorageError::Closed {
                path: self.path.clone(),
                detail: "the commit did not answer (the store was closed, or the call stopped on the store's I/O \
                         thread); whether it was written is unknown: read the thread back"
                    .to_string(),
            })));
        }
    }
}

impl Store for PostgresStore {
    fn thread(&self, id: &str) -> Result<Option<ThreadRecord>, ReadError> {
        let id = id.to_string();
        self.call(move |ctx| async move { Ok(reads::thread(&ctx, &id).await?) })
    }

    fn list_threads(&self) -> Result<Vec<ThreadRecord>, ReadError> {
        self.call(move |ctx| async move { Ok(reads::threads(&ctx, reads::Scan::Strict).await?.items) })
    }

    fn scan_threads(&self) -> Result<Listing<ThreadRecord>, ReadError> {
        self.call(move |ctx| async move { Ok(reads::threads(&ctx, reads::Scan::Skip).await?) })
    }

    fn child_threads(&self, parent: &str) -> Result<Listing<ThreadRecord>, ReadError> {
        let parent = parent.to_string();
        self.call(move |ctx| async move { Ok(reads::child_threads(&ctx, &parent).await?) })
    }

    fn commit_step(&self, c: StepCommit) -> Result<CommitReceipt, CommitError> {
        self.call(move |ctx| async move { commit(&ctx, c).await })
    }

    /// Answers on the store's I/O thread: `done` must not block or call the store.
    fn commit_step_then(&self, c: StepCommit, done: CommitCallback) {
        let ctx = self.ctx.clone();
        let answer = Answer { done: Some(done), path: ctx.path.clone() };
        self.io.spawn(async move {
            let result = commit(&ctx, c).await;
            answer.send(result);
        });
    }

    fn flush(&self) -> Result<(), CommitError> {
        self.call(move |ctx| async move {
            // A synchronous commit that writes makes the WAL durable up to it, which covers
            // every earlier `synchronous_commit = off` commit.
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| sql::execute(
                &tx,
                "UPDATE flush SET n = n + 1 WHERE id = 1",
                &[]
            )
            .await
            .map_err(Fail::<CommitError>::Db))?;
            Ok(())
        })
    }

    fn checkpoint(&self, thread: &str, seq: u64) -> Result<Option<Checkpoint>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::checkpoint(&ctx, &thread, seq).await?) })
    }

    fn latest_checkpoint(&self, thread: &str) -> Result<Option<Checkpoint>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::latest_checkpoint(&ctx, &thread).await?) })
    }

    fn list_checkpoints(&self, thread: &str) -> Result<Vec<CheckpointSummary>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::list_checkpoints(&ctx, &thread).await?) })
    }

    fn state_chain(&self, thread: &str, seq: u64) -> Result<Option<StateChain>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move {
            let client = ctx.client().await?;
            reads::state_chain(&ctx, &client, &thread, seq).await
        })
    }

    fn pending_writes(&self, thread: &str, seq: u64) -> Result<Vec<PendingWrite>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::pending_writes(&ctx, &thread, seq).await?) })
    }

    fn acquire_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        let (thread, holder) = (thread.to_string(), holder.to_string());
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, leases::acquire(ctx, &thread, &holder, ttl_ms, now).await)
        })
    }

    fn renew_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        let (thread, holder) = (thread.to_string(), holder.to_string());
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, leases::renew(ctx, &thread, &holder, ttl_ms, now).await)
        })
    }

    /// One statement on a pooled connection; safe from a `Drop` on an async worker thread.
    fn release_lease(&self, thread: &str, holder: &str) -> Result<(), LeaseError> {
        let (thread, holder) = (thread.to_string(), holder.to_string());
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, leases::release(ctx, &thread, &holder).await)
        })
    }

    fn effect(&self, key: &EffectKey) -> Result<Option<Vec<u8>>, ReadError> {
        let key = key.clone();
        self.call(move |ctx| async move { Ok(reads::effect(&ctx, &key).await?) })
    }

    fn effect_keys(&self, thread: &str, seq: u64) -> Result<Vec<EffectKey>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::effect_keys(&ctx, &thread, seq).await?) })
    }

    /// One query over the thread's rows of the effects table.
    fn thread_effects(&self, thread: &str) -> Result<Vec<(EffectKey, Vec<u8>)>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::thread_effects(&ctx, &thread).await?) })
    }

    fn record_effect(&self, key: &EffectKey, result: &[u8]) -> Result<EffectOutcome, EffectError> {
        let (key, result) = (key.clone(), result.to_vec());
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, {
                let client = ctx.client().await?;
                effects::record::<_, EffectError>(ctx, &client, &key, &result).await
            })
        })
    }

    /// One transaction: the effects, the approval compare-and-sets (each under its row's lock,
    /// with its audit entry) and the audit entries are written together, or, on a refusal, none
    /// of them.
    fn commit_effects(&self, batch: EffectBatch) -> Result<Vec<EffectOutcome>, CommitError> {
        effects::check_batch(&batch)?;
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| effects::stage_batch(ctx, &tx, &batch).await)
        })
    }

    fn append_audit(&self, thread: &str, entry: NewAuditEntry) -> Result<u64, AuditError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| approvals::append_audit::<_, AuditError>(
                ctx, &tx, &thread, &entry
            )
            .await)
        })
    }

    fn list_audit(&self, thread: &str) -> Result<Vec<AuditEntry>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::audit(&ctx, &thread, reads::Scan::Strict).await?.items) })
    }

    fn scan_audit(&self, thread: &str) -> Result<Listing<AuditEntry>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::audit(&ctx, &thread, reads::Scan::Skip).await?) })
    }

    fn put_approval(&self, approval: ApprovalRecord, actor: &str) -> Result<(), ApprovalError> {
        let actor = actor.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| approvals::insert::<_, ApprovalError>(
                ctx, &tx, &approval, &actor
            )
            .await)?;
            Ok(())
        })
    }

    fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, ReadError> {
        let id = id.to_string();
        self.call(move |ctx| async move { Ok(reads::approval(&ctx, &id).await?) })
    }

    fn list_approvals(&self, thread: &str) -> Result<Vec<ApprovalRecord>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::approvals(&ctx, &thread, reads::Scan::Strict).await?.items) })
    }

    fn scan_approvals(&self, thread: &str) -> Result<Listing<ApprovalRecord>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::approvals(&ctx, &thread, reads::Scan::Skip).await?) })
    }

    fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, ReadError> {
        self.call(move |ctx| async move { Ok(reads::pending_approvals(&ctx, reads::Scan::Strict).await?.items) })
    }

    fn scan_pending_approvals(&self) -> Result<Listing<ApprovalRecord>, ReadError> {
        self.call(move |ctx| async move { Ok(reads::pending_approvals(&ctx, reads::Scan::Skip).await?) })
    }

    fn transition_approval(
        &self,
        id: &str,
        expected: ApprovalStatus,
        to: ApprovalStatus,
        patch: ApprovalPatch,
    ) -> Result<ApprovalRecord, ApprovalError> {
        let id = id.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            let (record, _) =
                in_transaction!(ctx, Durability::Immediate, |tx| approvals::transition::<_, ApprovalError>(
                    ctx, &tx, &id, expected, to, &patch
                )
                .await)?;
            Ok(record)
        })
    }

    fn compact(&self, thread: &str, keep_last: usize, fold: &FoldFn<'_>) -> Result<CompactReport, CompactError> {
        let keep = keep_last.max(1);
        for _ in 0..COMPACT_ATTEMPTS {
            let t = thread.to_string();
            let plan = self.call(move |ctx| async move {
                let client = ctx.client().await?;
                match compact::plan(&ctx, &client, &t, keep).await {
                    Ok(plan) => Ok(plan),
                    Err(Fail::Refused(e)) => Err(e),
                    Err(Fail::Storage(e)) => Err(e.into()),
                    Err(Fail::Db(e)) => Err(ctx.db(&e).into()),
                }
            })?;
            let mut folded = Vec::with_capacity(plan.folds.len());
            for (mut summary, chain) in plan.folds {
                let seq = summary.seq;
                let snapshot =
                    fold(&chain).map_err(|source| CompactError::Fold { thread: thread.to_string(), seq, source })?;
                let delta = chain.steps.last().map(|s| s.delta.clone()).unwrap_or_default();
                summary.has_snapshot = true;
                summary.payload_bytes = (snapshot.len() + delta.iter().map(Vec::len).sum::<usize>()) as u64;
                folded.push(compact::Folded { seq: seq as i64, row: summary.encode_row(&delta), snapshot });
            }
            let (t, seen, dropped) = (thread.to_string(), plan.seen, plan.dropped);
            let n_folded = folded.len();
            let n_dropped = dropped.len();
            let applied = self.call(move |ctx| async move {
                let ctx = &*ctx;
                in_transaction!(ctx, Durability::Immediate, |tx| compact::apply(ctx, &tx, &t, &seen, &dropped, &folded)
                    .await)
            })?;
            if applied {
                // PostgreSQL reclaims the space itself (autovacuum): nothing to compact here.
                return Ok(CompactReport::new(n_dropped, n_folded, false));
            }
        }
        Err(CompactError::Storage(StorageError::Conflict {
            path: self.ctx.path.clone(),
            attempts: COMPACT_ATTEMPTS,
            detail: "the thread's history kept changing during compaction".to_string(),
        }))
    }

    fn enqueue_run(&self, run: NewRun) -> Result<(), QueueError> {
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, {
                let client = ctx.client().await?;
                queue::enqueue(ctx, &client, &run).await
            })
        })
    }

    /// One transaction in two round trips: `SELECT .. FOR UPDATE SKIP LOCKED` on the queue rows
    /// (with `BEGIN`), then the leases of the picked threads and the rows' claim columns (with
    /// the claimed rows and `COMMIT`). Committed without waiting for the disk: a claim lost in a
    /// server crash leaves the run queued and the lease with its previous holder, so the
    /// claimer's fenced commits are refused and the run is claimed again.
    fn claim_runs(
        &self,
        graph: &str,
        holder: &str,
        ttl_ms: u64,
        now: u64,
        max: usize,
    ) -> Result<Vec<QueuedRun>, QueueError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let (graph, holder) = (graph.to_string(), holder.to_string());
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, {
                let mut open = OpenTx { client: Some(ctx.client().await?) };
                let claimed = match &open.client {
                    Some(client) => queue::claim(ctx, client, &graph, &holder, ttl_ms, now, max).await,
                    None => Err(Fail::Storage(released(ctx))),
                };
                match claimed {
                    Ok(runs) => {
                        // Committed by `claim`: the connection goes back to the pool.
                        open.client.take();
                        Ok(runs)
                    }
                    Err(e) => {
                        let _ = open.end("ROLLBACK").await;
                        Err(e)
                    }
                }
            })
        })
    }

    /// One round trip; committed without waiting for the disk (a heartbeat is a timestamp).
    fn heartbeat_runs(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
        let holder = holder.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, {
                let mut open = OpenTx { client: Some(ctx.client().await?) };
                let beat = match &open.client {
                    Some(client) => queue::heartbeat(ctx, client, &holder, now).await,
                    None => Err(Fail::Storage(released(ctx))),
                };
                match beat {
                    Ok(controls) => {
                        // Committed by `heartbeat`: the connection goes back to the pool.
                        open.client.take();
                        Ok(controls)
                    }
                    Err(e) => {
                        let _ = open.end("ROLLBACK").await;
                        Err(e)
                    }
                }
            })
        })
    }

    /// One statement: one commit, one round trip.
    fn settle_run(&self, thread: &str, holder: &str, settle: &Settle) -> Result<bool, QueueError> {
        let (thread, holder, settle) = (thread.to_string(), holder.to_string(), settle.clone());
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, {
                let client = ctx.client().await?;
                queue::settle(ctx, &client, &thread, &holder, &settle, false).await
            })
        })
    }

    fn wake_run(&self, thread: &str, wait: RunWait) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, {
                let client = ctx.client().await?;
                queue::wake(&client, &thread, wait).await
            })
        })
    }

    fn control_run(&self, thread: &str, control: RunControl) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, {
                let client = ctx.client().await?;
                queue::control(ctx, &client, &thread, control).await
            })
        })
    }

    fn list_runs(&self) -> Result<Vec<QueuedRun>, QueueError> {
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, {
                let client = ctx.client().await?;
                queue::list(ctx, &client).await
            })
        })
    }

    fn due_timers(&self, until: u64, limit: usize) -> Result<Vec<Timer>, ReadError> {
        self.call(move |ctx| async move { Ok(reads::due_timers(&ctx, until, limit).await?) })
    }

    /// One `REPEATABLE READ` snapshot: the dump is the thread at one moment.
    fn dump_thread(&self, thread: &str) -> Result<Option<crate::ThreadDump>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::dump(&ctx, &thread).await?) })
    }

    fn thread_timer(&self, thread: &str) -> Result<Option<u64>, ReadError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move { Ok(reads::thread_timer(&ctx, &thread).await?) })
    }

    fn breaker(&self, tool: &str) -> Result<Option<BreakerRecord>, ReadError> {
        let tool = tool.to_string();
        self.call(move |ctx| async move {
            let client = ctx.client().await?;
            Ok(breakers::read(&ctx, &client, &tool).await?)
        })
    }

    /// One transaction: the tool's row is locked (`FOR UPDATE`), moved, and a change of state
    /// audited, so updates from any number of processes never interleave.
    fn update_breaker(&self, update: BreakerUpdate) -> Result<BreakerAnswer, BreakerError> {
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| breakers::update(ctx, &tx, &update).await)
        })
    }

    fn put_graph_description(&self, fingerprint: &str, description: &str) -> Result<(), StorageError> {
        let (fingerprint, description) = (fingerprint.to_string(), description.to_string());
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| sql::execute(
                &tx,
                "INSERT INTO graphs (fingerprint, description) VALUES ($1, $2)
                 ON CONFLICT (fingerprint) DO UPDATE SET description = EXCLUDED.description",
                &[&fingerprint, &description],
            )
            .await
            .map_err(Fail::<StorageError>::from))
            .map(|_| ())
        })
    }

    fn restore_thread(&self, dump: crate::ThreadDump) -> Result<(), CommitError> {
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| restore::stage(ctx, &tx, &dump).await)
        })
    }

    /// One transaction.
    fn restore_threads(&self, dumps: Vec<crate::ThreadDump>) -> Result<(), CommitError> {
        crate::dump::check_distinct(&dumps)?;
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| async {
                for dump in &dumps {
                    restore::stage(ctx, &tx, dump).await?;
                }
                Ok::<_, Fail<CommitError>>(())
            }
            .await)
        })
    }

    fn graph_description(&self, fingerprint: &str) -> Result<Option<String>, ReadError> {
        let fingerprint = fingerprint.to_string();
        self.call(move |ctx| async move {
            let client = ctx.client().await?;
            let row = sql::query_opt(&client, "SELECT description FROM graphs WHERE fingerprint = $1", &[&fingerprint])
                .await
                .map_err(|e| ctx.db(&e))?;
            Ok(row.map(|r| sql::col::<String>(&ctx.path, "graphs", &r, 0)).transpose()?)
        })
    }

    /// One transaction.
    fn enqueue_run_audited(&self, run: NewRun, entry: NewAuditEntry) -> Result<(), QueueError> {
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| async {
                queue::enqueue(ctx, &tx, &run).await?;
                approvals::append_audit::<_, QueueError>(ctx, &tx, &run.thread, &entry).await?;
                Ok::<_, Fail<QueueError>>(())
            }
            .await)
        })
    }

    /// One transaction.
    fn wake_run_audited(&self, thread: &str, wait: RunWait, entry: NewAuditEntry) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| async {
                let woken = queue::wake(&tx, &thread, wait).await?;
                if woken {
                    approvals::append_audit::<_, QueueError>(ctx, &tx, &thread, &entry).await?;
                }
                Ok::<_, Fail<QueueError>>(woken)
            }
            .await)
        })
    }

    /// One transaction.
    fn control_run_audited(&self, thread: &str, control: RunControl, entry: NewAuditEntry) -> Result<bool, QueueError> {
        let thread = thread.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            in_transaction!(ctx, Durability::Immediate, |tx| async {
                let set = queue::control(ctx, &tx, &thread, control).await?;
                if set {
                    approvals::append_audit::<_, QueueError>(ctx, &tx, &thread, &entry).await?;
                }
                Ok::<_, Fail<QueueError>>(set)
            }
            .await)
        })
    }
    /// One statement (settle and release together): one commit, one round trip.
    fn settle_run_and_release(&self, thread: &str, holder: &str, settle: &Settle) -> Result<bool, QueueError> {
        let (thread, holder, settle) = (thread.to_string(), holder.to_string(), settle.clone());
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, {
                let client = ctx.client().await?;
                queue::settle(ctx, &client, &thread, &holder, &settle, true).await
            })
        })
    }

    /// One read-only statement on `holder`'s rows: no commit to wait for.
    fn run_controls(&self, holder: &str, now: u64) -> Result<Vec<(String, RunControl)>, QueueError> {
        let holder = holder.to_string();
        self.call(move |ctx| async move {
            let ctx = &*ctx;
            retrying!(ctx, {
                let client = ctx.client().await?;
                queue::controls(ctx, &client, &holder, now).await
            })
        })
    }
}
