//! A fork to a checkpoint written before the thread moved to a newer version of its graph: the
//! forked thread takes the older version again (its graph fingerprint and state version), and
//! its next resume moves it through the declared migrations as the first move did (a second
//! `graph.migrated`, the state migration run again). A fork to the move's own checkpoint, or to
//! one after it, resumes on the current version. A move recorded by an earlier build, which did
//! not name the graph the thread had before it, refuses a fork to before it with a typed error.

use std::sync::Arc;

use agentflow::Store;
use agentflow::persist::HistoryError;
use agentflow::prelude::*;
use agentflow_store::NewAuditEntry;
use serde_json::json;

use crate::orders_versions::{Deps, OWNER, migrated_entries, new_app, old_app, order, v2};
use crate::support::stores::store;

/// A thread parked in `review` by version 1, then moved by version 2 and answered there:
/// checkpoints 0 (input) and 1 (in `review`) by version 1, 2 the move, then version 2's.
async fn moved_and_completed(store: &Arc<dyn Store>, thread: &str) -> u64 {
    let deps = Deps::default();
    old_app(store).runner(&deps).thread(thread).owner(OWNER).run(order("review", thread)).await.unwrap();
    let new = new_app(store);
    let done = new.runner(&deps).thread(thread).resume_with("first").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, ["reviewed: first"]);
    let moves = migrated_entries(&new, thread);
    assert_eq!(moves.len(), 1, "{moves:?}");
    moves[0]["checkpoint"].as_u64().unwrap()
}

/// Resumes `thread`, which asks for its value again in `human_review`.
async fn asks_in_human_review(new: &App<v2::Order, Deps>, deps: &Deps, thread: &str) {
    let run = new.runner(deps).thread(thread).resume().await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(pending.iter().map(|p| p.node.as_str()).collect::<Vec<_>>(), ["human_review"]);
}

#[tokio::test]
async fn a_fork_to_before_the_move_resumes_through_the_migrations_again() {
    let store = store();
    let moved_at = moved_and_completed(&store, "back").await;
    assert_eq!(moved_at, 2);
    let (old, new) = (old_app(&store), new_app(&store));
    let deps = Deps::default();

    // Back to version 1's checkpoint in `review`, a node version 2 renamed.
    let forked = new.fork("back", 1, "ada").unwrap();
    let record = store.thread("back").unwrap().unwrap();
    assert_eq!(record.graph_fingerprint, old.graph().fingerprint(), "the version that wrote checkpoint 1");
    assert_eq!(record.schema_version, 1, "the state as version 1 stored it");
    // The fork runs `review` afresh: moved, it asks for its value again.
    asks_in_human_review(&new, &deps, "back").await;
    let done = new.runner(&deps).thread("back").resume_with("second").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, ["reviewed: second"]);
    assert_eq!(done.state.amount, 12.5, "the state migration ran again");
    assert_eq!(done.state.note, "reviewed");
    let moves = migrated_entries(&new, "back");
    assert_eq!(moves.len(), 2, "{moves:?}");
    assert_eq!(moves[1]["nodes"], json!({ "review": "human_review" }));
    assert!(moves[1]["checkpoint"].as_u64().unwrap() > forked);
    assert_eq!(store.thread("back").unwrap().unwrap().graph_fingerprint, new.graph().fingerprint());
    let audit = new.audit_log("back").unwrap();
    let fork = audit.iter().find(|e| e.kind == "state.forked").expect("the fork is audited");
    assert_eq!(fork.detail["graph_fingerprint"], json!(old.graph().fingerprint()));
}

#[tokio::test]
async fn a_fork_to_the_move_or_after_it_resumes_on_the_current_version() {
    let store = store();
    let moved_at = moved_and_completed(&store, "on").await;
    let new = new_app(&store);
    let deps = Deps::default();

    // The move's own checkpoint: version 2's node, the state as version 1 stored it.
    new.fork("on", moved_at, "ada").unwrap();
    let record = store.thread("on").unwrap().unwrap();
    assert_eq!((record.graph_fingerprint.as_str(), record.schema_version), (new.graph().fingerprint(), 1));
    asks_in_human_review(&new, &deps, "on").await;
    let done = new.runner(&deps).thread("on").resume_with("again").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, ["reviewed: again"]);
    assert_eq!(done.state.amount, 12.5);

    // The input of the thread: a node both versions have; then a checkpoint version 2 wrote.
    new.fork("on", 0, "ada").unwrap();
    asks_in_human_review(&new, &deps, "on").await;
    let done = new.runner(&deps).thread("on").resume_with("from the start").await.unwrap();
    assert_eq!(done.state.log, ["reviewed: from the start"]);
    let last = new.history("on").unwrap().last().unwrap().seq;
    let before = migrated_entries(&new, "on").len();
    new.fork("on", last - 1, "ada").unwrap();
    let record = store.thread("on").unwrap().unwrap();
    assert_eq!((record.graph_fingerprint.as_str(), record.schema_version), (new.graph().fingerprint(), 2));
    asks_in_human_review(&new, &deps, "on").await;
    let done = new.runner(&deps).thread("on").resume_with("late").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(migrated_entries(&new, "on").len(), before, "not moved again");
}

