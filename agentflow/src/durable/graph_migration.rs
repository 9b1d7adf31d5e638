//! A thread stored on an older version of its graph, moved to the current version by the
//! graph's declared migrations (`#[graph(version = N, migrate(from = K, ..))]`) when it resumes.
//!
//! The thread's version is the one its stored graph description names (the `version` of the
//! description kept under its fingerprint), else the `to` of its last `graph.migrated` audit
//! entry, else its first checkpoint's; a thread stored before graphs had versions is version 1.
//! The same version with another fingerprint is refused as before
//! ([`ResumeError::GraphChanged`]); a newer one is refused ([`ResumeError::GraphNewer`]). An
//! older one is moved in ONE commit, fenced by the resuming run's lease: a new checkpoint (same
//! step, same state, keyed for its journal by the step it continues) whose cursor, kept writes,
//! questions, kept answers and map payloads name the current nodes, the node's journaled
//! effects under the new names (with the names the step's attempt started under, which its
//! idempotency keys and subgraph children are named by), the tool calls of its model's
//! journaled replies moved ([`migrated_calls`](super::migrated_calls)), the pending approvals
//! renamed (cancelled and asked anew under the new tool, arguments mapped, a decision taken
//! carried over) or cancelled ([`migrated_approvals`](super::migrated_approvals)), the thread's
//! fingerprint set to the current one, and the audit entry `graph.migrated`. Killed before that commit, the thread is wholly on
//! its old version; after it, wholly on the new one.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentflow_store::{
    ApprovalRecord, ApprovalTransition, Checkpoint, CheckpointMetadata, CheckpointSource, EffectKey, NewAuditEntry,
    PendingWrite, StateChain, StepCommit, Store, ThreadRecord, ThreadStatus,
};
use serde_json::{Value, json};

use super::chain::next_seq;
use super::error::{PersistError, ResumeError, ThreadError};
use super::fingerprint::{explain_change, keep_description};
use super::graph_identity::GraphIdentity;
use super::io::blocking;
use super::journal::journal_seq_of;
use super::keys::{ANSWERS, GRAPH, INTERRUPTS, JOURNAL_SEQ, MOVED, PAYLOADS, STARTED_AS};
use super::migration_chain::{Chain, END, NodeFate};
use super::recorded_answers::answers_at;
use super::state_fold::fold_exactly;
use super::stored_version::{MIGRATED_KIND, stored_version};
use crate::core::clock::now_ms;
use crate::core::state::State;
use crate::interrupt::Pending;
use crate::release::Release;

/// Who the migration's audit entries and approval moves are by.
pub(super) const ACTOR: &str = "agentflow";

/// What the resuming build knows of its graph's versions: the release `#[graph]` declared and
/// the risk class of each of its tools (by name), which an approval moved to a renamed tool
/// takes.
pub(crate) struct Versions<'a> {
    /// The graph's id, version and declared migrations.
    pub(crate) release: &'a Release,
    /// The risk class (`Display` of [`Risk`](crate::tool::Risk)) of the graph's tool `name`.
    pub(crate) tool_risk: &'a (dyn Fn(&str) -> Option<String> + Sync),
}

/// Moves thread `record` (its lease held by `holder`), stored under another fingerprint than
/// `graph`'s, to the current version, or refuses it with why (see the module docs). Returns once
/// the move is committed; the caller reads the thread again.
pub(crate) async fn migrate_thread<S: State>(
    graph: &impl GraphIdentity,
    versions: &Versions<'_>,
    store: &Arc<dyn Store>,
    holder: &str,
    record: &ThreadRecord,
) -> Result<(), ThreadError> {
    let release = versions.release;
    let (thread, fingerprint) = (record.id.clone(), record.graph_fingerprint.clone());
    let stored =
        blocking(store, move |s| stored_version(s, &thread, &fingerprint)).await?.map_err(PersistError::from)?;
    let current = release.version;
    if stored == current {
        return Err(graph_changed(graph, store, record).await?.into());
    }
    if stored > current {
        return Err(ResumeError::GraphNewer {
            thread: record.id.clone(),
            graph: release.id.to_string(),
            stored,
            current,
        }
        .into());
    }
    let (thread, fingerprint) = (record.id.clone(), record.graph_fingerprint.clone());
    let found = blocking(store, move |s| Found::read(s, &thread, &fingerprint)).await?.map_err(PersistError::from)?;
    let Some(found) = found else {
        return Err(ResumeError::NoCheckpoint { thread: record.id.clone() }.into());
    };
    let commit = {
        let chain = Chain::new(release, stored);
        let known = |name: &str| graph.node_id(name).is_some();
        let mut plan = Plan::new(&chain, record, &found, graph.fingerprint(), &known, versions.tool_risk);
        plan.state_version = S::VERSION;
        plan.commit(holder)?
    };
    // The current version's description, read by the next migration of this thread (best
    // effort: the audit entry below also names the version).
    keep_description(store, graph, S::FIELDS).await;
    blocking(store, move |s| s.commit_step(commit)).await?.map_err(PersistError::from)?;
    Ok(())
}

