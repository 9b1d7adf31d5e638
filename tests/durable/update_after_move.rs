//! A state update of a thread just moved to a newer version of its graph whose state version
//! changed too (no step has run on the new version yet, so the state is still stored as the old
//! version wrote it): the update migrates the state first and writes it whole, so the thread
//! resumes on the new version with the update applied. A `rollback` follow-up that would go
//! back to before the move fails visibly instead: a restart does not migrate a state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentflow::prelude::*;
use agentflow::{CancellationToken, Multitask, RunError, Worker};

use crate::orders_versions::{Deps, OWNER, migrated_entries, new_app, old_app, order, v2};
use crate::support::stores::store;

#[tokio::test]
async fn an_update_after_the_move_migrates_the_state_first() {
    let store = store();
    let deps = Deps::default();
    old_app(&store).runner(&deps).thread("upd").owner(OWNER).run(order("review", "upd")).await.unwrap();
    let new = new_app(&store);
    // Moved, it waits for the value `human_review` asks.
    let err = new.runner(&deps).thread("upd").resume().await.unwrap_err();
    assert!(matches!(&err, RunError::ValueRequired { node, .. } if node == "human_review"), "{err}");
    assert_eq!(migrated_entries(&new, "upd").len(), 1);
    assert_eq!(store.thread("upd").unwrap().unwrap().schema_version, 1, "no step ran on version 2 yet");

    new.update_state("upd", v2::Order::update().log(vec!["by hand".into()]), "ada").unwrap();
    let record = store.thread("upd").unwrap().unwrap();
    assert_eq!(record.schema_version, 2, "the update wrote the state as version 2 stores it");
    assert_eq!(new.state("upd").unwrap().unwrap().state.amount, 12.5);

    let done = new.runner(&deps).thread("upd").resume_with("ok").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, ["by hand", "reviewed: ok"]);
    assert_eq!(done.state.amount, 12.5, "migrated once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_to_before_a_move_that_changed_the_state_version_fails_saying_so() {
    let store = store();
    let deps = Deps::default();
    old_app(&store).runner(&deps).thread("rb").owner(OWNER).run(order("review", "rb")).await.unwrap();
    let new = new_app(&store);
    let err = new.runner(&deps).thread("rb").resume().await.unwrap_err();
    assert!(matches!(&err, RunError::ValueRequired { .. }), "{err}");
    new.update_state("rb", v2::Order::update().log(vec!["by hand".into()]), "ada").unwrap();
    assert_eq!(store.thread("rb").unwrap().unwrap().schema_version, 2);

    // The run it replaces started on version 1, whose checkpoint holds a version-1 state.
    new.submit_follow_up("rb", &v2::Order::update().log(vec!["again".into()]), Multitask::Rollback, "ada").unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(new.clone(), Arc::new(Deps::default())).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let failed = || store.list_audit("rb").unwrap().into_iter().find(|e| e.kind == "run.follow_up_failed");
    let deadline = Instant::now() + Duration::from_secs(60);
    while failed().is_none() {
        assert!(Instant::now() < deadline, "the rollback neither ran nor failed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    handle.await.unwrap().unwrap();
    let reason = failed().unwrap().detail["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("state version 1") && reason.contains("fork the thread"), "{reason}");
    assert_eq!(store.list_audit("rb").unwrap().iter().filter(|e| e.kind == "thread.rolled_back").count(), 0);
    assert_eq!(new.state("rb").unwrap().unwrap().state.log, ["by hand"], "the thread is left as it was");
}
