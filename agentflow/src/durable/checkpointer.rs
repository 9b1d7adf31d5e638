//! The run's side of persistence: one checkpoint per super-step, pending
//! writes for a failed step, the lease, and rebuilding a thread to resume it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use agentflow_store::{
    ApprovalError, ApprovalPatch, ApprovalStatus, ApprovalTransition, Checkpoint, CheckpointMetadata, CheckpointSource,
    CommitError, Durability as StoreDurability, EffectBatch, Lease, LeaseError, PendingWrite, StepCommit, Store,
    ThreadRecord, ThreadStatus,
};
use serde_json::{Value, json};

use super::finished::{FinishedWrites, StoredWrite, stored_write};
use super::journal::journal_seq_of;
use super::{Durability, Journal, ParentLeases, PersistError, ResumeError, UnknownOutcomes, blocking, now_ms};
use crate::app::App;
use crate::budget::{RunUsage, ThreadBudget};
use crate::graph::{CompiledGraph, NodeId};
use crate::interrupt::{KeptAnswer, KeptAnswers, Pending};
use crate::outcome::RunError;
use crate::state::State;
use crate::step::{Mailbox, Sends, Step};

/// How long a run's lease lasts unless [`Runner::lease_ttl`](crate::Runner::lease_ttl) says otherwise.
pub(crate) const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);
/// Below this size a snapshot is never worth skipping.
const MIN_SNAPSHOT_BYTES: usize = 512;

/// Where a resumed thread stands.
pub(crate) struct Resumed<S: State> {
    pub state: S,
    pub active: Vec<NodeId>,
    pub step: u32,
    /// Results of nodes that finished in the step that then stopped.
    pub pending: Vec<(NodeId, Step<S>)>,
    /// What the thread was waiting for when it paused.
    pub interrupts: Vec<Pending>,
    /// What its nodes' own `interrupt` returned before the step paused.
    pub kept_answers: Vec<KeptAnswer>,
    /// The payloads of the map workers in `active`.
    pub payloads: Mailbox,
}

impl<S: State> Resumed<S> {
    /// A new run at `input`.
    pub(crate) fn fresh(state: S, start: NodeId) -> Self {
        Resumed {
            state,
            active: vec![start],
            step: 0,
            pending: Vec::new(),
            interrupts: Vec::new(),
            kept_answers: Vec::new(),
            payloads: Vec::new(),
        }
    }
}

/// The pending-write key under which a paused step keeps its interrupts.
pub(crate) const INTERRUPTS: &str = "__interrupts__";
/// The pending-write key under which a paused step keeps what its nodes' own
/// `interrupt` returned before the step paused for something else.
pub(crate) const ANSWERS: &str = "__answers__";
/// The pending-write key (and checkpoint `extra` key) of the thread's budget.
pub(crate) const BUDGET: &str = "__budget__";
/// The checkpoint `extra` key of the payloads sent to the next step's map
/// workers: `[[worker, [payload, ..]], ..]`.
pub(crate) const PAYLOADS: &str = "payloads";

/// A lease a run's holder took before the run (a worker's claim takes the thread's lease):
/// the holder's id and when the lease expires (unix millis).
#[derive(Debug, Clone)]
pub(crate) struct LeaseHolder {
    pub(crate) id: String,
    pub(crate) until: u64,
    /// Set by the holder once it no longer trusts the lease to be this run's: a worker whose
    /// own claim took the thread again, the run's lease having lapsed. The store's fence
    /// cannot tell the two apart (one holder id), and another executor may have run the thread
    /// in between: the run then writes and starts nothing more, as after a lost lease.
    pub(crate) revoked: Arc<AtomicBool>,
}

/// A thread's lease, held by one holder until dropped.
///
/// Dropping it releases the lease at once, by a direct (blocking) call to
/// [`Store::release_lease`]: the call must work while a runtime is shutting
/// down or from a cancelled task, where nothing can be spawned any more; for
/// [`RedbStore`](agentflow_store::RedbStore) it is an in-memory map update.
/// A lease that another holder took meanwhile is left alone.
pub(crate) struct LeaseGuard {
    store: Arc<dyn Store>,
    thread: String,
    holder: String,
    ttl_ms: u64,
    until: AtomicU64,
    /// See [`LeaseHolder::revoked`] (never set for a lease the run took itself).
    revoked: Arc<AtomicBool>,
    /// Whether dropping the guard releases the lease: not when the holder took the lease
    /// before the run (a worker that claimed the thread releases it itself).
    release_on_drop: bool,
}

impl LeaseGuard {
    /// Takes `thread` for a new holder (blocking).
    pub(crate) fn acquire_now(
        store: Arc<dyn Store>,
        thread: String,
        holder: String,
        ttl_ms: u64,
    ) -> Result<Self, LeaseError> {
        let lease = store.acquire_lease(&thread, &holder, ttl_ms, now_ms())?;
        Ok(LeaseGuard {
            store,
            thread,
            holder,
            ttl_ms,
            until: AtomicU64::new(lease.expires_at),
            revoked: Arc::default(),
            release_on_drop: true,
        })
    }

    /// Takes `thread` for a new unique holder id (released when the guard drops), or, for a
    /// holder that already holds the lease ([`LeaseHolder`]: a worker whose claim took it),
    /// uses that lease as it is, without asking the store: the holder releases it. Its commits
    /// are fenced by the holder either way, so a lease lost between the claim and the run's
    /// first commit is refused there.
    async fn acquire(
        store: Arc<dyn Store>,
        thread: String,
        ttl: Duration,
        holder: Option<LeaseHolder>,
    ) -> Result<Self, RunError> {
        if holder.is_some() {
            return LeaseGuard::take(store, thread, ttl, holder);
        }
        let s = Arc::clone(&store);
        blocking(&store, move |_| LeaseGuard::take(s, thread, ttl, holder)).await?
    }

