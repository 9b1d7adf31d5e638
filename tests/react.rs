//! The prebuilt ReAct loop with real tools and the scripted test double.

use std::sync::Arc;

use agentflow::message::Role;
use agentflow::model::ScriptedModel;
use agentflow::prebuilt::{ReactDeps, ReactState};
use agentflow::prelude::*;
use agentflow::{Budget, Limits};
use serde_json::json;

mod common;
use common::{add, divide, multiply};

agentflow::react_agent!(mod calculator, tools = [add, multiply, divide], max_steps = 12);

#[tokio::test]
async fn two_dependent_calls_give_35() {
    let model = Arc::new(
        ScriptedModel::new()
            .reply_tool_call("add", json!({"a": 3, "b": 4}))
            .reply_tool_call("multiply", json!({"a": 7, "b": 5}))
            .reply_text("(3 + 4) * 5 = 35"),
    );
    let deps = ReactDeps::new(model.clone());
    let run = calculator::graph().run(ReactState::ask("what is (3 + 4) * 5?"), &deps).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.answer.as_deref(), Some("(3 + 4) * 5 = 35"));
    let tool_results: Vec<&str> =
        run.state.messages.iter().filter(|m| m.role == Role::Tool).map(|m| m.content.as_str()).collect();
    assert_eq!(tool_results, vec![r#"{"ok":true,"result":7.0}"#, r#"{"ok":true,"result":35.0}"#]);
    assert_eq!(run.usage.model_calls, 3);
    assert_eq!(run.usage.tool_calls, 2);
    // The model was offered exactly the tool node's set.
    let offered: Vec<String> = model.requests()[0].tools.iter().map(|t| t.name.clone()).collect();
    assert_eq!(offered, vec!["add", "multiply", "divide"]);
}

#[tokio::test]
async fn bad_arguments_and_unknown_tools_come_back_as_observations() {
    let model = Arc::new(
        ScriptedModel::new()
            .reply_tool_call("add", json!({"a": 3, "b": "four", "c": 1}))
            .reply_tool_call("delete_everything", json!({}))
            .reply_tool_call("divide", json!({"a": 10, "b": 0}))
            .reply_text("10 / 0 is undefined"),
    );
    let deps = ReactDeps::new(model);
    let run = calculator::graph().run(ReactState::ask("..."), &deps).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    let codes: Vec<String> = run
        .state
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| serde_json::from_str::<serde_json::Value>(&m.content).unwrap()["code"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(codes, vec!["INVALID_ARGUMENT", "PERMISSION_DENIED", "TOOL_ERROR"]);
}

#[tokio::test]
async fn a_model_that_keeps_calling_tools_runs_out_of_budget() {
    let mut model = ScriptedModel::new();
    for i in 0..50 {
        model = model.reply_tool_call("add", json!({"a": i, "b": 1}));
    }
    let deps = ReactDeps::new(Arc::new(model));
    let graph = calculator::graph();
    let run = graph.runner(&deps).limits(Limits::none().model_calls(4)).run(ReactState::ask("loop")).await.unwrap();
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::ModelCalls });
    assert_eq!(run.usage.model_calls, 4);
    // The step bound catches it too, never as success.
    let mut model = ScriptedModel::new();
    for i in 0..50 {
        model = model.reply_tool_call("add", json!({"a": i, "b": 1}));
    }
    let deps = ReactDeps::new(Arc::new(model));
    let run = graph.run(ReactState::ask("loop"), &deps).await.unwrap();
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::Steps });
}

#[tokio::test]
async fn a_repeated_identical_call_stops_the_loop() {
    let model = ScriptedModel::new()
        .reply_tool_call("add", json!({"a": 1, "b": 1}))
        .reply_tool_call("add", json!({"b": 1, "a": 1}))
        .reply_text("never reached");
    let deps = ReactDeps::new(Arc::new(model));
    let run = calculator::graph().run(ReactState::ask("1+1"), &deps).await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(node, "tools");
    assert!(error.message.contains("repeated the call `add`"), "{error}");
}
