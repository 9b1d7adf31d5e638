//! The pure half of a super-step: checking and merging the writes of one step.
//!
//! Kept apart from the async loop so it can be tested without a runtime.

use crate::error::NodeError;
use crate::graph::{NodeId, Plan};
use crate::state::{FieldMask, State, Update};
use crate::step::Step;

/// Checks the step's writes, then merges them into `state` in declaration
/// order (`results` is sorted by node id) and fills `next` with the next
/// active set, sorted and without duplicates (a join runs once).
///
/// On error nothing is merged: the state stays as it was before the step.
pub(crate) fn apply<S: State, D>(
    plan: &Plan<S, D>,
    state: &mut S,
    results: Vec<(NodeId, Step<S>)>,
    next: &mut Vec<NodeId>,
) -> Result<(), (NodeId, NodeError)> {
    check_writes(plan, &results)?;
    next.clear();
    for (_, step) in results {
        next.extend_from_slice(&step.next);
        state.apply(step.update);
    }
    next.sort_unstable();
    next.dedup();
    Ok(())
}

// A node that declared `writes = [..]` may set only those fields, and two
// nodes of one step may not both overwrite a field. `#[graph]` proves both
// for the updates it can see; this guards the rest (an update built far from
// its `goto!`) so a violation fails loudly instead of losing a write.
fn check_writes<S: State, D>(plan: &Plan<S, D>, results: &[(NodeId, Step<S>)]) -> Result<(), (NodeId, NodeError)> {
    let mut overwritten: FieldMask = 0;
    for (id, step) in results {
        let touched = step.update.touched();
        let node = &plan.spec.nodes[id.index()];
        if let Some(allowed) = node.writes {
            let outside = touched & !allowed;
            if outside != 0 {
                let msg = format!(
                    "node `{}` set {} outside its `writes` list [{}]",
                    node.name,
                    names::<S>(outside),
                    S::field_names(allowed).join(", ")
                );
                return Err((*id, NodeError::fatal(msg)));
            }
        }
        let clash = touched & overwritten & plan.overwrite_mask;
        if clash != 0 {
            let others: Vec<_> = results
                .iter()
                .filter(|(o, s)| o < id && s.update.touched() & clash != 0)
                .map(|(o, _)| plan.spec.nodes[o.index()].name)
                .collect();
            let msg = format!(
                "nodes `{}` and `{}` both overwrite {} in one super-step; give the field a reducer \
                 (e.g. `#[reduce(append)]`) or route the nodes to different steps",
                others.join("`, `"),
                node.name,
                names::<S>(clash)
            );
            return Err((*id, NodeError::fatal(msg)));
        }
        overwritten |= touched;
    }
    Ok(())
}

fn names<S: State>(mask: FieldMask) -> String {
    let names: Vec<String> = S::field_names(mask).iter().map(|n| format!("`{n}`")).collect();
    names.join(", ")
}
