//! Tools: calls through the gateway, their dependencies and results, effects and their keys,
//! prebuilt agents (ReAct, plan-execute), and the adversarial suite.

#[path = "../support/mod.rs"]
mod support;

mod adversarial;
mod effect_keys;
mod effect_race;
mod plan_execute;
mod react;
mod tool_deps;
mod tool_results_read_back;
mod tools;
mod uncertain_outcome;
