//! Tenants: a thread's tenant is fixed when it is created and taken by its subgraph children
//! and kept by forks; an actor sees, reads, decides and resumes only the threads of the tenants
//! it acts for, and a thread of another tenant looks exactly like a missing one.

use std::sync::Arc;

use agentflow::access::{AccessError, Actor, Operation, RoleAccess};
use agentflow::approval::{AnswerError, ApprovalStatus, DecisionError, RoleAuthorizer};
use agentflow::persist::ResumeError;
use agentflow::persist::{HistoryError, ThreadRecord};
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{RedbStore, RunError, Store};

use crate::support::refund_subgraph::{Case, Counts, support};

const OWNER: &str = "agent";

fn acme() -> Actor {
    Actor::new("alice", ["refunds"]).for_tenants(["acme"])
}

fn globex() -> Actor {
    Actor::new("gus", ["refunds"]).for_tenants(["globex"])
}

/// The approval a paused run waits for.
fn waiting_for(run: &agentflow::Run<Case>) -> String {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not waiting: {:?}", run.outcome) };
    pending[0].payload["approval"].as_str().expect("an approval id").to_string()
}

/// A parent in acme paused on its child's refund approval, a thread of globex and one of no
/// tenant, in one store.
async fn three_threads() -> (Arc<dyn Store>, agentflow::App<Case, Counts>, String) {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = support::graph().app().store(Arc::clone(&store));
    let counts = Counts::default();
    let case = Case { amount: 30, outcome: None };
    let run = app.runner(&counts).thread("a-1").owner(OWNER).tenant("acme").run(case.clone()).await.unwrap();
    let approval = waiting_for(&run);
    app.runner(&counts).thread("g-1").owner(OWNER).tenant("globex").run(case.clone()).await.unwrap();
    app.runner(&counts).thread("n-1").owner(OWNER).run(case).await.unwrap();
    (store, app, approval)
}

fn ids(threads: &[ThreadRecord]) -> Vec<&str> {
    threads.iter().map(|t| t.id.as_str()).collect()
}

#[tokio::test]
async fn a_subgraph_child_belongs_to_its_parents_tenant() {
    let (store, _app, approval) = three_threads().await;
    let record = store.approval(&approval).unwrap().unwrap();
    let child = store.thread(&record.thread).unwrap().unwrap();
    assert_eq!(child.parent.as_deref(), Some("a-1"), "the approval waits in the child: {child:?}");
    assert_eq!(child.tenant.as_deref(), Some("acme"));
    assert_eq!(store.thread("a-1").unwrap().unwrap().tenant.as_deref(), Some("acme"));
    assert_eq!(store.thread("n-1").unwrap().unwrap().tenant, None);
}

#[tokio::test]
async fn a_listing_shows_only_the_threads_of_the_actors_tenants() {
    let (_store, app, _) = three_threads().await;
    let all = app.list_threads().unwrap();
    assert_eq!(all.len(), 6, "three threads and their three children: {:?}", ids(&all));
    let mine = app.acting_as(acme()).list_threads().unwrap();
    assert!(mine.iter().all(|t| t.tenant.as_deref() == Some("acme")), "{:?}", ids(&mine));
    assert_eq!(mine.len(), 2, "a-1 and its child: {:?}", ids(&mine));
    let none = app.acting_as(Actor::new("nobody", ["refunds"]).for_tenants(Vec::<String>::new())).list_threads();
    assert!(none.unwrap().is_empty(), "an actor of no tenant sees no thread, not even those of no tenant");
}