/// The refusal of a thread stored by the same version under another fingerprint.
async fn graph_changed(
    graph: &impl GraphIdentity,
    store: &Arc<dyn Store>,
    record: &ThreadRecord,
) -> Result<ResumeError, ThreadError> {
    let id = record.id.clone();
    let root = blocking(store, move |s| s.checkpoint(&id, 0)).await?.map_err(PersistError::from)?;
    let stored = root.as_ref().and_then(|c| c.metadata.extra.get(GRAPH));
    Ok(ResumeError::GraphChanged {
        thread: record.id.clone(),
        stored: record.graph_fingerprint.clone(),
        current: graph.fingerprint().to_string(),
        changes: explain_change(stored, &graph.shape()),
    })
}

/// What a thread's move reads, in one trip to the store under its lease.
pub(super) struct Found {
    pub(super) latest: Checkpoint,
    pub(super) writes: Vec<PendingWrite>,
    pub(super) approvals: Vec<ApprovalRecord>,
    pub(super) effects: Vec<(EffectKey, Vec<u8>)>,
    /// The arguments' hash each approval was asked with (an edit replaces the record's).
    pub(super) requested: BTreeMap<String, String>,
    pub(super) timer: Option<u64>,
    /// The state's chain at `latest`, and the description of the graph it was stored by.
    pub(super) chain: Option<StateChain>,
    pub(super) description: Option<Value>,
    /// The answers recorded for the questions it waits on at `latest`, by question id.
    pub(super) answers: BTreeMap<String, agentflow_store::AuditEntry>,
}

impl Found {
    fn read(s: &dyn Store, thread: &str, fingerprint: &str) -> Result<Option<Found>, agentflow_store::ReadError> {
        let Some(latest) = s.latest_checkpoint(thread)? else { return Ok(None) };
        let writes = s.pending_writes(thread, latest.seq)?;
        let jseq = journal_seq_of(&latest);
        let effects = s.thread_effects(thread)?.into_iter().filter(|(k, _)| k.seq == jseq).collect();
        let audit = s.list_audit(thread)?;
        let answers = answers_at(&audit, latest.seq);
        let requested = audit
            .into_iter()
            .filter(|e| e.kind == "approval.requested")
            .filter_map(|e| {
                let id = e.detail.get("approval")?.as_str()?.to_string();
                Some((id, e.detail.get("args_hash")?.as_str()?.to_string()))
            })
            .collect();
        Ok(Some(Found {
            approvals: s.list_approvals(thread)?,
            timer: s.thread_timer(thread)?,
            chain: s.state_chain(thread, latest.seq)?,
            description: s.graph_description(fingerprint)?.and_then(|text| serde_json::from_str(&text).ok()),
            latest,
            writes,
            effects,
            requested,
            answers,
        }))
    }
}

/// The move of one thread, built from what it stored (pure: no store call).
pub(super) struct Plan<'a> {
    pub(super) chain: &'a Chain<'a>,
    pub(super) record: &'a ThreadRecord,
    pub(super) found: &'a Found,
    /// The current graph's fingerprint, the thread's from now on.
    pub(super) fingerprint: &'a str,
    /// The current state's version (`#[state(version = N)]`).
    pub(super) state_version: u32,
    pub(super) known: &'a dyn Fn(&str) -> bool,
    pub(super) tool_risk: &'a (dyn Fn(&str) -> Option<String> + Sync),
    pub(super) now: u64,
    /// Renames that applied to this thread: old node -> new node or `END`.
    pub(super) nodes: BTreeMap<String, String>,
    /// Tools of its approvals renamed or cancelled: old -> new or `cancel`.
    pub(super) tools: BTreeMap<String, String>,
    pub(super) cancelled: Vec<String>,
    /// The model's calls moved or withdrawn in the journal of the step continued (see
    /// [`migrated_calls`](super::migrated_calls)).
    pub(super) calls: Vec<Value>,
    /// The approvals asked again: both ids, tools and argument hashes, and the decision carried.
    pub(super) approvals: Vec<Value>,
    /// The answers recorded for its questions, recorded again for them as they are asked now.
    pub(super) answers: Vec<NewAuditEntry>,
    pub(super) new_approvals: Vec<ApprovalRecord>,
    pub(super) transitions: Vec<ApprovalTransition>,
}