#[tokio::test]
async fn a_fork_to_before_a_move_an_earlier_build_recorded_is_refused_by_type() {
    let store = store();
    let deps = Deps::default();
    let old = old_app(&store);
    old.runner(&deps).thread("legacy").owner(OWNER).run(order("review", "legacy")).await.unwrap();
    // A move as an earlier build audited it: no fingerprints, no state versions.
    let entry = NewAuditEntry::new(1, "agentflow", "graph.migrated", json!({ "from": 1, "to": 2, "checkpoint": 2 }));
    store.append_audit("legacy", entry).unwrap();
    let head = store.latest_checkpoint("legacy").unwrap().unwrap().seq;
    let err = old.fork("legacy", 1, "ada").unwrap_err();
    let HistoryError::ForkAcrossVersions { seq: 1, moved_at: 2, from: 1, to: 2, .. } = &err else { panic!("{err}") };
    assert!(err.to_string().contains("fork at checkpoint 2 or later"), "{err}");
    assert_eq!(store.latest_checkpoint("legacy").unwrap().unwrap().seq, head, "nothing was written");
}

/// Two branches, each moved once: version 1 wrote checkpoints 0 and 1, the first move wrote 2
/// and version 2 ran on to 3; a fork back to 1 gave a second branch that moved again later.
/// Checkpoint 3 is numbered before the second move but lies on the first branch, after its
/// move; a fork to the first move's checkpoint holds the state as version 1 stored it, though
/// it is numbered after both moves.
#[tokio::test]
async fn a_fork_between_moves_of_two_branches_takes_the_version_of_its_own_branch() {
    let store = store();
    let moved_at = moved_and_completed(&store, "branches").await;
    let (old, new) = (old_app(&store), new_app(&store));
    let deps = Deps::default();
    let ran_on = new.history("branches").unwrap().last().unwrap().seq;
    assert_eq!((moved_at, ran_on), (2, 3));

    // The second branch: back to version 1's checkpoint in `review`, moved again.
    let forked = new.fork("branches", 1, "ada").unwrap();
    asks_in_human_review(&new, &deps, "branches").await;
    let done = new.runner(&deps).thread("branches").resume_with("second").await.unwrap();
    assert_eq!(done.state.log, ["reviewed: second"]);
    let moves = migrated_entries(&new, "branches");
    assert_eq!(moves.len(), 2, "{moves:?}");
    let second = moves[1]["checkpoint"].as_u64().unwrap();
    assert!(ran_on < forked && forked < second, "{ran_on} {forked} {second}");

    // Checkpoint 3: version 2 wrote it, with the state migrated.
    new.fork("branches", ran_on, "ada").unwrap();
    let record = store.thread("branches").unwrap().unwrap();
    assert_eq!((record.graph_fingerprint.as_str(), record.schema_version), (new.graph().fingerprint(), 2));
    assert_eq!(new.state("branches").unwrap().unwrap().state.amount, 12.5);

    // The fork checkpoint of the second branch: version 1's, as the checkpoint it forked to.
    new.fork("branches", forked, "ada").unwrap();
    let record = store.thread("branches").unwrap().unwrap();
    assert_eq!((record.graph_fingerprint.as_str(), record.schema_version), (old.graph().fingerprint(), 1));

    // A fork to the first move's checkpoint, then to that fork's own checkpoint: version 2's
    // nodes, the state as version 1 stored it; resumed, the state migration runs on it.
    let at_move = new.fork("branches", moved_at, "ada").unwrap();
    let again = new.fork("branches", at_move, "ada").unwrap();
    assert!(again > second);
    let record = store.thread("branches").unwrap().unwrap();
    assert_eq!((record.graph_fingerprint.as_str(), record.schema_version), (new.graph().fingerprint(), 1));
    asks_in_human_review(&new, &deps, "branches").await;
    let done = new.runner(&deps).thread("branches").resume_with("third").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, ["reviewed: third"]);
    assert_eq!(done.state.amount, 12.5, "the state migration ran on the state version 1 stored");
    assert_eq!(migrated_entries(&new, "branches").len(), 2, "not moved again");
}