#[tokio::test]
async fn reading_a_thread_of_another_tenant_reads_like_a_missing_thread() {
    let (_store, app, _) = three_threads().await;
    let gus = app.acting_as(globex());
    // Their own thread reads.
    assert!(gus.state("g-1").unwrap().is_some());
    assert!(!gus.history("g-1").unwrap().is_empty());
    // acme's, and the one of no tenant, read exactly as a thread that is not there.
    for thread in ["a-1", "n-1", "missing"] {
        assert!(gus.thread(thread).unwrap().is_none(), "{thread}");
        assert!(gus.state(thread).unwrap().is_none(), "{thread}");
        assert!(gus.state_at(thread, 0).unwrap().is_none(), "{thread}");
        assert!(gus.history(thread).unwrap().is_empty(), "{thread}");
        assert!(gus.audit_log(thread).unwrap().is_empty(), "{thread}");
        let err = gus.pending(thread).unwrap_err();
        assert!(matches!(&err, HistoryError::UnknownThread { thread: t } if t == thread), "{err}");
        assert_eq!(err.to_string(), format!("no thread `{thread}` in the store"));
        let err = gus.fork(thread, 0, globex()).unwrap_err();
        assert!(matches!(err, HistoryError::UnknownThread { .. }), "{err}");
    }
    // The thread of acme is unchanged by the attempts.
    assert_eq!(app.history("a-1").unwrap().len(), app.history("a-1").unwrap().len());
}

#[tokio::test]
async fn deciding_or_answering_for_another_tenant_is_refused_as_not_found() {
    let (_store, app, approval) = three_threads().await;
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "refunds")).unwrap();
    // Gus holds the role, but not the tenant: the approval is not there for him.
    let err = desk.approve(&approval, &globex()).unwrap_err();
    assert!(matches!(&err, DecisionError::NotFound { id } if *id == approval), "{err}");
    assert_eq!(desk.get(&approval).unwrap().unwrap().status, ApprovalStatus::Pending);
    let theirs = desk.pending_for(&globex()).unwrap();
    assert!(theirs.iter().all(|r| !r.thread.starts_with("a-1")), "{theirs:?}");
    assert!(desk.pending_for(&acme()).unwrap().iter().any(|r| r.id == approval));
    // An answer to a thread of another tenant: not found.
    let err = desk.answer_interrupt("a-1", 1, serde_json::json!(true), &globex()).unwrap_err();
    assert!(matches!(&err, AnswerError::NotFound { thread } if thread == "a-1"), "{err}");
    // Alice, of acme, decides; the run goes on and both threads stay acme's.
    assert_eq!(desk.approve(&approval, &acme()).unwrap().status, ApprovalStatus::Approved);
    let counts = Counts::default();
    let done = app.acting_as(acme()).runner(&counts).thread("a-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert!(
        app.list_threads()
            .unwrap()
            .iter()
            .filter(|t| t.id.starts_with("a-1"))
            .all(|t| t.tenant.as_deref() == Some("acme"))
    );
}

#[tokio::test]
async fn a_fork_keeps_the_threads_tenant_and_its_new_child_takes_it() {
    let (store, app, approval) = three_threads().await;
    let alice = app.acting_as(acme());
    alice.fork("a-1", 0, acme()).unwrap();
    assert_eq!(store.thread("a-1").unwrap().unwrap().tenant.as_deref(), Some("acme"));
    // The branch runs its child anew: the new approval's thread is acme's too.
    let counts = Counts::default();
    let run = alice.runner(&counts).thread("a-1").resume().await.unwrap();
    let fresh = waiting_for(&run);
    assert_ne!(fresh, approval);
    let child = store.approval(&fresh).unwrap().unwrap().thread;
    assert_eq!(store.thread(&child).unwrap().unwrap().tenant.as_deref(), Some("acme"));
}