    /// [`LeaseGuard::acquire`], blocking.
    fn take(
        store: Arc<dyn Store>,
        thread: String,
        ttl: Duration,
        holder: Option<LeaseHolder>,
    ) -> Result<Self, RunError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if let Some(LeaseHolder { id, until, revoked }) = holder {
            let until = AtomicU64::new(until);
            return Ok(LeaseGuard { store, thread, holder: id, ttl_ms, until, revoked, release_on_drop: false });
        }
        LeaseGuard::acquire_now(store, thread, holder_id(), ttl_ms).map_err(lease_error)
    }

    /// Who holds the lease (the value commits are fenced by).
    pub(crate) fn holder(&self) -> &str {
        &self.holder
    }

    /// The flag its holder sets once the lease is no longer trusted to be this run's (see
    /// [`LeaseHolder::revoked`]).
    pub(crate) fn revoked(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.revoked)
    }

    /// A lease its holder revoked counts as lost (another executor may have the thread).
    pub(crate) fn check_not_revoked(&self) -> Result<(), PersistError> {
        if self.revoked.load(Ordering::SeqCst) {
            return Err(PersistError::Lease(LeaseError::NotHeld {
                thread: self.thread.clone(),
                holder: self.holder.clone(),
                current: None,
            }));
        }
        Ok(())
    }

    /// Extends the lease by its TTL from now.
    async fn renew(&self) -> Result<(), PersistError> {
        self.check_not_revoked()?;
        let (thread, holder, ttl, now) = (self.thread.clone(), self.holder.clone(), self.ttl_ms, now_ms());
        let lease = blocking(&self.store, move |s| s.renew_lease(&thread, &holder, ttl, now)).await??;
        self.until.store(lease.expires_at, Ordering::SeqCst);
        Ok(())
    }

    /// Renews the lease when less than half its TTL is left.
    pub(crate) async fn renew_if_due(&self) -> Result<(), PersistError> {
        if now_ms().saturating_add(self.ttl_ms / 2) >= self.until.load(Ordering::SeqCst) {
            self.renew().await
        } else {
            Ok(())
        }
    }

    /// Before a step: renews the lease when it is due. Another holder having
    /// it ends the run; a store that cannot be reached is waited out while
    /// the lease has not expired (the policy of [`LeaseGuard::tolerate`], as
    /// while a step runs).
    pub(crate) async fn check_before_step(&self) -> Result<(), PersistError> {
        match self.renew_if_due().await {
            Ok(()) => Ok(()),
            Err(e) => self.tolerate(e, "before a step"),
        }
    }

    /// Renews the lease every third of its TTL; completes only when the lease
    /// is lost (another holder has it, or it could not be renewed before it
    /// expired), with the error that ends the run.
    pub(crate) async fn keep_alive(&self) -> RunError {
        let every = Duration::from_millis((self.ttl_ms / 3).max(1));
        loop {
            tokio::time::sleep(every).await;
            let Err(failed) = self.renew().await else { continue };
            match self.tolerate(failed, "while a step runs") {
                Ok(()) => {}
                Err(PersistError::Lease(LeaseError::NotHeld { current, .. })) => return self.lost(current),
                Err(_) => return self.lost(None),
            }
        }
    }

    /// The one policy for a renewal that failed, before a step and while one
    /// runs: another holder having the lease, or the lease having expired
    /// unrenewed, ends the run (the error comes back); any other failure (a
    /// store that does not answer) is logged and waited out, as the lease
    /// still keeps every other holder off until it expires.
    fn tolerate(&self, failed: PersistError, when: &'static str) -> Result<(), PersistError> {
        match failed {
            e @ PersistError::Lease(LeaseError::NotHeld { .. }) => Err(e),
            e if now_ms() >= self.until.load(Ordering::SeqCst) => Err(e),
            e => {
                tracing::warn!(thread = %self.thread, error = %e, "could not renew the thread's lease {when}");
                Ok(())
            }
        }
    }

    pub(crate) fn lost(&self, current: Option<Lease>) -> RunError {
        RunError::LeaseLost { thread: self.thread.clone(), holder: current.map(|l| l.holder) }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if !self.release_on_drop {
            return;
        }
        match self.store.release_lease(&self.thread, &self.holder) {
            Ok(()) => {}
            // Taken over after it expired: it is not ours to release.
            Err(LeaseError::NotHeld { .. }) => {}
            // A lease we cannot release expires by itself; nothing is lost.
            Err(e) => tracing::warn!(thread = %self.thread, error = %e, "could not release the thread's lease"),
        }
    }
}

/// Writes a thread's checkpoints for one run. Holds the thread's lease
/// while it lives.
pub(crate) struct Checkpointer {
    store: Arc<dyn Store>,
    pub(crate) thread: String,
    owner: String,
    /// The thread whose run started this one as a subgraph child, stored in its record.
    parent: Option<String>,
    lease: LeaseGuard,
    fingerprint: String,
    version: u32,
    durability: Durability,
    /// The newest checkpoint of this run.
    pub(crate) seq: u64,
    /// The checkpoint the next step's effects and approvals are keyed by:
    /// `seq`, or for a step continued after a manual update, the checkpoint
    /// that step started from.
    journal_seq: u64,
    created_at: u64,
    snapshot_len: usize,
    delta_since: usize,
    /// The last step's commit already recorded the thread as completed.
    completed: bool,
    /// The status and detail last written, and when they changed.
    last_status: Option<(ThreadStatus, String)>,
    updated_at: u64,
    /// The thread's stored limits and its usage before this run.
    pub(crate) budget: ThreadBudget,
    /// The next step commit cancels the approvals left open: set on resume,
    /// since a paused step may have asked for calls it no longer makes.
    sweep_approvals: bool,
    /// Whether a node of the graph runs subgraphs: only then can a step leave children behind.
    runs_subgraphs: bool,
    /// A subgraph child's run: the leases of the runs above it (see [`ParentLeases`]).
    parents: ParentLeases,
    /// Approved calls of the running step that failed with a passing fault, left `EXECUTING` for
    /// a retry of their node (see [`Journal::failed_approvals`]).
    failed_approvals: Arc<std::sync::Mutex<Vec<String>>>,
    /// The checkpoint has a list of kept answers (see [`KeptAnswer`]): the next pause replaces it.
    answers_kept: bool,
    /// The state was migrated from an older version on load: the version it has now. Until a
    /// snapshot of it is committed (the next step's checkpoint carries one), the thread record
    /// keeps the stored version, so a resume before then migrates the stored snapshot again
    /// (its chain then holds no delta of the new version).
    migrated_to: Option<u32>,
    /// The thread's status when this run opened it (`None` for a new thread).
    pub(crate) opened_as: Option<ThreadStatus>,
    /// When the run ends sleeping: the thread's timer, written with its status.
    pub(crate) wake_at: Option<u64>,
    /// The last step's checkpoint `extra` when it held only the budget: the
    /// next step reuses it while the budget is unchanged (no model or tool
    /// call), instead of serialising the same value again.
    step_extra: Option<(ThreadBudget, Value)>,
}

/// When a commit must be on disk.
#[derive(Clone, Copy)]
enum Flush {
    /// Before returning, whatever the run's durability.
    Now,
    /// As the run's durability says for a step.
    Step,
    /// With the next durable commit.
    Deferred,
}

/// A lease holder id unique to this run: the process's [`process_tag`] and a counter.
pub(crate) fn holder_id() -> String {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{}-{}", process_tag(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Names this process among every process that shares a store, on this machine or another:
/// the host name, the pid, the start time and 64 random bits (a pid alone repeats across
/// machines and containers, and after a restart).
pub(crate) fn process_tag() -> &'static str {
    use std::hash::{BuildHasher, Hasher};
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| h.trim().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.').collect())
            .filter(|h: &String| !h.is_empty())
            .unwrap_or_else(|| "host".to_string());
        // `RandomState` is seeded from the operating system's randomness.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(now_ms());
        format!("{host}-pid{}-{}-{:016x}", std::process::id(), now_ms(), hasher.finish())
    })
}

/// The seq after `seq`, for thread `thread`'s next checkpoint. A store holds none past
/// `i64::MAX`, so this fails only for a [`Store`] of another origin that handed out a seq at the
/// end of the range: a typed error, not an overflow.
pub(crate) fn next_seq(thread: &str, seq: u64) -> Result<u64, PersistError> {
    seq.checked_add(1).ok_or_else(|| {
        PersistError::Commit(agentflow_store::CommitError::Invalid {
            thread: thread.to_string(),
            reason: format!("checkpoint {seq} is the last a thread can have: it cannot take another"),
        })
    })
}

fn to_json<T: serde::Serialize>(value: &T, what: &'static str) -> Result<Vec<u8>, PersistError> {
    super::encode::document(value, what)
}

