//! Subgraphs: a compiled graph run as a child of a node, with its own
//! checkpoints under the parent's thread.
//!
//! A node lists the graphs it may run, `#[node(goto = [..], subgraphs =
//! [research])]`, and runs one with [`Ctx::subgraph`](crate::Ctx::subgraph), written
//! `cx.subgraph(research::graph(), input)`, which returns the child's typed
//! final state:
//!
//! ```
//! use std::sync::Arc;
//! use agentflow::prelude::*;
//! use agentflow::RedbStore;
//! # use serde::{Deserialize, Serialize};
//! #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
//! pub struct Research { topic: String, notes: Vec<String> }
//!
//! #[graph(state = Research, start = search)]
//! pub mod research {
//!     use super::*;
//!     #[node(goto = [END])]
//!     async fn search(s: &Research) -> Step<Research> {
//!         goto!(END, Research::update().notes(vec![format!("notes on {}", s.topic)]))
//!     }
//! }
//!
//! #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
//! pub struct Report { topic: String, body: String }
//!
//! #[graph(state = Report, start = write)]
//! pub mod supervisor {
//!     use super::*;
//!     #[node(goto = [END], subgraphs = [research])]
//!     async fn write(s: &Report, cx: &Ctx<()>) -> Result<Step<Report>, NodeError> {
//!         let found = cx.subgraph(research::graph(), Research { topic: s.topic.clone(), notes: vec![] }).await?;
//!         Ok(goto!(END, Report::update().body(found.notes.join("; "))))
//!     }
//! }
//! # fn main() -> Result<(), agentflow::Error> {
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let app = supervisor::graph().app().store(Arc::new(RedbStore::in_memory()?));
//! let input = Report { topic: "tides".into(), body: String::new() };
//! let run = app.runner(&()).thread("r-1").run(input).await?;
//! assert_eq!(run.state.body, "notes on tides");
//! // The child's thread lives under the parent's: `r-1/write.0.0.research`.
//! assert_eq!(supervisor::DELEGATION_DEPTH, 2);
//! assert!(app.backing_store().unwrap().thread("r-1/write.0.0.research")?.is_some());
//! # Ok(())
//! # })
//! # }
//! ```
//!
//! What the macro checks: a node calls only the subgraphs it lists (a
//! compile error at the name otherwise; a call the macro cannot see, in a
//! helper fn handed the context, is refused at run time); the child is
//! written `name::graph()` so the check can see it; each graph knows how deep it
//! delegates (`DELEGATION_DEPTH`: 1, plus its deepest child's) and one deeper
//! than its `#[graph(max_depth = N)]` (default 3) does not compile, the error
//! naming the chain; a graph that contains itself, directly or through
//! others, does not compile. The child's deps type is the parent's (rustc
//! checks it at the call).
//!
//! At run time, with a store, the child runs as its own thread
//! `{parent}/{node}[.{instance}].{seq}.{call}.{graph}`, where `seq` is the
//! checkpoint the node's step started from (the step number, in a run no
//! one forked or updated between steps) and `call` counts the node's
//! subgraph calls in order, so a re-run of the node finds the same child
//! (a manual update of a thread paused mid-step keeps the step's checkpoint,
//! so it keeps the child too), while a [fork](crate::App::fork)'s branch
//! starts from a new checkpoint and runs children of its own: the old
//! branch's children, their results and their approvals, are not used.
//! The child's thread record names its parent
//! ([`ThreadRecord::parent`](agentflow_store::ThreadRecord::parent)), and
//! that, not the shape of an id, is what makes it a child: for an export,
//! a fork, an answer and the run queue. A thread of its own that happens to
//! have the id a child would get is refused, never taken for the child: the
//! node fails, naming it.
//! Within one branch:
//! - a child that completed is not run again: its final state is returned;
//! - a child that stopped (the process died, or it paused) is resumed from its
//!   last checkpoint; while another holder still has the child's lease (a
//!   process that died has it until it expires), the node waits for that
//!   lease to end (up to 8 times), and the child is not touched meanwhile;
//! - a child that pauses (an `interrupt`, an approval, an unknown outcome)
//!   pauses the parent: the parent's pending item has the child's payload
//!   with `path` (`write/review`, nested children add levels), and
//!   `subgraph` and `thread` naming the graph and thread that wait (the
//!   deepest); decide the approval and `resume` the parent, or
//!   `resume_with(value)` the parent, and the value reaches the child;
//! - a child the node's re-run after a resume no longer calls (the model
//!   answered another way after a crash) is not run again. Once the
//!   parent's step commits, what the child and the threads under it left
//!   open is settled as their own next step would: a call cut off mid-way
//!   becomes an `OUTCOME_UNKNOWN` record with an `effect.outcome_unknown`
//!   entry in the child's log, and an approved call still `EXECUTING`
//!   becomes `OUTCOME_UNKNOWN` (both before the commit, for a human to
//!   settle), and its open requests are cancelled (after it). Each under the
//!   child's lease: a child another holder still has is waited for as above,
//!   and one still held after that is left to its holder (logged); a child
//!   whose records do not read back is logged and left, and the parent goes
//!   on (`tests/tools/uncertain_outcome.rs`);
//! - what starts a child's effects (an effect's *started* marker, an
//!   approval's claim) is fenced by the child's lease and, in the same
//!   transaction, by its parent run's lease and every one above
//!   ([`EffectBatch::parent_leases`](agentflow_store::EffectBatch::parent_leases)),
//!   and so is every commit of the child's thread, its creation included
//!   ([`StepCommit::parent_leases`](agentflow_store::StepCommit::parent_leases)):
//!   a parent that lost its thread (it stalled past its lease, or its worker
//!   revoked it) neither acts through a child it starts nor moves one on;
//! - a child that sleeps makes the parent sleep until the same time; the
//!   parent's [`Scheduler`](crate::timer::Scheduler) wakes the tree (it
//!   leaves the child's own timer alone: the child is another graph's thread);
//! - a node run gets one resume value: the first that waits for one (a
//!   child, or the node's own `interrupt`) takes it, a later one pauses
//!   again; what the node's own `interrupt` returned is kept when a child
//!   then pauses the step, so the node's re-run gets the same answer and the
//!   next value goes to the child;
//! - the child's model calls, tool calls and tokens count against the
//!   parent's budgets (it runs with what the parent has left); a child
//!   resumed when its parent allows more than the child's stored limits (the
//!   parent's limits were raised, or a crash kept the child's usage from
//!   reaching the parent) has its limits raised to that, with a
//!   `limits.raised` audit entry in its log;
//! - the parent's tool policy, approval time to live, rejection rule and
//!   circuit breakers apply in the child;
//! - cancelling the parent cancels the child, and pausing it (a worker's
//!   [`App::pause_run`](crate::App::pause_run)) pauses the child (nothing is
//!   compensated); a child that fails fails the
//!   node (fatally: it is not re-run by the node's retry policy).
//!
//! Without a store the child runs in memory, and a child that pauses fails
//! the node (there is nothing to resume). At most [`DEFAULT_PARALLEL`]
//! children run at once in one run.
//!
//! Streams: everything a child does reaches the parent's
//! [stream](crate::Runner::stream) in the modes it carries, each item's
//! `namespace` naming the child's place (`["delegate.0.2.writer"]`, one
//! entry per level): model chunks and `cx.emit` values as they are, values,
//! updates and events as [`StreamPart::Child`](crate::StreamPart::Child)
//! JSON. Not yet: the parent's `on_event` sink gets none of the child's
//! events, and a child cut off by a crash has its usage counted in its own
//! thread only, not in the parent's.
//!
//! [`DEFAULT_PARALLEL`]: crate::DEFAULT_PARALLEL

pub use crate::ctx::subgraph::ChildGraph;
