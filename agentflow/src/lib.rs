//! agentflow: LLM agents as state graphs whose wiring the compiler checks.
//!
//! You write a state struct with `#[derive(State)]`, async node functions
//! with `#[node]`, and one `#[graph]` module. The macros check at compile
//! time that every route goes to a node of the graph or `END`, every node is
//! reachable and can finish, every cycle is bounded, every field's reducer
//! fits its type, nodes only call the tools they list, and two nodes of one
//! super-step never overwrite the same plain field. Errors point at the
//! identifier to change.
//!
//! A small tokio executor runs the graph in super-steps and, with a store,
//! persists every step to an embedded redb file, so runs survive crashes,
//! pause for human approval, and can be resumed, inspected and forked.
//!
//! ```
//! use agentflow::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
//! struct Ticket {
//!     text: String,
//!     intent: Option<String>,
//!     #[reduce(append)]
//!     log: Vec<String>,
//! }
//!
//! #[graph(state = Ticket, start = classify)]
//! mod support {
//!     use super::*;
//!
//!     #[node(goto = [answer, escalate])]
//!     async fn classify(t: &Ticket) -> Step<Ticket> {
//!         if t.text.contains("refund") {
//!             goto!(escalate, Ticket::update().intent(Some("billing".into())))
//!         } else {
//!             goto!(answer, Ticket::update().intent(Some("question".into())))
//!         }
//!     }
//!
//!     #[node(goto = [END])]
//!     async fn answer(_t: &Ticket) -> Step<Ticket> {
//!         goto!(END, Ticket::update().log(vec!["answered".into()]))
//!     }
//!
//!     #[node(goto = [END])]
//!     async fn escalate(_t: &Ticket) -> Step<Ticket> {
//!         goto!(END, Ticket::update().log(vec!["sent to a human".into()]))
//!     }
//! }
//!
//! # fn main() {
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let graph = support::graph();
//! let input = Ticket { text: "I want a refund".into(), ..Ticket::default() };
//! let run = graph.run(input, &()).await?;
//! assert_eq!(run.outcome, Outcome::Completed);
//! assert_eq!(run.state.intent.as_deref(), Some("billing"));
//! assert_eq!(run.state.log, ["sent to a human"]);
//! # Ok::<(), agentflow::RunError>(())
//! # }).unwrap();
//! # }
//! ```
//!
//! Where to go next: [`executor::Runner`] (threads, budgets, breakpoints,
//! events), [`persist`] (durable runs and history), [`tool`] (tools and the
//! approval gateway), [`approval`] (deciding approvals), [`model`] (chat
//! models, including the scripted test double), [`prebuilt`] (ReAct).
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
