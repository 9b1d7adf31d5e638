//! A `#[tool]` whose result cannot be stored (a NaN, an infinity) has still acted: the run
//! stops with an error naming the value, and the call is journaled as run, so a resume of the
//! failed thread never makes it again (as `Ctx::effect` does with such a result). A read's such
//! result is an observation the model acts on: nothing was changed, nothing is journaled.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::prelude::*;
use agentflow::{RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::json;

static SENT: AtomicU32 = AtomicU32::new(0);

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Invoice {
    amount: f64,
}

/// Sends an invoice and returns its ratio to the credit line, which may not be finite.
#[tool(risk = reversible)]
async fn send_invoice(args: Invoice) -> Result<f64, ToolError> {
    SENT.fetch_add(1, Ordering::SeqCst);
    Ok(args.amount / 0.0)
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Billing {
    #[reduce(append)]
    log: Vec<String>,
}

#[graph(state = Billing, deps = (), start = bill)]
mod billing {
    use super::*;

    #[node(goto = [END], tools = [send_invoice])]
    async fn bill(_s: &Billing, cx: &Ctx<()>) -> Result<Step<Billing>, NodeError> {
        let observation = cx.run_tool(send_invoice, json!({ "amount": 120.0 })).await?;
        Ok(goto!(END, Billing::update().log(vec![observation.body.to_string()])))
    }
}

#[tokio::test]
async fn a_tool_result_that_cannot_be_stored_fails_the_run_and_the_call_never_runs_again() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = billing::graph().app().store(store);
    let first = app.runner(&()).thread("invoice").run(Billing::default()).await.unwrap();
    let again = app.runner(&()).thread("invoice").resume().await.unwrap();
    assert_eq!(SENT.load(Ordering::SeqCst), 1, "the resume sent the invoice again");
    for run in [first, again] {
        let Outcome::Failed { error, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
        let message = error.to_string();
        assert!(message.contains("`result` is inf") && message.contains("will not run again"), "{message}");
    }
}

// ---------------------------------------------------------------- the marker cannot be written

use crate::support::hooked_store;

static FAXED: AtomicU32 = AtomicU32::new(0);

/// Faxes an invoice and returns a ratio that is not finite.
#[tool(risk = reversible)]
async fn fax_invoice(args: Invoice) -> Result<f64, ToolError> {
    FAXED.fetch_add(1, Ordering::SeqCst);
    Ok(args.amount / 0.0)
}

#[graph(state = Billing, deps = (), start = fax)]
mod faxing {
    use super::*;

    #[node(goto = [END], tools = [fax_invoice])]
    async fn fax(_s: &Billing, cx: &Ctx<()>) -> Result<Step<Billing>, NodeError> {
        let observation = cx.run_tool(fax_invoice, json!({ "amount": 80.0 })).await?;
        Ok(goto!(END, Billing::update().log(vec![observation.body.to_string()])))
    }
}

/// The store refuses the marker that says the call ran: the call is then left open (started,
/// no result), so a resume asks a human about it; it is never taken for a call that did not run.
#[tokio::test]
async fn a_call_whose_ran_marker_cannot_be_written_is_left_for_a_human_not_run_again() {
    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let mut store = hooked_store::Hooked::new(Arc::clone(&inner));
    store.before_effects = Some(Box::new(|_, batch| {
        let unjournaled = batch.effects.iter().any(|(_, v)| v.starts_with(b"{\"__agentflow_unjournaled_result__\""));
        if unjournaled {
            return Err(agentflow_store::CommitError::Invalid {
                thread: batch.thread.clone(),
                reason: "refused".into(),
            });
        }
        Ok(())
    }));
    let app = faxing::graph().app().store(Arc::new(store));
    let first = app.runner(&()).thread("fax").owner("agent:billing").run(Billing::default()).await.unwrap();
    assert!(matches!(first.outcome, Outcome::Failed { .. }), "{:?}", first.outcome);
    let again = app.runner(&()).thread("fax").resume().await.unwrap();
    assert_eq!(FAXED.load(Ordering::SeqCst), 1, "the call ran again");
    let Outcome::Interrupted { pending, .. } = &again.outcome else { panic!("{:?}", again.outcome) };
    assert_eq!(pending[0].kind, agentflow::PendingKind::OutcomeUnknown);
}

/// Looks a ratio up; the ratio of a zero credit line is not finite.
#[tool(risk = read)]
async fn credit_ratio(args: Invoice) -> Result<f64, ToolError> {
    Ok(args.amount / 0.0)
}

#[graph(state = Billing, deps = (), start = look)]
mod lookup {
    use super::*;

    #[node(goto = [END], tools = [credit_ratio])]
    async fn look(_s: &Billing, cx: &Ctx<()>) -> Result<Step<Billing>, NodeError> {
        let observation = cx.run_tool(credit_ratio, json!({ "amount": 120.0 })).await?;
        Ok(goto!(END, Billing::update().log(vec![observation.body.to_string()])))
    }
}

/// A read changed nothing: a result it cannot keep is the model's to act on (ask for less), not
/// the run's end.
#[tokio::test]
async fn a_read_whose_result_cannot_be_kept_is_an_observation_and_the_run_goes_on() {
    let run = lookup::graph().run(Billing::default(), &()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed, "{:?}", run.outcome);
    let body = &run.state.log[0];
    assert!(body.contains("\"ok\":false") && body.contains("cannot be kept"), "{body}");
    assert!(body.contains("ask for less"), "{body}");
}