impl<'a> Plan<'a> {
    fn new(
        chain: &'a Chain<'a>,
        record: &'a ThreadRecord,
        found: &'a Found,
        fingerprint: &'a str,
        known: &'a dyn Fn(&str) -> bool,
        tool_risk: &'a (dyn Fn(&str) -> Option<String> + Sync),
    ) -> Self {
        Plan {
            chain,
            record,
            found,
            fingerprint,
            state_version: 1,
            known,
            tool_risk,
            now: now_ms(),
            nodes: BTreeMap::new(),
            tools: BTreeMap::new(),
            cancelled: Vec::new(),
            calls: Vec::new(),
            approvals: Vec::new(),
            answers: Vec::new(),
            new_approvals: Vec::new(),
            transitions: Vec::new(),
        }
    }

    pub(super) fn thread(&self) -> &str {
        &self.record.id
    }

    /// The current name of stored node `name`, `None` when it was mapped to `END`.
    pub(super) fn rename(&mut self, name: &str) -> Result<Option<String>, ResumeError> {
        match self.chain.node(name) {
            NodeFate::End => {
                self.nodes.insert(name.to_string(), END.to_string());
                Ok(None)
            }
            NodeFate::At(now) if (self.known)(&now) => {
                if now != name {
                    self.nodes.insert(name.to_string(), now.clone());
                }
                Ok(Some(now))
            }
            NodeFate::At(now) => {
                let (to, from) = (self.chain.to(), self.chain.from);
                Err(ResumeError::NodeUnmapped {
                    thread: self.thread().to_string(),
                    graph: self.chain.release.id.to_string(),
                    declare_from: if now == name { from } else { to.saturating_sub(1) },
                    node: now,
                    from,
                    to,
                })
            }
        }
    }

    pub(super) fn decode(&self, what: &'static str, source: serde_json::Error) -> PersistError {
        PersistError::Decode { thread: self.thread().to_string(), seq: self.found.latest.seq, what, source }
    }

    pub(super) fn encode(what: &'static str, value: &impl serde::Serialize) -> Result<Vec<u8>, PersistError> {
        serde_json::to_vec(value).map_err(|source| PersistError::Encode { what, source })
    }

