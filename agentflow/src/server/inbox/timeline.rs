//! A thread's timeline as its page shows it, read from the store: each checkpoint with how long
//! its step took (from the checkpoint it continued, to its own), what the step waited for (a
//! durable timer, journaled with its wake time; a person's decision on an approval, audited),
//! and what the thread waits for now.
//!
//! Nothing here is trusted to be well-formed: a wake time that does not decode, or a clock that
//! went backwards between two checkpoints, leaves that fact out of the page.

use std::collections::BTreeMap;

use agentflow_store::{ApprovalRecord, AuditEntry, CheckpointSummary, EffectKey, Store, ThreadRecord, ThreadStatus};
use serde_json::Value;

use super::pages::{Now, Step, Wait};
use crate::durable::wake::SLEEP_KEY;
use crate::interrupt::PendingKind;
use crate::server::inspect::InspectError;
use crate::server::inspect::waits::waits;

/// The checkpoint `extra` key naming the checkpoint whose step a manual update continues: the
/// step after it journals under that seq.
const JOURNAL_SEQ: &str = "journal_seq";
/// The audit kinds of an approval's decision (by a person, or by its expiry).
const DECIDED: [&str; 3] = ["approval.approved", "approval.rejected", "approval.expired"];

/// The seq a step continuing from `c` journals its effects under.
fn journal_seq(c: &CheckpointSummary) -> u64 {
    c.metadata.extra.get(JOURNAL_SEQ).and_then(Value::as_u64).unwrap_or(c.seq)
}

/// Each durable timer's wake time, by the seq its step journaled under: `(node, until)`, in
/// the journal's order. A value that is not a time is left out.
fn timers(effects: Vec<(EffectKey, Vec<u8>)>) -> BTreeMap<u64, Vec<(String, u64)>> {
    let mut by_seq: BTreeMap<u64, Vec<(String, u64)>> = BTreeMap::new();
    for (key, value) in effects {
        let Some(n) = key.key.strip_prefix(SLEEP_KEY) else { continue };
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(until) = serde_json::from_slice::<u64>(&value) {
            by_seq.entry(key.seq).or_default().push((key.node, until));
        }
    }
    by_seq
}

/// When and by whom each approval was decided: `(at, actor, kind without its prefix)` from the
/// first audited decision.
fn decisions(audit: &[AuditEntry]) -> BTreeMap<&str, (u64, &str, &str)> {
    let mut found = BTreeMap::new();
    for e in audit {
        if !DECIDED.contains(&e.kind.as_str()) {
            continue;
        }
        if let Some(id) = e.detail.get("approval").and_then(Value::as_str) {
            let outcome = e.kind.strip_prefix("approval.").unwrap_or(&e.kind);
            found.entry(id).or_insert((e.at, e.actor.as_str(), outcome));
        }
    }
    found
}

fn source_name(c: &CheckpointSummary) -> String {
    serde_json::to_value(c.metadata.source).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// The thread's checkpoints, oldest first, each with its step's duration and waits.
/// `approvals` and `audit` are the thread's (a step's approval is one its nodes asked for
/// between the two checkpoints).
pub(super) fn steps(
    store: &dyn Store,
    thread: &str,
    approvals: &[ApprovalRecord],
    audit: &[AuditEntry],
) -> Result<Vec<Step>, InspectError> {
    let checkpoints = store.list_checkpoints(thread).map_err(InspectError::store)?;
    let timers = timers(store.thread_effects(thread).map_err(InspectError::store)?);
    let decided = decisions(audit);
    let by_seq: BTreeMap<u64, &CheckpointSummary> = checkpoints.iter().map(|c| (c.seq, c)).collect();
    let mut steps = Vec::with_capacity(checkpoints.len());
    for c in &checkpoints {
        let parent = c.parent.and_then(|p| by_seq.get(&p)).copied();
        let mut waits = Vec::new();
        let mut began = None;
        if let Some(p) = parent.filter(|p| p.created_at <= c.created_at) {
            let ran = |node: &str| c.metadata.nodes.iter().any(|n| n == node);
            // A person's decision this step's nodes asked for, after the step began.
            let mut resumed = p.created_at;
            for a in approvals {
                if !ran(&a.node) || a.created_at < p.created_at || a.created_at > c.created_at {
                    continue;
                }
                let Some(&(at, by, outcome)) = decided.get(a.id.as_str()) else { continue };
                resumed = resumed.max(at);
                waits.push(Wait::Approval {
                    tool: a.tool.clone(),
                    from: a.created_at,
                    decided: at,
                    by: by.to_string(),
                    outcome: outcome.to_string(),
                });
            }
            // Its durable timers: each slept from the step's start (or the last decision it
            // waited for, after which its node ran again) until its wake time.
            for (node, until) in timers.get(&journal_seq(p)).into_iter().flatten() {
                if ran(node) {
                    waits.push(Wait::Slept { node: node.clone(), from: resumed, until: *until });
                }
            }
            began = Some(p.created_at);
        }
        steps.push(Step {
            seq: c.seq,
            step: c.metadata.step,
            source: source_name(c),
            nodes: c.metadata.nodes.clone(),
            next: c.cursor.clone(),
            at: c.created_at,
            took: began.map(|b| c.created_at - b),
            waits,
        });
    }
    Ok(steps)
}

/// What a paused thread waits for now, from its latest checkpoint (nothing for a thread that
/// runs, finished or failed; a note when that cannot be read).
pub(super) fn now(store: &dyn Store, t: &ThreadRecord) -> Vec<Now> {
    if !matches!(t.status, ThreadStatus::Sleeping | ThreadStatus::Interrupted) {
        return Vec::new();
    }
    // A record that does not read leaves the rest of the page to show.
    let waits = match waits(store, &t.id) {
        Ok((_, waits)) => waits,
        Err(e) => return vec![Now::Unreadable { message: e.to_string() }],
    };
    let timer = store.thread_timer(&t.id).ok().flatten();
    waits
        .into_iter()
        .map(|p| {
            let text = |key: &str| p.payload.get(key).and_then(Value::as_str).map(str::to_string);
            match p.kind {
                PendingKind::Sleep => Now::Sleeping {
                    node: p.node.clone(),
                    until: p.payload.get("until").and_then(Value::as_u64).or(timer),
                    breaker: text("breaker"),
                    subgraph: text("subgraph"),
                },
                PendingKind::Approval => Now::Approval { node: p.node.clone(), approval: text("approval") },
                PendingKind::Interrupt => Now::Answer { node: p.node.clone() },
                PendingKind::Before => Now::Breakpoint { node: p.node.clone(), when: "before" },
                PendingKind::After => Now::Breakpoint { node: p.node.clone(), when: "after" },
                PendingKind::OutcomeUnknown => Now::Unknown { node: p.node.clone(), approval: text("approval") },
            }
        })
        .collect()
}
