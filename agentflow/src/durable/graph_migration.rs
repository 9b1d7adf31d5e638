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
//! effects under the new names, the pending approvals renamed (cancelled and asked anew under
//! the new tool, arguments mapped) or cancelled, the thread's fingerprint set to the current
//! one, and the audit entry `graph.migrated`. Killed before that commit, the thread is wholly on
//! its old version; after it, wholly on the new one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use agentflow_store::{
    ApprovalPatch, ApprovalRecord, ApprovalStatus, ApprovalTransition, Checkpoint, CheckpointMetadata,
    CheckpointSource, EffectKey, NewAuditEntry, PendingWrite, StateChain, StepCommit, Store, ThreadRecord,
    ThreadStatus,
};
use serde_json::{Value, json};

use super::approval_key::{CallAt, approval_id_at, approval_payload, direct_call_id};
use super::chain::next_seq;
use super::error::{PersistError, ResumeError, ThreadError};
use super::fingerprint::{explain_change, keep_description};
use super::graph_identity::GraphIdentity;
use super::io::blocking;
use super::journal::journal_seq_of;
use super::keys::{ANSWERS, GRAPH, INTERRUPTS, JOURNAL_SEQ, PAYLOADS};
use super::migration_chain::{Chain, END, NodeFate, ToolFate};
use super::recorded_answers::answers_at;
use super::state_fold::fold_exactly;
use crate::core::clock::now_ms;
use crate::core::state::State;
use crate::interrupt::{ANSWER_KIND, Pending, PendingKind};
use crate::release::Release;
use crate::tool::{args_hash, canonical_json};

/// The audit kind of a thread's move to a newer version of its graph.
pub(crate) const MIGRATED: &str = "graph.migrated";
/// Who the migration's audit entries and approval moves are by.
const ACTOR: &str = "agentflow";
/// How many direct calls of one tool a node's attempt is searched for when the id of the call an
/// approval was asked for is recovered.
const DIRECT_CALLS_SEARCHED: u32 = 256;

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

