//! Opening a thread for a run: a new thread at its input, or a stored one rebuilt where it
//! stopped, with what its paused step left.

use std::sync::Arc;
use std::time::Duration;

use agentflow_store::{Checkpoint, CheckpointMetadata, CheckpointSource, Store, ThreadStatus};
use serde_json::{Value, json};

use super::{Checkpointer, Flush, Written};
use crate::core::budget::ThreadBudget;
use crate::core::clock::now_ms;
use crate::core::node_id::NodeId;
use crate::core::state::State;
use crate::core::step::{Mailbox, Sends, Step};
use crate::durable::budget::stored_budget;
use crate::durable::chain::fold_chain;
use crate::durable::document::{Allowed, check_sealed, state_document};
use crate::durable::durability::Durability;
use crate::durable::error::{PersistError, ResumeError, ThreadError};
use crate::durable::event_log::RunLog;
use crate::durable::fingerprint::{keep_description, marks_current};
use crate::durable::finished::StoredWrite;
use crate::durable::graph_identity::GraphIdentity;
use crate::durable::graph_migration::{Versions, migrate_thread};
use crate::durable::io::blocking;
use crate::durable::journal::{ParentLeases, journal_seq_of};
use crate::durable::keys::{ANSWERS, BUDGET, GRAPH, INTERRUPTS, MOVED, PAYLOADS, STARTED_AS};
use crate::durable::lease::{LeaseGuard, LeaseHolder};
use crate::interrupt::{KeptAnswer, KeptAnswers, Pending};

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

/// Who a new thread is: its id, the thread it is a subgraph child of, who it belongs to and
/// its tenant.
pub(crate) struct NewThread {
    pub(crate) thread: String,
    pub(crate) parent: Option<String>,
    pub(crate) owner: String,
    pub(crate) tenant: Option<String>,
}

