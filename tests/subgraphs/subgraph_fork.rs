//! Forking a parent whose node ran a subgraph. `App::fork` promises that the
//! branch runs its steps afresh: effects journaled on the old branch run
//! again, and no approval of the old branch can be used on the new one. A
//! child thread is keyed by where its node ran, so the new branch must not
//! find the old branch's child: neither its final state (stale, computed from
//! the old input) nor its approval (decided for the old call). An update of
//! a parent paused mid-step continues that step, so it keeps its child.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{Outcome, PendingKind};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::support::refund_subgraph;
use refund_subgraph::{Case, Counts, support};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Echo {
    word: String,
    said: String,
}

#[graph(state = Echo, deps = Counts, start = say)]
pub mod echo {
    use super::*;

    #[node(goto = [END])]
    async fn say(s: &Echo, cx: &Ctx<Counts>) -> Step<Echo> {
        cx.deps().looks.fetch_add(1, Ordering::SeqCst);
        goto!(END, Echo::update().said(format!("heard {}", s.word)))
    }
}

#[graph(state = Echo, deps = Counts, start = ask)]
pub mod asker {
    use super::*;

    #[node(goto = [END], subgraphs = [echo])]
    async fn ask(s: &Echo, cx: &Ctx<Counts>) -> Result<Step<Echo>, NodeError> {
        let out = cx.subgraph(echo::graph(), Echo { word: s.word.clone(), said: String::new() }).await?;
        Ok(goto!(END, Echo::update().said(out.said)))
    }
}

use crate::support::stores::store;

#[tokio::test]
async fn a_fork_of_the_parent_does_not_use_the_old_branchs_child_approval() {
    let store = store();
    let app = support::graph().app().store(Arc::clone(&store));
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "approver")).unwrap();
    let counts = Counts::default();
    let run = app.runner(&counts).thread("c").owner("agent").run(Case { amount: 40, outcome: None }).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    let old = pending[0].payload["approval"].as_str().unwrap().to_string();
    // A human approves the refund of 40 ...
    desk.approve(&old, &Approver::new("alice", ["approver"])).unwrap();

    // ... but before the parent resumes, an operator branches it at its input
    // and changes the amount. The new branch must ask again, for 99.
    let first = app.history("c").unwrap().iter().map(|c| c.seq).min().unwrap();
    app.fork("c", first, "ops").unwrap();
    // The old branch's request is withdrawn, so nobody decides it for nothing.
    let withdrawn = store.approval(&old).unwrap().unwrap();
    assert_eq!(withdrawn.status, agentflow::approval::ApprovalStatus::Cancelled);
    app.update_state("c", Case::update().amount(99), "ops").unwrap();
    let run = app.runner(&counts).thread("c").resume().await.unwrap();
    assert_eq!(counts.refunds.load(Ordering::SeqCst), 0, "the old branch's approval ran a refund: {}", run.outcome);
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Approval);
    let new = pending[0].payload["approval"].as_str().unwrap().to_string();
    assert_ne!(new, old);
    let args: Value = serde_json::from_str(&store.approval(&new).unwrap().unwrap().args).unwrap();
    assert_eq!(args, json!({ "amount": 99 }));

    desk.approve(&new, &Approver::new("alice", ["approver"])).unwrap();
    let done = app.runner(&counts).thread("c").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.outcome.unwrap()["result"]["refunded"], 99);
    assert_eq!(counts.refunds.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_fork_of_the_parent_runs_a_completed_child_afresh() {
    let app = asker::graph().app().store(store());
    let counts = Counts::default();
    let run = app.runner(&counts).thread("a").run(Echo { word: "one".into(), said: String::new() }).await.unwrap();
    assert_eq!(run.state.said, "heard one");

    let first = app.history("a").unwrap().iter().map(|c| c.seq).min().unwrap();
    app.fork("a", first, "ops").unwrap();
    app.update_state("a", Echo::update().word("two".to_string()), "ops").unwrap();
    let run = app.runner(&counts).thread("a").resume().await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.said, "heard two", "the new branch got the old branch's child result");
    assert_eq!(counts.looks.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_update_of_a_parent_paused_mid_step_keeps_its_child_and_the_childs_approval() {
    let store = store();
    let app = support::graph().app().store(Arc::clone(&store));
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "approver")).unwrap();
    let counts = Counts::default();
    let run = app.runner(&counts).thread("u").owner("agent").run(Case { amount: 40, outcome: None }).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    let id = pending[0].payload["approval"].as_str().unwrap().to_string();
    // An update continues the paused step (unlike a fork): the step's child,
    // with its approval, is the one that goes on.
    app.update_state("u", Case::update().amount(99), "ops").unwrap();
    desk.approve(&id, &Approver::new("alice", ["approver"])).unwrap();
    let done = app.runner(&counts).thread("u").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.outcome.unwrap()["result"]["refunded"], 40);
    assert_eq!(counts.refunds.load(Ordering::SeqCst), 1);
    assert_eq!(store.list_approvals("u/settle.0.0.payer").unwrap().len(), 1);
}

/// Thread ids may hold a `/`: a fork of `acct` cancels the requests of its own subgraph children,
/// never those of another thread whose id only starts with `acct/`, not even one whose id has a
/// child's shape.
#[tokio::test]
async fn a_fork_leaves_the_approvals_of_a_thread_that_only_shares_its_prefix() {
    let store = store();
    let app = support::graph().app().store(Arc::clone(&store));
    let counts = Counts::default();
    let approval_of = |run: &agentflow::Run<Case>| {
        let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
        pending[0].payload["approval"].as_str().unwrap().to_string()
    };
    let parent = app.runner(&counts).thread("acct").owner("agent").run(Case { amount: 40, outcome: None });
    let own = approval_of(&parent.await.unwrap());
    let other = app.runner(&counts).thread("acct/2").owner("agent").run(Case { amount: 7, outcome: None });
    let others = approval_of(&other.await.unwrap());
    // A thread of its own whose id has the shape of one of `acct`'s children: its request is in
    // its own child, `acct/settle.0.1.payer/settle.0.0.payer`. Neither is `acct`'s.
    let lookalike =
        app.runner(&counts).thread("acct/settle.0.1.payer").owner("bob").run(Case { amount: 9, outcome: None });
    let lookalikes = approval_of(&lookalike.await.unwrap());
    assert_eq!(store.approval(&lookalikes).unwrap().unwrap().thread, "acct/settle.0.1.payer/settle.0.0.payer");

    let first = app.history("acct").unwrap().iter().map(|c| c.seq).min().unwrap();
    app.fork("acct", first, "ops").unwrap();
    let status = |id: &str| store.approval(id).unwrap().unwrap().status;
    assert_eq!(status(&own), agentflow::approval::ApprovalStatus::Cancelled, "the fork's own child's request");
    assert_eq!(status(&others), agentflow::approval::ApprovalStatus::Pending, "another thread's request");
    assert_eq!(status(&lookalikes), agentflow::approval::ApprovalStatus::Pending, "a lookalike's request");
}
