//! Prebuilt graphs, written with the same DSL as user graphs and so checked
//! the same way: [`react_agent!`](crate::react_agent) (model <-> tools) and
//! [`plan_execute_agent!`](crate::plan_execute_agent) (planner, executor,
//! replanner, finalizer).

pub mod plan_execute;
pub mod react;
