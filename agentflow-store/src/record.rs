//! The records a [`Store`](crate::Store) keeps. They hold typed metadata and opaque bytes: the
//! store never looks inside a state, an update or an effect result.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codec::{Dec, DecodeResult, Enc};

/// The format version written by this build for every record kind (2: records end with a
/// checksum; pending writes and effect results are records too).
pub(crate) const RECORD_VERSION: u8 = 2;

/// The highest checkpoint seq a store accepts: a PostgreSQL `bigint` holds no more, and the next
/// seq after it still fits a `u64`.
pub(crate) const MAX_CHECKPOINT_SEQ: u64 = i64::MAX as u64;

/// Why a checkpoint seq past [`MAX_CHECKPOINT_SEQ`] is refused, in every backend's words.
pub(crate) fn seq_too_large(seq: u64) -> String {
    format!("checkpoint seq {seq} is too large (the most a thread can have is {MAX_CHECKPOINT_SEQ})")
}

/// Where a thread's run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ThreadStatus {
    /// An executor is running (or was running when it crashed).
    Running,
    /// Paused for a human or a breakpoint; can be resumed.
    Interrupted,
    /// Reached `END`.
    Completed,
    /// Stopped by a fatal error.
    Failed,
    /// Cancelled from outside.
    Cancelled,
    /// Stopped by a budget (steps, calls, tokens, deadline).
    BudgetExhausted,
    /// Undoing the completed calls of a run that stopped (saga compensation); a resume continues
    /// the compensation, never the graph. Also the status of a compensation that failed and waits
    /// for a human.
    Compensating,
    /// Every completed call that names a compensation was undone.
    Compensated,
    /// Waiting on a durable timer (`cx.sleep`); its wake time is the thread's timer
    /// ([`Store::thread_timer`](crate::Store::thread_timer)). Can be resumed.
    /// (Appended last: the tags of the other statuses are stored and do not change.)
    Sleeping,
    /// Stopped at a step boundary by a pause request from any process (`App::pause_run`):
    /// nothing was undone and no timer wakes it; a resume continues with the next step.
    /// (Appended last, like `Sleeping`.)
    Paused,
}

impl ThreadStatus {
    /// Every status, in tag order.
    pub const ALL: [ThreadStatus; 10] = [
        ThreadStatus::Running,
        ThreadStatus::Interrupted,
        ThreadStatus::Completed,
        ThreadStatus::Failed,
        ThreadStatus::Cancelled,
        ThreadStatus::BudgetExhausted,
        ThreadStatus::Compensating,
        ThreadStatus::Compensated,
        ThreadStatus::Sleeping,
        ThreadStatus::Paused,
    ];

    /// Whether the run has stopped, which makes the thread eligible for compaction.
    /// `Running`, `Interrupted`, `Compensating`, `Sleeping` and `Paused` threads may still
    /// continue; of the finished ones, a resume may still run `Failed`, `Cancelled` and
    /// `BudgetExhausted` threads (see [`ThreadStatus::is_resumable`]).
    pub fn is_finished(self) -> bool {
        !matches!(
            self,
            ThreadStatus::Running
                | ThreadStatus::Interrupted
                | ThreadStatus::Compensating
                | ThreadStatus::Sleeping
                | ThreadStatus::Paused
        )
    }

    /// Whether a resume may still run the thread: every status but `Completed` and
    /// `Compensated`. A `Failed`, `Cancelled` or `BudgetExhausted` thread is finished (it may
    /// be compacted) and resumable at once, so [`Store::compact`](crate::Store::compact) keeps
    /// its whole effect journal.
    pub fn is_resumable(self) -> bool {
        !matches!(self, ThreadStatus::Completed | ThreadStatus::Compensated)
    }

    /// The snake_case name used in messages and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadStatus::Running => "running",
            ThreadStatus::Interrupted => "interrupted",
            ThreadStatus::Completed => "completed",
            ThreadStatus::Failed => "failed",
            ThreadStatus::Cancelled => "cancelled",
            ThreadStatus::BudgetExhausted => "budget_exhausted",
            ThreadStatus::Compensating => "compensating",
            ThreadStatus::Compensated => "compensated",
            ThreadStatus::Sleeping => "sleeping",
            ThreadStatus::Paused => "paused",
        }
    }

    fn tag(self) -> u8 {
        self as u8
    }

    fn from_tag(tag: u8) -> DecodeResult<Self> {
        Self::ALL.get(usize::from(tag)).copied().ok_or_else(|| format!("unknown thread status tag {tag}"))
    }
}

impl std::fmt::Display for ThreadStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Exclusive hold of a thread by one executor until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Who holds the thread (an executor instance id).
    pub holder: String,
    /// Unix millis after which another holder may take the thread over.
    pub expires_at: u64,
}

/// One run of a graph, resumable across processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadRecord {
    /// Thread id, unique in the store.
    pub id: String,
    /// Who started the thread; knowing a thread id grants nothing by itself.
    pub owner: String,
    /// Structural fingerprint of the graph that runs the thread; resume compares it.
    pub graph_fingerprint: String,
    /// Version of the state schema the checkpoints were written with.
    pub schema_version: u32,
    /// Where the run stands.
    pub status: ThreadStatus,
    /// Free text about the status (error message, interrupt reason, exhausted budget).
    pub detail: String,
    /// Unix millis when the thread was created.
    pub created_at: u64,
    /// Unix millis of the last update.
    pub updated_at: u64,
    /// The current lease. Filled in on read; ignored on write (leases change only through the
    /// lease methods).
    pub lease: Option<Lease>,
    /// The thread whose run started this one as a subgraph child, `None` for a thread of its
    /// own. What makes a thread a child is this field, never the shape of its id: export,
    /// fork, answers and the run queue follow it from parent to child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

impl ThreadRecord {
    /// A new `Running` thread with no lease, created and updated at `now`.
    pub fn new(
        id: impl Into<String>,
        owner: impl Into<String>,
        graph_fingerprint: impl Into<String>,
        schema_version: u32,
        now: u64,
    ) -> Self {
        ThreadRecord {
            id: id.into(),
            owner: owner.into(),
            graph_fingerprint: graph_fingerprint.into(),
            schema_version,
            status: ThreadStatus::Running,
            detail: String::new(),
            created_at: now,
            updated_at: now,
            lease: None,
            parent: None,
        }
    }

    /// The same record as a subgraph child of thread `parent`.
    pub fn child_of(mut self, parent: impl Into<String>) -> Self {
        self.parent = Some(parent.into());
        self
    }

