//! A state update of a thread just moved to a newer version of its graph whose state version
//! changed too (no step has run on the new version yet, so the state is still stored as the old
//! version wrote it): the update migrates the state first and writes it whole, so the thread
//! resumes on the new version with the update applied.

use agentflow::RunError;
use agentflow::prelude::*;

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
