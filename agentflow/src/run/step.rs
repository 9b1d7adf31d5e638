//! The pure half of a super-step: checking and merging the writes of one step.
//!
//! Kept apart from the async loop so it can be tested without a runtime.

use crate::core::error::NodeError;
use crate::core::state::{FieldMask, State, Update};
use crate::core::step::{Mailbox, Step};
use crate::graph::{NodeId, Plan};

/// Checks the step's writes, then merges them into `state` in declaration
/// order (`results` is sorted by node id, and a map worker's instances by
/// payload index) and fills `next` with the next active set, sorted and
/// without duplicates (a join runs once), and `payloads` with the payloads
/// sent to the next step's map workers (several senders' lists are
/// concatenated in declaration order). A worker sent no payload does not run.
///
/// On error nothing is merged: the state stays as it was before the step.
pub(crate) fn apply<S: State, D>(
    plan: &Plan<S, D>,
    state: &mut S,
    results: &mut Vec<(NodeId, Step<S>)>,
    next: &mut Vec<NodeId>,
    payloads: &mut Mailbox,
) -> Result<(), (NodeId, NodeError)> {
    check_routes(plan, results)?;
    check_writes(plan, results)?;
    next.clear();
    payloads.clear();
    for (id, step) in results.drain(..) {
        next.extend_from_slice(&step.next);
        for sends in step.sends {
            let items = sends.payloads.map_err(|e| (id, NodeError::fatal(e)))?;
            if items.is_empty() {
                continue;
            }
            next.push(sends.worker);
            match payloads.iter_mut().find(|(w, _)| *w == sends.worker) {
                Some((_, list)) => list.extend(items),
                None => payloads.push((sends.worker, items)),
            }
        }
        state.apply(step.update);
    }
    next.sort_unstable();
    next.dedup();
    Ok(())
}

// Every route must be one the node declared. `#[graph]` proves this for the
// `goto!`s it rewrites; a plan built by hand, or a restored pending write,
// is checked here so an undeclared route fails instead of running.
fn check_routes<S: State, D>(plan: &Plan<S, D>, results: &[(NodeId, Step<S>)]) -> Result<(), (NodeId, NodeError)> {
    for (id, step) in results {
        let Some(node) = plan.spec.nodes.get(id.index()) else {
            return Err((*id, NodeError::fatal(format!("node {id} is not part of graph `{}`", plan.spec.name))));
        };
        if step.next.is_empty() && step.sends.is_empty() && !node.may_end {
            return Err((
                *id,
                NodeError::fatal(format!("node `{}` routed to END, which its `goto` list does not allow", node.name)),
            ));
        }
        if let Some(bad) =
            step.next.iter().chain(step.sends.iter().map(|s| &s.worker)).find(|t| !node.targets.contains(t))
        {
            let to = plan.spec.nodes.get(bad.index()).map_or_else(|| bad.to_string(), |n| n.name.to_string());
            return Err((
                *id,
                NodeError::fatal(format!("illegal transition `{} -> {to}`: not in its `goto` list", node.name)),
            ));
        }
    }
    Ok(())
}

// A node that declared `writes = [..]` may set only those fields, and two
// nodes of one step may not both overwrite a field. `#[graph]` proves both
// for the updates it can see; this guards the rest (an update built far from
// its `goto!`) so a violation fails loudly instead of losing a write.
fn check_writes<S: State, D>(plan: &Plan<S, D>, results: &[(NodeId, Step<S>)]) -> Result<(), (NodeId, NodeError)> {
    let mut overwritten: FieldMask = 0;
    for (k, (id, step)) in results.iter().enumerate() {
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
        // Looked for only on a clash, so a step of many instances stays linear.
        let sibling = || results[..k].iter().any(|(o, s)| o == id && s.update.touched() & clash != 0);
        if clash != 0 && sibling() {
            let msg = format!(
                "instances of map worker `{}` both overwrite {} in one super-step; give the field a reducer \
                 (e.g. `#[reduce(append)]`): the instances of one `each(..)` always share a step",
                node.name,
                names::<S>(clash)
            );
            return Err((*id, NodeError::fatal(msg)));
        }
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
