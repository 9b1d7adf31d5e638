//! [`ThreadDump`]: everything a store keeps for one thread, as
//! [`Store::dump_thread`](crate::Store::dump_thread) reads it and
//! [`Store::restore_thread`](crate::Store::restore_thread) writes it back.

use crate::codec::MAX_DOCUMENT_DEPTH;
use crate::error::{CommitError, JsonTooDeep};
use crate::record::{
    ApprovalRecord, AuditEntry, Checkpoint, EffectKey, MAX_CHECKPOINT_SEQ, PendingWrite, StoredEvent, ThreadRecord,
    seq_too_large,
};

/// Everything a store keeps for one thread. The thread's lease, its place in a run queue (with
/// the follow-up runs behind it) and its webhook deliveries are not part of it (they belong to
/// the processes running it and to the servers telling of it).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ThreadDump {
    /// The thread's record (its `lease` is ignored on restore).
    pub thread: ThreadRecord,
    /// Its durable timer, if it sleeps.
    pub wake_at: Option<u64>,
    /// Every checkpoint, ordered by seq, with snapshots and deltas.
    pub checkpoints: Vec<Checkpoint>,
    /// Every pending write, ordered by (seq, node, idx).
    pub pending_writes: Vec<PendingWrite>,
    /// Every journaled effect result, ordered by (seq, node, key).
    pub effects: Vec<(EffectKey, Vec<u8>)>,
    /// The audit log, oldest first, with its seqs.
    pub audit: Vec<AuditEntry>,
    /// The thread's approvals, ordered by id, each with its current status.
    pub approvals: Vec<ApprovalRecord>,
    /// The thread's event log as kept ([`Store::read_events`](crate::Store::read_events)),
    /// oldest first, with its ids: a restored thread's log goes on after the newest. (Appended
    /// last.)
    pub events: Vec<StoredEvent>,
}

impl ThreadDump {
    /// A dump (for code that builds one from another source, such as an export file).
    pub fn new(thread: ThreadRecord) -> Self {
        ThreadDump {
            thread,
            wake_at: None,
            checkpoints: Vec::new(),
            pending_writes: Vec::new(),
            effects: Vec::new(),
            audit: Vec::new(),
            approvals: Vec::new(),
            events: Vec::new(),
        }
    }
}

/// How many checkpoint seqs the default [`Store::thread_effects`](crate::Store::thread_effects)
/// reads the journal of, at most.
const SCANNED_SEQS: u64 = 1 << 20;

/// The seqs whose journal the default `thread_effects` reads, given the kept checkpoints' seqs:
/// every seq from 0 to the latest (past [`SCANNED_SEQS`] of them, the kept ones alone), and the
/// last seq, where a compensation journals its calls.
pub(crate) fn journal_seqs(kept: Vec<u64>) -> Vec<u64> {
    let mut seqs = match kept.iter().max() {
        Some(&latest) if latest < SCANNED_SEQS => (0..=latest).collect(),
        _ => kept,
    };
    if seqs.last() != Some(&MAX_CHECKPOINT_SEQ) {
        seqs.push(MAX_CHECKPOINT_SEQ);
    }
    seqs
}

/// The largest time (unix millis) a dump may hold: PostgreSQL keeps times as `bigint`, so a
/// larger one would read back changed there.
const MAX_TIME: u64 = i64::MAX as u64;

/// A set of dumps written together ([`Store::restore_threads`](crate::Store::restore_threads))
/// names each thread once.
pub(crate) fn check_distinct(dumps: &[ThreadDump]) -> Result<(), CommitError> {
    let mut seen = std::collections::BTreeSet::new();
    for d in dumps {
        if !seen.insert(d.thread.id.as_str()) {
            return Err(CommitError::Invalid {
                thread: d.thread.id.clone(),
                reason: "the thread comes twice in what is restored".to_string(),
            });
        }
    }
    Ok(())
}

/// The refusal of a restore into a store that holds records of the thread without its thread
/// record: what a run submitted to a worker, or one starting, writes first.
pub(crate) fn left_over(thread: &str, what: &str) -> CommitError {
    CommitError::Invalid {
        thread: thread.to_string(),
        reason: format!(
            "this store holds {what} of the thread already (a run was submitted or started under its id, \
             perhaps cancelled before it ran): a restore would mix the two; restore it into another store"
        ),
    }
}

