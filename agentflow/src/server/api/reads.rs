//! The reads the API's answers are made of, run on a blocking thread: a thread's state (folded
//! with the graph's own types when the server hosts its graph, from the stored description
//! otherwise; personal fields masked for the caller), what it waits for, its queued run.

use agentflow_store::{QueuedRun, ThreadRecord, ThreadStatus};
use serde_json::Value;

use super::bodies::{ApprovalView, PendingView, StateView};
use super::problem::Problem;
use super::state::ApiState;
use crate::access::Access;
use crate::interrupt::{Pending, PendingKind};
use crate::server::inspect::description::description;
use crate::server::inspect::fold;
use crate::server::inspect::personal;
use crate::server::inspect::waits::waits;

/// The surface the API's reads of personal data are audited under.
const SURFACE: &str = "api";

/// Thread `t`'s state at its latest checkpoint, for `access`'s actor (whose access to the
/// thread was checked): personal fields masked unless the actor may see them (then the read is
/// audited), credential fields always.
pub(crate) fn state_view(state: &ApiState, access: &Access, t: &ThreadRecord) -> Result<StateView, Problem> {
    let store = state.store.as_ref();
    let hosted = state.graph_of(&t.graph_fingerprint);
    let description = match description(store, t)? {
        Some(d) => Some(d),
        None => hosted.map(|g| g.description()),
    };
    let pending: Vec<PendingView> = pending_of(state, t)?.iter().map(PendingView::from).collect();
    let Some(cp) = store.latest_checkpoint(&t.id)? else {
        return Ok(StateView {
            thread: t.id.clone(),
            seq: None,
            state: Value::Null,
            next: Vec::new(),
            warnings: Vec::new(),
            pending,
        });
    };
    let (mut value, warnings) = match hosted {
        Some(graph) => {
            let value = graph.state_json(&t.id, cp.seq)?.ok_or_else(|| {
                Problem::not_found(format!(
                    "thread `{}` has no checkpoint {}; it may have been compacted",
                    t.id, cp.seq
                ))
            })?;
            (value, Vec::new())
        }
        None => {
            let fields = fold::fields(description.as_ref());
            let folded = fold::state_at(store, &t.id, cp.seq, fields.as_ref())?;
            (folded.state, folded.warnings)
        }
    };
    personal::show(store, access, SURFACE, &t.id, description.as_ref(), &mut [&mut value])?;
    Ok(StateView {
        thread: t.id.clone(),
        seq: Some(cp.seq),
        state: value,
        next: if t.status.is_finished() { Vec::new() } else { cp.cursor },
        warnings,
        pending,
    })
}

/// What thread `t` waits for before it can go on, as [`App::pending`](crate::App::pending)
/// says it: the items of a paused thread (interrupted or sleeping), the question of a failed
/// thread whose node still waits for a value; of the questions of a step that asks several,
/// those still unanswered.
pub(crate) fn pending_of(state: &ApiState, t: &ThreadRecord) -> Result<Vec<Pending>, Problem> {
    let store = state.store.as_ref();
    let waits = match t.status {
        ThreadStatus::Interrupted | ThreadStatus::Sleeping => waits(store, &t.id)?.1,
        ThreadStatus::Failed => {
            let mut waits = waits(store, &t.id)?.1;
            waits.retain(|p| p.kind == PendingKind::Interrupt);
            waits
        }
        _ => Vec::new(),
    };
    Ok(crate::approval::answer::unanswered(store, &t.id, waits)?)
}

/// The approvals of thread `thread` that wait for a person.
pub(crate) fn approvals_waiting(state: &ApiState, thread: &str) -> Result<Vec<ApprovalView>, Problem> {
    let records = state.store.list_approvals(thread)?;
    Ok(records.iter().filter(|a| a.status.is_waiting()).map(ApprovalView::from).collect())
}

/// Thread `thread`'s run in the run queue, if it has one.
pub(crate) fn queued_run(state: &ApiState, thread: &str) -> Result<Option<QueuedRun>, Problem> {
    Ok(state.store.scan_runs().map_err(Problem::store)?.items.into_iter().find(|r| r.thread == thread))
}