    /// Why this record's [`parent`](Self::parent) cannot be stored, if it cannot: a child's id
    /// extends its parent's (`{parent}/` and at least one more character), so every thread's
    /// chain of parents is finite and every reader walks it the same way.
    pub(crate) fn parent_problem(&self) -> Option<String> {
        let parent = self.parent.as_deref()?;
        let extends =
            self.id.strip_prefix(parent).and_then(|rest| rest.strip_prefix('/')).is_some_and(|l| !l.is_empty());
        (parent.is_empty() || !extends).then(|| {
            format!(
                "its parent `{parent}` is not a prefix of its id: a subgraph child's id is its parent's id, `/` and \
                 its own level"
            )
        })
    }

    /// The parent that a thread record written before records named their parent is given:
    /// the id up to its last `/` when the part after it has the shape of a subgraph child's
    /// level, `{node}[.{instance}].{seq}.{index}.{subgraph}` (how children were told apart
    /// then). Only for data of that time (an older store file, schema or export); a record
    /// written now says what it is. A child of that time whose node or graph name was no Rust
    /// identifier (a hand-built graph's) gets no parent: a resume of its parent refuses to take
    /// it for the child.
    pub fn legacy_parent(id: &str) -> Option<&str> {
        let (parent, level) = id.rsplit_once('/')?;
        (!parent.is_empty() && is_child_level(level)).then_some(parent)
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new(RECORD_VERSION);
        e.str(&self.id)
            .str(&self.owner)
            .str(&self.graph_fingerprint)
            .u32(self.schema_version)
            .u8(self.status.tag())
            .str(&self.detail)
            .u64(self.created_at)
            .u64(self.updated_at)
            .opt_str(self.parent.as_deref());
        e.finish()
    }

    pub(crate) fn decode(buf: &[u8]) -> DecodeResult<Self> {
        let mut d = Dec::new(buf, RECORD_VERSION)?;
        let record = ThreadRecord {
            id: d.str("id")?,
            owner: d.str("owner")?,
            graph_fingerprint: d.str("graph_fingerprint")?,
            schema_version: d.u32("schema_version")?,
            status: ThreadStatus::from_tag(d.u8("status")?)?,
            detail: d.str("detail")?,
            created_at: d.u64("created_at")?,
            updated_at: d.u64("updated_at")?,
            lease: None,
            parent: None,
        };
        // A record of store format 3 ends here, without its parent: it gets the one its id's
        // shape gave it then.
        let parent =
            if d.at_end() { Self::legacy_parent(&record.id).map(str::to_string) } else { d.opt_str("parent")? };
        d.end()?;
        Ok(ThreadRecord { parent, ..record })
    }
}

/// One level of a subgraph child's id as [`Ctx::subgraph`] named them:
/// `{node}[.{instance}].{seq}.{index}.{subgraph}`.
///
/// [`Ctx::subgraph`]: https://docs.rs/agentflow/latest/agentflow/struct.Ctx.html#method.subgraph
fn is_child_level(level: &str) -> bool {
    // Node and graph names are Rust identifiers (`r#type` included); `.` and `/` never occur in one.
    let ident = |s: &str| !s.is_empty() && !s.starts_with(|c: char| c.is_ascii_digit());
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = level.split('.').collect();
    match parts.as_slice() {
        [node, seq, index, name] => ident(node) && number(seq) && number(index) && ident(name),
        [node, instance, seq, index, name] => {
            ident(node) && number(instance) && number(seq) && number(index) && ident(name)
        }
        _ => false,
    }
}

/// What produced a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CheckpointSource {
    /// The input that started (or resumed) the thread.
    Input,
    /// A super-step of the run loop.
    Loop,
    /// A manual `update_state` (history is never rewritten: it is a new checkpoint).
    UpdateState,
    /// A fork from an older checkpoint.
    Fork,
}

impl CheckpointSource {
    const ALL: [CheckpointSource; 4] =
        [CheckpointSource::Input, CheckpointSource::Loop, CheckpointSource::UpdateState, CheckpointSource::Fork];

    fn from_tag(tag: u8) -> DecodeResult<Self> {
        Self::ALL.get(usize::from(tag)).copied().ok_or_else(|| format!("unknown checkpoint source tag {tag}"))
    }
}

/// Searchable facts about a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    /// Super-step number.
    pub step: u64,
    /// What produced the checkpoint.
    pub source: CheckpointSource,
    /// Nodes that ran in the step.
    pub nodes: Vec<String>,
    /// Anything else the executor wants to keep (`Value::Null` when nothing).
    pub extra: Value,
}

impl CheckpointMetadata {
    /// Metadata with no `extra`.
    pub fn new(step: u64, source: CheckpointSource, nodes: Vec<String>) -> Self {
        CheckpointMetadata { step, source, nodes, extra: Value::Null }
    }
}

/// One saved point of a thread's history. Checkpoints form a tree through `parent`.
///
/// The state at a checkpoint is `snapshot` when it has one (the full state *after* `delta` was
/// applied; `delta` is then kept for inspection only), and otherwise the parent's state with
/// `delta` applied in order. [`Store::state_chain`](crate::Store::state_chain) collects what a
/// caller needs to rebuild it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Thread the checkpoint belongs to.
    pub thread: String,
    /// Sequence number, unique per thread and increasing in commit order; at most `i64::MAX`
    /// (a store refuses a larger one).
    pub seq: u64,
    /// The checkpoint this one continues from; `None` for a root. After compaction it may
    /// name a checkpoint that is gone (the retained one then has a snapshot).
    pub parent: Option<u64>,
    /// Nodes to run next.
    pub cursor: Vec<String>,
    /// Full serialised state, if this checkpoint carries one.
    pub snapshot: Option<Vec<u8>>,
    /// The step's serialised updates, in merge order.
    pub delta: Vec<Vec<u8>>,
    /// Searchable facts.
    pub metadata: CheckpointMetadata,
    /// Unix millis when it was written.
    pub created_at: u64,
}

impl Checkpoint {
    /// The checkpoint without its payload.
    pub fn summary(&self) -> CheckpointSummary {
        CheckpointSummary {
            thread: self.thread.clone(),
            seq: self.seq,
            parent: self.parent,
            cursor: self.cursor.clone(),
            metadata: self.metadata.clone(),
            created_at: self.created_at,
            has_snapshot: self.snapshot.is_some(),
            delta_len: self.delta.len(),
            payload_bytes: payload_bytes(self.snapshot.as_deref(), &self.delta),
        }
    }

