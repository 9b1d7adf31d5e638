//! Tools: calls through the gateway, their dependencies and results, effects and their keys,
//! prebuilt agents (ReAct, plan-execute), and the adversarial suite.

#[path = "../support/mod.rs"]
mod support;

mod adversarial;
mod adversarial_driver;
mod adversarial_script;
mod adversarial_world;
mod effect_keys;
mod effect_race;
mod mcp_client;
mod mcp_drift;
mod mcp_gateway;
mod plan_execute;
mod react;
mod tool_deps;
mod tool_results_read_back;
mod tools;
mod uncertain_children;
mod uncertain_effects;
mod uncertain_forked;
mod uncertain_never_again;
mod uncertain_no_answer;
mod uncertain_outcome;
mod uncertain_world;