#[tokio::test]
async fn a_run_may_start_or_resume_only_threads_of_its_actors_tenants() {
    let (store, app, _) = three_threads().await;
    let counts = Counts::default();
    let case = Case { amount: 1, outcome: None };
    let alice = app.acting_as(acme());
    // Of another tenant, or of none: refused before anything is written.
    let err = alice.runner(&counts).thread("x-1").owner(OWNER).tenant("globex").run(case.clone()).await.unwrap_err();
    assert!(
        matches!(&err, RunError::Access(e) if matches!(**e, AccessError::Denied { operation: Operation::Start, .. })),
        "{err}"
    );
    let err = alice.runner(&counts).thread("x-2").owner(OWNER).run(case).await.unwrap_err();
    assert!(matches!(err, RunError::Access(_)), "{err}");
    assert!(store.thread("x-1").unwrap().is_none() && store.thread("x-2").unwrap().is_none());
    // Resuming a thread of another tenant: no such thread.
    let err = alice.runner(&counts).thread("g-1").resume().await.unwrap_err();
    assert!(matches!(err, RunError::Resume(ResumeError::UnknownThread { .. })), "{err}");
}

#[tokio::test]
async fn roles_are_checked_after_tenants() {
    let (_store, app, _) = three_threads().await;
    let app = app.access(RoleAccess::new().allow(Operation::ReadState, "viewer"));
    let vic = app.acting_as(Actor::new("vic", ["viewer"]).for_tenants(["acme"]));
    assert!(vic.state("a-1").unwrap().is_some());
    // A role the policy does not give: refused, naming what is missing.
    let err = vic.history("a-1").unwrap_err();
    assert!(
        matches!(&err, HistoryError::Access(AccessError::Denied { operation: Operation::ReadHistory, .. })),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "`vic` may not read a thread's history: the access policy gives `read_history` to no role (add a role for \
         it to the policy)"
    );
    // Of another tenant: not found before the policy is asked (no refusal reveals it).
    assert!(vic.history("g-1").unwrap().is_empty());
    assert!(vic.state("g-1").unwrap().is_none());
}

// ------------------------------------------------ what a review of the checks found

/// Giving a value is answering: an actor of another tenant (or one the policy does not let
/// answer) records nothing, and the thread waits as before.
#[tokio::test]
async fn a_value_given_for_another_tenants_question_records_nothing() {
    use crate::support::questions::{Ran, Support, two_questions};
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = two_questions::graph().app().store(Arc::clone(&store));
    let ran = Ran::default();
    let run = app.runner(&ran).thread("q-1").tenant("acme").run(Support::default()).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    let question = pending[0].question_id();
    let audit_before = store.list_audit("q-1").unwrap().len();
    let gus = app.acting_as(globex());
    let err = gus.runner(&ran).thread("q-1").resume_answering(&question, true).await.unwrap_err();
    assert!(matches!(err, RunError::Resume(ResumeError::UnknownThread { .. })), "{err}");
    let err = gus.runner(&ran).thread("q-1").resume_with(true).await.unwrap_err();
    assert!(matches!(err, RunError::Resume(ResumeError::UnknownThread { .. })), "{err}");
    // Of the tenant, allowed to resume but not to answer: refused before anything is written.
    let policy = RoleAccess::new().allow(Operation::Resume, "refunds");
    let alice = app.access(policy).acting_as(acme());
    let err = alice.runner(&ran).thread("q-1").resume_answering(&question, true).await.unwrap_err();
    assert!(
        matches!(&err, RunError::Access(e) if matches!(**e, AccessError::Denied { operation: Operation::Answer, .. })),
        "{err}"
    );
    assert_eq!(store.list_audit("q-1").unwrap().len(), audit_before, "an answer was recorded");
    assert_eq!(store.thread("q-1").unwrap().unwrap().status, agentflow::persist::ThreadStatus::Interrupted);
}

