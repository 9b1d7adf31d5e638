//! [`PostgresStore`]: the [`Store`](crate::Store) on a PostgreSQL server, shared by any number of processes
//! (feature `postgres`).

mod approvals;
mod breakers;
mod commit;
mod compact;
mod effects;
pub(crate) mod error;
mod event_log;
mod follow_ups;
mod idempotency;
pub(crate) mod io;
mod leases;
mod listener;
mod pool;
mod purge;
mod queue;
mod reads;
mod restore;
mod schedules;
mod schema;
mod sql;
mod store_impl;
mod transaction;
mod webhooks;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use crate::error::{OpenError, ReadError, StorageError};
use crate::postgres::io::IoThread;
use crate::postgres::listener::EventListener;
use crate::postgres::pool::PgPool;
use crate::record::EVENT_LOG_KEEP_COMMITS;

pub use schema::POSTGRES_SCHEMA_VERSION;

/// The PostgreSQL schema that holds the tables unless [`PostgresStoreBuilder::schema`] names another.
pub const POSTGRES_DEFAULT_SCHEMA: &str = "agentflow";

/// The most connections a pool keeps (see [`PostgresStoreBuilder::max_connections`]).
const MAX_POOL: usize = 10_000;

/// How long a call waits for a free pooled connection before it fails.
const POOL_WAIT: Duration = Duration::from_secs(60);

/// How long the server lets a session of this store sit idle inside a transaction.
const IDLE_IN_TRANSACTION: &str = "idle_in_transaction_session_timeout=10000";

/// Options for opening a [`PostgresStore`].
#[derive(Debug, Clone)]
pub struct PostgresStoreBuilder {
    schema: String,
    max_connections: usize,
    connect_timeout: Duration,
    event_log_keep: u64,
}

impl Default for PostgresStoreBuilder {
    fn default() -> Self {
        PostgresStoreBuilder {
            schema: POSTGRES_DEFAULT_SCHEMA.to_string(),
            max_connections: 8,
            connect_timeout: Duration::from_secs(10),
            event_log_keep: EVENT_LOG_KEEP_COMMITS,
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

    /// How many commits' events each thread's log keeps (default and at most
    /// [`EVENT_LOG_KEEP_COMMITS`], at least 1): tests of the log's retention set a small bound.
    /// Processes that share a schema should agree on it.
    #[doc(hidden)]
    #[must_use]
    pub fn event_log_keep(mut self, commits: u64) -> Self {
        self.event_log_keep = commits.clamp(1, EVENT_LOG_KEEP_COMMITS);
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
        let channel = event_log::channel(&self.schema);
        let events = EventListener::new(config.clone(), channel.clone());
        let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(self.max_connections)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(self.connect_timeout.saturating_add(Duration::from_secs(1))))
            .wait_timeout(Some(POOL_WAIT))
            .build()
            .map_err(|e| OpenError::Storage(StorageError::Backend { path: path.clone(), detail: e.to_string() }))?;
        let io = IoThread::start(path.clone())?;
        let event_keep = i64::try_from(self.event_log_keep).unwrap_or(i64::MAX);
        let ctx = Arc::new(PgPool { pool, path: path.clone(), events_channel: channel, event_keep });
        let (c, schema_name) = (ctx.clone(), self.schema.clone());
        io.run(async move {
            let mut client = c.client().await.map_err(OpenError::Storage)?;
            schema::migrate(&mut client, &schema_name, &c.path).await
        })??;
        Ok(PostgresStore { ctx, io, schema: self.schema.clone(), events })
    }
}

/// The [`Store`](crate::Store) on a PostgreSQL server (15 or newer), shared by any number of processes.
///
/// A [`RedbStore`](crate::RedbStore) file is open in one process at a time: a second process
/// (an approval CLI next to a running agent, a second worker) gets
/// [`OpenError::AlreadyOpen`], and its leases live in that one process's memory. Every process
/// may open a `PostgresStore` on the same database and schema at once: leases are rows in the
/// database, so they exclude executors in different processes and on different machines;
/// approvals can be decided, and threads listed, from any process.
///
/// # Guarantees
/// - [`Store::commit_step`](crate::Store::commit_step) is one transaction; a fenced commit locks the lease row
///   (`SELECT .. FOR UPDATE`) and is refused with [`CommitError::LeaseLost`](crate::CommitError::LeaseLost) if its holder's
///   lease expired or was taken over, even by another process.
/// - Approval transitions are compare-and-sets on the row (`UPDATE .. WHERE status =
///   $expected` under a row lock) with the audit entry in the same transaction.
/// - The effect journal has a unique key; a second result for a key is dropped and the first
///   returned.
/// - [`Store::commit_effects`](crate::Store::commit_effects) is one transaction: a refused part (a lost compare-and-set, an
///   approval of another thread) leaves nothing of the batch written.
/// - Each lease carries a fencing token ([`PostgresStore::lease_token`]) that grows on every
///   takeover and never goes back.
/// - An operation that fails on a serialization failure or a deadlock is run again (the whole
///   transaction), up to 10 times with a growing, jittered pause, then
///   [`StorageError::Conflict`] is returned. Under READ COMMITTED (PostgreSQL's default) the row
///   locks above leave little to retry; with `default_transaction_isolation = serializable` on
///   the server or role, races end in serialization failures and the retries keep every
///   guarantee above (the conformance suite runs that way too).
/// - [`Durability::Eventual`](crate::Durability::Eventual) commits with `synchronous_commit = off` (visible at once, durable
///   within the server's `wal_writer_delay`, or at the next [`Store::flush`](crate::Store::flush)).
/// - A step commit's events ([`StepCommit::events`](crate::StepCommit::events)) are written in
///   its transaction, which also notifies channel `agentflow_events_<schema>` (`NOTIFY`, sent
///   when it commits); [`Store::on_events`](crate::Store::on_events) listens on it, so a wake
///   hears the commits of every process on the schema. A start's idempotency key is kept in the
///   transaction that queues its run: of concurrent starts with one key, one queues.
/// - A follow-up run is added under the lock of its thread's queued run, so the settle that
///   ends that run puts it in the run's place (a settle whose snapshot missed it runs again); a
///   schedule's fire is a compare-and-set of its `next_at` with the run queued in the same
///   transaction (of concurrent fires, one is made); a webhook delivery is held by one
///   dispatcher at a time (a conditional `UPDATE`).
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
    pub(super) ctx: Arc<PgPool>,
    pub(super) io: IoThread,
    schema: String,
    /// The wakes of [`Store::on_events`](crate::Store::on_events) and their `LISTEN` connection.
    pub(super) events: EventListener,
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
    pub(super) fn call<T, E, Fut>(&self, f: impl FnOnce(Arc<PgPool>) -> Fut) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StorageError> + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        self.io.run(f(self.ctx.clone()))?
    }
}
