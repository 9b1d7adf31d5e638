//! The checks made at each cut: on what ran (the ledger and the model calls), on how the
//! resumed run ended, and on what the store holds at the end.

use std::collections::{BTreeMap, BTreeSet};

use agentflow_store::{ApprovalStatus, Store, ThreadStatus};

use super::crash_store::Acked;
use super::recorder::Tally;
use super::report::{Check, Cut, Ending, Violation};

/// Where the violations found are reported.
pub(crate) struct At<'a> {
    pub(crate) boundary: &'a str,
    pub(crate) cut: Cut,
}

impl At<'_> {
    pub(crate) fn violation(&self, check: Check, detail: String) -> Violation {
        Violation { boundary: self.boundary.to_string(), cut: self.cut, check, detail }
    }
}

/// What ran before and after the cut, against the uncut run.
pub(crate) fn ran(at: &At<'_>, reference: &Tally, cut: &Tally, resumed: &Tally, acked: &Acked) -> Vec<Violation> {
    let mut found = Vec::new();
    let keys: BTreeSet<&String> = cut.bodies.keys().chain(resumed.bodies.keys()).collect();
    for key in keys {
        let (before, rerunnable) = cut.bodies.get(key).copied().unwrap_or((0, false));
        let (after, rerunnable_after) = resumed.bodies.get(key).copied().unwrap_or((0, false));
        if rerunnable || rerunnable_after {
            continue;
        }
        let uncut = reference.bodies.get(key).map_or(0, |(n, _)| *n);
        if before + after > uncut.max(1) {
            found.push(at.violation(
                Check::EffectRanTwice,
                format!(
                    "`{key}` ran {} times ({before} before the cut, {after} after it); the uncut run ran it {uncut} times",
                    before + after
                ),
            ));
        }
    }
    for (run, after) in &resumed.calls {
        let (thread, seq, node, instance) = run;
        if !acked.holds(thread, *seq, node, instance.unwrap_or(0)) {
            continue;
        }
        let before = cut.calls.get(run).copied().unwrap_or(0);
        let uncut = reference.calls.get(run).copied().unwrap_or(0);
        if before + after > uncut {
            let instance = instance.map(|i| format!("[{i}]")).unwrap_or_default();
            found.push(at.violation(
                Check::ModelReplyConsumedTwice,
                format!(
                    "node `{node}{instance}` of thread `{thread}` on checkpoint {seq} asked a model {after} more \
                     times after the cut, though its write was committed before it ({before} calls before, {uncut} \
                     in the uncut run)"
                ),
            ));
        }
    }
    found
}

/// How the resumed run ended, against the uncut run.
pub(crate) fn ending(at: &At<'_>, reference: &Ending, resumed: &Ending) -> Option<Violation> {
    match resumed {
        Ending::WaitsForHuman { .. } => None,
        Ending::Finished { .. } if resumed == reference => None,
        Ending::Finished { .. } => {
            Some(at.violation(Check::EndingDiffers, format!("the uncut run ended {reference}; this one {resumed}")))
        }
        Ending::Error { error } => {
            Some(at.violation(Check::EndingDiffers, format!("the resumed run did not run to its end: {error}")))
        }
    }
}

/// What one call's journal holds: a result, and the runs started and ended.
#[derive(Default)]
struct Marks {
    result: bool,
    started: BTreeSet<String>,
    ended: BTreeSet<String>,
}

/// What the store holds once the run returned: no thread `running`, and every call cut off
/// journaled as ended or listed as an unknown outcome.
pub(crate) fn stored(at: &At<'_>, store: &dyn Store) -> Vec<Violation> {
    let mut found = Vec::new();
    let threads = match store.list_threads() {
        Ok(threads) => threads,
        Err(e) => return vec![at.violation(Check::EndingDiffers, format!("the store cannot list its threads: {e}"))],
    };
    for t in &threads {
        if t.status == ThreadStatus::Running {
            found.push(at.violation(
                Check::LeftRunning,
                format!("thread `{}` is `running` after its run returned ({})", t.id, t.detail),
            ));
        }
        let (effects, approvals) = match (store.thread_effects(&t.id), store.list_approvals(&t.id)) {
            (Ok(e), Ok(a)) => (e, a),
            (Err(e), _) | (_, Err(e)) => {
                found.push(at.violation(Check::EndingDiffers, format!("thread `{}` cannot be read: {e}", t.id)));
                continue;
            }
        };
        // (seq, node, key) -> what its journal holds.
        let mut calls: BTreeMap<(u64, String, String), Marks> = BTreeMap::new();
        for (k, _) in &effects {
            let mut parts = k.key.split('\u{1f}');
            let base = parts.next().unwrap_or_default().to_string();
            let entry = calls.entry((k.seq, k.node.clone(), base)).or_default();
            match (parts.next(), parts.next()) {
                (Some("started"), Some(run)) => {
                    entry.started.insert(run.to_string());
                }
                (Some(_), Some(run)) => {
                    entry.ended.insert(run.to_string());
                }
                _ => entry.result = true,
            }
        }
        for ((seq, node, key), marks) in calls {
            if marks.result {
                continue;
            }
            for run in marks.started.difference(&marks.ended) {
                let n: u32 = run.parse().unwrap_or(0);
                let unknown = crate::durable::unknown_outcome_id(&t.id, seq, &node, &key, n);
                let listed = approvals
                    .iter()
                    .any(|a| a.id == unknown || (a.node == node && a.status == ApprovalStatus::OutcomeUnknown));
                if !listed {
                    found.push(at.violation(
                        Check::CallCutOffUnlisted,
                        format!(
                            "call `{key}` of node `{node}` (thread `{}`, checkpoint {seq}, run {run}) started and left \
                             no result, and no unknown outcome is listed for a human",
                            t.id
                        ),
                    ));
                }
            }
        }
    }
    found
}
