//! The run's side of persistence: one checkpoint per super-step, pending
//! writes for a failed step, the lease, and rebuilding a thread to resume it.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentflow_store::{
    Checkpoint, CheckpointMetadata, CheckpointSource, Durability as StoreDurability, LeaseError, PendingWrite,
    StepCommit, Store, ThreadRecord, ThreadStatus,
};
use serde_json::{Value, json};

use super::{Durability, Journal, PersistError, ResumeError, blocking, now_ms};
use crate::executor::RunError;
use crate::graph::{CompiledGraph, NodeId};
use crate::interrupt::Pending;
use crate::state::State;
use crate::step::Step;

const LEASE_TTL_MS: u64 = 30_000;
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
}

impl<S: State> Resumed<S> {
    /// A new run at `input`.
    pub(crate) fn fresh(state: S, start: NodeId) -> Self {
        Resumed { state, active: vec![start], step: 0, pending: Vec::new(), interrupts: Vec::new() }
    }
}

/// The pending-write key under which a paused step keeps its interrupts.
pub(crate) const INTERRUPTS: &str = "__interrupts__";

/// Writes a thread's checkpoints for one run.
pub(crate) struct Checkpointer {
    store: Arc<dyn Store>,
    pub(crate) thread: String,
    owner: String,
    holder: String,
    fingerprint: &'static str,
    version: u32,
    durability: Durability,
    /// The newest checkpoint of this run.
    pub(crate) seq: u64,
    created_at: u64,
    lease_until: u64,
    snapshot_len: usize,
    delta_since: usize,
    /// The last step's commit already recorded the thread as completed.
    completed: bool,
    /// The status and detail last written, and when they changed.
    last_status: Option<(ThreadStatus, String)>,
    updated_at: u64,
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

fn holder_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("pid{}-{}-{}", std::process::id(), now_ms(), NEXT.fetch_add(1, Ordering::Relaxed))
}

fn to_json<T: serde::Serialize>(value: &T, what: &'static str) -> Result<Vec<u8>, PersistError> {
    super::encode::document(value, what)
}

/// The stored description of a graph, to explain a fingerprint change.
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
    json!({ "name": graph.name(), "nodes": nodes })
}