    /// The stored row of the checkpoint: the same bytes as
    /// `self.summary().encode_row(&self.delta)`, without copying the summary first.
    pub(crate) fn encode_row(&self) -> Vec<u8> {
        let row = RowFields {
            thread: &self.thread,
            seq: self.seq,
            parent: self.parent,
            cursor: &self.cursor,
            metadata: &self.metadata,
            created_at: self.created_at,
            has_snapshot: self.snapshot.is_some(),
            payload_bytes: payload_bytes(self.snapshot.as_deref(), &self.delta),
        };
        row.encode(&self.delta)
    }

    pub(crate) fn from_parts(summary: CheckpointSummary, snapshot: Option<Vec<u8>>, delta: Vec<Vec<u8>>) -> Self {
        Checkpoint {
            thread: summary.thread,
            seq: summary.seq,
            parent: summary.parent,
            cursor: summary.cursor,
            snapshot,
            delta,
            metadata: summary.metadata,
            created_at: summary.created_at,
        }
    }
}

fn payload_bytes(snapshot: Option<&[u8]>, delta: &[Vec<u8>]) -> u64 {
    let total = snapshot.map_or(0, <[u8]>::len) + delta.iter().map(Vec::len).sum::<usize>();
    total as u64
}

/// The fields of a stored checkpoint row, borrowed from a [`Checkpoint`] or a
/// [`CheckpointSummary`]: both encode through here, so their rows are the same bytes.
struct RowFields<'a> {
    thread: &'a str,
    seq: u64,
    parent: Option<u64>,
    cursor: &'a [String],
    metadata: &'a CheckpointMetadata,
    created_at: u64,
    has_snapshot: bool,
    payload_bytes: u64,
}

impl RowFields<'_> {
    /// The row: the summary's fields, then the step's delta blobs.
    fn encode(&self, delta: &[Vec<u8>]) -> Vec<u8> {
        let delta_bytes = delta.iter().map(|d| d.len() + 2).sum::<usize>();
        let mut e = Enc::with_capacity(RECORD_VERSION, 96 + self.thread.len() + delta_bytes);
        e.str(self.thread)
            .u64(self.seq)
            .opt_u64(self.parent)
            .strs(self.cursor)
            .u64(self.metadata.step)
            .u8(self.metadata.source as u8)
            .strs(&self.metadata.nodes)
            .json(&self.metadata.extra)
            .u64(self.created_at)
            .bool(self.has_snapshot)
            .u64(self.payload_bytes)
            .byte_list(delta);
        e.finish()
    }
}

/// A checkpoint without its snapshot and delta bytes: what history listings return.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointSummary {
    /// Thread the checkpoint belongs to.
    pub thread: String,
    /// Sequence number.
    pub seq: u64,
    /// Parent checkpoint, if any.
    pub parent: Option<u64>,
    /// Nodes to run next.
    pub cursor: Vec<String>,
    /// Searchable facts.
    pub metadata: CheckpointMetadata,
    /// Unix millis when it was written.
    pub created_at: u64,
    /// Whether the checkpoint carries a full snapshot.
    pub has_snapshot: bool,
    /// Number of update blobs in its delta.
    pub delta_len: usize,
    /// Bytes of snapshot plus delta.
    pub payload_bytes: u64,
}

impl CheckpointSummary {
    /// The stored row of a checkpoint: this summary, then the step's delta blobs.
    pub(crate) fn encode_row(&self, delta: &[Vec<u8>]) -> Vec<u8> {
        let row = RowFields {
            thread: &self.thread,
            seq: self.seq,
            parent: self.parent,
            cursor: &self.cursor,
            metadata: &self.metadata,
            created_at: self.created_at,
            has_snapshot: self.has_snapshot,
            payload_bytes: self.payload_bytes,
        };
        row.encode(delta)
    }

    fn decode_fields(d: &mut Dec<'_>) -> DecodeResult<Self> {
        Ok(CheckpointSummary {
            thread: d.str("thread")?,
            seq: d.u64("seq")?,
            parent: d.opt_u64("parent")?,
            cursor: d.strs("cursor")?,
            metadata: CheckpointMetadata {
                step: d.u64("step")?,
                source: CheckpointSource::from_tag(d.u8("source")?)?,
                nodes: d.strs("nodes")?,
                extra: d.json("extra")?,
            },
            created_at: d.u64("created_at")?,
            has_snapshot: d.bool("has_snapshot")?,
            delta_len: 0,
            payload_bytes: d.u64("payload_bytes")?,
        })
    }

    /// The summary of a stored row; the delta blobs are checked but not copied.
    pub(crate) fn decode(buf: &[u8]) -> DecodeResult<Self> {
        let mut d = Dec::new(buf, RECORD_VERSION)?;
        let mut summary = Self::decode_fields(&mut d)?;
        summary.delta_len = d.skip_byte_list("delta")?;
        d.end()?;
        Ok(summary)
    }

    /// A stored row: the summary and the step's delta blobs.
    pub(crate) fn decode_row(buf: &[u8]) -> DecodeResult<Row> {
        let mut d = Dec::new(buf, RECORD_VERSION)?;
        let mut summary = Self::decode_fields(&mut d)?;
        let delta = d.byte_list("delta")?;
        summary.delta_len = delta.len();
        d.end()?;
        Ok((summary, delta))
    }
}

/// The bytes of a pending write or an effect result, stored as a record (version and checksum)
/// so damage to them is a decode error too.
pub(crate) struct Payload;

impl Payload {
    pub(crate) fn encode(bytes: &[u8]) -> Vec<u8> {
        let mut e = Enc::new(RECORD_VERSION);
        e.bytes(bytes);
        e.finish()
    }

    pub(crate) fn decode(buf: &[u8]) -> DecodeResult<Vec<u8>> {
        let mut d = Dec::new(buf, RECORD_VERSION)?;
        let bytes = d.bytes("payload")?;
        d.end()?;
        Ok(bytes)
    }
}

/// A durable timer's wake time as `agentflow.timer_of` keeps it: unix millis, as a record.
pub(crate) struct WakeAt;

impl WakeAt {
    pub(crate) fn encode(at: u64) -> Vec<u8> {
        let mut e = Enc::new(RECORD_VERSION);
        e.u64(at);
        e.finish()
    }

    pub(crate) fn decode(buf: &[u8]) -> DecodeResult<u64> {
        let mut d = Dec::new(buf, RECORD_VERSION)?;
        let at = d.u64("wake_at")?;
        d.end()?;
        Ok(at)
    }
}

