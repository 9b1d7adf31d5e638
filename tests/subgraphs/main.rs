//! Subgraphs: child graphs run from a node, their budgets, limits, forks, takeovers and the
//! parent's policies applied in the child.

#[path = "../support/mod.rs"]
mod support;

mod promises_child_policy;
mod promises_subgraph_parallel;
mod subgraph_answers;
mod subgraph_budget;
mod subgraph_fork;
mod subgraph_limits;
mod subgraph_stops;
mod subgraph_stream;
mod subgraph_takeover;
mod subgraph_tree;
mod subgraphs;