/// An actor a call names acts only for the tenants of the app it is named to: a bare name to an
/// app acting for globex cannot touch acme's thread, nor decide or read its approvals.
#[tokio::test]
async fn an_actor_named_in_a_call_acts_only_within_the_apps_tenants() {
    let (store, app, approval) = three_threads().await;
    let before = store.list_checkpoints("a-1").unwrap().len();
    let gus = app.acting_as(globex());
    let err = gus.update_state("a-1", Case::update().amount(1), "eve").unwrap_err();
    assert!(matches!(err, HistoryError::UnknownThread { .. }), "{err}");
    let err = gus.fork("a-1", 0, Actor::new("eve", ["refunds"])).unwrap_err();
    assert!(matches!(err, HistoryError::UnknownThread { .. }), "{err}");
    assert_eq!(store.list_checkpoints("a-1").unwrap().len(), before);
    // Widening by acting as someone else does not work either.
    assert!(gus.acting_as("eve").state("a-1").unwrap().is_none());

    // The desk of that app reads and decides for globex only.
    let desk = gus.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "refunds")).unwrap();
    assert!(desk.get(&approval).unwrap().is_none());
    assert!(desk.pending().unwrap().iter().all(|r| !r.thread.starts_with("a-1")));
    assert!(desk.for_thread(&store.approval(&approval).unwrap().unwrap().thread).unwrap().is_empty());
    let err = desk.approve(&approval, &Actor::new("eve", ["refunds"])).unwrap_err();
    assert!(matches!(err, DecisionError::NotFound { .. }), "{err}");
    // An edit with arguments that do not fit says nothing of the tool behind the id either.
    let err = desk
        .edit_checked(&approval, &Actor::new("eve", ["refunds"]), serde_json::json!({}), |_, _| Err("bad".to_string()));
    assert!(matches!(err, Err(DecisionError::NotFound { .. })), "{err:?}");
    assert_eq!(store.approval(&approval).unwrap().unwrap().status, ApprovalStatus::Pending);
}

/// Waking and compacting a thread of another tenant read as for a missing thread.
#[tokio::test]
async fn waking_or_compacting_another_tenants_thread_reads_like_a_missing_thread() {
    let (_store, app, _) = three_threads().await;
    let gus = app.acting_as(globex());
    let counts = Counts::default();
    let foreign = gus.wake("a-1", &counts).await.unwrap_err().to_string();
    let missing = gus.wake("nope", &counts).await.unwrap_err().to_string();
    assert_eq!(foreign.replace("a-1", "X"), missing.replace("nope", "X"));
    let foreign = gus.compact("a-1", 1).unwrap_err().to_string();
    let missing = gus.compact("nope", 1).unwrap_err().to_string();
    assert_eq!(foreign.replace("a-1", "X"), missing.replace("nope", "X"));
}

/// A thread planted where a parent keeps its child, with another tenant than the parent's, is
/// not taken for the child: the parent's step fails instead of running or reading it.
#[tokio::test]
async fn a_child_of_another_tenant_is_not_taken_for_the_parents_child() {
    // Where `a-1` keeps its child: learnt from a run in a scratch store.
    let scratch: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let counts = Counts::default();
    let case = Case { amount: 30, outcome: None };
    let app = support::graph().app().store(Arc::clone(&scratch));
    app.runner(&counts).thread("a-1").owner(OWNER).tenant("acme").run(case.clone()).await.unwrap();
    let child = scratch.child_threads("a-1").unwrap().items.remove(0);
    let mut planted = scratch.dump_thread(&child.id).unwrap().unwrap();
    planted.thread.tenant = Some("globex".to_string());

    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    store.restore_thread(planted).unwrap();
    // The planted thread comes with the approval it waited on in the scratch store.
    let planted_approvals = store.list_pending_approvals().unwrap();
    let app = support::graph().app().store(Arc::clone(&store));
    let run = app.runner(&counts).thread("a-1").owner(OWNER).tenant("acme").run(case).await.unwrap();
    let Outcome::Failed { error, .. } = &run.outcome else { panic!("the planted child was taken: {:?}", run.outcome) };
    assert!(error.to_string().contains("belongs to tenant `globex`"), "{error}");
    assert_eq!(store.list_pending_approvals().unwrap(), planted_approvals, "the planted child ran");
    assert_eq!(store.thread(&child.id).unwrap().unwrap().tenant.as_deref(), Some("globex"));
}