/// A stored checkpoint row, decoded: the summary and the step's delta blobs.
pub(crate) type Row = (CheckpointSummary, Vec<Vec<u8>>);

/// The full state bytes of a checkpoint that carries a snapshot, stored apart from its row so
/// listings and step commits stay small.
pub(crate) struct Snapshot;

impl Snapshot {
    pub(crate) fn encode(state: &[u8]) -> Vec<u8> {
        let mut e = Enc::new(RECORD_VERSION);
        e.bytes(state);
        e.finish()
    }

    pub(crate) fn decode(buf: &[u8]) -> DecodeResult<Vec<u8>> {
        let mut d = Dec::new(buf, RECORD_VERSION)?;
        let state = d.bytes("snapshot")?;
        d.end()?;
        Ok(state)
    }
}

/// One checkpoint's delta in a [`StateChain`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainStep {
    /// The checkpoint the delta belongs to.
    pub seq: u64,
    /// Its update blobs, in merge order.
    pub delta: Vec<Vec<u8>>,
}

/// What it takes to rebuild the state at a checkpoint: start from `snapshot` and apply each
/// step's delta in order (oldest first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateChain {
    /// The checkpoint whose snapshot starts the chain (the target itself if it has one).
    pub snapshot_seq: u64,
    /// Full state at `snapshot_seq`.
    pub snapshot: Vec<u8>,
    /// Deltas of the checkpoints after `snapshot_seq` up to and including the target.
    pub steps: Vec<ChainStep>,
}

/// A successful node write inside a super-step that failed half-way, kept so only the failed
/// nodes re-run. Keyed (thread, `seq`, `node`, `idx`); `seq` is the checkpoint the step ran from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingWrite {
    /// Checkpoint the step started from.
    pub seq: u64,
    /// Node that produced the write.
    pub node: String,
    /// Position of the write among the node's writes (also distinguishes map-reduce sends).
    pub idx: u32,
    /// Serialised update.
    pub value: Vec<u8>,
}

/// Key of a side effect in the effect journal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EffectKey {
    /// Thread the effect ran in.
    pub thread: String,
    /// Checkpoint the step ran from.
    pub seq: u64,
    /// Node that ran it.
    pub node: String,
    /// Call id / idempotency key, unique within the node's run.
    pub key: String,
}

impl EffectKey {
    /// Builds a key.
    pub fn new(thread: impl Into<String>, seq: u64, node: impl Into<String>, key: impl Into<String>) -> Self {
        EffectKey { thread: thread.into(), seq, node: node.into(), key: key.into() }
    }
}

/// What [`Store::record_effect`](crate::Store::record_effect) did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EffectOutcome {
    /// The result was stored.
    Recorded,
    /// A result was already stored under the key; it is returned and was not replaced.
    AlreadyRecorded(Vec<u8>),
}

/// An audit entry to append; the store assigns its sequence number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewAuditEntry {
    /// Unix millis of the event.
    pub at: u64,
    /// Who did it (user, executor id, `system`).
    pub actor: String,
    /// What happened, e.g. `update_state`, `approval.approved`.
    pub kind: String,
    /// Structured detail.
    pub detail: Value,
}

impl NewAuditEntry {
    /// Builds an entry.
    pub fn new(at: u64, actor: impl Into<String>, kind: impl Into<String>, detail: Value) -> Self {
        NewAuditEntry { at, actor: actor.into(), kind: kind.into(), detail }
    }
}

/// One entry of a thread's append-only audit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Thread the entry belongs to.
    pub thread: String,
    /// Position in the thread's log, from 1, without gaps.
    pub seq: u64,
    /// Unix millis of the event.
    pub at: u64,
    /// Who did it.
    pub actor: String,
    /// What happened.
    pub kind: String,
    /// Structured detail.
    pub detail: Value,
}

impl AuditEntry {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new(RECORD_VERSION);
        e.str(&self.thread).u64(self.seq).u64(self.at).str(&self.actor).str(&self.kind).json(&self.detail);
        e.finish()
    }

    pub(crate) fn decode(buf: &[u8]) -> DecodeResult<Self> {
        let mut d = Dec::new(buf, RECORD_VERSION)?;
        let entry = AuditEntry {
            thread: d.str("thread")?,
            seq: d.u64("seq")?,
            at: d.u64("at")?,
            actor: d.str("actor")?,
            kind: d.str("kind")?,
            detail: d.json("detail")?,
        };
        d.end()?;
        Ok(entry)
    }
}

/// Status of an approval. Legal moves: `PENDING -> APPROVED | REJECTED | EXPIRED | CANCELLED`,
/// `APPROVED -> EXECUTING | EXPIRED | CANCELLED`, `EXECUTING -> SUCCEEDED | FAILED | OUTCOME_UNKNOWN`,
/// and `OUTCOME_UNKNOWN -> SUCCEEDED | FAILED | APPROVED` (a human's decision on an uncertain
/// outcome: it happened, it did not, or run it again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum ApprovalStatus {
    /// Waiting for a decision.
    Pending,
    /// Approved; not executed yet (single use).
    Approved,
    /// Rejected by a reviewer.
    Rejected,
    /// Its time to live ran out.
    Expired,
    /// Withdrawn (run cancelled, superseded).
    Cancelled,
    /// The approved call is running.
    Executing,
    /// The approved call finished.
    Succeeded,
    /// The approved call failed.
    Failed,
    /// The call started and left no result (a crash, a dropped run): whether it acted is
    /// unknown, and a human decides. Also the status a record is created with for an
    /// uncertain outcome that had no approval (an effect, a call the policy let run).
    OutcomeUnknown,
}

impl ApprovalStatus {
    const ALL: [ApprovalStatus; 9] = [
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Rejected,
        ApprovalStatus::Expired,
        ApprovalStatus::Cancelled,
        ApprovalStatus::Executing,
        ApprovalStatus::Succeeded,
        ApprovalStatus::Failed,
        ApprovalStatus::OutcomeUnknown,
    ];

    /// Whether `self -> to` is a legal transition.
    pub fn can_move_to(self, to: ApprovalStatus) -> bool {
        use ApprovalStatus::{
            Approved, Cancelled, Executing, Expired, Failed, OutcomeUnknown, Pending, Rejected, Succeeded,
        };
        matches!(
            (self, to),
            (Pending, Approved | Rejected | Expired | Cancelled)
                | (Approved, Executing | Expired | Cancelled)
                | (Executing, Succeeded | Failed | OutcomeUnknown)
                | (OutcomeUnknown, Succeeded | Failed | Approved)
        )
    }