/// The stored description of a graph, to explain a fingerprint change.
/// Stores the graph's description under its fingerprint unless the store has
/// it already (see [`CompiledGraph::description`]). The description only
/// serves tools that read the store, so a failure is logged, not fatal.
async fn keep_description<S: State, D>(store: &Arc<dyn Store>, graph: &CompiledGraph<S, D>) {
    let fingerprint = graph.fingerprint().to_string();
    let fp = fingerprint.clone();
    match blocking(store, move |s| s.graph_description(&fp)).await {
        Ok(Ok(Some(_))) => return,
        Ok(Ok(None)) => {}
        Ok(Err(e)) => return tracing::warn!(fingerprint, error = %e, "reading the graph's description"),
        Err(e) => return tracing::warn!(fingerprint, error = %e, "reading the graph's description"),
    }
    let text = graph.description().to_string();
    match blocking(store, move |s| s.put_graph_description(&fingerprint, &text)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "storing the graph's description"),
        Err(e) => tracing::warn!(error = %e, "storing the graph's description"),
    }
}

fn describe<S: State, D>(graph: &CompiledGraph<S, D>) -> Value {
    let nodes: BTreeMap<&str, Vec<&str>> = graph
        .nodes()
        .iter()
        .map(|n| {
            let mut targets: Vec<&str> = n.targets.iter().map(|t| graph.node_name(*t)).collect();
            if n.may_end {
                targets.push("END");
            }
            (n.name, targets)
        })
        .collect();
    let tools: BTreeMap<&str, Vec<String>> = graph
        .nodes()
        .iter()
        .filter(|n| !n.tools.is_empty())
        .map(|n| (n.name, n.tools.iter().map(|t| format!("{}:{}", t.name(), t.risk())).collect()))
        .collect();
    // The rest of what the fingerprint covers, so a refused resume can name it.
    let writes: BTreeMap<&str, Vec<&str>> =
        graph.nodes().iter().filter_map(|n| Some((n.name, S::field_names(n.writes?)))).collect();
    json!({
        "name": graph.name(),
        "nodes": nodes,
        "tools": tools,
        "state": S::NAME,
        "start": graph.node_name(graph.start()),
        "max_steps": graph.max_steps(),
        "writes": writes,
    })
}

/// The thread's budget as of checkpoint `latest`: a pending `__budget__`
/// write on it (a pause, a failure, a raised limit) wins over the one stored
/// in its metadata. A thread written before budgets were stored has none.
pub(crate) fn stored_budget(latest: &Checkpoint, writes: &[PendingWrite]) -> Result<ThreadBudget, PersistError> {
    let decode = |source| PersistError::Decode {
        thread: latest.thread.clone(),
        seq: latest.seq,
        what: "the thread's budget",
        source,
    };
    if let Some(w) = writes.iter().find(|w| w.node == BUDGET) {
        return serde_json::from_slice(&w.value).map_err(decode);
    }
    match latest.metadata.extra.get(BUDGET) {
        Some(v) => serde_json::from_value(v.clone()).map_err(decode),
        None => Ok(ThreadBudget::default()),
    }
}

/// How many times settling an abandoned subgraph run waits for another holder's lease on it
/// (as many as a subgraph call waits for a busy child, `subgraph::BUSY_WAITS`), and how long at most each time (never
/// more than a third of this run's own lease, which is renewed after each wait: the step's
/// nodes have finished, its commit waits).
const CHILD_BUSY_WAITS: u32 = 8;
const CHILD_BUSY_WAIT_MS: u64 = 5_000;

/// A pending write holding the thread's budget on checkpoint `seq`.
pub(crate) fn budget_write(seq: u64, budget: &ThreadBudget) -> Result<PendingWrite, PersistError> {
    Ok(PendingWrite { seq, node: BUDGET.to_string(), idx: 0, value: to_json(budget, "the thread's budget")? })
}

fn explain_change(stored: Option<&Value>, current: &Value) -> String {
    let (stored_all, current_all) = (stored.unwrap_or(&Value::Null), current);
    let Some(stored) = stored.and_then(|s| s.get("nodes")).and_then(Value::as_object) else {
        return "the stored thread carries no description of its graph".into();
    };
    let Some(current) = current.get("nodes").and_then(Value::as_object) else { return String::new() };
    let mut changes = Vec::new();
    for (name, routes) in stored {
        match current.get(name) {
            None => changes.push(format!("node `{name}` was removed")),
            Some(now) if now != routes => changes.push(format!("routes of `{name}` changed from {routes} to {now}")),
            Some(_) => {}
        }
    }
    for name in current.keys().filter(|n| !stored.contains_key(*n)) {
        changes.push(format!("node `{name}` was added"));
    }
    // Per node: its tools, and the fields it may write (threads stored before these were
    // described carry none, and are compared on what they carry).
    for (key, what) in [("tools", "tools"), ("writes", "`writes`")] {
        let of = |v: &Value| v.get(key).and_then(Value::as_object).cloned();
        if let (Some(before), Some(now)) = (of(stored_all), of(current_all)) {
            for name in before.keys().chain(now.keys().filter(|n| !before.contains_key(*n))) {
                let (b, n) = (before.get(name).unwrap_or(&Value::Null), now.get(name).unwrap_or(&Value::Null));
                if b != n {
                    changes.push(format!("{what} of `{name}` changed from {b} to {n}"));
                }
            }
        }
    }
    for (key, what) in [("state", "the state type"), ("start", "the start node"), ("max_steps", "the step bound")] {
        if let (Some(b), Some(n)) = (stored_all.get(key), current_all.get(key))
            && b != n
        {
            changes.push(format!("{what} changed from {b} to {n}"));
        }
    }

    if changes.is_empty() {
        "the state type, start node, `writes` lists, step bound or tools changed".into()
    } else {
        changes.join("; ")
    }
}

fn lease_error(e: LeaseError) -> RunError {
    match e {
        LeaseError::ThreadBusy { thread, holder, expires_at } => RunError::ThreadBusy { thread, holder, expires_at },
        other => RunError::Persist(other.into()),
    }
}

impl Checkpointer {
    fn new(
        store: Arc<dyn Store>,
        lease: LeaseGuard,
        owner: String,
        fingerprint: String,
        version: u32,
        durability: Durability,
    ) -> Self {
        Checkpointer {
            store,
            thread: lease.thread.clone(),
            owner,
            parent: None,
            lease,
            fingerprint,
            version,
            durability,
            seq: 0,
            journal_seq: 0,
            created_at: now_ms(),
            snapshot_len: 0,
            delta_since: 0,
            completed: false,
            last_status: None,
            opened_as: None,
            updated_at: 0,
            budget: ThreadBudget::default(),
            sweep_approvals: false,
            runs_subgraphs: false,
            parents: ParentLeases::default(),
            failed_approvals: Arc::default(),
            answers_kept: false,
            migrated_to: None,
            wake_at: None,
            step_extra: None,
        }
    }