    /// The commit that moves the thread.
    fn commit(&mut self, holder: &str) -> Result<StepCommit, ThreadError> {
        let latest = &self.found.latest;
        let seq = next_seq(self.thread(), latest.seq)?;
        let jseq = journal_seq_of(latest);
        self.refuse_merged()?;
        let mut cursor = Vec::new();
        for name in &latest.cursor {
            cursor.extend(self.rename(name)?);
        }
        cursor.sort_unstable();
        cursor.dedup();
        let mut writes = Vec::new();
        let mut waits = Vec::new();
        for w in &self.found.writes {
            let kept = match w.node.as_str() {
                INTERRUPTS => {
                    let pending: Vec<Pending> =
                        serde_json::from_slice(&w.value).map_err(|e| self.decode("interrupts", e))?;
                    waits = self.questions(pending, jseq, seq)?;
                    Some(PendingWrite { seq, value: Self::encode("interrupts", &waits)?, ..w.clone() })
                }
                ANSWERS => Some(PendingWrite { seq, value: self.answers(&w.value, seq)?, ..w.clone() }),
                // The thread's own records (its budget) stay as they are.
                reserved if reserved.starts_with("__") => Some(PendingWrite { seq, ..w.clone() }),
                node => match self.rename(node)? {
                    None => None,
                    Some(now) => Some(PendingWrite { seq, node: now, value: self.write(&w.value)?, idx: w.idx }),
                },
            };
            writes.extend(kept);
        }
        let mut extra = latest.metadata.extra.clone();
        if !extra.is_object() {
            extra = json!({});
        }
        let payloads = match latest.metadata.extra.get(PAYLOADS) {
            Some(v) => Some(self.payloads(v)?),
            None => None,
        };
        if let Some(map) = extra.as_object_mut() {
            map.insert(JOURNAL_SEQ.to_string(), json!(jseq));
            let started_as = self.started_as();
            map.insert(
                MOVED.to_string(),
                json!({ "from": self.chain.from, "to": self.chain.to(), STARTED_AS: started_as }),
            );
            match payloads {
                Some(p) => map.insert(PAYLOADS.to_string(), p),
                None => map.remove(PAYLOADS),
            };
        }
        let mut effects = self.effects()?;
        effects.extend(self.move_calls()?);
        // Every node the thread stood at went to `END`.
        let finished = cursor.is_empty() && !latest.cursor.is_empty();
        if finished {
            // Nothing is left to run: the thread ends here, and nothing it waited for stays open.
            writes.clear();
        }
        let status = match self.record.status {
            _ if finished => ThreadStatus::Completed,
            other => other,
        };
        let wake_at = match status {
            ThreadStatus::Interrupted => crate::durable::wake::wake_time(&waits),
            s if s.is_finished() => None,
            _ => self.found.timer,
        };
        let metadata = CheckpointMetadata {
            extra,
            ..CheckpointMetadata::new(latest.metadata.step, CheckpointSource::UpdateState, vec![])
        };
        let checkpoint = Checkpoint {
            thread: self.thread().to_string(),
            seq,
            parent: Some(latest.seq),
            cursor,
            snapshot: self.snapshot()?,
            delta: vec![],
            metadata,
            created_at: self.now,
        };
        let thread = ThreadRecord {
            status,
            graph_fingerprint: self.fingerprint.to_string(),
            updated_at: self.now,
            lease: None,
            ..self.record.clone()
        };
        let mut commit = StepCommit::new(thread).with_checkpoint(checkpoint).fenced_by(holder, self.now);
        commit.pending_writes = writes;
        commit.effects = effects;
        commit.wake_at = wake_at;
        commit.audit.push(NewAuditEntry::new(
            self.now,
            ACTOR,
            MIGRATED_KIND,
            json!({
                "from": self.chain.from,
                "to": self.chain.to(),
                "nodes": self.nodes,
                "tools": self.tools,
                "cancelled": self.cancelled,
                "calls": self.calls,
                "approvals": self.approvals,
                "checkpoint": seq,
                // What a fork to a checkpoint on either side of this one gives the thread.
                "fingerprints": { "from": self.record.graph_fingerprint, "to": self.fingerprint },
                "state": { "from": self.record.schema_version, "to": self.state_version },
            }),
        ));
        commit.audit.append(&mut self.answers);
        commit.new_approvals = std::mem::take(&mut self.new_approvals);
        commit.approval_transitions = std::mem::take(&mut self.transitions);
        Ok(commit)
    }

    /// Refuses a move that would give two of the nodes the thread stands at, has kept writes of
    /// or asks questions from the same current name (`nodes(a -> c)` with `c` kept): one's work
    /// would be lost under the other's.
    fn refuse_merged(&self) -> Result<(), ThreadError> {
        let mut names = self.found.latest.cursor.clone();
        for w in &self.found.writes {
            match w.node.as_str() {
                INTERRUPTS => {
                    let pending: Vec<Pending> =
                        serde_json::from_slice(&w.value).map_err(|e| self.decode("interrupts", e))?;
                    names.extend(pending.into_iter().map(|p| p.node));
                }
                reserved if reserved.starts_with("__") => {}
                node => names.push(node.to_string()),
            }
        }
        let mut by_now: BTreeMap<String, String> = BTreeMap::new();
        for name in names {
            let NodeFate::At(now) = self.chain.node(&name) else { continue };
            match by_now.get(&now) {
                Some(other) if *other != name => {
                    return Err(ResumeError::NodesMerged {
                        thread: self.thread().to_string(),
                        first: other.clone(),
                        second: name,
                        node: now,
                        from: self.chain.from,
                        to: self.chain.to(),
                    }
                    .into());
                }
                _ => {
                    by_now.insert(now, name);
                }
            }
        }
        Ok(())
    }

    /// The old state as of the thread's last checkpoint, when the state's version changed too
    /// and that checkpoint holds only updates since its last snapshot: the state migrations take
    /// a whole state (see [`state_fold`](super::state_fold)).
    fn snapshot(&self) -> Result<Option<Vec<u8>>, ThreadError> {
        let stored = self.record.schema_version;
        let Some(chain) = &self.found.chain else { return Ok(None) };
        if stored == self.state_version || chain.steps.iter().all(|s| s.delta.is_empty()) {
            return Ok(None);
        }
        let refused =
            || ResumeError::NeedsSnapshot { thread: self.thread().to_string(), seq: chain_seq(chain), stored };
        let state = fold_exactly(chain, self.found.description.as_ref()).ok_or_else(refused)?;
        Ok(Some(Self::encode("the state", &state)?))
    }

