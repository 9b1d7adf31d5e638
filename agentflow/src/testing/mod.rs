//! Crash tests for your own graphs (feature `testing`): every durable boundary of a run, with
//! the process killed just before and just after it.
//!
//! [`CrashMatrix`] runs the graph once, uncut, on a store that names every write it makes (a
//! step's commit, a map instance's write, an effect's *started* marker and its result, an
//! approval's move, an audit entry, a timer: see [`BoundaryKind`]). Then, for each of those
//! boundaries and for each side of it, it runs the graph again on a fresh store and "kills the
//! process" there: it takes a snapshot of what is committed at that point (before: without the
//! write; after: with it), fails the call and every later one, and shuts the runtime down
//! without waiting for anything (`shutdown_background`). A fresh store is restored from the
//! snapshot, and the thread is resumed to its end with the same scripts. At each cut it checks:
//!
//! - **the ledger**: no non-idempotent effect or tool call ran more often than in the uncut
//!   run ([`Check::EffectRanTwice`]);
//! - **the model replies**: no node run (a node, or a map instance, on one checkpoint) whose
//!   write was committed before the cut asked a model again ([`Check::ModelReplyConsumedTwice`]);
//! - **the calls cut off**: each call that started and left no result is journaled as ended,
//!   or listed as an unknown outcome for a human ([`Check::CallCutOffUnlisted`]);
//! - **the ending**: the resumed run ends as the uncut one did (same outcome, same state), or
//!   waits for a human who must settle a call cut off mid-way ([`Check::EndingDiffers`]);
//! - **nothing left running** ([`Check::LeftRunning`]);
//! - **the event log** (on for every run the matrix makes, see
//!   [`App::event_log`](crate::App::event_log)): ids without a gap, one `step` event per step
//!   of the run loop, a thread that ended saying so last ([`Check::EventLogBroken`]).
//!
//! The models are the graph's own (a [`ScriptedModel`](crate::model::ScriptedModel) in the
//! deps, say): the uncut run asks them and records each reply by the place it was asked
//! (thread, checkpoint, node, map instance, attempt, call), and every cut run gets the reply of
//! its place from that record, never asking a model. The people are [`Answers`]: the answer to
//! each node's `cx.interrupt`, and who approves or rejects which tool.
//!
//! ```
//! use agentflow::prelude::*;
//! use agentflow::testing::{CrashMatrix, CrashMatrixError};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
//! struct Order { #[reduce(add)] charged: u32, receipt: Option<String> }
//!
//! #[graph(state = Order, start = charge)]
//! mod shop {
//!     use super::*;
//!     #[node(goto = [END])]
//!     async fn charge(_o: &Order, cx: &Ctx<'_, ()>) -> Result<Step<Order>, NodeError> {
//!         let receipt = cx.effect("charge", |key| async move { Ok(format!("paid:{key}")) }).await?;
//!         Ok(goto!(END, Order::update().charged(1).receipt(Some(receipt))))
//!     }
//! }
//!
//! fn main() -> Result<(), CrashMatrixError> {
//!     let report = CrashMatrix::new(shop::graph().app(), &()).input(Order::default()).run()?;
//!     assert!(report.is_clean(), "{report}");
//!     assert!(report.boundaries.len() >= 3); // started marker, result, step commits
//!     Ok(())
//! }
//! ```
//!
//! [`UpgradeMatrix`] does the same for a graph's upgrade: a thread parked by one version and
//! resumed by the next, killed at every write of that resume, the commit that moves the thread
//! to the new version (`graph.migrated`) among them; each cut leaves the thread wholly on one
//! version ([`Check::MigrationTorn`]).
//!
//! The full matrix runs on in-memory stores and is deterministic. [`CrashMatrix::kill_sample`]
//! checks the snapshot model against real processes: a child process runs the graph on a real
//! store (a redb file, or PostgreSQL) and is killed with SIGKILL at a boundary.
//!
//! What a snapshot does not hold: circuit breaker records and queued runs (a store's
//! [`dump_thread`](agentflow_store::Store::dump_thread) holds neither), so a graph whose run
//! trips a breaker may end otherwise after a cut.

mod boundary;
mod checks;
mod crash_store;
mod driver;
mod error;
mod event_log_check;
mod kill;
mod matrix;
mod recorder;
mod report;
mod upgrade;

pub use driver::Answers;
pub use error::CrashMatrixError;
pub use kill::{KillReport, KillTrial};
pub use matrix::{CrashMatrix, StoreFactory};
pub use report::{Boundary, BoundaryKind, Check, CrashReport, Cut, Ending, Trial, Violation};
pub use upgrade::UpgradeMatrix;
