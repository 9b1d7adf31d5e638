//! A node that clears an `Option` field (`update().field(None)`) changes the
//! state the run goes on with; the stored update must read back the same, so
//! the state a resume, `App::state` or a later process sees is the one the
//! run computed. (The update type wraps each field in an `Option`, "not
//! set"; for an `Option` field, `None` written as `null` must not read back
//! as "not set".)

use std::sync::Arc;

use agentflow::prelude::*;
use agentflow::{Outcome, RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Ticket {
    assignee: Option<String>,
    #[reduce(append)]
    seen: Vec<Option<String>>,
}

#[graph(state = Ticket, start = assign)]
pub mod desk {
    use super::*;

    #[node(goto = [unassign])]
    async fn assign(_s: &Ticket) -> Step<Ticket> {
        goto!(unassign, Ticket::update().assignee(Some("dana".to_string())))
    }

    #[node(goto = [check])]
    async fn unassign(_s: &Ticket) -> Step<Ticket> {
        goto!(check, Ticket::update().assignee(None))
    }

    /// Asks a human, then records the assignee it sees.
    #[node(goto = [END], interrupt)]
    async fn check(s: &Ticket, cx: &Ctx<()>) -> Result<Step<Ticket>, NodeError> {
        let _ok: bool = cx.interrupt(json!({ "assignee": s.assignee }))?;
        Ok(goto!(END, Ticket::update().seen(vec![s.assignee.clone()])))
    }
}

#[tokio::test]
async fn an_option_field_cleared_by_a_node_reads_back_cleared() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = desk::graph().app().store(store);
    let run = app.runner(&()).thread("t").run(Ticket::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    assert_eq!(run.state.assignee, None);
    // What the store gives back is what the run computed.
    assert_eq!(app.state("t").unwrap().unwrap().state.assignee, None, "the cleared field came back");

    // The resumed node sees the cleared field too.
    let done = app.runner(&()).thread("t").resume_with(true).await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.seen, [None]);
    assert_eq!(app.state("t").unwrap().unwrap().state, done.state);
}

#[tokio::test]
async fn a_manual_update_clearing_an_option_field_reads_back_cleared() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = desk::graph().app().store(store);
    app.runner(&()).thread("u").run(Ticket::default()).await.unwrap();
    app.update_state("u", Ticket::update().assignee(Some("eve".to_string())), "ops").unwrap();
    assert_eq!(app.state("u").unwrap().unwrap().state.assignee.as_deref(), Some("eve"));
    app.update_state("u", Ticket::update().assignee(None), "ops").unwrap();
    assert_eq!(app.state("u").unwrap().unwrap().state.assignee, None);
}

#[tokio::test]
async fn null_for_a_field_whose_type_has_no_null_still_reads_as_not_set() {
    // Earlier versions stored such updates (they read `null` as "not set" for
    // every field): they must keep reading back.
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = desk::graph().app().store(Arc::clone(&store));
    let run = app.runner(&()).thread("v").run(Ticket::default()).await.unwrap();
    let before = run.state;
    agentflow::persist::update_thread(&store, "v", br#"{"seen": null, "assignee": null}"#.to_vec(), "ops").unwrap();
    let after = app.state("v").unwrap().unwrap().state;
    assert_eq!(after.seen, before.seen);
    assert_eq!(after.assignee, None);
}