    /// Starts a new thread at `input` (a subgraph child of thread `parent`, if given):
    /// checkpoint 0 holds its snapshot and the thread's `budget`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start<S: State, D>(
        app: &App<S, D>,
        store: Arc<dyn Store>,
        thread: String,
        parent: Option<String>,
        owner: String,
        durability: Durability,
        lease_ttl: Duration,
        budget: ThreadBudget,
        input: &S,
        holder: Option<LeaseHolder>,
        parents: ParentLeases,
    ) -> Result<Self, RunError> {
        let graph = &app.graph;
        let snapshot = to_json(input, "the input state")?;
        let mut metadata = CheckpointMetadata::new(0, CheckpointSource::Input, vec![]);
        metadata.extra = json!({ "graph": describe(graph), BUDGET: budget });
        let cursor = vec![graph.node_name(graph.start()).to_string()];
        let fingerprint = graph.fingerprint().to_string();
        // One trip off the async threads for everything a new thread needs before its first
        // step: the check that it is new, its lease and its input checkpoint.
        let s = Arc::clone(&store);
        let (cp, described, wrote) = blocking(&store, move |st| -> Result<(Checkpointer, bool, Written), RunError> {
            if st.thread(&thread).map_err(PersistError::from)?.is_some() {
                return Err(RunError::ThreadExists { thread });
            }
            let lease = LeaseGuard::take(Arc::clone(&s), thread, lease_ttl, holder)?;
            let described = matches!(st.graph_description(&fingerprint), Ok(Some(_)));
            let mut cp = Checkpointer::new(s, lease, owner, fingerprint, S::VERSION, durability);
            cp.parent = parent;
            // A child's thread is created fenced by its parents' leases too: a parent that lost
            // its thread does not start one.
            cp.parents = parents;
            cp.budget = budget;
            cp.snapshot_len = snapshot.len();
            let checkpoint = Checkpoint {
                thread: cp.thread.clone(),
                seq: 0,
                parent: None,
                cursor,
                snapshot: Some(snapshot),
                delta: vec![],
                metadata,
                created_at: now_ms(),
            };
            // Not synced on its own: it reaches the disk with the first step's
            // durable commit (redb commits in order), or the run never started.
            // A run above that its holder revoked does not start a child either.
            cp.check_parents_not_revoked()?;
            let commit = cp.prepare(Some(checkpoint), vec![], ThreadStatus::Running, String::new(), Flush::Deferred);
            let wrote = Written::of(&commit);
            st.commit_step(commit).map_err(PersistError::from)?;
            Ok((cp, described, wrote.done()))
        })
        .await??;
        // Recorded here: a metrics recorder may be installed for this thread only.
        wrote.record();
        if !described {
            keep_description(&store, graph).await;
        }
        Ok(cp)
    }

    /// Opens an existing thread where it stopped.
    pub(crate) async fn resume<S: State, D>(
        app: &App<S, D>,
        store: Arc<dyn Store>,
        thread: String,
        durability: Durability,
        lease_ttl: Duration,
        holder: Option<LeaseHolder>,
    ) -> Result<(Self, Resumed<S>), RunError> {
        let graph = &app.graph;
        let id = thread.clone();
        let record = blocking(&store, move |s| s.thread(&id))
            .await?
            .map_err(PersistError::from)?
            .ok_or_else(|| ResumeError::UnknownThread { thread: thread.clone() })?;
        if !record.status.is_resumable() {
            return Err(ResumeError::Finished { thread, status: record.status.as_str().into() }.into());
        }
        let lease = LeaseGuard::acquire(Arc::clone(&store), thread, lease_ttl, holder).await?;
        let mut cp = Checkpointer::new(
            store,
            lease,
            record.owner.clone(),
            graph.fingerprint().to_string(),
            S::VERSION,
            durability,
        );
        cp.created_at = record.created_at;
        cp.parent = record.parent.clone();
        cp.opened_as = Some(record.status);
        let id = cp.thread.clone();
        let latest = blocking(&cp.store, move |s| s.latest_checkpoint(&id))
            .await?
            .map_err(PersistError::from)?
            .ok_or_else(|| ResumeError::NoCheckpoint { thread: cp.thread.clone() })?;
        if record.graph_fingerprint != graph.fingerprint() {
            let id = cp.thread.clone();
            let root = blocking(&cp.store, move |s| s.checkpoint(&id, 0)).await?.map_err(PersistError::from)?;
            let stored = root.as_ref().and_then(|c| c.metadata.extra.get("graph"));
            let changes = explain_change(stored, &describe(graph));
            return Err(ResumeError::GraphChanged {
                thread: cp.thread.clone(),
                stored: record.graph_fingerprint,
                current: graph.fingerprint().to_string(),
                changes,
            }
            .into());
        }
        let state = cp.rebuild(app, latest.seq, record.schema_version).await?;
        if record.schema_version != S::VERSION {
            cp.migrated_to = Some(S::VERSION);
            cp.version = record.schema_version;
        }
        let mut active = Vec::new();
        for name in &latest.cursor {
            active.push(graph.node_id(name).ok_or_else(|| ResumeError::GraphChanged {
                thread: cp.thread.clone(),
                stored: record.graph_fingerprint.clone(),
                current: graph.fingerprint().to_string(),
                changes: format!("node `{name}` was removed"),
            })?);
        }
        active.sort_unstable();
        let (id, seq) = (cp.thread.clone(), latest.seq);
        let writes = blocking(&cp.store, move |s| s.pending_writes(&id, seq)).await?.map_err(PersistError::from)?;
        let mut pending = Vec::new();
        let mut interrupts = Vec::new();
        let mut kept_answers = Vec::new();
        let mut answers_stored = false;
        cp.budget = stored_budget(&latest, &writes)?;
        for w in writes {
            if w.node == BUDGET {
                continue;
            }
            if w.node == INTERRUPTS {
                interrupts = serde_json::from_slice(&w.value).map_err(|source| PersistError::Decode {
                    thread: cp.thread.clone(),
                    seq,
                    what: "interrupts",
                    source,
                })?;
                continue;
            }
            if w.node == ANSWERS {
                answers_stored = true;
                let (kept_at, mut kept) = match serde_json::from_slice::<KeptAnswers<Vec<KeptAnswer>>>(&w.value) {
                    Ok(kept) => (Some(kept.seq), kept.answers),
                    // The bare list of an earlier build: where it was kept is unknown.
                    Err(e) => (
                        None,
                        serde_json::from_slice(&w.value).map_err(|_| PersistError::Decode {
                            thread: cp.thread.clone(),
                            seq,
                            what: "kept answers",
                            source: e,
                        })?,
                    ),
                };
                // Carried here by a manual update, the state they answered about changed: each of
                // those nodes asks anew (and takes no value meant for what paused its step).
                if kept_at != Some(seq) {
                    for answer in &mut kept {
                        answer.stale = true;
                    }
                }
                kept_answers = kept;
                continue;
            }
            let Some(node) = graph.node_id(&w.node) else { continue };
            let stored: StoredWrite<S::Update> = serde_json::from_slice(&w.value).map_err(|source| {
                PersistError::Decode { thread: cp.thread.clone(), seq, what: "pending write", source }
            })?;
            let next = stored.next.iter().filter_map(|n| graph.node_id(n)).collect();
            let sends = stored
                .sends
                .into_iter()
                .filter_map(|(w, p)| Some(Sends { worker: graph.node_id(&w)?, payloads: Ok(p) }))
                .collect();
            pending.push((node, Step::restored(next, stored.update, sends, stored.instance)));
        }
        let payloads = match latest.metadata.extra.get(PAYLOADS) {
            None => Vec::new(),
            Some(v) => {
                let stored: Vec<(String, Vec<serde_json::Value>)> =
                    serde_json::from_value(v.clone()).map_err(|source| PersistError::Decode {
                        thread: cp.thread.clone(),
                        seq,
                        what: "map payloads",
                        source,
                    })?;
                stored.into_iter().filter_map(|(w, p)| Some((graph.node_id(&w)?, p))).collect()
            }
        };
        cp.seq = latest.seq;
        cp.journal_seq = journal_seq_of(&latest);
        cp.sweep_approvals = true;
        cp.runs_subgraphs = graph.nodes().iter().any(|n| !n.subgraphs.is_empty());
        cp.answers_kept = answers_stored;
        cp.snapshot_len = to_json(&state, "the state")?.len();
        let step = u32::try_from(latest.metadata.step).unwrap_or(u32::MAX);
        Ok((cp, Resumed { state, active, step, pending, interrupts, kept_answers, payloads }))
    }

    /// Rebuilds the state at `seq`: the nearest snapshot, migrated if needed,
    /// then every delta after it in order.
    async fn rebuild<S: State, D>(&self, app: &App<S, D>, seq: u64, stored_version: u32) -> Result<S, RunError> {
        let id = self.thread.clone();
        let chain = blocking(&self.store, move |s| s.state_chain(&id, seq))
            .await?
            .map_err(PersistError::from)?
            .ok_or_else(|| ResumeError::NoCheckpoint { thread: self.thread.clone() })?;
        let decode = |what, seq, source| PersistError::Decode { thread: self.thread.clone(), seq, what, source };
        if stored_version != S::VERSION {
            if !chain.steps.iter().all(|s| s.delta.is_empty()) {
                return Err(
                    ResumeError::NeedsSnapshot { thread: self.thread.clone(), seq, stored: stored_version }.into()
                );
            }
            let old: Value =
                serde_json::from_slice(&chain.snapshot).map_err(|e| decode("state snapshot", chain.snapshot_seq, e))?;
            let migrated = app.migrate(&self.thread, stored_version, old)?;
            return Ok(serde_json::from_value(migrated).map_err(|e| decode("migrated state", seq, e))?);
        }
        Ok(super::history::fold_chain(&self.thread, &chain)?)
    }

    /// Persists a finished super-step: its updates (already merged into
    /// `state`) and where the run goes next.
    // One argument per part of the checkpoint; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn commit_step<S: State>(
        &mut self,
        step: u32,
        state: &S,
        delta: Vec<Vec<u8>>,
        cursor: Vec<String>,
        nodes: Vec<String>,
        payloads: Vec<(String, Vec<serde_json::Value>)>,
        usage: RunUsage,
    ) -> Result<(), PersistError> {
        self.delta_since += delta.iter().map(Vec::len).sum::<usize>();
        // Snapshot when the deltas since the last one outweigh it (so storage
        // stays linear in the updates), and at the end of a run unless one
        // is recent (a resumable end should not need a long delta chain).
        let last = cursor.is_empty();
        let threshold = if last { self.snapshot_len / 4 } else { self.snapshot_len.max(MIN_SNAPSHOT_BYTES) };
        let snapshot = if self.delta_since >= threshold || self.migrated_to.is_some() {
            let bytes = to_json(state, "the state")?;
            self.snapshot_len = bytes.len();
            self.delta_since = 0;
            Some(bytes)
        } else {
            None
        };
        let seq = next_seq(&self.thread, self.seq)?;
        // The migrated state's first snapshot: the commit that carries it records the thread as of
        // the new version (below, and only if it succeeds: any other write keeps the stored one).
        let migrated = self.migrated_to.filter(|_| snapshot.is_some());
        let checkpoint = Checkpoint {
            thread: self.thread.clone(),
            seq,
            parent: Some(self.seq),
            cursor,
            snapshot,
            delta,
            metadata: CheckpointMetadata {
                extra: if payloads.is_empty() {
                    self.budget_extra(ThreadBudget { usage, ..self.budget })
                } else {
                    json!({ BUDGET: ThreadBudget { usage, ..self.budget }, PAYLOADS: payloads })
                },
                ..CheckpointMetadata::new(u64::from(step), CheckpointSource::Loop, nodes)
            },
            created_at: now_ms(),
        };
        // The step that completes the run records the thread as completed in
        // the same commit, so finishing needs no second disk sync.
        let (status, detail) = if last {
            (ThreadStatus::Completed, "Completed".to_string())
        } else {
            (ThreadStatus::Running, String::new())
        };
        // Every node of the step finished: a call of the step's journal still open was cut off
        // (before the resume) and not made again; so was an approved call still `EXECUTING`.
        // Their records ride the step's commit, fenced by the lease: a crash cannot lose them,
        // and a run that lost the thread writes none.
        let (unknown, mut cut_off, abandoned) = if self.sweep_approvals {
            (
                self.unknown_outcomes(self.journal_seq).await?,
                self.cut_off_approvals(self.journal_seq).await?,
                self.record_abandoned_children(self.journal_seq).await?,
            )
        } else {
            (UnknownOutcomes::default(), vec![], vec![])
        };
        // An approved call that failed with a passing fault stayed `EXECUTING` for its node's
        // retry; its node finished without one that succeeded: the call failed. (Its retry's
        // success, if any, already moved it: that move stands.)
        let failed: Vec<String> = std::mem::take(&mut *self.failed_approvals.lock().unwrap_or_else(|p| p.into_inner()));
        for id in failed {
            // Known to have failed: not an unknown outcome, whatever the sweep found.
            cut_off.retain(|t| t.id != id);
            let note = "the approved call failed (a passing fault) and its step finished without making it again";
            cut_off.push(ApprovalTransition {
                id,
                from: ApprovalStatus::Executing,
                to: ApprovalStatus::Failed,
                patch: ApprovalPatch { note: Some(note.to_string()), ..ApprovalPatch::by("agentflow", now_ms()) },
            });
        }
        let flush = if last { Flush::Now } else { Flush::Step };
        let stored_version = self.version;
        if let Some(version) = migrated {
            self.version = version;
        }
        let committed = if cut_off.is_empty() {
            self.commit_raw_with(Some(checkpoint), vec![], cut_off, unknown, status, detail, flush).await
        } else {
            self.commit_with_cut_off(checkpoint, cut_off, unknown, status, detail, flush).await
        };
        if let Err(e) = committed {
            self.version = stored_version;
            return Err(e);
        }
        if migrated.is_some() {
            self.migrated_to = None;
        }
        self.completed = last;
        self.seq = seq;
        // The new checkpoint has no kept answers of its own.
        self.answers_kept = false;
        let finished = std::mem::replace(&mut self.journal_seq, self.seq);
        if std::mem::take(&mut self.sweep_approvals) {
            self.cancel_orphaned_approvals(finished).await;
            self.cancel_abandoned_requests(abandoned, finished).await;
        }
        Ok(())
    }

    /// [`Checkpointer::commit_raw_with`] of a step that moves approved calls cut off mid-way to
    /// `OUTCOME_UNKNOWN`: one that another run moved meanwhile (its call's result came in from
    /// the run that made it) keeps that move, and the step commits without it instead of
    /// failing.
    async fn commit_with_cut_off(
        &mut self,
        checkpoint: Checkpoint,
        mut cut_off: Vec<ApprovalTransition>,
        unknown: UnknownOutcomes,
        status: ThreadStatus,
        detail: String,
        flush: Flush,
    ) -> Result<(), PersistError> {
        loop {
            let (cp, moves, records, text) = (checkpoint.clone(), cut_off.clone(), unknown.clone(), detail.clone());
            match self.commit_raw_with(Some(cp), vec![], moves, records, status, text, flush).await {
                Err(PersistError::Commit(CommitError::Approval(ApprovalError::AlreadyDecided { id, .. })))
                    if cut_off.iter().any(|t| t.id == id) =>
                {
                    cut_off.retain(|t| t.id != id);
                }
                answer => return answer,
            }
        }
    }

    /// The subgraph children the step at checkpoint `step_seq` started and its re-run did not
    /// call again ([`abandoned`](super::abandoned)): records what they left open (calls cut
    /// off mid-way, approved calls still `EXECUTING`) before the step's commit, and returns
    /// them for [`Checkpointer::cancel_abandoned_requests`] after it. A child another holder
    /// still runs is waited for, as a subgraph call waits for it. Best effort: a child that
    /// cannot be settled is logged and left.
    async fn record_abandoned_children(&self, step_seq: u64) -> Result<Vec<ThreadRecord>, PersistError> {
        if !self.runs_subgraphs {
            return Ok(Vec::new());
        }
        self.lease.check_not_revoked()?;
        let thread = self.thread.clone();
        let listed =
            blocking(&self.store, move |s| super::abandoned::abandoned_children(s, &thread, Some(step_seq))).await?;
        let children = match listed {
            Ok(children) => children,
            Err(e) => {
                tracing::warn!(thread = %self.thread, error = %e, "could not list the subgraph runs the step left");
                return Ok(Vec::new());
            }
        };
        let mut settled = Vec::with_capacity(children.len());
        for child in children {
            let note = format!(
                "the call started in subgraph run `{}` and left no result (the run stopped mid-call), and the step \
                 of thread `{}` at checkpoint {step_seq} finished without running that subgraph again; whether it \
                 acted is unknown: settle it",
                child.id, self.thread
            );
            let fences = self.sweep_fences();
            let done = self
                .with_child_lease(&child, move |s, child, holder| {
                    super::abandoned::record_left_open(s, child, holder, &fences, &note)
                })
                .await?;
            if done {
                settled.push(child);
            }
        }
        Ok(settled)
    }

    /// What fences this run's writes into an abandoned child: its own lease and those of the
    /// runs above it. A run that lost its thread writes nothing into a child another run owns.
    fn sweep_fences(&self) -> Vec<(String, String)> {
        let mut fences = self.parents.leases.clone();
        fences.push((self.thread.clone(), self.lease.holder().to_string()));
        fences
    }

    /// Runs `act` on abandoned child `child` with this run's holder id, waiting while another
    /// holder has the child's lease (up to [`CHILD_BUSY_WAITS`] times, renewing this run's
    /// lease in between). Whether it was done; a failure, or a child still held, is logged.
    async fn with_child_lease<F>(&self, child: &ThreadRecord, act: F) -> Result<bool, PersistError>
    where
        F: Fn(&dyn Store, &ThreadRecord, &str) -> Result<super::abandoned::Left, PersistError> + Clone + Send + 'static,
    {
        for wait in 0..=CHILD_BUSY_WAITS {
            let (c, holder, act) = (child.clone(), self.lease.holder().to_string(), act.clone());
            match blocking(&self.store, move |s| act(s, &c, &holder)).await? {
                Ok(super::abandoned::Left::Done) => return Ok(true),
                Ok(super::abandoned::Left::Busy { expires_at }) if wait < CHILD_BUSY_WAITS => {
                    let most = CHILD_BUSY_WAIT_MS.min(self.lease.ttl_ms / 3);
                    let left = expires_at.saturating_sub(now_ms()).min(most);
                    tokio::time::sleep(Duration::from_millis(left + 20)).await;
                    if let Err(e) = self.lease.renew_if_due().await {
                        // The step's commit finds out whether the thread is still this run's.
                        tracing::warn!(thread = %child.id, error = %e, "stopped waiting for an abandoned subgraph run");
                        return Ok(false);
                    }
                }
                Ok(super::abandoned::Left::Busy { .. }) => {
                    tracing::warn!(
                        thread = %child.id,
                        "an abandoned subgraph run is still held by another run: left as it is (its records are \
                         not settled; a resume of the parent before its next step commits looks again)"
                    );
                    return Ok(false);
                }
                Err(e) => {
                    tracing::warn!(thread = %child.id, error = %e, "could not settle an abandoned subgraph run");
                    return Ok(false);
                }
            }
        }
        Ok(false)
    }

    /// Cancels the requests still open in the children [`Checkpointer::record_abandoned_children`]
    /// settled, once the step at checkpoint `step_seq` committed: no call will use them. Best
    /// effort, as [`Checkpointer::cancel_orphaned_approvals`].
    async fn cancel_abandoned_requests(&self, children: Vec<ThreadRecord>, step_seq: u64) {
        if self.lease.check_not_revoked().is_err() {
            return;
        }
        let note = format!(
            "the step of thread `{}` at checkpoint {step_seq} finished without running this subgraph again; the \
             request can no longer be used",
            self.thread
        );
        for child in children {
            let (note, fences) = (note.clone(), self.sweep_fences());
            let cancelled = self
                .with_child_lease(&child, move |s, child, holder| {
                    super::abandoned::cancel_requests(s, child, holder, &fences, &note)
                })
                .await;
            if let Err(e) = cancelled {
                tracing::warn!(thread = %child.id, error = %e, "could not cancel the requests of an abandoned subgraph run");
            }
        }
    }

    /// A step's checkpoint `extra` holding only `budget`.
    fn budget_extra(&mut self, budget: ThreadBudget) -> Value {
        match &self.step_extra {
            Some((last, extra)) if *last == budget => extra.clone(),
            _ => {
                let extra = json!({ BUDGET: budget });
                self.step_extra = Some((budget, extra.clone()));
                extra
            }
        }
    }

    /// The calls of the journal of checkpoint `step_seq` cut off mid-way (before the resume) and
    /// not made again by the step, whose outcome is unknown (see [`super::unknown_outcomes`]).
    async fn unknown_outcomes(&self, step_seq: u64) -> Result<UnknownOutcomes, PersistError> {
        let thread = self.thread.clone();
        blocking(&self.store, move |s| super::unknown_outcomes(s, &thread, step_seq)).await?
    }

    /// Records, before a compensation, the calls of the failed step at checkpoint `step_seq`
    /// cut off mid-way in an earlier run and not made again (their outcome is unknown), so
    /// the compensation lists them and a human is asked about them. In one commit of the
    /// thread record, fenced by the lease, keeping the thread's status; nothing to record,
    /// nothing written.
    pub(crate) async fn record_unknown_outcomes(&mut self, step_seq: u64) -> Result<(), PersistError> {
        let unknown = self.unknown_outcomes(step_seq).await?;
        if unknown.is_empty() {
            return Ok(());
        }
        let (status, detail) = self
            .last_status
            .clone()
            .unwrap_or_else(|| (ThreadStatus::Compensating, "resumed while compensating".to_string()));
        self.commit_raw_with(None, vec![], vec![], unknown, status, detail, Flush::Now).await
    }

    /// The moves that go with the commit of the step at checkpoint `step_seq`: an approval of
    /// the thread still `EXECUTING` belongs to a call cut off mid-way (before the resume) that
    /// the step finished without making again. It may have acted, so it becomes
    /// `OUTCOME_UNKNOWN` (listed for a human to settle, audited), never cancelled. In the step's
    /// own commit, fenced by the run's lease: a crash right after the commit cannot leave it
    /// `EXECUTING` for good (no later step would look at it again), and a run that lost the
    /// thread moves nothing.
    async fn cut_off_approvals(&self, step_seq: u64) -> Result<Vec<ApprovalTransition>, PersistError> {
        let thread = self.thread.clone();
        let executing = blocking(&self.store, move |s| s.list_approvals(&thread)).await??;
        let note = format!(
            "the call started and left no result (the run stopped mid-call), and the step at checkpoint {step_seq} \
             finished without asking for it again; whether it acted is unknown: settle it"
        );
        Ok(executing
            .into_iter()
            .filter(|a| a.status == ApprovalStatus::Executing)
            .map(|a| ApprovalTransition {
                id: a.id,
                from: ApprovalStatus::Executing,
                to: ApprovalStatus::OutcomeUnknown,
                patch: ApprovalPatch { note: Some(note.clone()), ..ApprovalPatch::by("agentflow", now_ms()) },
            })
            .collect())
    }

    /// Before the thread is compensated after a failed step: an approved call cut off mid-way
    /// that the step did not make again would stay `EXECUTING` for good (no step of a
    /// compensated thread runs again). It may have acted, so it becomes `OUTCOME_UNKNOWN`, for
    /// a human to settle and for the outcome to list. Each move is its own compare-and-set,
    /// fenced by the run's lease (one another run moved meanwhile keeps that move).
    pub(crate) async fn settle_cut_off_approvals(&self, step_seq: u64) -> Result<(), PersistError> {
        self.lease.check_not_revoked()?;
        for transition in self.cut_off_approvals(step_seq).await? {
            let batch =
                EffectBatch::new(self.thread.clone()).transition(transition).fenced_by(self.lease.holder(), now_ms());
            match blocking(&self.store, move |s| s.commit_effects(batch)).await? {
                Ok(_) | Err(CommitError::Approval(ApprovalError::AlreadyDecided { .. })) => {}
                Err(e) => return Err(PersistError::Commit(e)),
            }
        }
        Ok(())
    }

    /// Cancels the thread's approvals still `PENDING` or `APPROVED` once the
    /// step they were asked in has committed: their ids are keyed by that
    /// step's checkpoint, so no later call can use them (the model asked for
    /// other calls, or other arguments, when the step ran again). Each gets
    /// an `approval.cancelled` audit entry. (One still `EXECUTING` was made
    /// `OUTCOME_UNKNOWN` in the step's commit.) Best effort, one compare-and-set
    /// each, fenced by the run's lease (a run that lost the thread cancels
    /// nothing the new holder asked for): an approval a human decides at the
    /// same moment keeps that decision, and a crash before it leaves requests
    /// no call can use.
    async fn cancel_orphaned_approvals(&self, step_seq: u64) {
        if self.lease.check_not_revoked().is_err() {
            return;
        }
        let (thread, holder) = (self.thread.clone(), self.lease.holder().to_string());
        let swept = blocking(&self.store, move |s| -> Result<usize, PersistError> {
            let note = format!(
                "the step at checkpoint {step_seq} finished without this call (the model asked for other calls \
                 or arguments); the request can no longer be used"
            );
            let mut cancelled = 0;
            for approval in s.list_approvals(&thread)? {
                if !matches!(approval.status, ApprovalStatus::Pending | ApprovalStatus::Approved) {
                    continue;
                }
                let now = now_ms();
                let patch = ApprovalPatch { note: Some(note.clone()), ..ApprovalPatch::by("agentflow", now) };
                let transition = ApprovalTransition {
                    id: approval.id.clone(),
                    from: approval.status,
                    to: ApprovalStatus::Cancelled,
                    patch,
                };
                // Fenced by the lease: a run that lost the thread after its commit does not
                // cancel what the new holder asked for since.
                let batch = EffectBatch::new(thread.clone()).transition(transition).fenced_by(holder.clone(), now);
                match s.commit_effects(batch) {
                    Ok(_) => cancelled += 1,
                    Err(e @ CommitError::LeaseLost { .. }) => return Err(PersistError::Commit(e)),
                    Err(e) => tracing::info!(thread = %thread, approval = %approval.id, error = %e, "left as decided"),
                }
            }
            Ok(cancelled)
        })
        .await;
        match swept {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => tracing::info!(thread = %self.thread, cancelled = n, "cancelled approvals of a finished step"),
            Ok(Err(e)) | Err(e) => {
                tracing::warn!(thread = %self.thread, error = %e, "could not cancel the approvals of a finished step");
            }
        }
    }

    /// Keeps the writes of the nodes that finished in a step that failed, so
    /// a resume re-runs only the failed nodes. (The thread's usage is
    /// written by [`Checkpointer::finish`], which follows.) `interrupts`
    /// replaces what the thread waits for (`None` leaves it as it is).
    pub(crate) async fn keep_pending<S: State>(
        &mut self,
        done: &[(NodeId, Step<S>)],
        interrupts: Option<&[Pending]>,
        kept: Option<&[KeptAnswer]>,
        names: impl Fn(NodeId) -> &'static str,
    ) -> Result<(), PersistError> {
        let mut writes = Vec::new();
        if let Some(interrupts) = interrupts {
            let value = to_json(&interrupts, "the interrupts")?;
            writes.push(PendingWrite { seq: self.seq, node: INTERRUPTS.to_string(), idx: 0, value });
        }
        // A pause replaces the kept answers (a node that now asks anew keeps none); a step that
        // failed leaves them as they were.
        if let Some(kept) = kept
            && (!kept.is_empty() || self.answers_kept)
        {
            let value = to_json(&KeptAnswers { seq: self.seq, answers: kept }, "the answers the paused nodes keep")?;
            writes.push(PendingWrite { seq: self.seq, node: ANSWERS.to_string(), idx: 0, value });
            self.answers_kept = !kept.is_empty();
        }
        for (id, step) in done {
            let value = stored_write(step, &names)?;
            let idx = step.instance.unwrap_or(0);
            writes.push(PendingWrite { seq: self.seq, node: names(*id).to_string(), idx, value });
        }
        if !writes.is_empty() {
            self.commit_raw(None, writes, ThreadStatus::Running, String::new(), Flush::Step).await?;
        }
        Ok(())
    }

    /// Records how the run ended and the thread's usage, durably. The lease
    /// is released when the checkpointer is dropped.
    pub(crate) async fn finish(
        &mut self,
        status: ThreadStatus,
        detail: String,
        usage: RunUsage,
    ) -> Result<(), PersistError> {
        if self.completed && status == ThreadStatus::Completed {
            return Ok(());
        }
        let writes = vec![budget_write(self.seq, &ThreadBudget { usage, ..self.budget })?];
        self.commit_raw(None, writes, status, detail, Flush::Now).await
    }

    /// The lease this run holds, to keep alive while a step runs.
    pub(crate) fn lease(&self) -> &LeaseGuard {
        &self.lease
    }

    async fn commit_raw(
        &mut self,
        checkpoint: Option<Checkpoint>,
        pending: Vec<PendingWrite>,
        status: ThreadStatus,
        detail: String,
        sync: Flush,
    ) -> Result<(), PersistError> {
        self.commit_raw_with(checkpoint, pending, vec![], UnknownOutcomes::default(), status, detail, sync).await
    }

    /// [`Checkpointer::commit_raw`] with approval compare-and-sets, and the records of calls
    /// whose outcome is unknown, in the same commit.
    #[allow(clippy::too_many_arguments)]
    async fn commit_raw_with(
        &mut self,
        checkpoint: Option<Checkpoint>,
        pending: Vec<PendingWrite>,
        transitions: Vec<ApprovalTransition>,
        unknown: UnknownOutcomes,
        status: ThreadStatus,
        detail: String,
        sync: Flush,
    ) -> Result<(), PersistError> {
        self.lease.check_not_revoked()?;
        self.check_parents_not_revoked()?;
        self.lease.renew_if_due().await?;
        let mut commit = self.prepare(checkpoint, pending, status, detail, sync);
        commit.approval_transitions = transitions;
        commit.new_approvals = unknown.records;
        commit.audit = unknown.audit;
        let durability = commit.durability;
        let wrote = Written::of(&commit);
        // A durable commit on a multi-threaded runtime is made from this task's thread, the
        // runtime's other work moved off it meanwhile: the store can then commit without a
        // hand-off to its writer thread and a wake-up of this task afterwards, so a `Sync` step
        // costs about one disk commit. Otherwise the commit is answered from the store's writer
        // thread and no runtime thread waits for the disk.
        if durability == StoreDurability::Immediate && on_multi_thread_runtime() {
            tokio::task::block_in_place(|| self.store.commit_step(commit))?;
        } else {
            let (tx, rx) = tokio::sync::oneshot::channel();
            self.store.commit_step_then(commit, Box::new(move |answer| drop(tx.send(answer))));
            rx.await.map_err(|_| PersistError::CommitDropped)??;
        }
        wrote.done().record();
        Ok(())
    }

    /// The store commit that writes `checkpoint` and `pending` and records the
    /// thread as `status`, fenced by this run's lease.
    fn prepare(
        &mut self,
        checkpoint: Option<Checkpoint>,
        pending: Vec<PendingWrite>,
        status: ThreadStatus,
        detail: String,
        sync: Flush,
    ) -> StepCommit {
        let now = now_ms();
        let durability = match (self.durability, sync) {
            (_, Flush::Now) | (Durability::Sync, Flush::Step) => StoreDurability::Immediate,
            (_, Flush::Deferred) | (Durability::Async | Durability::Exit, Flush::Step) => StoreDurability::Eventual,
        };
        // A NUL byte (an error message decoded from a binary body) is stored as U+FFFD: PostgreSQL
        // `text` cannot hold it, and a refused commit would leave the thread `running`.
        let detail = if detail.contains('\0') { detail.replace('\0', "\u{FFFD}") } else { detail };
        let mut record = ThreadRecord::new(&self.thread, &self.owner, &self.fingerprint, self.version, self.created_at);
        // `updated_at` moves when the status or detail does, so a plain step
        // leaves the stored record unchanged and the store can skip it.
        if self.last_status.as_ref() != Some(&(status, detail.clone())) {
            self.updated_at = now;
            self.last_status = Some((status, detail.clone()));
        }
        record.status = status;
        record.detail = detail;
        record.updated_at = self.updated_at;
        record.parent.clone_from(&self.parent);
        let mut commit = StepCommit::new(record)
            .fenced_by(self.lease.holder(), now)
            .fenced_by_parents(self.parents.leases.clone())
            .with_durability(durability);
        commit.checkpoint = checkpoint;
        commit.pending_writes = pending;
        if matches!(status, ThreadStatus::Sleeping | ThreadStatus::Interrupted) {
            commit.wake_at = self.wake_at;
        }
        commit
    }

    /// The store the thread is in.
    pub(crate) fn store_handle(&self) -> Arc<dyn Store> {
        Arc::clone(&self.store)
    }

    /// The store the thread lives in.
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Who the thread belongs to, as stored with it.
    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// Where the next step keeps its finished writes as they finish: under
    /// [`Durability::Sync`] only (see [`super::finished`]); the other durabilities keep them
    /// with the step's own commit.
    pub(crate) fn finished_writes(&self) -> Option<FinishedWrites> {
        (self.durability == Durability::Sync).then(|| FinishedWrites {
            store: Arc::clone(&self.store),
            thread: self.thread.clone(),
            seq: self.seq,
            holder: self.lease.holder().to_string(),
            revoked: self.lease.revoked(),
            parents: self.parents.clone(),
        })
    }

    /// Where the effects of the next step are journaled.
    pub(crate) fn journal(&self) -> Journal {
        Journal {
            store: Arc::clone(&self.store),
            thread: self.thread.clone(),
            seq: self.journal_seq,
            holder: Some(self.lease.holder().to_string()),
            lost: Arc::default(),
            revoked: Some(self.lease.revoked()),
            parents: self.parents.clone(),
            failed_approvals: Arc::clone(&self.failed_approvals),
        }
    }

    /// Fences this run's commits and what starts its effects by the leases of the runs above
    /// it too (a subgraph child's run; see [`ParentLeases`]).
    pub(crate) fn fence_parents(&mut self, parents: ParentLeases) {
        self.parents = parents;
    }

    /// A lease of a run above this one that its holder revoked counts as lost, as this run's
    /// own does ([`LeaseGuard::check_not_revoked`]).
    fn check_parents_not_revoked(&self) -> Result<(), PersistError> {
        match self.parents.revoked_lease() {
            Some((thread, holder)) => Err(PersistError::Lease(LeaseError::NotHeld {
                thread: thread.clone(),
                holder: holder.clone(),
                current: None,
            })),
            None => Ok(()),
        }
    }
}