    /// Whether the record waits for a human: `PENDING` (a decision to run) or
    /// `OUTCOME_UNKNOWN` (a decision on what happened). The only statuses a record may be
    /// created with, and the ones [`Store::list_pending_approvals`](crate::Store::list_pending_approvals) lists.
    pub fn is_waiting(self) -> bool {
        matches!(self, ApprovalStatus::Pending | ApprovalStatus::OutcomeUnknown)
    }

    /// Whether no transition leaves this status.
    pub fn is_final(self) -> bool {
        Self::ALL.iter().all(|&to| !self.can_move_to(to))
    }

    /// The SCREAMING_SNAKE_CASE name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "PENDING",
            ApprovalStatus::Approved => "APPROVED",
            ApprovalStatus::Rejected => "REJECTED",
            ApprovalStatus::Expired => "EXPIRED",
            ApprovalStatus::Cancelled => "CANCELLED",
            ApprovalStatus::Executing => "EXECUTING",
            ApprovalStatus::Succeeded => "SUCCEEDED",
            ApprovalStatus::Failed => "FAILED",
            ApprovalStatus::OutcomeUnknown => "OUTCOME_UNKNOWN",
        }
    }

    fn from_tag(tag: u8) -> DecodeResult<Self> {
        Self::ALL.get(usize::from(tag)).copied().ok_or_else(|| format!("unknown approval status tag {tag}"))
    }
}

impl std::fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tool call waiting for (or past) a human decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// Approval id, unique in the store.
    pub id: String,
    /// Thread that asked.
    pub thread: String,
    /// Node that made the call.
    pub node: String,
    /// Tool to run.
    pub tool: String,
    /// Canonical JSON text of the arguments.
    pub args: String,
    /// Hash of `args`; the executed arguments must hash to it.
    pub args_hash: String,
    /// Risk class of the tool (`read`, `reversible`, `external`, `irreversible`).
    pub risk: String,
    /// Who asked (agent or user id).
    pub requester: String,
    /// Why approval is needed.
    pub reason: String,
    /// Unix millis of the request.
    pub created_at: u64,
    /// Unix millis after which the approval must not be used.
    pub expires_at: u64,
    /// Current status.
    pub status: ApprovalStatus,
    /// Who decided, once decided.
    pub decided_by: Option<String>,
    /// Reviewer's note (a rejection reason is fed back to the model).
    pub decision_note: Option<String>,
    /// Conditions attached to an approval, as JSON. `Some(Value::Null)` is stored as `None`:
    /// null conditions are no conditions.
    pub conditions: Option<Value>,
    /// Unix millis of the last transition.
    pub updated_at: u64,
}

impl ApprovalRecord {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new(RECORD_VERSION);
        e.str(&self.id)
            .str(&self.thread)
            .str(&self.node)
            .str(&self.tool)
            .str(&self.args)
            .str(&self.args_hash)
            .str(&self.risk)
            .str(&self.requester)
            .str(&self.reason)
            .u64(self.created_at)
            .u64(self.expires_at)
            .u8(self.status as u8)
            .opt_str(self.decided_by.as_deref())
            .opt_str(self.decision_note.as_deref())
            // Null conditions are no conditions (a JSON form of the record cannot tell them apart).
            .opt_json(self.conditions.as_ref().filter(|c| !c.is_null()))
            .u64(self.updated_at);
        e.finish()
    }

    pub(crate) fn decode(buf: &[u8]) -> DecodeResult<Self> {
        let mut d = Dec::new(buf, RECORD_VERSION)?;
        let record = ApprovalRecord {
            id: d.str("id")?,
            thread: d.str("thread")?,
            node: d.str("node")?,
            tool: d.str("tool")?,
            args: d.str("args")?,
            args_hash: d.str("args_hash")?,
            risk: d.str("risk")?,
            requester: d.str("requester")?,
            reason: d.str("reason")?,
            created_at: d.u64("created_at")?,
            expires_at: d.u64("expires_at")?,
            status: ApprovalStatus::from_tag(d.u8("status")?)?,
            decided_by: d.opt_str("decided_by")?,
            decision_note: d.opt_str("decision_note")?,
            // Null conditions are no conditions, also in a record written before they were
            // stored as none.
            conditions: d.opt_json("conditions")?.filter(|c| !c.is_null()),
            updated_at: d.u64("updated_at")?,
        };
        d.end()?;
        Ok(record)
    }
}

impl ApprovalRecord {
    /// Moves the record to `to` with what `patch` changes (decider, note, conditions, edited
    /// arguments); every backend's compare-and-set applies a transition through this.
    pub(crate) fn apply_patch(&mut self, to: ApprovalStatus, patch: &ApprovalPatch) {
        self.status = to;
        self.updated_at = patch.at;
        if let Some(by) = &patch.decided_by {
            self.decided_by = Some(by.clone());
        }
        if let Some(note) = &patch.note {
            self.decision_note = Some(note.clone());
        }
        if let Some(conditions) = &patch.conditions {
            self.conditions = Some(conditions.clone()).filter(|c| !c.is_null());
        }
        if let Some(args) = &patch.args {
            self.args.clone_from(&args.canonical);
            self.args_hash.clone_from(&args.hash);
        }
        if let Some(expires_at) = patch.expires_at {
            self.expires_at = expires_at;
        }
    }
}

/// Edited arguments recorded with a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalArgs {
    /// New canonical JSON text of the arguments.
    pub canonical: String,
    /// Hash of `canonical`.
    pub hash: String,
}

/// What a transition changes besides the status. `None` fields keep their value.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ApprovalPatch {
    /// Who makes the transition (written to the audit entry).
    pub actor: String,
    /// Unix millis of the transition.
    pub at: u64,
    /// Sets `decided_by`.
    pub decided_by: Option<String>,
    /// Sets `decision_note`.
    pub note: Option<String>,
    /// Sets `conditions` (`Some(Value::Null)` clears them).
    pub conditions: Option<Value>,
    /// Replaces `args` and `args_hash` (an edit).
    pub args: Option<ApprovalArgs>,
    /// Sets `expires_at` (a call settled to run again gets a fresh time to live). (Appended
    /// last.)
    #[serde(default)]
    pub expires_at: Option<u64>,
}

