//! The flagship example's model calls go through the node context, so they
//! count against the run's limits and are reported as events.

#[allow(dead_code)]
#[path = "../../examples/email_triage.rs"]
mod email_triage;

use std::sync::{Arc, Mutex};

use agentflow::{Activity, Budget, Event, Limits, Outcome};
use email_triage::{SAMPLES, Services, Triage, scripted_model};

fn question() -> Triage {
    let raw = SAMPLES.iter().find(|(name, _)| *name == "question").expect("the sample exists").1;
    serde_json::from_value(serde_json::json!({ "raw": raw, "context": [], "path": [] }))
        .expect("a Triage with only `raw` set")
}

#[tokio::test]
async fn email_triage_counts_every_model_call_and_reports_it_as_an_event() {
    let services = Services { model: Arc::new(scripted_model()) };
    let models = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&models);
    let run = email_triage::triage::graph()
        .app()
        .runner(&services)
        .on_event(move |e: Event<Triage>| {
            if let Event::Activity(Activity::ModelCall { node, .. }) = e {
                seen.lock().unwrap().push(node);
            }
        })
        .run(question())
        .await
        .expect("the run ends");
    assert_eq!(run.outcome, Outcome::Completed, "a question is answered without review");
    // classify (structured output) and draft: both model calls are counted.
    assert_eq!(run.usage.model_calls, 2, "{:?}", run.usage);
    assert_eq!(*models.lock().unwrap(), ["classify", "draft"]);
}

#[tokio::test]
async fn email_triage_classification_is_bounded_by_the_model_call_limit() {
    let services = Services { model: Arc::new(scripted_model()) };
    let run = email_triage::triage::graph()
        .app()
        .runner(&services)
        .limits(Limits::none().model_calls(0))
        .run(question())
        .await
        .expect("the run ends");
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::ModelCalls }, "{:?}", run.outcome);
    assert_eq!(run.usage.model_calls, 0);
    // The limit stops the run at classification, before any model answered.
    let state = serde_json::to_value(&run.state).unwrap();
    assert_eq!(state["path"], serde_json::json!(["read"]), "{state}");
    assert_eq!(state["classification"], serde_json::Value::Null);
}
