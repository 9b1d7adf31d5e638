//! Checkpoints: a step's cursor, snapshot or delta and metadata, their stored rows and
//! summaries, and the chain of deltas that rebuilds a state.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codec::{Dec, DecodeResult, Enc};
use crate::record::payload::RECORD_VERSION;

/// The highest checkpoint seq a store accepts: a PostgreSQL `bigint` holds no more, and the next
/// seq after it still fits a `u64`.
pub(crate) const MAX_CHECKPOINT_SEQ: u64 = i64::MAX as u64;

/// Why a checkpoint seq past [`MAX_CHECKPOINT_SEQ`] is refused, in every backend's words.
pub(crate) fn seq_too_large(seq: u64) -> String {
    format!("checkpoint seq {seq} is too large (the most a thread can have is {MAX_CHECKPOINT_SEQ})")
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