/// The version thread `thread`, stored under `fingerprint`, was stored by.
fn stored_version(s: &dyn Store, thread: &str, fingerprint: &str) -> Result<u32, agentflow_store::ReadError> {
    let version_of = |v: &Value| v.get("version").and_then(Value::as_u64).and_then(|v| u32::try_from(v).ok());
    let described = s.graph_description(fingerprint)?.and_then(|text| serde_json::from_str::<Value>(&text).ok());
    if let Some(v) = described.as_ref().and_then(version_of) {
        return Ok(v);
    }
    let migrated = s.list_audit(thread)?.into_iter().rev().find(|e| e.kind == MIGRATED);
    if let Some(v) = migrated.and_then(|e| e.detail.get("to").and_then(Value::as_u64)) {
        return Ok(u32::try_from(v).unwrap_or(u32::MAX));
    }
    let root = s.checkpoint(thread, 0)?;
    Ok(root.as_ref().and_then(|c| c.metadata.extra.get(GRAPH)).and_then(version_of).unwrap_or(1))
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
struct Found {
    latest: Checkpoint,
    writes: Vec<PendingWrite>,
    approvals: Vec<ApprovalRecord>,
    effects: Vec<(EffectKey, Vec<u8>)>,
    /// The arguments' hash each approval was asked with (an edit replaces the record's).
    requested: BTreeMap<String, String>,
    timer: Option<u64>,
    /// The state's chain at `latest`, and the description of the graph it was stored by.
    chain: Option<StateChain>,
    description: Option<Value>,
    /// The answers recorded for the questions it waits on at `latest`, by question id.
    answers: BTreeMap<String, agentflow_store::AuditEntry>,
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
struct Plan<'a> {
    chain: &'a Chain<'a>,
    record: &'a ThreadRecord,
    found: &'a Found,
    /// The current graph's fingerprint, the thread's from now on.
    fingerprint: &'a str,
    /// The current state's version (`#[state(version = N)]`).
    state_version: u32,
    known: &'a dyn Fn(&str) -> bool,
    tool_risk: &'a (dyn Fn(&str) -> Option<String> + Sync),
    now: u64,
    /// Renames that applied to this thread: old node -> new node or `END`.
    nodes: BTreeMap<String, String>,
    /// Tools of its approvals renamed or cancelled: old -> new or `cancel`.
    tools: BTreeMap<String, String>,
    cancelled: Vec<String>,
    /// The answers recorded for its questions, recorded again for them as they are asked now.
    answers: Vec<NewAuditEntry>,
    new_approvals: Vec<ApprovalRecord>,
    transitions: Vec<ApprovalTransition>,
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
            answers: Vec::new(),
            new_approvals: Vec::new(),
            transitions: Vec::new(),
        }
    }

    fn thread(&self) -> &str {
        &self.record.id
    }

    /// The current name of stored node `name`, `None` when it was mapped to `END`.
    fn rename(&mut self, name: &str) -> Result<Option<String>, ResumeError> {
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

    fn decode(&self, what: &'static str, source: serde_json::Error) -> PersistError {
        PersistError::Decode { thread: self.thread().to_string(), seq: self.found.latest.seq, what, source }
    }

    fn encode(what: &'static str, value: &impl serde::Serialize) -> Result<Vec<u8>, PersistError> {
        serde_json::to_vec(value).map_err(|source| PersistError::Encode { what, source })
    }

    /// The commit that moves the thread.
    fn commit(&mut self, holder: &str) -> Result<StepCommit, ThreadError> {
        let latest = &self.found.latest;
        let seq = next_seq(self.thread(), latest.seq)?;
        let jseq = journal_seq_of(latest);
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
            map.insert("migrated".to_string(), json!({ "from": self.chain.from, "to": self.chain.to() }));
            match payloads {
                Some(p) => map.insert(PAYLOADS.to_string(), p),
                None => map.remove(PAYLOADS),
            };
        }
        let effects = self.effects();
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
            MIGRATED,
            json!({
                "from": self.chain.from,
                "to": self.chain.to(),
                "nodes": self.nodes,
                "tools": self.tools,
                "cancelled": self.cancelled,
                "checkpoint": seq,
            }),
        ));
        commit.audit.append(&mut self.answers);
        commit.new_approvals = std::mem::take(&mut self.new_approvals);
        commit.approval_transitions = std::mem::take(&mut self.transitions);
        Ok(commit)
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

    /// What the thread waits for, its nodes renamed and its approvals moved.
    /// An answer already recorded for a question is recorded again for the question as it is
    /// asked at the new checkpoint `seq`, by the person who gave it.
    fn questions(&mut self, pending: Vec<Pending>, jseq: u64, seq: u64) -> Result<Vec<Pending>, ThreadError> {
        let mut kept = Vec::new();
        for mut p in pending {
            let old = p.node.clone();
            let asked = p.question_id();
            let Some(now) = self.rename(&old)? else {
                self.cancel_asked(&p, "its node was mapped to END");
                continue;
            };
            p.node = now;
            if let Some(answer) = self.found.answers.get(&asked) {
                let mut detail = answer.detail.clone();
                if let Some(d) = detail.as_object_mut() {
                    d.insert("checkpoint".into(), json!(seq));
                    d.insert("node".into(), json!(p.node));
                    d.insert("question".into(), json!(p.question_id()));
                }
                self.answers.push(NewAuditEntry::new(self.now, &answer.actor, ANSWER_KIND, detail));
            }
            if p.kind == PendingKind::Approval {
                match self.approval(&p, &old, jseq)? {
                    Some(payload) => p.payload = payload,
                    None => continue,
                }
            }
            kept.push(p);
        }
        Ok(kept)
    }

    /// The stored approval a question of kind `Approval` waits on, if it is still open.
    fn asked(&self, p: &Pending) -> Option<&'a ApprovalRecord> {
        let id = p.payload.get("approval").and_then(Value::as_str)?;
        self.found
            .approvals
            .iter()
            .find(|a| a.id == id)
            .filter(|a| matches!(a.status, ApprovalStatus::Pending | ApprovalStatus::Approved))
    }

    /// Cancels the open approval `p` waits on, if any, noting `why`.
    fn cancel_asked(&mut self, p: &Pending, why: &str) {
        if p.kind != PendingKind::Approval {
            return;
        }
        if let Some(record) = self.asked(p) {
            self.cancel(record, why);
        }
    }

    /// Cancels `record`, noting `why`, and lists it as cancelled in the audit entry.
    fn cancel(&mut self, record: &ApprovalRecord, why: &str) {
        self.withdraw(record, why);
        self.cancelled.push(record.id.clone());
    }

    /// Cancels `record`, noting `why`.
    fn withdraw(&mut self, record: &ApprovalRecord, why: &str) {
        let note = format!(
            "cancelled by the migration of the thread from version {} to version {} of graph `{}`: {why}",
            self.chain.from,
            self.chain.to(),
            self.chain.release.id
        );
        self.transitions.push(ApprovalTransition {
            id: record.id.clone(),
            from: record.status,
            to: ApprovalStatus::Cancelled,
            patch: ApprovalPatch { note: Some(note), ..ApprovalPatch::by(ACTOR, self.now) },
        });
    }

    /// The payload of question `p` (asked by node `old`) for its approval after the move; `None`
    /// when the approval was cancelled and the thread no longer waits on it.
    fn approval(&mut self, p: &Pending, old: &str, jseq: u64) -> Result<Option<Value>, ThreadError> {
        let Some(record) = self.asked(p) else { return Ok(Some(p.payload.clone())) };
        let (name, maps) = match self.chain.tool(&record.tool) {
            ToolFate::Cancel => {
                self.tools.insert(record.tool.clone(), "cancel".into());
                self.cancel(record, &format!("version {} no longer calls `{}`", self.chain.to(), record.tool));
                return Ok(None);
            }
            ToolFate::Keep(name, maps) => (name, maps),
        };
        if name == record.tool && maps.is_empty() && p.node == old {
            return Ok(Some(p.payload.clone()));
        }
        if name != record.tool {
            self.tools.insert(record.tool.clone(), name.clone());
        }
        let mut args: Value = serde_json::from_str(&record.args).map_err(|e| self.decode("approval arguments", e))?;
        for map in &maps {
            args = map(args).map_err(|reason| ResumeError::ArgsRefused {
                thread: self.thread().to_string(),
                approval: record.id.clone(),
                tool: name.clone(),
                from: self.chain.from,
                to: self.chain.to(),
                reason,
            })?;
        }
        let requested = self.found.requested.get(&record.id).unwrap_or(&record.args_hash).clone();
        let Some(call_id) = self.call_id(record, p.instance, old, jseq, &requested) else {
            self.cancel(record, "the call it was asked for could not be found again; the node asks anew");
            return Ok(None);
        };
        let renamed_call = match call_id.strip_prefix(&format!("{old}-{}-", record.tool)) {
            Some(n) if n.parse::<u32>().is_ok() => format!("{}-{name}-{n}", p.node),
            _ => call_id,
        };
        let hash = args_hash(&args);
        let call = CallAt { node: &p.node, instance: p.instance, tool: &name, call_id: &renamed_call, hash: &hash };
        let id = approval_id_at(self.thread(), jseq, &call);
        let moved = ApprovalRecord {
            id: id.clone(),
            node: p.node.clone(),
            tool: name.clone(),
            args: canonical_json(&args),
            args_hash: hash,
            risk: (self.tool_risk)(&name).unwrap_or_else(|| record.risk.clone()),
            status: ApprovalStatus::Pending,
            decided_by: None,
            decision_note: None,
            conditions: None,
            updated_at: self.now,
            ..record.clone()
        };
        // A decision carries over when the call is the same but for names: the same arguments.
        if record.status == ApprovalStatus::Approved && maps.is_empty() {
            let patch = ApprovalPatch {
                decided_by: record.decided_by.clone(),
                note: record.decision_note.clone(),
                conditions: record.conditions.clone(),
                ..ApprovalPatch::by(ACTOR, self.now)
            };
            self.transitions.push(ApprovalTransition {
                id: id.clone(),
                from: ApprovalStatus::Pending,
                to: ApprovalStatus::Approved,
                patch,
            });
        }
        let payload = approval_payload(&moved);
        self.new_approvals.push(moved);
        self.withdraw(record, &format!("asked again as `{id}` for `{name}`"));
        Ok(Some(payload))
    }

    /// The id of the call `record` was asked for by node `old` (map instance `instance`): among
    /// the ids a direct call of its tool takes and the strings its node's journaled replies
    /// hold, the one its id was made from.
    fn call_id(
        &self,
        record: &ApprovalRecord,
        instance: Option<u32>,
        old: &str,
        jseq: u64,
        requested: &str,
    ) -> Option<String> {
        let matches = |call_id: &str| {
            let call = CallAt { node: old, instance, tool: &record.tool, call_id, hash: requested };
            approval_id_at(self.thread(), jseq, &call) == record.id
        };
        if let Some(n) = (1..=DIRECT_CALLS_SEARCHED).find(|n| matches(&direct_call_id(old, &record.tool, *n))) {
            return Some(direct_call_id(old, &record.tool, n));
        }
        let mut seen = BTreeSet::new();
        for (key, value) in &self.found.effects {
            if key.node != old {
                continue;
            }
            let Ok(reply) = serde_json::from_slice::<Value>(value) else { continue };
            strings(&reply, &mut seen);
        }
        seen.into_iter().find(|s| matches(s))
    }

    /// The node's journaled effects of the paused step, under its new name (a direct call's key
    /// names its node too).
    fn effects(&self) -> Vec<(EffectKey, Vec<u8>)> {
        let mut moved = Vec::new();
        for (key, value) in &self.found.effects {
            let Some(now) = self.nodes.get(&key.node) else { continue };
            if now == END {
                continue;
            }
            let renamed = key.key.replace(&format!(":{}-", key.node), &format!(":{now}-"));
            moved.push((EffectKey { node: now.clone(), key: renamed, ..key.clone() }, value.clone()));
        }
        moved
    }
}

/// The checkpoint a chain ends at.
fn chain_seq(chain: &StateChain) -> u64 {
    chain.steps.last().map_or(chain.snapshot_seq, |s| s.seq)
}

/// Every string in `value`, into `out`.
fn strings(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::String(s) => {
            out.insert(s.clone());
        }
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}
