//! The reserved keys: the names under which a thread's checkpoints keep the runtime's own
//! records (its budget, what it waits for, the map payloads of the next step, ...) beside the
//! nodes' writes, and the separator that sets the effect journal's markers apart from effects.

/// The pending-write key under which a paused step keeps its interrupts.
pub(crate) const INTERRUPTS: &str = "__interrupts__";
/// The pending-write key under which a paused step keeps what its nodes' own
/// `interrupt` returned before the step paused for something else.
pub(crate) const ANSWERS: &str = "__answers__";
/// The pending-write key (and checkpoint `extra` key) of the thread's budget.
pub(crate) const BUDGET: &str = "__budget__";
/// The checkpoint `extra` key of the payloads sent to the next step's map
/// workers: `[[worker, [payload, ..]], ..]`.
pub(crate) const PAYLOADS: &str = "payloads";
/// The checkpoint `extra` key of checkpoint 0 holding the description of the thread's graph
/// (see [`describe`](super::fingerprint::describe)), to explain a fingerprint change.
pub(crate) const GRAPH: &str = "graph";
/// The checkpoint `extra` key naming the checkpoint whose step a manual
/// update continues: its effects and approvals stay keyed by that seq.
pub(crate) const JOURNAL_SEQ: &str = "journal_seq";
/// The checkpoint `extra` key of a thread's move to a newer version of its graph: `{from, to,
/// started_as}` (see [`graph_migration`](super::graph_migration)).
pub(crate) const MOVED: &str = "migrated";
/// The key, in [`MOVED`], of the names the nodes the thread continues at had when their step's
/// attempt started: `{current name: name then}`.
pub(crate) const STARTED_AS: &str = "started_as";
/// The checkpoint `extra` key of a checkpoint whose parent another version of the graph may
/// have written (a rollback's restart goes back to a checkpoint from before a move): the graph
/// fingerprint and state version it was written under, `{fingerprint, state}`, for a fork to it
/// (see `checkpoint_version`).
pub(crate) const WRITTEN_BY: &str = "written_by";
/// The separator of marker keys; user keys may not contain it, so a marker
/// never collides with an effect's own key.
pub(crate) const MARK: char = '\u{1f}';
