//! `GET /api/approvals`: everything waiting for a person in the threads of the caller's tenants,
//! as `agentflow pending` lists it: the approvals to decide and unknown outcomes to settle, and
//! the questions and breakpoints of paused threads. A question asked inside a subgraph is listed
//! once, as the parent thread's (the thread to answer; its resume hands the answer down).

use std::sync::Arc;

use agentflow_store::ThreadStatus;
use axum::Json;
use axum::extract::State;

use super::bodies::{ApprovalView, InterruptView, PendingView, Waiting};
use super::caller::Caller;
use super::problem::{Problem, blocking};
use super::state::ApiState;
use crate::access::Operation;
use crate::approval::{ApprovalDesk, RoleAuthorizer};
use crate::interrupt::PendingKind;
use crate::server::inspect::waits::waits;

/// `GET /api/approvals`.
pub(crate) async fn list(State(state): State<Arc<ApiState>>, caller: Caller) -> Result<Json<Waiting>, Problem> {
    caller.allow(Operation::List)?;
    let access = caller.access().clone();
    blocking(move || {
        let store = state.store.as_ref();
        let sees = |thread: &str| -> Result<bool, Problem> {
            Ok(access.is_open() || store.thread(thread)?.is_some_and(|t| access.sees(&t)))
        };
        let mut approvals = Vec::new();
        for record in store.scan_pending_approvals()?.items {
            if sees(&record.thread)? {
                approvals.push(ApprovalView::from(&record));
            }
        }
        // Reads only: the desk's checks are the caller's, made above.
        let desk = ApprovalDesk::for_store(Arc::clone(&state.store), RoleAuthorizer::new());
        let mut interrupts = Vec::new();
        for t in store.scan_threads()?.items.into_iter().filter(|t| access.sees(t)) {
            // A failed thread still waits for a value where a node asked (an answer of the wrong
            // shape failed it there).
            let listed: &[PendingKind] = match t.status {
                ThreadStatus::Interrupted => &[PendingKind::Interrupt, PendingKind::Before, PendingKind::After],
                ThreadStatus::Failed => &[PendingKind::Interrupt],
                _ => continue,
            };
            if desk.parent_waiting_on(&t.id)?.is_some() || desk.parent_moved_on(&t.id)?.is_some() {
                continue;
            }
            let (seq, asked) = waits(store, &t.id)?;
            // A question of a step that asks several, answered already while others wait, waits
            // no more.
            let answered: Vec<String> = match desk.waiting_questions(&t.id) {
                Ok((_, asks)) if asks.iter().any(|(_, a)| a.is_none()) => {
                    asks.iter().filter(|(_, a)| a.is_some()).map(|(p, _)| p.question_id()).collect()
                }
                _ => Vec::new(),
            };
            for p in asked {
                if listed.contains(&p.kind)
                    && !(p.kind == PendingKind::Interrupt && answered.contains(&p.question_id()))
                {
                    interrupts.push(InterruptView {
                        thread: t.id.clone(),
                        seq,
                        since: t.updated_at,
                        pending: PendingView::from(&p),
                    });
                }
            }
        }
        Ok(Json(Waiting { approvals, interrupts }))
    })
    .await
}
