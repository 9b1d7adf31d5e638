//! Interrupts on the inbox (`agentflow serve` as a subprocess, as in `serve.rs`): what each
//! asks, one answer form per question (a map step's instances, a subgraph's question under its
//! parent), answers refused or recorded, and the app's resume continuing with the recorded one.
//! The store is read, and the app resumes, once the server is stopped (it may hold the redb file
//! while it runs); the inbox goes on on a server started again.

use crate::inbox_common;

use std::path::Path;

use inbox_common::http::*;
use inbox_common::*;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn the_inbox_lists_interrupts_with_what_they_ask() {
    let dir = temp_dir("interrupts");
    let store = filled_redb(&dir).await;
    add_question(open_redb(&store)).await;
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let alice = login(&serve.base, "alice-token").await;
    let (status, inbox) = get(&serve.base, Some(&alice), "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(inbox.contains("Inbox: 1 approval, 1 interrupt"), "{inbox}");
    let section = &inbox[inbox.find("id=\"interrupts\"").expect("an interrupts section")..];
    assert!(section.contains("t-question") && section.contains("<code>ask</code>"), "{section}");
    // Shown pretty-printed.
    assert!(section.contains("&quot;question&quot;: &quot;ship it?&quot;"), "{section}");
}

/// Two instances of a map worker wait in one step, each asking about its own draft: the page
/// names each instance with what it asks, under one card with one answer form per question. An
/// answer to one is recorded for that question alone: the card shows it answered and still
/// offers the other, the app's resume does not go on yet, and once the second is answered each
/// instance gets its own answer.
#[tokio::test]
async fn each_question_of_a_map_step_has_its_own_answer_form_and_answer() {
    let dir = temp_dir("instances");
    let store = filled_redb(&dir).await;
    add_two_instance_questions(open_redb(&store)).await;
    let seq = with_redb(&store, |s| s.latest_checkpoint("t-reviews").unwrap().unwrap().seq.to_string());
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let alice = login(&serve.base, "alice-token").await;
    let (status, inbox) = get(&serve.base, Some(&alice), "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(inbox.contains("Inbox: 1 approval, 2 interrupts"), "{inbox}");
    let section = &inbox[inbox.find("id=\"interrupts\"").expect("an interrupts section")..];
    assert_eq!(section.matches("id=\"interrupt-t-reviews\"").count(), 1, "{section}");
    assert_eq!(section.matches("action=\"/threads/t-reviews/answer\"").count(), 2, "{section}");
    let mut forms = Vec::new();
    for (instance, title) in [(0, "intro"), (1, "outro")] {
        let asked = format!("<code>review</code> (instance {instance})");
        let at = section.find(&asked).unwrap_or_else(|| panic!("instance {instance} is named: {section}"));
        assert!(section[at..].contains(&format!("&quot;review&quot;: &quot;{title}&quot;")), "{section}");
        // The form after what the instance asks is its own.
        forms.push(form_question(&section[at..]));
        assert!(section.contains(&format!("id=\"answer-value-t-reviews-{instance}\"")), "{section}");
    }
    assert_ne!(forms[0], forms[1]);

    let path = "/threads/t-reviews/answer";
    let answer = |question: String, value: &'static str| {
        let (base, alice, seq) = (serve.base.clone(), &alice, seq.clone());
        async move {
            post(&base, Some(alice), path, &[("checkpoint", &seq), ("question", &question), ("value", value)]).await
        }
    };
    let (status, to) = answer(forms[1].clone(), "\"cut it\"").await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{to}");
    let (_, inbox) = get(&serve.base, Some(&alice), "/").await;
    let section = &inbox[inbox.find("id=\"interrupt-t-reviews\"").expect("the card")..];
    assert_eq!(section.matches("action=\"/threads/t-reviews/answer\"").count(), 1, "{section}");
    assert!(section.contains("Answered by <strong>alice</strong>"), "{section}");
    assert_eq!(form_question(section), forms[0], "the unanswered question is still offered");
    // One question of two answered: the run does not go on.
    let app = || reviewers::graph().app().store(open_redb(&store));
    let stopped = serve.stop();
    let early = app().runner(&()).thread("t-reviews").resume().await;
    assert!(matches!(early, Err(agentflow::RunError::ValueRequired { .. })), "{:?}", early.map(|r| r.outcome));
    let serve = stopped.start();
    let alice = login(&serve.base, "alice-token").await;
    let (status, to) =
        post(&serve.base, Some(&alice), path, &[("checkpoint", &seq), ("question", &forms[0]), ("value", "\"fine\"")])
            .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{to}");
    serve.stop();
    let done = app().runner(&()).thread("t-reviews").resume().await.unwrap();
    assert_eq!(done.outcome, agentflow::Outcome::Completed);
    let mut verdicts = done.state.verdicts.clone();
    verdicts.sort();
    assert_eq!(verdicts, ["intro: fine", "outro: cut it"]);
}

/// After a fork of its parent, a subgraph run's question belongs to the abandoned branch: no
/// run would read an answer to it. The desk refuses one (`ParentMovedOn`, nothing recorded),
/// and the inbox no longer offers the question (it offered it, and took the answer, before).
#[tokio::test]
async fn after_a_fork_of_its_parent_a_subgraphs_question_is_neither_offered_nor_answered() {
    use agentflow::approval::{AnswerError, Approver, RoleAuthorizer};

    let dir = temp_dir("moved-on");
    let store = filled_redb(&dir).await;
    add_delegated_question(open_redb(&store)).await;
    let child = with_redb(&store, |s| {
        let ids: Vec<String> = s.list_threads().unwrap().into_iter().map(|t| t.id).collect();
        ids.into_iter().find(|id| id.starts_with("t-parent/")).expect("the subgraph's thread")
    });
    {
        let app = delegating::graph().app().store(open_redb(&store));
        let first = app.history("t-parent").unwrap().first().expect("a checkpoint").seq;
        app.fork("t-parent", first, "ops").unwrap();
        let desk = app.approvals(RoleAuthorizer::new()).unwrap();
        let (seq, _) = desk.waiting_interrupt(&child).expect("the child still waits in its interrupt");
        let refused = desk.answer_interrupt(&child, seq, json!("merge"), &Approver::new("alice", ["x"])).unwrap_err();
        assert!(matches!(&refused, AnswerError::ParentMovedOn { parent, .. } if parent == "t-parent"), "{refused}");
        assert_eq!(desk.recorded_answer(&child).unwrap(), None, "nothing recorded");
    }
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let alice = login(&serve.base, "alice-token").await;
    let (_, inbox) = get(&serve.base, Some(&alice), "/").await;
    assert!(!inbox.contains("merge it?"), "{inbox}");
    assert!(!inbox.contains(&format!("action=\"/threads/{}/answer\"", segment(&child))), "{inbox}");
}

#[tokio::test]
async fn an_interrupt_answered_on_the_page_is_what_the_apps_resume_continues_with() {
    let dir = temp_dir("answer");
    let store = filled_redb(&dir).await;
    add_question(open_redb(&store)).await;
    let seq = with_redb(&store, |s| s.latest_checkpoint("t-question").unwrap().unwrap().seq).to_string();
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let alice = login(&serve.base, "alice-token").await;
    let bob = login(&serve.base, "bob-token").await;
    let (_, inbox) = get(&serve.base, Some(&alice), "/").await;
    let section = &inbox[inbox.find("id=\"interrupts\"").expect("an interrupts section")..];
    assert!(section.contains("action=\"/threads/t-question/answer\""), "{section}");
    assert!(section.contains(&format!("name=\"checkpoint\" value=\"{seq}\"")), "{section}");
    let question = form_question(section);

    // Refused (what they recorded is read at the end): anonymous, no CSRF token, not JSON, a
    // checkpoint the thread is not at, a question it does not ask (one read before it asked
    // another), none.
    let path = "/threads/t-question/answer";
    let (status, _) =
        post(&serve.base, None, path, &[("checkpoint", &seq), ("question", &question), ("value", "\"yes\"")]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let forged = [("checkpoint", seq.as_str()), ("value", "\"yes\""), ("csrf", "forged")];
    let (status, _) = post(&serve.base, Some(&alice), path, &forged).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) =
        post(&serve.base, Some(&alice), path, &[("checkpoint", &seq), ("question", &question), ("value", "yes")]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) =
        post(&serve.base, Some(&alice), path, &[("checkpoint", "999"), ("question", &question), ("value", "\"yes\"")])
            .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("no longer waits at checkpoint 999"), "{body}");
    let other = [("checkpoint", seq.as_str()), ("question", "another-question"), ("value", "\"yes\"")];
    let (status, body) = post(&serve.base, Some(&alice), path, &other).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("asks another question"), "{body}");
    let (status, _) = post(&serve.base, Some(&alice), path, &[("checkpoint", &seq), ("value", "\"yes\"")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Bob answers first; Alice's answer, sent from a page that still showed the form, is refused.
    let (status, to) =
        post(&serve.base, Some(&bob), path, &[("checkpoint", &seq), ("question", &question), ("value", "\"ship it\"")])
            .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{to}");
    let (status, body) =
        post(&serve.base, Some(&alice), path, &[("checkpoint", &seq), ("question", &question), ("value", "\"no\"")])
            .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("already answered") && body.contains("bob"), "{body}");
    let (_, inbox) = get(&serve.base, Some(&alice), "/").await;
    assert!(inbox.contains("Answered by <strong>bob</strong>"), "{inbox}");

    // One answer recorded: Bob's; none of the refused ones, nor Alice's late one.
    serve.stop();
    let answers = with_redb(&store, |s| {
        s.list_audit("t-question").unwrap().into_iter().filter(|e| e.kind == "interrupt.answered").collect::<Vec<_>>()
    });
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!((answers[0].actor.as_str(), &answers[0].detail["value"]), ("bob", &json!("ship it")), "{answers:?}");

    // The app's plain resume, in this process, continues with Bob's answer.
    let done = questions::graph()
        .app()
        .store(open_redb(&store))
        .runner(&())
        .thread("t-question")
        .resume()
        .await
        .expect("resume with the recorded answer");
    assert_eq!(done.outcome, agentflow::Outcome::Completed);
    assert_eq!(done.state.answer.as_deref(), Some("ship it"));
}

