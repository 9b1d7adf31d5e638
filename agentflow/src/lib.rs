//! agentflow: LLM agents as state graphs whose wiring the compiler checks.
#![warn(missing_docs)]

// The derive and graph macros name `::agentflow`; this lets the crate use them itself.
extern crate self as agentflow;

pub mod approval;
pub mod budget;
pub mod context;
pub mod error;
pub mod event;
pub mod executor;
pub mod graph;
pub mod interrupt;
pub mod message;
pub mod model;
pub mod persist;
pub mod prebuilt;
pub mod reducer;
pub mod state;
pub mod step;
pub mod tool;

#[doc(hidden)]
pub mod __private;

pub use budget::{Limits, RunUsage};
pub use context::Ctx;
pub use error::{ErrorClass, NodeError};
pub use event::{Activity, Event};
pub use executor::{Budget, Outcome, RetryPolicy, Run, RunError, Runner};
pub use graph::{CompiledGraph, NodeId};
pub use interrupt::{Pending, PendingKind};
pub use persist::{Durability, RedbStore, Snapshot, Store};
pub use state::{Field, FieldMask, ReducerKind, State, Update};
pub use step::Step;
pub use tokio_util::sync::CancellationToken;

/// Everything a graph definition needs: `use agentflow::prelude::*;`.
pub mod prelude {
    pub use crate::tool::{Risk, ToolCx, ToolError};
    pub use crate::{CompiledGraph, Ctx, NodeError, Outcome, State, Step, goto, graph, node, tool};
}

pub use agentflow_macros::{State, graph, node, tool};
