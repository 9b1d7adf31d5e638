//! One answer answers one question: when a step asks several (two nodes, map instances, a
//! subgraph child beside a node), each is answered on its own by its question id, the thread
//! goes on once each has its answer, and a bare value is refused.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use agentflow::approval::{ApprovalDesk, Approver, RoleAuthorizer};
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{RunError, Store};
use serde_json::json;

use crate::support::questions;
use questions::*;

fn desk(store: &Arc<dyn Store>) -> ApprovalDesk {
    ApprovalDesk::for_store(Arc::clone(store), RoleAuthorizer::new())
}

fn maria() -> Approver {
    Approver::new("maria", ["reviewer"])
}

/// Two nodes ask two different yes/no questions: one `resume_with(true)` must not answer both.
/// Nothing runs, and the error names both questions.
#[tokio::test]
async fn one_bare_value_does_not_answer_two_different_questions() {
    let store = store();
    let app = two_questions::graph().app().store(Arc::clone(&store));
    let ran = Ran::default();
    let run = app.runner(&ran).thread("c").run(Support::default()).await.unwrap();
    let asked = questions(&run.outcome);
    assert_eq!(asked.len(), 2, "{asked:?}");
    let (refund, delete) = (question_of(&asked, "refund", None), question_of(&asked, "delete", None));
    assert_ne!(refund.question_id(), delete.question_id());
    assert_eq!(ran.asks.load(Ordering::SeqCst), 2);

    let result = app.runner(&ran).thread("c").resume_with(true).await;
    let err = match result {
        Ok(run) => panic!("one value answered both questions: {} with {:?}", run.outcome, run.state),
        Err(e) => e,
    };
    let message = err.to_string();
    for id in [refund.question_id(), delete.question_id()] {
        assert!(message.contains(&id), "the refusal names question {id}: {message}");
    }
    assert!(message.contains("resume_answering"), "the refusal says how to answer: {message}");
    // Nothing ran and nothing moved: the thread still waits on both.
    assert_eq!(ran.asks.load(Ordering::SeqCst), 2);
    assert_eq!(store.thread("c").unwrap().unwrap().status, ThreadStatus::Interrupted);
    assert_eq!(app.pending("c").unwrap().len(), 2);
}

/// Each question answered by its id (from the inbox's desk, one at a time, the first by a
/// process that then goes away): the thread waits until the second answer, lists only the
/// unanswered question meanwhile, then each node gets its own answer.
#[tokio::test]
async fn each_question_answered_by_its_id_gets_its_own_value() {
    let store = store();
    let app = two_questions::graph().app().store(Arc::clone(&store));
    let ran = Ran::default();
    let run = app.runner(&ran).thread("c").run(Support::default()).await.unwrap();
    let asked = questions(&run.outcome);
    let (refund, delete) = (question_of(&asked, "refund", None), question_of(&asked, "delete", None));

    let (seq, _) = desk(&store).waiting_interrupt("c").unwrap();
    let answer = desk(&store).answer_question("c", seq, &refund.question_id(), json!(true), &maria()).unwrap();
    assert_eq!(answer.node, "refund");
    // One of two answered: the thread stays interrupted and lists only what is unanswered.
    assert_eq!(store.thread("c").unwrap().unwrap().status, ThreadStatus::Interrupted);
    assert_eq!(app.pending("c").unwrap(), vec![delete.clone()]);
    let err = app.runner(&ran).thread("c").resume().await.unwrap_err();
    assert!(matches!(err, RunError::ValueRequired { ref node, .. } if node == "delete"), "{err}");
    assert_eq!(ran.asks.load(Ordering::SeqCst), 2, "nothing ran before the last answer");
    // The answered question is not answered twice.
    assert!(desk(&store).answer_question("c", seq, &refund.question_id(), json!(false), &maria()).is_err());

    // A fresh desk and app, as in other processes: the first answer was kept.
    desk(&store).answer_question("c", seq, &delete.question_id(), json!(false), &maria()).unwrap();
    let done = two_questions::graph().app().store(Arc::clone(&store)).runner(&ran).thread("c").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!((done.state.refunded, done.state.deleted), (Some(true), Some(false)));
}