impl ApprovalPatch {
    /// A patch that only records who moved the approval and when.
    pub fn by(actor: impl Into<String>, at: u64) -> Self {
        ApprovalPatch { actor: actor.into(), at, ..ApprovalPatch::default() }
    }
}

/// A compare-and-set on an approval's status, carried in a [`StepCommit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalTransition {
    /// Approval id.
    pub id: String,
    /// Status the caller believes the approval has.
    pub from: ApprovalStatus,
    /// Status to move to.
    pub to: ApprovalStatus,
    /// Other changes.
    pub patch: ApprovalPatch,
}

/// How durable a commit must be before the caller gets its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Durability {
    /// On stable storage when the call returns (redb `Durability::Immediate`).
    #[default]
    Immediate,
    /// Visible to readers when the call returns, on disk at the next immediate commit, the next
    /// background flush or [`Store::flush`](crate::Store::flush); a crash before that loses it
    /// (redb `Durability::None`).
    Eventual,
}

/// Everything one super-step persists, written in one write transaction.
///
/// Order of application: lease checks, thread record, checkpoint (its parent's pending writes are
/// cleared), pending writes, effects, audit entries, new approvals, approval transitions. If any
/// part is refused nothing is written.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StepCommit {
    /// The thread's new record (inserted or replaced; the stored lease is kept).
    pub thread: ThreadRecord,
    /// The new checkpoint, if the step completed. Its `thread` must be `thread.id`, its `seq`
    /// greater than every existing one, its parent (if any) an existing older checkpoint, and a
    /// root must carry a snapshot.
    pub checkpoint: Option<Checkpoint>,
    /// Node writes to keep (usually of a step that failed half-way).
    pub pending_writes: Vec<PendingWrite>,
    /// Effect results to journal; an existing result is kept, never replaced.
    pub effects: Vec<(EffectKey, Vec<u8>)>,
    /// Audit entries for `thread.id`.
    pub audit: Vec<NewAuditEntry>,
    /// Approvals to create (status `PENDING`, thread `thread.id`); each appends an
    /// `approval.requested` entry by its requester.
    pub new_approvals: Vec<ApprovalRecord>,
    /// Approval compare-and-sets; each appends an `approval.<status>` entry.
    pub approval_transitions: Vec<ApprovalTransition>,
    /// When set, the commit is refused unless this holder has an unexpired lease at `now`.
    pub lease_holder: Option<String>,
    /// Unix millis used for the lease check.
    pub now: u64,
    /// Durability of this commit.
    pub durability: Durability,
    /// `(thread, holder)` pairs: the commit is refused
    /// ([`CommitError::LeaseLost`](crate::CommitError::LeaseLost), naming that thread) unless
    /// each holder has an unexpired lease on its thread at `now`, checked in the same
    /// transaction as `lease_holder`. A subgraph child's run fences its commits by the leases of
    /// its parent's run and of every run above it, so a parent that lost its thread cannot move
    /// a child on (see [`EffectBatch::parent_leases`]). (Appended last.)
    pub parent_leases: Vec<(String, String)>,
    /// The thread's durable timer (unix millis): when to wake the thread, listed by
    /// [`Store::due_timers`](crate::Store::due_timers). Every commit replaces the thread's
    /// timer with this one, so a commit without it clears the timer (the thread moved on).
    /// Required when `thread.status` is [`ThreadStatus::Sleeping`]; a thread paused for a
    /// human may carry one too (when its approval expires). A time past `i64::MAX` (never) is
    /// kept as `i64::MAX` on every store.
    pub wake_at: Option<u64>,
}

impl StepCommit {
    /// A commit of only the thread record, immediate, with no lease check.
    pub fn new(thread: ThreadRecord) -> Self {
        let now = thread.updated_at;
        StepCommit {
            thread,
            checkpoint: None,
            pending_writes: Vec::new(),
            effects: Vec::new(),
            audit: Vec::new(),
            new_approvals: Vec::new(),
            approval_transitions: Vec::new(),
            lease_holder: None,
            now,
            durability: Durability::Immediate,
            wake_at: None,
            parent_leases: Vec::new(),
        }
    }

    /// Also requires each `(thread, holder)` of `leases` to be held, unexpired, at the commit's
    /// `now` (see [`StepCommit::parent_leases`]).
    #[must_use]
    pub fn fenced_by_parents(mut self, leases: Vec<(String, String)>) -> Self {
        self.parent_leases = leases;
        self
    }

    /// Adds the checkpoint.
    #[must_use]
    pub fn with_checkpoint(mut self, checkpoint: Checkpoint) -> Self {
        self.checkpoint = Some(checkpoint);
        self
    }

    /// Requires `holder` to hold an unexpired lease at `now`.
    #[must_use]
    pub fn fenced_by(mut self, holder: impl Into<String>, now: u64) -> Self {
        self.lease_holder = Some(holder.into());
        self.now = now;
        self
    }

    /// Sets the durability.
    #[must_use]
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Sets the thread's timer (see [`StepCommit::wake_at`]).
    #[must_use]
    pub fn with_wake_at(mut self, wake_at: u64) -> Self {
        self.wake_at = Some(wake_at);
        self
    }
}

/// What a successful [`Store::commit_step`](crate::Store::commit_step) wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CommitReceipt {
    /// Sequence number of the new checkpoint, if any.
    pub checkpoint: Option<u64>,
    /// Sequence numbers given to the audit entries (the commit's own, then the approvals').
    pub audit_seqs: Vec<u64>,
    /// Whether the data was on stable storage when the call returned.
    pub durable: bool,
    /// How many requests shared the underlying transaction (1 when alone).
    pub group_size: usize,
}

impl CommitReceipt {
    /// Builds a receipt (for `Store` implementations outside this crate).
    pub fn new(checkpoint: Option<u64>, audit_seqs: Vec<u64>, durable: bool, group_size: usize) -> Self {
        CommitReceipt { checkpoint, audit_seqs, durable, group_size }
    }
}

