//! Prebuilt graphs, written with the same DSL as user graphs and so checked
//! the same way: [`react_agent!`](crate::react_agent) (model <-> tools).

pub mod react;

pub use react::{ReactDeps, ReactState};