    /// A node's kept write with the nodes it routed and sent to renamed.
    fn write(&mut self, value: &[u8]) -> Result<Vec<u8>, ThreadError> {
        let mut stored: Value = serde_json::from_slice(value).map_err(|e| self.decode("pending write", e))?;
        if let Some(next) = stored.get_mut("next").and_then(Value::as_array_mut) {
            let mut renamed = Vec::new();
            for name in next.iter() {
                match name.as_str() {
                    Some(n) if self.routes_to(n) => renamed.extend(self.rename(n)?.map(Value::from)),
                    _ => renamed.push(name.clone()),
                }
            }
            *next = renamed;
        }
        if let Some(sends) = stored.get_mut("sends").and_then(Value::as_array_mut) {
            let mut renamed = Vec::new();
            for send in sends.iter() {
                renamed.extend(self.send(send)?);
            }
            *sends = renamed;
        }
        Ok(Self::encode("a pending write", &stored)?)
    }

    /// Whether `name` is a node name a migration may have to carry (not a name the runtime
    /// writes for a route out of the graph).
    fn routes_to(&self, name: &str) -> bool {
        !(name == END || name.starts_with("__") || name.starts_with('<'))
    }

    /// A `[worker, payloads]` pair with its worker renamed; `None` when the worker went to `END`.
    fn send(&mut self, send: &Value) -> Result<Option<Value>, ThreadError> {
        match send.get(0).and_then(Value::as_str) {
            Some(worker) if self.routes_to(worker) => {
                Ok(self.rename(worker)?.map(|now| json!([now, send.get(1).cloned().unwrap_or(Value::Null)])))
            }
            _ => Ok(Some(send.clone())),
        }
    }

    /// The next step's map payloads, their workers renamed.
    fn payloads(&mut self, payloads: &Value) -> Result<Value, ThreadError> {
        let Some(list) = payloads.as_array() else { return Ok(payloads.clone()) };
        let mut renamed = Vec::new();
        for send in list {
            renamed.extend(self.send(send)?);
        }
        Ok(Value::Array(renamed))
    }

    /// The kept answers, their nodes renamed; kept at the paused checkpoint, they are kept at the
    /// new one (the state they answered about did not change).
    fn answers(&mut self, value: &[u8], seq: u64) -> Result<Vec<u8>, ThreadError> {
        let stored: Value = serde_json::from_slice(value).map_err(|e| self.decode("kept answers", e))?;
        let (kept_at, list) = match &stored {
            Value::Array(list) => (None, list.clone()),
            other => (
                other.get("seq").and_then(Value::as_u64),
                other.get("answers").and_then(Value::as_array).cloned().unwrap_or_default(),
            ),
        };
        let mut renamed = Vec::new();
        for mut answer in list {
            let Some(node) = answer.get("node").and_then(Value::as_str).map(str::to_string) else { continue };
            if let Some(now) = self.rename(&node)? {
                answer["node"] = Value::from(now);
                renamed.push(answer);
            }
        }
        let at = match kept_at {
            Some(at) if at == self.found.latest.seq => seq,
            Some(at) => at,
            // The bare list of an earlier build: where it was kept is unknown, and stays so.
            None => return Ok(Self::encode("kept answers", &renamed)?),
        };
        Ok(Self::encode("kept answers", &json!({ "seq": at, "answers": renamed }))?)
    }

    /// The name each node the thread continues at had when its step's attempt started (under
    /// the node's current name; only the names that differ): what the journal derives the
    /// attempt's idempotency keys and subgraph children's ids from. An earlier move of this
    /// step's thread (the latest checkpoint is its) named them first.
    fn started_as(&self) -> BTreeMap<String, String> {
        let earlier = self.found.latest.metadata.extra.get(MOVED).and_then(|m| m.get(STARTED_AS));
        let first = |name: &str| earlier.and_then(|e| e.get(name)).and_then(Value::as_str).map(str::to_string);
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        if let Some(Value::Object(map)) = earlier {
            for (now, was) in map {
                if !self.nodes.contains_key(now) {
                    names.insert(now.clone(), was.as_str().unwrap_or(now).to_string());
                }
            }
        }
        for (old, now) in &self.nodes {
            if now != END {
                names.insert(now.clone(), first(old).unwrap_or_else(|| old.clone()));
            }
        }
        names.retain(|now, was| now != was);
        names
    }
}

/// The checkpoint a chain ends at.
fn chain_seq(chain: &StateChain) -> u64 {
    chain.steps.last().map_or(chain.snapshot_seq, |s| s.seq)
}