/// Effect results, approval transitions and audit entries of one thread, journaled together by
/// [`Store::commit_effects`](crate::Store::commit_effects): all of them durably in one
/// transaction (with [`RedbStore`](crate::RedbStore)), or nothing if any part is refused.
///
/// The executor uses it around an approved tool call: the claim `APPROVED -> EXECUTING` with the
/// call's *started* marker before the tool runs, and the result with `EXECUTING -> SUCCEEDED`
/// (or `FAILED`) after it returns.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EffectBatch {
    /// The thread every part belongs to.
    pub thread: String,
    /// Effect results to journal, in order; an existing result is kept, never replaced.
    pub effects: Vec<(EffectKey, Vec<u8>)>,
    /// Approval compare-and-sets of this thread's approvals, applied after the effects; each
    /// appends an `approval.<status>` audit entry.
    pub approval_transitions: Vec<ApprovalTransition>,
    /// Audit entries for `thread`, appended last.
    pub audit: Vec<NewAuditEntry>,
    /// When set, the batch is refused ([`CommitError::LeaseLost`](crate::CommitError::LeaseLost))
    /// unless this holder has an unexpired lease on `thread` at `now`. The runtime fences the
    /// batch that says an effect *started* (and claims its approval), so a run that lost its
    /// thread's lease does not act; a result is recorded whoever holds the lease, as a fact.
    pub lease_holder: Option<String>,
    /// Unix millis used for the lease checks.
    pub now: u64,
    /// `(thread, holder)` pairs: the batch is refused
    /// ([`CommitError::LeaseLost`](crate::CommitError::LeaseLost), naming that thread) unless
    /// each holder has an unexpired lease on its thread at `now`, checked in the same
    /// transaction as `lease_holder`. A subgraph child's run fences what starts its effects by
    /// the leases of its parent's run and of every run above it, so a parent that lost its
    /// thread cannot act through a child. (Appended last.)
    pub parent_leases: Vec<(String, String)>,
    /// Records to create for `thread`, as [`Store::put_approval`](crate::Store::put_approval)
    /// would (a `PENDING` approval or an `OUTCOME_UNKNOWN` record), each with an
    /// `approval.requested` entry by its requester, before the transitions. An id that exists
    /// already refuses the batch ([`ApprovalError::AlreadyExists`](crate::ApprovalError)). The
    /// runtime creates the record of a call cut off mid-way this way, fenced by the run's
    /// lease. (Appended last: a backend outside this crate must write them too.)
    pub new_approvals: Vec<ApprovalRecord>,
    /// Pending writes of `thread` to keep, each replacing one stored under the same
    /// `(seq, node, idx)`, as a [`StepCommit`]'s pending writes are kept. The runtime commits
    /// the write of each map instance (and of each node of a fan-out step) as soon as it
    /// finishes, fenced by its lease, so a resume after a crash runs only the instances that
    /// had not finished. (Appended last: a backend outside this crate must write them too.)
    pub pending_writes: Vec<PendingWrite>,
}

impl EffectBatch {
    /// An empty batch for `thread`, with no lease check.
    pub fn new(thread: impl Into<String>) -> Self {
        EffectBatch {
            thread: thread.into(),
            effects: Vec::new(),
            approval_transitions: Vec::new(),
            audit: Vec::new(),
            lease_holder: None,
            now: 0,
            parent_leases: Vec::new(),
            new_approvals: Vec::new(),
            pending_writes: Vec::new(),
        }
    }

    /// Adds a pending write to keep (see [`EffectBatch::pending_writes`]).
    #[must_use]
    pub fn pending_write(mut self, write: PendingWrite) -> Self {
        self.pending_writes.push(write);
        self
    }

    /// Adds a record to create (see [`EffectBatch::new_approvals`]).
    #[must_use]
    pub fn new_approval(mut self, record: ApprovalRecord) -> Self {
        self.new_approvals.push(record);
        self
    }

    /// Also requires each `(thread, holder)` of `leases` to be held, unexpired, at the batch's
    /// `now` (see [`EffectBatch::parent_leases`]).
    #[must_use]
    pub fn fenced_by_parents(mut self, leases: Vec<(String, String)>) -> Self {
        self.parent_leases = leases;
        self
    }

    /// Requires `holder` to hold an unexpired lease on the thread at `now`.
    #[must_use]
    pub fn fenced_by(mut self, holder: impl Into<String>, now: u64) -> Self {
        self.lease_holder = Some(holder.into());
        self.now = now;
        self
    }

    /// Adds an effect result.
    #[must_use]
    pub fn effect(mut self, key: EffectKey, result: Vec<u8>) -> Self {
        self.effects.push((key, result));
        self
    }

    /// Adds an approval compare-and-set.
    #[must_use]
    pub fn transition(mut self, transition: ApprovalTransition) -> Self {
        self.approval_transitions.push(transition);
        self
    }

    /// Adds an audit entry.
    #[must_use]
    pub fn audit(mut self, entry: NewAuditEntry) -> Self {
        self.audit.push(entry);
        self
    }
}

/// What [`Store::compact`](crate::Store::compact) did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CompactReport {
    /// Checkpoints removed, with their pending writes (and their effects, if the thread can
    /// no longer be resumed: see [`Store::compact`](crate::Store::compact)).
    pub dropped: usize,
    /// Retained checkpoints that received a folded snapshot.
    pub folded: usize,
    /// Whether the backing file was compacted as well.
    pub file_compacted: bool,
}

