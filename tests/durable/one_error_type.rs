//! Every operation's error converts into `agentflow::Error`, so `?` works in
//! one function that opens a store, runs, resumes, reads history and decides
//! approvals.

use std::sync::Arc;

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::{RedbStore, RunError};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Count {
    #[reduce(add)]
    n: u32,
}

#[graph(state = Count, start = bump)]
mod counter {
    use super::*;

    #[node(goto = [END])]
    async fn bump(_c: &Count) -> Step<Count> {
        goto!(END, Count::update().n(1))
    }
}

/// Like a user's `main`: `?` on every kind of operation.
async fn every_operation(resume_unknown: bool) -> Result<u32, agentflow::Error> {
    let store = Arc::new(RedbStore::in_memory()?);
    let app = counter::graph().app().store(store);
    let run = app.runner(&()).thread("t-1").run(Count::default()).await?;
    let history = app.history("t-1")?;
    let desk = app.approvals(RoleAuthorizer::new())?;
    if resume_unknown {
        app.runner(&()).thread("nope").resume().await?;
    }
    let decided = || -> Result<(), agentflow::Error> {
        desk.approve("no-such-approval", &Approver::new("alice", ["ops"]))?;
        Ok(())
    };
    let err = decided().unwrap_err();
    assert!(matches!(err, agentflow::Error::Decision(agentflow::approval::DecisionError::NotFound { .. })), "{err:?}");
    Ok(run.state.n + history.len() as u32)
}

#[tokio::test]
async fn question_mark_converts_every_operation_error_into_agentflow_error() {
    // n = 1, and two checkpoints: the input and the one step.
    assert_eq!(every_operation(false).await.unwrap(), 1 + 2);
    let err = every_operation(true).await.unwrap_err();
    assert!(matches!(err, agentflow::Error::Run(RunError::Resume(_))), "{err:?}");
    assert!(err.to_string().contains("nope"), "{err}");
}

#[test]
fn a_decision_error_and_a_history_error_convert_too() {
    fn decide() -> Result<(), agentflow::Error> {
        let app = counter::graph().app();
        // No store: a history error, through `?`.
        app.approvals(RoleAuthorizer::new())?;
        Ok(())
    }
    let err = decide().unwrap_err();
    assert!(matches!(err, agentflow::Error::History(agentflow::persist::HistoryError::NoStore)), "{err:?}");
}