fn explain_change(stored: Option<&Value>, current: &Value) -> String {
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
    if changes.is_empty() { "the state type, `writes` lists or step bound changed".into() } else { changes.join("; ") }
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
        thread: String,
        owner: String,
        fingerprint: &'static str,
        version: u32,
        durability: Durability,
    ) -> Self {
        Checkpointer {
            store,
            thread,
            owner,
            holder: holder_id(),
            fingerprint,
            version,
            durability,
            seq: 0,
            created_at: now_ms(),
            lease_until: 0,
            snapshot_len: 0,
            delta_since: 0,
            completed: false,
            last_status: None,
            updated_at: 0,
        }
    }

    async fn acquire(&mut self) -> Result<(), RunError> {
        let (thread, holder, now) = (self.thread.clone(), self.holder.clone(), now_ms());
        let lease = blocking(&self.store, move |s| s.acquire_lease(&thread, &holder, LEASE_TTL_MS, now))
            .await?
            .map_err(lease_error)?;
        self.lease_until = lease.expires_at;
        Ok(())
    }

    /// Starts a new thread at `input`: checkpoint 0 holds its snapshot.
    pub(crate) async fn start<S: State, D>(
        graph: &CompiledGraph<S, D>,
        store: Arc<dyn Store>,
        thread: String,
        owner: String,
        durability: Durability,
        input: &S,
    ) -> Result<Self, RunError> {
        let mut cp = Checkpointer::new(store, thread, owner, graph.fingerprint(), S::VERSION, durability);
        let id = cp.thread.clone();
        if blocking(&cp.store, move |s| s.thread(&id)).await?.map_err(PersistError::from)?.is_some() {
            return Err(RunError::ThreadExists { thread: cp.thread });
        }
        cp.acquire().await?;
        let snapshot = to_json(input, "the input state")?;
        cp.snapshot_len = snapshot.len();
        let mut metadata = CheckpointMetadata::new(0, CheckpointSource::Input, vec![]);
        metadata.extra = json!({ "graph": describe(graph) });
        let checkpoint = Checkpoint {
            thread: cp.thread.clone(),
            seq: 0,
            parent: None,
            cursor: vec![graph.node_name(graph.start()).to_string()],
            snapshot: Some(snapshot),
            delta: vec![],
            metadata,
            created_at: now_ms(),
        };
        // Not synced on its own: it reaches the disk with the first step's
        // durable commit (redb commits in order), or the run never started.
        cp.commit_raw(Some(checkpoint), vec![], ThreadStatus::Running, String::new(), Flush::Deferred).await?;
        Ok(cp)
    }

    /// Opens an existing thread where it stopped.
    pub(crate) async fn resume<S: State, D>(
        graph: &CompiledGraph<S, D>,
        store: Arc<dyn Store>,
        thread: String,
        durability: Durability,
    ) -> Result<(Self, Resumed<S>), RunError> {
        let id = thread.clone();
        let record = blocking(&store, move |s| s.thread(&id))
            .await?
            .map_err(PersistError::from)?
            .ok_or_else(|| ResumeError::UnknownThread { thread: thread.clone() })?;
        if matches!(record.status, ThreadStatus::Completed) {
            return Err(ResumeError::Finished { thread, status: "completed".into() }.into());
        }
        let mut cp =
            Checkpointer::new(store, thread, record.owner.clone(), graph.fingerprint(), S::VERSION, durability);
        cp.created_at = record.created_at;
        cp.acquire().await?;
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
            cp.release().await;
            return Err(ResumeError::GraphChanged {
                thread: cp.thread.clone(),
                stored: record.graph_fingerprint,
                current: graph.fingerprint().to_string(),
                changes,
            }
            .into());
        }
        let state = match cp.rebuild(graph, latest.seq, record.schema_version).await {
            Ok(state) => state,
            Err(e) => {
                cp.release().await;
                return Err(e);
            }
        };
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
        for w in writes {
            if w.node == INTERRUPTS {
                interrupts = serde_json::from_slice(&w.value).map_err(|source| PersistError::Decode {
                    thread: cp.thread.clone(),
                    seq,
                    what: "interrupts",
                    source,
                })?;
                continue;
            }
            let Some(node) = graph.node_id(&w.node) else { continue };
            let stored: StoredWrite<S::Update> = serde_json::from_slice(&w.value).map_err(|source| {
                PersistError::Decode { thread: cp.thread.clone(), seq, what: "pending write", source }
            })?;
            let next = stored.next.iter().filter_map(|n| graph.node_id(n)).collect();
            pending.push((node, Step::restored(next, stored.update)));
        }
        cp.seq = latest.seq;
        cp.snapshot_len = to_json(&state, "the state")?.len();
        let step = u32::try_from(latest.metadata.step).unwrap_or(u32::MAX);
        Ok((cp, Resumed { state, active, step, pending, interrupts }))
    }

    /// Rebuilds the state at `seq`: the nearest snapshot, migrated if needed,
    /// then every delta after it in order.
    async fn rebuild<S: State, D>(
        &self,
        graph: &CompiledGraph<S, D>,
        seq: u64,
        stored_version: u32,
    ) -> Result<S, RunError> {
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
            let migrated = graph.migrate(&self.thread, stored_version, old)?;
            return Ok(serde_json::from_value(migrated).map_err(|e| decode("migrated state", seq, e))?);
        }
        Ok(super::history::fold_chain(&self.thread, &chain)?)
    }

    /// Persists a finished super-step: its updates (already merged into
    /// `state`) and where the run goes next.
    pub(crate) async fn commit_step<S: State>(
        &mut self,
        step: u32,
        state: &S,
        delta: Vec<Vec<u8>>,
        cursor: Vec<String>,
        nodes: Vec<String>,
    ) -> Result<(), PersistError> {
        self.delta_since += delta.iter().map(Vec::len).sum::<usize>();
        // Snapshot when the deltas since the last one outweigh it (so storage
        // stays linear in the updates), and at the end of a run.
        // Snapshot when the deltas since the last one outweigh it (so storage
        // stays linear in the updates), and at the end of a run unless one
        // is recent (a resumable end should not need a long delta chain).
        let last = cursor.is_empty();
        let threshold = if last { self.snapshot_len / 4 } else { self.snapshot_len.max(MIN_SNAPSHOT_BYTES) };
        let snapshot = if self.delta_since >= threshold {
            let bytes = to_json(state, "the state")?;
            self.snapshot_len = bytes.len();
            self.delta_since = 0;
            Some(bytes)
        } else {
            None
        };
        let checkpoint = Checkpoint {
            thread: self.thread.clone(),
            seq: self.seq + 1,
            parent: Some(self.seq),
            cursor,
            snapshot,
            delta,
            metadata: CheckpointMetadata::new(u64::from(step), CheckpointSource::Loop, nodes),
            created_at: now_ms(),
        };
        // The step that completes the run records the thread as completed in
        // the same commit, so finishing needs no second disk sync.
        let (status, detail) = if last {
            (ThreadStatus::Completed, "Completed".to_string())
        } else {
            (ThreadStatus::Running, String::new())
        };
        self.commit_raw(Some(checkpoint), vec![], status, detail, if last { Flush::Now } else { Flush::Step }).await?;
        self.completed = last;
        self.seq += 1;
        Ok(())
    }

    /// Keeps the writes of the nodes that finished in a step that failed, so
    /// a resume re-runs only the failed nodes.
    pub(crate) async fn keep_pending<S: State>(
        &mut self,
        done: &[(NodeId, Step<S>)],
        interrupts: &[Pending],
        names: impl Fn(NodeId) -> &'static str,
    ) -> Result<(), PersistError> {
        let mut writes = Vec::new();
        if !interrupts.is_empty() {
            let value = to_json(&interrupts, "the interrupts")?;
            writes.push(PendingWrite { seq: self.seq, node: INTERRUPTS.to_string(), idx: 0, value });
        }
        for (id, step) in done {
            let next: Vec<&str> = step.next.iter().map(|n| names(*n)).collect();
            let value = to_json(&StoredWriteRef { update: &step.update, next }, "a pending write")?;
            writes.push(PendingWrite { seq: self.seq, node: names(*id).to_string(), idx: 0, value });
        }
        if !writes.is_empty() {
            self.commit_raw(None, writes, ThreadStatus::Running, String::new(), Flush::Step).await?;
        }
        Ok(())
    }

    /// Records how the run ended, durably, and lets the thread go.
    pub(crate) async fn finish(&mut self, status: ThreadStatus, detail: String) -> Result<(), PersistError> {
        let result = if self.completed && status == ThreadStatus::Completed {
            Ok(())
        } else {
            self.commit_raw(None, vec![], status, detail, Flush::Now).await
        };
        self.release().await;
        result
    }

    pub(crate) async fn release(&self) {
        let (thread, holder) = (self.thread.clone(), self.holder.clone());
        // A lease we cannot release expires by itself; nothing is lost.
        if let Ok(Err(e)) = blocking(&self.store, move |s| s.release_lease(&thread, &holder)).await {
            tracing::warn!(thread = %self.thread, error = %e, "could not release the thread's lease");
        }
    }

    async fn commit_raw(
        &mut self,
        checkpoint: Option<Checkpoint>,
        pending: Vec<PendingWrite>,
        status: ThreadStatus,
        detail: String,
        sync: Flush,
    ) -> Result<(), PersistError> {
        let now = now_ms();
        if now + LEASE_TTL_MS / 2 >= self.lease_until {
            let (thread, holder) = (self.thread.clone(), self.holder.clone());
            self.lease_until =
                blocking(&self.store, move |s| s.renew_lease(&thread, &holder, LEASE_TTL_MS, now)).await??.expires_at;
        }
        let durability = match (self.durability, sync) {
            (_, Flush::Now) | (Durability::Sync, Flush::Step) => StoreDurability::Immediate,
            (_, Flush::Deferred) | (Durability::Async | Durability::Exit, Flush::Step) => StoreDurability::Eventual,
        };
        let mut record = ThreadRecord::new(&self.thread, &self.owner, self.fingerprint, self.version, self.created_at);
        // `updated_at` moves when the status or detail does, so a plain step
        // leaves the stored record unchanged and the store can skip it.
        if self.last_status.as_ref() != Some(&(status, detail.clone())) {
            self.updated_at = now;
            self.last_status = Some((status, detail.clone()));
        }
        record.status = status;
        record.detail = detail;
        record.updated_at = self.updated_at;
        let mut commit = StepCommit::new(record).fenced_by(&self.holder, now).with_durability(durability);
        commit.checkpoint = checkpoint;
        commit.pending_writes = pending;
        // Answered from the store's writer thread: no thread waits for the disk.
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.store.commit_step_then(commit, Box::new(move |answer| drop(tx.send(answer))));
        rx.await.map_err(|_| PersistError::Task("the store dropped a commit without answering".into()))??;
        Ok(())
    }

    /// Who the thread belongs to, as stored with it.
    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// Where the effects of the next step are journaled.
    pub(crate) fn journal(&self) -> Journal {
        Journal { store: Arc::clone(&self.store), thread: self.thread.clone(), seq: self.seq }
    }
}

/// A pending write as stored: the node's update and where it routed.
#[derive(serde::Deserialize)]
struct StoredWrite<U> {
    update: U,
    next: Vec<String>,
}

#[derive(serde::Serialize)]
struct StoredWriteRef<'a, U> {
    update: &'a U,
    next: Vec<&'a str>,
}