impl Checkpointer {
    /// Starts a new thread at `input` (a subgraph child of thread `parent`, if given):
    /// checkpoint 0 holds its snapshot and the thread's `budget` (and, with the event log, the
    /// run's `run.started`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start<S: State>(
        graph: &impl GraphIdentity,
        store: Arc<dyn Store>,
        ids: NewThread,
        durability: Durability,
        lease_ttl: Duration,
        budget: ThreadBudget,
        input: &S,
        holder: Option<LeaseHolder>,
        parents: ParentLeases,
    ) -> Result<Self, ThreadError> {
        let NewThread { thread, parent, owner, tenant } = ids;
        check_sealed::<S>(store.as_ref())?;
        let snapshot = state_document(input, "the input state", Allowed::of::<S>())?;
        let mut metadata = CheckpointMetadata::new(0, CheckpointSource::Input, vec![]);
        metadata.extra = json!({ GRAPH: graph.shape(), BUDGET: budget });
        let cursor = vec![graph.start_name().to_string()];
        let fingerprint = graph.fingerprint().to_string();
        let log = graph.event_log().then(|| Box::new(RunLog::new(graph.name())));
        // The run starts from the input checkpoint, 0.
        let started = log.as_ref().map(|log| log.started(false, 0)).transpose()?;
        // One trip off the async threads for everything a new thread needs before its first
        // step: the check that it is new, its lease and its input checkpoint.
        let s = Arc::clone(&store);
        let (cp, described, wrote) =
            blocking(&store, move |st| -> Result<(Checkpointer, bool, Written), ThreadError> {
                if st.thread(&thread).map_err(PersistError::from)?.is_some() {
                    return Err(ThreadError::Exists { thread });
                }
                let lease = LeaseGuard::take(Arc::clone(&s), thread, lease_ttl, holder)?;
                // A description stored before the state's fields were marked (`#[state(pii)]`) is
                // replaced, so the tools that mask by it see the marks.
                let described = matches!(st.graph_description(&fingerprint),
                    Ok(Some(text)) if marks_current(&text, S::FIELDS));
                let mut cp = Checkpointer::new(s, lease, owner, fingerprint, S::VERSION, durability);
                cp.parent = parent;
                cp.tenant = tenant;
                // A child's thread is created fenced by its parents' leases too: a parent that lost
                // its thread does not start one.
                cp.parents = parents;
                cp.budget = budget;
                cp.snapshot_len = snapshot.len();
                cp.log = log;
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
                let mut commit =
                    cp.prepare(Some(checkpoint), vec![], ThreadStatus::Running, String::new(), Flush::Deferred);
                commit.events.extend(started);
                let wrote = Written::of(&commit);
                st.commit_step(commit).map_err(PersistError::from)?;
                Ok((cp, described, wrote.done()))
            })
            .await??;
        // Recorded here: a metrics recorder may be installed for this thread only.
        wrote.record();
        if !described {
            keep_description(&store, graph, S::FIELDS).await;
        }
        Ok(cp)
    }

    /// Opens an existing thread where it stopped. With the event log, the run's `run.started`
    /// waits for its first commit. A thread stored by an older version of the graph is moved to
    /// this one first, by the graph's declared migrations (see `durable::graph_migration`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn resume<S: State>(
        graph: &impl GraphIdentity,
        versions: &Versions<'_>,
        store: Arc<dyn Store>,
        thread: String,
        durability: Durability,
        lease_ttl: Duration,
        holder: Option<LeaseHolder>,
    ) -> Result<(Self, Resumed<S>), ThreadError> {
        check_sealed::<S>(store.as_ref())?;
        let id = thread.clone();
        let record = blocking(&store, move |s| s.thread(&id))
            .await?
            .map_err(PersistError::from)?
            .ok_or_else(|| ResumeError::UnknownThread { thread: thread.clone() })?;
        if !record.status.is_resumable() {
            return Err(ResumeError::Finished { thread, status: record.status.as_str().into() }.into());
        }
        let id = record.id.clone();
        let lease = LeaseGuard::acquire(Arc::clone(&store), thread, lease_ttl, holder).await?;
        // Read again under the lease: a run that held the thread before may have moved it to this
        // version of its graph (or finished it) since; what it stands on now is what counts.
        let record = blocking(&store, move |s| s.thread(&id))
            .await?
            .map_err(PersistError::from)?
            .ok_or_else(|| ResumeError::UnknownThread { thread: record.id.clone() })?;
        if !record.status.is_resumable() {
            return Err(ResumeError::Finished { thread: record.id, status: record.status.as_str().into() }.into());
        }
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
        cp.tenant = record.tenant.clone();
        cp.trace = record.trace.clone();
        cp.opened_as = Some(record.status);
        if record.graph_fingerprint != graph.fingerprint() {
            migrate_thread::<S>(graph, versions, &cp.store, cp.lease.holder(), &record).await?;
        }
        let id = cp.thread.clone();
        let latest = blocking(&cp.store, move |s| s.latest_checkpoint(&id))
            .await?
            .map_err(PersistError::from)?
            .ok_or_else(|| ResumeError::NoCheckpoint { thread: cp.thread.clone() })?;
        if graph.event_log() {
            // The run goes on from the thread's latest checkpoint.
            let mut log = Box::new(RunLog::new(graph.name()));
            log.waiting.push(log.started(true, latest.seq)?);
            cp.log = Some(log);
        }
        let state = cp.rebuild(graph, latest.seq, record.schema_version).await?;
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
        let moved = latest.metadata.extra.get(MOVED);
        cp.moved_to =
            moved.and_then(|m| m.get("to")).and_then(serde_json::Value::as_u64).and_then(|v| u32::try_from(v).ok());
        cp.started_as =
            Arc::new(moved.and_then(|m| serde_json::from_value(m.get(STARTED_AS)?.clone()).ok()).unwrap_or_default());
        cp.sweep_approvals = true;
        cp.runs_subgraphs = graph.runs_subgraphs();
        cp.answers_kept = answers_stored;
        cp.snapshot_len = state_document(&state, "the state", Allowed::of::<S>())?.len();
        let step = u32::try_from(latest.metadata.step).unwrap_or(u32::MAX);
        Ok((cp, Resumed { state, active, step, pending, interrupts, kept_answers, payloads }))
    }

    /// Rebuilds the state at `seq`: the nearest snapshot, migrated if needed,
    /// then every delta after it in order.
    async fn rebuild<S: State>(
        &self,
        graph: &impl GraphIdentity,
        seq: u64,
        stored_version: u32,
    ) -> Result<S, ThreadError> {
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
        Ok(fold_chain(&self.thread, &chain)?)
    }
}