impl CompactReport {
    /// Builds a report (for `Store` implementations outside this crate).
    pub fn new(dropped: usize, folded: usize, file_compacted: bool) -> Self {
        CompactReport { dropped, folded, file_compacted }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval() -> ApprovalRecord {
        ApprovalRecord {
            id: "a".into(),
            thread: "t".into(),
            node: "n".into(),
            tool: "refund".into(),
            args: "{}".into(),
            args_hash: "h".into(),
            risk: "irreversible".into(),
            requester: "r".into(),
            reason: "why".into(),
            created_at: 1,
            expires_at: 2,
            status: ApprovalStatus::Executing,
            decided_by: Some("d".into()),
            decision_note: None,
            conditions: Some(serde_json::json!({"max": 1})),
            updated_at: 3,
        }
    }

    /// Every prefix of an encoded record, and every extension, is refused.
    fn strict<T: std::fmt::Debug + PartialEq>(bytes: &[u8], decode: fn(&[u8]) -> DecodeResult<T>, value: &T) {
        assert_eq!(&decode(bytes).unwrap(), value);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "prefix of {cut} bytes decoded");
        }
        let mut longer = bytes.to_vec();
        longer.push(0);
        assert!(decode(&longer).is_err());
    }

    #[test]
    fn every_thread_status_round_trips_and_only_compensating_may_continue_besides_running_and_interrupted() {
        for status in ThreadStatus::ALL {
            let mut thread = ThreadRecord::new("t", "o", "fp", 1, 2);
            thread.status = status;
            assert_eq!(ThreadRecord::decode(&thread.encode()).unwrap().status, status);
            let continues = matches!(
                status,
                ThreadStatus::Running
                    | ThreadStatus::Interrupted
                    | ThreadStatus::Compensating
                    | ThreadStatus::Sleeping
                    | ThreadStatus::Paused
            );
            assert_eq!(status.is_finished(), !continues, "{status}");
        }
        let names: std::collections::HashSet<&str> = ThreadStatus::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(names.len(), ThreadStatus::ALL.len());
        assert_eq!(ThreadStatus::Compensating.as_str(), "compensating");
        assert_eq!(ThreadStatus::Compensated.as_str(), "compensated");
        // Stored tags never change: the later statuses were appended.
        assert_eq!((ThreadStatus::Sleeping.tag(), ThreadStatus::Paused.tag()), (8, 9));
        assert_eq!(ThreadStatus::Paused.as_str(), "paused");
    }

    #[test]
    fn a_thread_record_names_its_parent_and_an_older_one_gets_the_parent_its_id_shape_gave() {
        let child = ThreadRecord::new("acct/write.0.0.review", "o", "fp", 1, 2).child_of("acct");
        strict(&child.encode(), ThreadRecord::decode, &child);
        // A thread of its own, whatever its id's shape, stays one.
        let own = ThreadRecord::new("acct/write.0.0.review", "o", "fp", 1, 2);
        assert_eq!(ThreadRecord::decode(&own.encode()).unwrap().parent, None);
        // Store format 3 wrote no parent: the shape of the id decided.
        let format_3 = |id: &str| {
            let mut e = Enc::new(RECORD_VERSION);
            e.str(id).str("o").str("fp").u32(1).u8(ThreadStatus::Running.tag()).str("").u64(2).u64(2);
            ThreadRecord::decode(&e.finish()).unwrap().parent
        };
        assert_eq!(format_3("acct/write.0.0.review").as_deref(), Some("acct"));
        assert_eq!(format_3("acct/write.0.0.review/check.1.2.0.vet").as_deref(), Some("acct/write.0.0.review"));
        assert_eq!(format_3("acct/2"), None);
        assert_eq!(format_3("acct"), None);
    }

    #[test]
    fn legacy_parents_follow_the_shape_of_a_child_level() {
        let parent = ThreadRecord::legacy_parent;
        assert_eq!(parent("acct/write.0.0.review"), Some("acct"));
        assert_eq!(parent("acct/write.3.7.1.review"), Some("acct"));
        assert_eq!(parent("a/b/write.0.0.review"), Some("a/b"));
        assert_eq!(parent("acct/r#type.0.0.r#match"), Some("acct"), "raw identifiers");
        assert_eq!(parent("acct"), None);
        assert_eq!(parent("acct/"), None);
        assert_eq!(parent("/write.0.0.review"), None);
        assert_eq!(parent("acct/2"), None);
        assert_eq!(parent("acct/write.x.0.review"), None);
        assert_eq!(parent("acct/write.0.0.review/notes"), None);
    }

    #[test]
    fn records_round_trip_and_refuse_damage() {
        let mut thread = ThreadRecord::new("t", "o", "fp", 3, 9);
        thread.status = ThreadStatus::BudgetExhausted;
        strict(&thread.encode(), ThreadRecord::decode, &thread);
        let cp = Checkpoint {
            thread: "t".into(),
            seq: 4,
            parent: Some(2),
            cursor: vec!["a".into(), "b".into()],
            snapshot: None,
            delta: vec![vec![1, 2], vec![]],
            metadata: CheckpointMetadata {
                step: 4,
                source: CheckpointSource::Fork,
                nodes: vec!["x".into()],
                extra: serde_json::json!({"k": [1, 2]}),
            },
            created_at: 5,
        };
        let summary = cp.summary();
        let row = summary.encode_row(&cp.delta);
        assert_eq!(cp.encode_row(), row, "a checkpoint and its summary encode the same row");
        strict(&row, CheckpointSummary::decode, &summary);
        strict(&row, CheckpointSummary::decode_row, &(summary.clone(), cp.delta.clone()));
        strict(&Snapshot::encode(b"state"), Snapshot::decode, &b"state".to_vec());
        strict(&Payload::encode(b"write"), Payload::decode, &b"write".to_vec());
        let entry = AuditEntry {
            thread: "t".into(),
            seq: 1,
            at: 2,
            actor: "a".into(),
            kind: "k".into(),
            detail: serde_json::json!(null),
        };
        strict(&entry.encode(), AuditEntry::decode, &entry);
        strict(&approval().encode(), ApprovalRecord::decode, &approval());
    }

    #[test]
    fn unknown_tags_are_errors() {
        let mut bytes = approval().encode();
        // The status tag sits right before the optional fields; find it by re-encoding.
        let mut other = approval();
        other.status = ApprovalStatus::Pending;
        let pos = bytes.iter().zip(other.encode()).position(|(a, b)| *a != b).unwrap();
        bytes[pos] = 200;
        // Damage is caught by the checksum first; a record written with the bad tag by the tag.
        assert!(ApprovalRecord::decode(&bytes).unwrap_err().contains("checksum mismatch"));
        let body = bytes.len() - 4;
        let sum = crate::codec::crc32(&bytes[..body]).to_le_bytes();
        bytes[body..].copy_from_slice(&sum);
        assert!(ApprovalRecord::decode(&bytes).unwrap_err().contains("unknown approval status"));
    }

    #[test]
    fn approval_state_machine() {
        use ApprovalStatus::*;
        assert!(Pending.can_move_to(Approved));
        assert!(Approved.can_move_to(Executing));
        assert!(!Pending.can_move_to(Executing));
        assert!(!Rejected.can_move_to(Approved));
        assert!(Succeeded.is_final() && Failed.is_final() && Rejected.is_final());
        assert!(!Approved.is_final());
        assert!(Executing.can_move_to(OutcomeUnknown));
        assert!(OutcomeUnknown.can_move_to(Succeeded) && OutcomeUnknown.can_move_to(Approved));
        assert!(!OutcomeUnknown.can_move_to(Executing) && !OutcomeUnknown.is_final());
    }

    #[test]
    fn outcome_unknown_roundtrips() {
        let mut r = approval();
        r.status = ApprovalStatus::OutcomeUnknown;
        strict(&r.encode(), ApprovalRecord::decode, &r);
    }
}

/// A thread's durable timer: the thread sleeps until `wake_at`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Timer {
    /// Unix millis at which the thread is due.
    pub wake_at: u64,
    /// The sleeping thread.
    pub thread: String,
}