#[tokio::test]
async fn an_answer_of_the_wrong_shape_fails_the_resume_once_and_the_page_asks_again() {
    let dir = temp_dir("spent");
    let store = filled_redb(&dir).await;
    add_question(open_redb(&store)).await;
    let seq = with_redb(&store, |s| s.latest_checkpoint("t-question").unwrap().unwrap().seq).to_string();
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let alice = login(&serve.base, "alice-token").await;
    let path = "/threads/t-question/answer";
    // The node expects a string; a number is valid JSON, so it is recorded.
    let (status, _) = post(
        &serve.base,
        Some(&alice),
        path,
        &[
            ("checkpoint", &seq),
            ("question", &form_question(&get(&serve.base, Some(&alice), "/").await.1)),
            ("value", "3"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let resume = |store: &Path| {
        let app = questions::graph().app().store(open_redb(store));
        async move { app.runner(&()).thread("t-question").resume().await }
    };
    let stopped = serve.stop();
    let failed = resume(&store).await.expect("the run ends failed");
    assert!(matches!(failed.outcome, agentflow::Outcome::Failed { .. }), "{:?}", failed.outcome);

    // The answer is spent: the page shows the form again, and a new answer is taken.
    let serve = stopped.start();
    let alice = login(&serve.base, "alice-token").await;
    let (_, inbox) = get(&serve.base, Some(&alice), "/").await;
    let section = &inbox[inbox.find("id=\"interrupts\"").expect("the interrupt is listed again")..];
    assert!(section.contains(&format!("action=\"{path}\"")) && !section.contains("Answered by"), "{section}");
    let (status, body) = post(
        &serve.base,
        Some(&alice),
        path,
        &[("checkpoint", &seq), ("question", &form_question(section)), ("value", "\"ship it\"")],
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    serve.stop();
    let done = resume(&store).await.expect("resume with the new answer");
    assert_eq!(done.outcome, agentflow::Outcome::Completed);
    assert_eq!(done.state.answer.as_deref(), Some("ship it"));
}

#[tokio::test]
async fn a_question_asked_in_a_subgraph_is_listed_once_as_its_parents() {
    let dir = temp_dir("delegated");
    let store = filled_redb(&dir).await;
    add_delegated_question(open_redb(&store)).await;
    let child = with_redb(&store, |s| {
        let ids: Vec<String> = s.list_threads().unwrap().into_iter().map(|t| t.id).collect();
        ids.into_iter().find(|id| id.starts_with("t-parent/")).expect("the subgraph's thread")
    });
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let alice = login(&serve.base, "alice-token").await;
    let (_, inbox) = get(&serve.base, Some(&alice), "/").await;
    let section = &inbox[inbox.find("id=\"interrupts\"").expect("an interrupts section")..];
    // The parent's form only: the subgraph's thread waits too, but is answered through it.
    assert_eq!(section.matches("/answer\"").count(), 1, "{section}");
    assert!(section.contains("action=\"/threads/t-parent/answer\""), "{section}");
    assert!(!section.contains(&format!("action=\"/threads/{child}/answer\"")), "{section}");
    assert!(section.contains("merge it?"), "{section}");
}