/// Checks a dump before anything is written, so that what is restored reads back as it was, on
/// every store alike, and a run or a commit can go on from it: every part belongs to the
/// thread; the checkpoints are in increasing order and each has its parent (an earlier one) or
/// a snapshot; the audit seqs run 1, 2, .. without gaps; the events' ids increase; no approval id, pending-write key or
/// effect key comes twice; each pending write belongs to a checkpoint of the dump; a sleeping
/// thread has its timer; no time but a timer is past what PostgreSQL holds; no id, name or key
/// holds a NUL byte (which PostgreSQL `text` cannot).
pub(crate) fn check_dump(d: &ThreadDump) -> Result<(), CommitError> {
    let tid = d.thread.id.as_str();
    let invalid = |reason: String| CommitError::Invalid { thread: tid.to_string(), reason };
    if tid.is_empty() {
        return Err(invalid("the thread id is empty".to_string()));
    }
    if let Some(reason) = d.thread.parent_problem() {
        return Err(invalid(reason));
    }
    check_text(d).map_err(invalid)?;
    check_times(d).map_err(invalid)?;
    if d.thread.status == crate::record::ThreadStatus::Sleeping && d.wake_at.is_none() {
        return Err(invalid("the thread is sleeping but has no timer (`wake_at`) to wake it".to_string()));
    }
    let mut seen: Vec<u64> = Vec::new();
    for cp in &d.checkpoints {
        if cp.thread != tid {
            return Err(invalid(format!("checkpoint {} belongs to thread `{}`", cp.seq, cp.thread)));
        }
        if cp.seq > MAX_CHECKPOINT_SEQ {
            return Err(invalid(seq_too_large(cp.seq)));
        }
        if seen.last().is_some_and(|last| *last >= cp.seq) {
            return Err(invalid(format!("checkpoint {} is out of order", cp.seq)));
        }
        match cp.parent {
            Some(p) if p >= cp.seq => {
                return Err(invalid(format!(
                    "checkpoint {} names {p} as its parent, which is not an earlier one",
                    cp.seq
                )));
            }
            Some(p) if !seen.contains(&p) && cp.snapshot.is_none() => {
                return Err(invalid(format!("checkpoint {} has neither its parent {p} nor a snapshot", cp.seq)));
            }
            None if cp.snapshot.is_none() => {
                return Err(invalid(format!("checkpoint {} has no parent, so it must carry a snapshot", cp.seq)));
            }
            _ => {}
        }
        seen.push(cp.seq);
    }
    if let Some(e) = d.audit.iter().find(|e| e.thread != tid) {
        return Err(invalid(format!("audit entry {} belongs to thread `{}`", e.seq, e.thread)));
    }
    if let Some(a) = d.approvals.iter().find(|a| a.thread != tid) {
        return Err(invalid(format!("approval `{}` belongs to thread `{}`", a.id, a.thread)));
    }
    if let Some((k, _)) = d.effects.iter().find(|(k, _)| k.thread != tid) {
        return Err(invalid(format!("effect `{}` belongs to thread `{}`", k.key, k.thread)));
    }
    // The log a thread's store appends to: 1, 2, .., so the next append follows the last.
    if let Some((i, e)) = d.audit.iter().enumerate().find(|(i, e)| e.seq != *i as u64 + 1) {
        return Err(invalid(format!(
            "audit entry {} is where entry {} belongs: the seqs run 1, 2, .. without gaps",
            e.seq,
            i + 1
        )));
    }
    let mut approval_ids = std::collections::HashSet::new();
    if let Some(a) = d.approvals.iter().find(|a| !approval_ids.insert(a.id.as_str())) {
        return Err(invalid(format!("approval `{}` comes twice", a.id)));
    }
    let mut writes = std::collections::HashSet::new();
    for w in &d.pending_writes {
        if !writes.insert((w.seq, w.node.as_str(), w.idx)) {
            return Err(invalid(format!(
                "pending write {} of node `{}` at checkpoint {} comes twice",
                w.idx, w.node, w.seq
            )));
        }
        if !seen.contains(&w.seq) {
            return Err(invalid(format!(
                "pending write {} of node `{}` belongs to checkpoint {}, which is not in the dump",
                w.idx, w.node, w.seq
            )));
        }
    }
    // The log goes on after its newest event: ids strictly increasing, seqs from 1.
    if let Some(e) = d.events.iter().find(|e| e.id.seq == 0 || e.id.seq > MAX_TIME) {
        return Err(invalid(format!("event {} has a seq a log does not give (1 to {MAX_TIME})", e.id)));
    }
    if let Some(pair) = d.events.windows(2).find(|p| p[0].id >= p[1].id) {
        return Err(invalid(format!("event {} comes after event {}: the log's ids increase", pair[1].id, pair[0].id)));
    }
    let mut effects = std::collections::HashSet::new();
    if let Some((k, _)) = d.effects.iter().find(|(k, _)| !effects.insert((k.seq, k.node.as_str(), k.key.as_str()))) {
        return Err(invalid(format!("effect `{}` of node `{}` at checkpoint {} comes twice", k.key, k.node, k.seq)));
    }
    // The JSON the store reads back itself is held to the limits a commit is (an edited dump
    // must not make the thread unreadable): checkpoint metadata, audit details, conditions.
    let too_deep = |source| CommitError::TooDeep { thread: tid.to_string(), source };
    for cp in &d.checkpoints {
        let root = format!("checkpoint {}: metadata.extra", cp.seq);
        JsonTooDeep::check(&cp.metadata.extra, MAX_DOCUMENT_DEPTH, &root).map_err(too_deep)?;
    }
    for e in &d.audit {
        JsonTooDeep::check(&e.detail, MAX_DOCUMENT_DEPTH, &format!("audit entry {}: detail", e.seq))
            .map_err(too_deep)?;
    }
    for a in &d.approvals {
        crate::checks::check_conditions(&a.id, a.conditions.as_ref())?;
    }
    Ok(())
}