/// The metrics of one checkpoint write: its payload's size and how long the run waited for it.
struct Written {
    bytes: Option<usize>,
    durability: &'static str,
    began: std::time::Instant,
    took: std::time::Duration,
}

impl Written {
    /// Starts timing the write of `commit`.
    fn of(commit: &StepCommit) -> Self {
        let bytes = commit
            .checkpoint
            .as_ref()
            .map(|cp| cp.delta.iter().map(Vec::len).sum::<usize>() + cp.snapshot.as_ref().map_or(0, Vec::len));
        let durability = if commit.durability == StoreDurability::Immediate { "immediate" } else { "eventual" };
        Written { bytes, durability, began: std::time::Instant::now(), took: std::time::Duration::ZERO }
    }

    /// The write returned.
    fn done(mut self) -> Self {
        self.took = self.began.elapsed();
        self
    }

    /// Records the write with the metrics recorder of the calling thread.
    fn record(&self) {
        if let Some(bytes) = self.bytes {
            ::metrics::histogram!(crate::metrics::CHECKPOINT_BYTES).record(bytes as f64);
        }
        ::metrics::histogram!(crate::metrics::CHECKPOINT_WRITE_SECONDS, "durability" => self.durability)
            .record(self.took.as_secs_f64());
    }
}

/// Whether this task runs on a multi-threaded tokio runtime, where
/// [`tokio::task::block_in_place`] may be used (it panics on a current-thread one).
fn on_multi_thread_runtime() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::explain_change;

    fn described(writes: serde_json::Value, max_steps: u32) -> serde_json::Value {
        json!({
            "name": "g",
            "nodes": { "a": ["b"], "b": ["END"] },
            "tools": {},
            "state": "Doc",
            "start": "a",
            "max_steps": max_steps,
            "writes": writes,
        })
    }

    #[test]
    fn a_changed_writes_list_or_step_bound_is_named() {
        let before = described(json!({ "a": ["x", "y"] }), 10);
        let after = described(json!({ "a": ["x"], "b": ["y"] }), 12);
        let changes = explain_change(Some(&before), &after);
        assert!(changes.contains("`writes` of `a` changed from [\"x\",\"y\"] to [\"x\"]"), "{changes}");
        assert!(changes.contains("`writes` of `b` changed from null to [\"y\"]"), "{changes}");
        assert!(changes.contains("the step bound changed from 10 to 12"), "{changes}");
    }

    #[test]
    fn a_description_stored_before_writes_were_described_is_compared_on_what_it_holds() {
        let old = json!({ "name": "g", "nodes": { "a": ["b"], "b": ["END"] }, "tools": {} });
        let now = described(json!({ "a": ["x"] }), 10);
        let changes = explain_change(Some(&old), &now);
        assert_eq!(changes, "the state type, start node, `writes` lists, step bound or tools changed");
    }
}
