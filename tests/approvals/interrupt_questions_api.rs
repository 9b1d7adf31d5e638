//! The library's answers to a step that asks several questions: `resume_answering` answers
//! one question by its id (kept until the last one arrives), a bare `resume_with` is refused
//! with a typed error, and one value for every question is given only with
//! `resume_with_all_alike`, for questions that ask the very same thing.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use agentflow::RunError;
use agentflow::approval::{AnswerError, ApprovalDesk, Approver, RoleAuthorizer};
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use serde_json::json;

use crate::support::questions;
use questions::*;

/// Answered one at a time by the app, the first in one process and the second in another: the
/// first answer is kept durably and nothing runs until the second; each node gets its own.
#[tokio::test]
async fn resume_answering_answers_one_question_and_goes_on_with_the_last() {
    let store = store();
    let ran = Ran::default();
    let app = two_questions::graph().app().store(Arc::clone(&store));
    let run = app.runner(&ran).thread("c").run(Support::default()).await.unwrap();
    let asked = questions(&run.outcome);
    let (refund, delete) = (question_of(&asked, "refund", None), question_of(&asked, "delete", None));

    let err = app.runner(&ran).thread("c").resume_with(true).await.unwrap_err();
    let RunError::SeveralQuestions { thread, questions: ids } = &err else { panic!("{err}") };
    assert_eq!(thread, "c");
    assert_eq!(ids, &[refund.question_id(), delete.question_id()]);

    let run = app.runner(&ran).thread("c").owner("maria").resume_answering(&refund.question_id(), true).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending, &vec![delete.clone()], "only the unanswered question waits");
    assert_eq!(ran.asks.load(Ordering::SeqCst), 2, "nothing ran before the last answer");
    assert_eq!(store.thread("c").unwrap().unwrap().status, ThreadStatus::Interrupted);
    assert_eq!(app.pending("c").unwrap(), vec![delete.clone()]);
    // The answer is in the audit log, by who gave it.
    let desk = ApprovalDesk::for_store(Arc::clone(&store), RoleAuthorizer::new());
    let (_, waiting) = desk.waiting_questions("c").unwrap();
    let kept = waiting.iter().find(|(p, _)| p.node == "refund").and_then(|(_, a)| a.clone()).unwrap();
    assert_eq!((kept.by.as_str(), &kept.value), ("maria", &json!(true)));
    // Answering it again is refused.
    let again = app.runner(&ran).thread("c").resume_answering(&refund.question_id(), false).await.unwrap_err();
    assert!(matches!(&again, RunError::Answer(e) if matches!(**e, AnswerError::AlreadyAnswered { .. })), "{again}");

    // Another process: a fresh app on the same store.
    let other = two_questions::graph().app().store(Arc::clone(&store));
    let done = other.runner(&ran).thread("c").resume_answering(&delete.question_id(), false).await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!((done.state.refunded, done.state.deleted), (Some(true), Some(false)));

    // A question the thread does not ask (any more) is refused.
    let gone = other.runner(&ran).thread("c").resume_answering(&delete.question_id(), true).await.unwrap_err();
    assert!(matches!(&gone, RunError::Answer(e) if matches!(**e, AnswerError::NotWaiting { .. })), "{gone}");
}

/// Map instances asking the very same thing: a bare value is refused all the same; one value
/// for all is given when the caller says so.
#[tokio::test]
async fn one_value_for_instances_asking_the_same_is_given_only_when_asked_for() {
    let store = store();
    let app = map_questions::graph().app().store(Arc::clone(&store));
    let ran = Ran::default();
    let input = Docs { names: vec!["a".into(), "b".into()], same: true, ..Docs::default() };
    let run = app.runner(&ran).thread("m").run(input).await.unwrap();
    let asked = questions(&run.outcome);
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0].payload, asked[1].payload);

    let err = app.runner(&ran).thread("m").resume_with("yes").await.unwrap_err();
    assert!(matches!(err, RunError::SeveralQuestions { ref questions, .. } if questions.len() == 2), "{err}");
    let done = app.runner(&ran).thread("m").resume_with_all_alike("yes").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    let mut verdicts = done.state.verdicts.clone();
    verdicts.sort();
    assert_eq!(verdicts, ["a=yes", "b=yes"]);
}

/// Answering alike is refused for questions that ask different things (the library and the
/// desk alike); nothing runs and nothing is recorded.
#[tokio::test]
async fn answering_alike_is_refused_for_different_questions() {
    let store = store();
    let app = two_questions::graph().app().store(Arc::clone(&store));
    let ran = Ran::default();
    app.runner(&ran).thread("c").run(Support::default()).await.unwrap();
    let err = app.runner(&ran).thread("c").resume_with_all_alike(true).await.unwrap_err();
    assert!(matches!(err, RunError::QuestionsDiffer { ref questions, .. } if questions.len() == 2), "{err}");

    let desk = ApprovalDesk::for_store(Arc::clone(&store), RoleAuthorizer::new());
    let (seq, _) = desk.waiting_interrupt("c").unwrap();
    let who = Approver::new("maria", ["reviewer"]);
    let err = desk.answer_all_alike("c", seq, json!(true), &who).unwrap_err();
    assert!(matches!(err, AnswerError::QuestionsDiffer { .. }), "{err}");
    let err = desk.answer_interrupt("c", seq, json!(true), &who).unwrap_err();
    assert!(matches!(err, AnswerError::SeveralQuestions { ref questions, .. } if questions.len() == 2), "{err}");
    assert_eq!(ran.asks.load(Ordering::SeqCst), 2);
    assert_eq!(app.pending("c").unwrap().len(), 2);
}

/// The desk answers map instances asking the same thing alike when told to.
#[tokio::test]
async fn the_desk_answers_alike_when_told_to() {
    let store = store();
    let app = map_questions::graph().app().store(Arc::clone(&store));
    let ran = Ran::default();
    let input = Docs { names: vec!["a".into(), "b".into()], same: true, ..Docs::default() };
    app.runner(&ran).thread("m").run(input).await.unwrap();
    let desk = ApprovalDesk::for_store(Arc::clone(&store), RoleAuthorizer::new());
    let (seq, _) = desk.waiting_interrupt("m").unwrap();
    let answers = desk.answer_all_alike("m", seq, json!("no"), &Approver::new("maria", ["reviewer"])).unwrap();
    assert_eq!(answers.len(), 2);
    let done = app.runner(&ran).thread("m").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    let mut verdicts = done.state.verdicts.clone();
    verdicts.sort();
    assert_eq!(verdicts, ["a=no", "b=no"]);
}