/// Refuses a NUL byte in what a store keeps as text: the thread's id, owner, fingerprint,
/// detail, parent, tenant and trace context, audit actors and kinds, approval ids, pending-write
/// nodes, effect nodes and keys, event kinds.
fn check_text(d: &ThreadDump) -> Result<(), String> {
    let t = &d.thread;
    let mut fields: Vec<(String, &str)> = vec![
        ("the thread id".into(), t.id.as_str()),
        ("the owner".into(), t.owner.as_str()),
        ("the graph fingerprint".into(), t.graph_fingerprint.as_str()),
        ("the detail".into(), t.detail.as_str()),
    ];
    fields.extend(t.parent.as_deref().map(|p| ("the parent".to_string(), p)));
    fields.extend(t.tenant.as_deref().map(|p| ("the tenant".to_string(), p)));
    fields.extend(t.trace.as_deref().map(|p| ("the trace context".to_string(), p)));
    for e in &d.audit {
        fields.push((format!("the actor of audit entry {}", e.seq), e.actor.as_str()));
        fields.push((format!("the kind of audit entry {}", e.seq), e.kind.as_str()));
        fields.push((format!("the detail hash of audit entry {}", e.seq), e.detail_hash.as_str()));
        fields.push((format!("the link of audit entry {}", e.seq), e.link.as_str()));
    }
    fields.extend(d.approvals.iter().map(|a| (format!("approval id {:?}", a.id), a.id.as_str())));
    fields.extend(
        d.pending_writes.iter().map(|w| (format!("the node of a pending write at {}", w.seq), w.node.as_str())),
    );
    for (k, _) in &d.effects {
        fields.push((format!("the node of an effect at {}", k.seq), k.node.as_str()));
        fields.push((format!("effect key {:?}", k.key), k.key.as_str()));
    }
    fields.extend(d.events.iter().map(|e| (format!("the kind of event {}", e.id), e.kind.as_str())));
    match fields.into_iter().find(|(_, v)| v.contains('\0')) {
        Some((what, _)) => Err(format!("{what} contains a NUL byte, which a store cannot keep as text")),
        None => Ok(()),
    }
}

/// Refuses a time past [`MAX_TIME`]: the thread's, its audit entries' and its events'. A timer past it
/// (`cx.sleep(Duration::MAX)`, an approval that never expires) means "never" on either store
/// (PostgreSQL keeps it as `i64::MAX`), so it is let through.
fn check_times(d: &ThreadDump) -> Result<(), String> {
    let t = &d.thread;
    let mut times = vec![("created_at", t.created_at), ("updated_at", t.updated_at)];
    times.extend(d.audit.iter().map(|e| ("an audit entry's `at`", e.at)));
    times.extend(d.events.iter().map(|e| ("an event's `at`", e.at)));
    match times.into_iter().find(|(_, v)| *v > MAX_TIME) {
        Some((what, v)) => Err(format!("{what} is {v}, past the largest time a store keeps ({MAX_TIME})")),
        None => Ok(()),
    }
}

/// The dump's audit log as a store writes it: an entry with its hashes keeps them (a verify
/// then finds what was changed in the dump), one without (an export of a build before the
/// chain) is chained after the entry before it.
pub(crate) fn chained_audit(d: &ThreadDump) -> Vec<AuditEntry> {
    let mut prev = String::new();
    d.audit
        .iter()
        .map(|e| {
            let mut e = e.clone();
            if e.detail_hash.is_empty() && e.link.is_empty() {
                crate::audit_chain::seal(&mut e, &prev);
            }
            prev.clone_from(&e.link);
            e
        })
        .collect()
}

/// A checkpoint whose parent is not in the dump (dropped by compaction) is restored as a root:
/// it carries a snapshot (checked by [`check_dump`]).
pub(crate) fn parent_in_dump(d: &ThreadDump, cp: &Checkpoint) -> Option<u64> {
    cp.parent.filter(|p| d.checkpoints.iter().any(|c| c.seq == *p))
}
