//! The durable boundaries of a run, named by what they write: each write to the store is one
//! boundary, named by the items it carries (a step's checkpoint, a map instance's write, an
//! effect's *started* marker or result, an approval's move, an audit entry, a timer).
//!
//! A name says what is written, never when: `write t@3 worker[2]`, not "the 7th commit". Two
//! runs of one graph with the same inputs write the same items, though not always grouped the
//! same way (map instances that finish together share a commit): a cut is aimed at an item,
//! and falls on whichever write carries it.

use std::collections::BTreeMap;

use agentflow_store::{ApprovalRecord, ApprovalTransition, EffectBatch, EffectKey, NewAuditEntry, StepCommit};

/// The seq a compensation journals its calls under (the last one a store keeps).
const MAX_CHECKPOINT_SEQ: u64 = i64::MAX as u64;

/// What kind of write a boundary is (the kind of its first item).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum BoundaryKind {
    /// A super-step's commit: its checkpoint, with the thread's status.
    Step,
    /// A commit that changes the thread's status without a checkpoint (how a run ended).
    Status,
    /// A commit that sets the thread's durable timer: it sleeps (`cx.sleep`), or waits for an
    /// approval that expires.
    Timer,
    /// A finished node's or map instance's write, kept before its step commits.
    Write,
    /// The *started* marker written right before an effect or a tool call runs.
    EffectStarted,
    /// An *ended* marker: the call failed, or was run again.
    EffectEnded,
    /// An effect's or tool call's journaled result.
    EffectResult,
    /// A call journaled by a compensation (undoing a saga's steps).
    Compensation,
    /// An approval created (requested), or an unknown outcome recorded.
    ApprovalRequested,
    /// An approval's move (approved, rejected, executing, succeeded, ...).
    ApprovalMoved,
    /// An audit entry written on its own (an answer to an interrupt, a saga's log).
    Audit,
}

impl BoundaryKind {
    /// The kind's name, as the report prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            BoundaryKind::Step => "step",
            BoundaryKind::Status => "status",
            BoundaryKind::Timer => "timer",
            BoundaryKind::Write => "write",
            BoundaryKind::EffectStarted => "effect-started",
            BoundaryKind::EffectEnded => "effect-ended",
            BoundaryKind::EffectResult => "effect-result",
            BoundaryKind::Compensation => "compensation",
            BoundaryKind::ApprovalRequested => "approval-requested",
            BoundaryKind::ApprovalMoved => "approval-moved",
            BoundaryKind::Audit => "audit",
        }
    }
}

/// One item of a write, with its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub(crate) kind: BoundaryKind,
    pub(crate) key: String,
}

fn item(kind: BoundaryKind, key: String) -> Item {
    Item { kind, key }
}

/// The items of a step commit.
pub(crate) fn step_items(c: &StepCommit) -> Vec<Item> {
    let t = &c.thread.id;
    let mut items = Vec::new();
    let status = c.thread.status.as_str();
    match (&c.checkpoint, c.wake_at) {
        (Some(cp), Some(_)) => items.push(item(BoundaryKind::Timer, format!("timer {t}@{}", cp.seq))),
        (None, Some(_)) => items.push(item(BoundaryKind::Timer, format!("timer {t} {status}"))),
        (Some(cp), None) => items.push(item(BoundaryKind::Step, format!("step {t}@{}", cp.seq))),
        (None, None) => items.push(item(BoundaryKind::Status, format!("status {t} {status}"))),
    }
    items.extend(c.effects.iter().map(|(k, _)| effect_item(k)));
    items.extend(c.new_approvals.iter().map(requested));
    items.extend(c.approval_transitions.iter().map(moved));
    items.extend(c.audit.iter().map(|e| audit(t, e)));
    items
}

/// The items of an effect batch.
pub(crate) fn batch_items(b: &EffectBatch) -> Vec<Item> {
    let t = &b.thread;
    let mut items: Vec<Item> = b.effects.iter().map(|(k, _)| effect_item(k)).collect();
    items.extend(
        b.pending_writes
            .iter()
            .map(|w| item(BoundaryKind::Write, format!("write {t}@{} {}[{}]", w.seq, w.node, w.idx))),
    );
    items.extend(b.new_approvals.iter().map(requested));
    items.extend(b.approval_transitions.iter().map(moved));
    items.extend(b.audit.iter().map(|e| audit(t, e)));
    items
}

/// The item of one journaled effect (a result, or a marker: `key␟started␟1`).
pub(crate) fn effect_item(k: &EffectKey) -> Item {
    let mut parts = k.key.split('\u{1f}');
    let name = parts.next().unwrap_or_default();
    let (kind, what) = match (parts.next(), parts.next()) {
        (Some("started"), Some(run)) => (BoundaryKind::EffectStarted, format!(" started#{run}")),
        (Some(marker), Some(run)) => (BoundaryKind::EffectEnded, format!(" {marker}#{run}")),
        _ => (BoundaryKind::EffectResult, String::new()),
    };
    if k.seq == MAX_CHECKPOINT_SEQ {
        return item(BoundaryKind::Compensation, format!("compensation {} {} {name}{what}", k.thread, k.node));
    }
    item(kind, format!("effect {}@{} {} {name}{what}", k.thread, k.seq, k.node))
}

pub(crate) fn requested(a: &ApprovalRecord) -> Item {
    item(BoundaryKind::ApprovalRequested, format!("approval {} {}", a.id, a.status.as_str()))
}

pub(crate) fn moved(t: &ApprovalTransition) -> Item {
    approval_move(&t.id, t.to.as_str())
}

pub(crate) fn approval_move(id: &str, to: &str) -> Item {
    item(BoundaryKind::ApprovalMoved, format!("approval {id} -> {to}"))
}

pub(crate) fn audit(thread: &str, e: &NewAuditEntry) -> Item {
    item(BoundaryKind::Audit, format!("audit {thread} {}", e.kind))
}

/// Numbers the items that come again within one run (`#2`, `#3`, ...), so each names one write.
#[derive(Debug, Default)]
pub(crate) struct Numbering {
    seen: BTreeMap<String, u32>,
}

impl Numbering {
    pub(crate) fn number(&mut self, items: Vec<Item>) -> Vec<Item> {
        items
            .into_iter()
            .map(|mut it| {
                let n = self.seen.entry(it.key.clone()).or_insert(0);
                *n += 1;
                if *n > 1 {
                    it.key = format!("{} #{n}", it.key);
                }
                it
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effect_markers_are_named_by_their_key_and_run() {
        let k = |key: &str, seq| EffectKey { thread: "t".into(), seq, node: "pay".into(), key: key.into() };
        assert_eq!(effect_item(&k("charge\u{1f}started\u{1f}1", 3)).key, "effect t@3 pay charge started#1");
        assert_eq!(effect_item(&k("charge\u{1f}started\u{1f}1", 3)).kind, BoundaryKind::EffectStarted);
        assert_eq!(effect_item(&k("charge\u{1f}ended\u{1f}2", 3)).kind, BoundaryKind::EffectEnded);
        assert_eq!(effect_item(&k("charge", 3)).key, "effect t@3 pay charge");
        assert_eq!(effect_item(&k("undo", MAX_CHECKPOINT_SEQ)).kind, BoundaryKind::Compensation);
    }

    #[test]
    fn repeated_items_are_numbered() {
        let mut n = Numbering::default();
        let a = || vec![item(BoundaryKind::Audit, "audit t answer".into())];
        assert_eq!(n.number(a())[0].key, "audit t answer");
        assert_eq!(n.number(a())[0].key, "audit t answer #2");
    }
}