/// An answer that names no question is refused while two questions wait, naming their ids and
/// how to answer them; nothing is recorded.
#[tokio::test]
async fn a_recorded_answer_naming_no_question_is_refused_while_two_wait() {
    let store = store();
    let app = two_questions::graph().app().store(Arc::clone(&store));
    let ran = Ran::default();
    let run = app.runner(&ran).thread("c").run(Support::default()).await.unwrap();
    let asked = questions(&run.outcome);
    let (seq, _) = desk(&store).waiting_interrupt("c").unwrap();
    let err = desk(&store).answer_interrupt("c", seq, json!(true), &maria()).unwrap_err();
    let message = err.to_string();
    for p in &asked {
        assert!(message.contains(&p.question_id()), "the refusal names question {}: {message}", p.question_id());
    }
    assert!(message.contains("--question"), "{message}");
    assert!(store.list_audit("c").unwrap().iter().all(|e| e.kind != agentflow::approval::ANSWER_KIND));
    assert!(app.runner(&ran).thread("c").resume().await.is_err(), "no answer was recorded to continue with");
}

/// Map instances that ask about their own documents: each is answered by its question id, and
/// each instance gets its own answer.
#[tokio::test]
async fn each_map_instance_gets_the_answer_to_its_own_question() {
    let store = store();
    let app = map_questions::graph().app().store(Arc::clone(&store));
    let ran = Ran::default();
    let input = Docs { names: vec!["a".into(), "b".into()], ..Docs::default() };
    let run = app.runner(&ran).thread("m").run(input).await.unwrap();
    let asked = questions(&run.outcome);
    assert_eq!(asked.len(), 2, "{asked:?}");
    let (a, b) = (question_of(&asked, "review", Some(0)), question_of(&asked, "review", Some(1)));
    assert_eq!(a.payload, json!({ "publish": "a" }));

    assert!(app.runner(&ran).thread("m").resume_with("yes").await.is_err(), "one value for two documents");
    let (seq, _) = desk(&store).waiting_interrupt("m").unwrap();
    desk(&store).answer_question("m", seq, &b.question_id(), json!("no"), &maria()).unwrap();
    assert_eq!(app.pending("m").unwrap(), vec![a.clone()]);
    desk(&store).answer_question("m", seq, &a.question_id(), json!("yes"), &maria()).unwrap();
    let done = app.runner(&ran).thread("m").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    let mut verdicts = done.state.verdicts.clone();
    verdicts.sort();
    assert_eq!(verdicts, ["a=yes", "b=no"]);
}

/// A node beside a node whose subgraph child asks: the child's question is the parent's item,
/// answered by its own id, and the answer reaches the child; the node's reaches the node.
#[tokio::test]
async fn a_subgraph_childs_question_is_answered_on_its_own() {
    let store = store();
    let app = with_child::graph().app().store(Arc::clone(&store));
    let ran = Ran::default();
    let run = app.runner(&ran).thread("s").run(Case::default()).await.unwrap();
    let asked = questions(&run.outcome);
    assert_eq!(asked.len(), 2, "{asked:?}");
    let (refund, child) = (question_of(&asked, "refund", None), question_of(&asked, "delegate", None));
    assert_eq!(child.payload["question"], DELETE);

    assert!(app.runner(&ran).thread("s").resume_with("yes").await.is_err(), "one value for two questions");
    let (seq, _) = desk(&store).waiting_interrupt("s").unwrap();
    desk(&store).answer_question("s", seq, &child.question_id(), json!("keep it"), &maria()).unwrap();
    desk(&store).answer_question("s", seq, &refund.question_id(), json!("refund it"), &maria()).unwrap();
    let done = app.runner(&ran).thread("s").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!((done.state.refund.as_str(), done.state.delete.as_str()), ("refund it", "keep it"));
}
