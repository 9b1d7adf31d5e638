//! Saga compensation: a reversible tool names the tool that
//! undoes it, `#[tool(risk = reversible, compensate = cancel_order)]`, and
//! when a thread's run fails for good or is cancelled, the runtime undoes
//! the thread's completed calls, newest first.
//!
//! # What is recorded
//!
//! When a call to a tool that names a compensation completes, the gateway
//! writes a `saga.step` entry to the thread's audit log in the transaction
//! that journals the call's result: the call, and the compensation's
//! arguments built from the call's arguments and result by
//! [`Compensates::from_call`]. So a call whose result is recorded is in the
//! log, whatever happens next. (A result a human settled through the desk
//! gets its entry when the call is replayed.) Only
//! completed calls are recorded: a call refused, failed, or cut off with an
//! unknown outcome (an `OUTCOME_UNKNOWN` record) is not compensated; the
//! unknown ones are listed in [`Outcome::Compensated`]'s `unknown`.
//!
//! # How compensation runs
//!
//! With a store and a thread, when a run ends [`Outcome::Failed`] (a fatal
//! error, including [`Ctx::compensate`](crate::Ctx::compensate)) or
//! [`Outcome::Cancelled`], and the thread has `saga.step` entries:
//!
//! 1. the thread's status becomes [`ThreadStatus::Compensating`](crate::persist::ThreadStatus::Compensating), durably;
//! 2. each recorded step's compensation runs, in reverse order of
//!    completion, under the effect journal: a *started* marker before it
//!    runs, its result and a `saga.compensated` audit entry in one
//!    transaction after. One that already has a result is never run again;
//! 3. the run ends [`Outcome::Compensated`] (status
//!    [`ThreadStatus::Compensated`](crate::persist::ThreadStatus::Compensated)) listing what was undone, or
//!    [`Outcome::CompensationFailed`] naming the compensation that failed
//!    (status stays `Compensating`, audit entry `saga.compensation_failed`):
//!    the later compensations do not run; a human looks, and a resume of the
//!    thread retries from the failed one.
//!
//! A process that dies during compensation leaves the thread
//! `Compensating`; [`Runner::resume`](crate::Runner::resume) then continues
//! the compensation (it does not run the graph). A compensation cut off
//! mid-call runs again with the same idempotency key if its tool is
//! `idempotent`; otherwise an `OUTCOME_UNKNOWN` record asks a human (with
//! [`ApprovalDesk::settle`](crate::approval::ApprovalDesk::settle):
//! succeeded counts it as done, run again runs it again, failed leaves the
//! saga failed for a human to finish by hand) and each resume ends
//! `CompensationFailed` until then.
//!
//! The compensation tool is called with the graph's deps (a graph built by
//! hand, without `#[graph]`, passes none, so a compensation that reads deps
//! fails there with a typed error), and needs not be in any node's `tools =
//! [..]` list; it is called directly, without the policy or an approval (it
//! was implied by the forward call's). That its deps type is the graph's is
//! checked when it runs, not at compile time.
//! [`Outcome::BudgetExhausted`] and [`Outcome::Interrupted`] do not
//! compensate: the thread can still continue.
//!
//! # Subgraph children
//!
//! A subgraph child's calls are logged in the child thread's audit log, each
//! with the step of the root thread that ran the child. A thread's
//! compensation undoes its children's calls (at every level) with its own:
//! newest first across the tree (by the root's step, then by when each call
//! was logged), each once under the thread's journal, and
//! [`Outcome::Compensated`] lists them all (its `unknown` too lists the
//! children's calls of unknown outcome). A call a child's own compensation
//! already undid (the child failed first) is not undone again.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

#[cfg(doc)]
use crate::outcome::Outcome;
pub use crate::outcome::Undone;
use crate::tool::{Compensation, Tool};

mod compensator;
mod log;

pub(crate) use compensator::{Compensator, status_of, triggers};
pub(crate) use log::{has_steps, record_step, step_entry};

/// A `#[tool]`'s argument struct, for `#[tool(compensate = ..)]`'s check
/// that the compensation's arguments can be built from the forward call.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tool, so it cannot be a compensation",
    label = "not a `#[tool]`",
    note = "a compensation is a tool declared with `#[tool(risk = ..)]` on an `async fn` taking a typed argument struct"
)]
pub trait ToolArgsOf: Tool {
    /// The argument struct.
    type Args;
}

/// A tool that names a compensation: its argument and result types, for
/// [`Compensates`]. `#[tool(compensate = ..)]` implements it.
pub trait Reversible: Tool {
    /// The forward call's argument struct.
    type Args;
    /// The forward call's result (`T` of `Result<T, ToolError>`).
    type Output;
}

/// How a compensation's arguments are built from the forward call it
/// undoes: implement it for the compensating tool's argument struct, once
/// per forward tool (`F` is the forward tool, e.g. `create_order`).
///
/// ```
/// use agentflow::prelude::*;
/// use agentflow::saga::Compensates;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Deserialize, Serialize, schemars::JsonSchema)]
/// struct NewOrder {
///     item: String,
/// }
///
/// #[derive(Deserialize, Serialize)]
/// struct Order {
///     id: u64,
/// }
///
/// #[derive(Deserialize, Serialize, schemars::JsonSchema)]
/// struct OrderRef {
///     id: u64,
/// }
///
/// /// Creates an order.
/// #[tool(risk = reversible, compensate = cancel_order)]
/// async fn create_order(args: NewOrder) -> Result<Order, ToolError> {
///     Ok(Order { id: 7 })
/// }
///
/// /// Cancels an order.
/// #[tool(risk = reversible)]
/// async fn cancel_order(args: OrderRef) -> Result<(), ToolError> {
///     Ok(())
/// }
///
/// impl Compensates<create_order> for OrderRef {
///     fn from_call(_args: NewOrder, order: Order) -> Self {
///         OrderRef { id: order.id }
///     }
/// }
/// # fn main() {}
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot undo a call of `{F}`: it does not implement `Compensates<{F}>`",
    label = "the compensation's arguments are built from the forward call here",
    note = "implement `agentflow::saga::Compensates<{F}>` for `{Self}` (the compensating tool's argument struct): \
            `fn from_call(args, result) -> Self` takes the forward call's arguments and result"
)]
pub trait Compensates<F: Reversible>: Sized {
    /// The compensation's arguments for the forward call made with `args`
    /// that returned `result`.
    fn from_call(args: F::Args, result: F::Output) -> Self;
}

/// A compensation named by `#[tool(compensate = ..)]`; used by the macro.
#[doc(hidden)]
pub fn compensation<F, C>(tool: &'static C) -> Compensation
where
    F: Reversible,
    F::Args: DeserializeOwned,
    F::Output: DeserializeOwned,
    C: ToolArgsOf,
    C::Args: Compensates<F> + Serialize,
{
    Compensation::new(tool, build::<F, C>)
}

fn build<F, C>(args: &Value, result: &Value) -> Result<Value, String>
where
    F: Reversible,
    F::Args: DeserializeOwned,
    F::Output: DeserializeOwned,
    C: ToolArgsOf,
    C::Args: Compensates<F> + Serialize,
{
    // The decoder's message quotes the value: only what the type expected is kept.
    let shape = crate::secret::describe_decode_error;
    let args: F::Args = serde_json::from_value(args.clone()).map_err(|e| format!("the arguments: {}", shape(&e)))?;
    let result: F::Output = serde_json::from_value(result.clone()).map_err(|e| format!("the result: {}", shape(&e)))?;
    serde_json::to_value(C::Args::from_call(args, result)).map_err(|e| format!("the compensation's arguments: {e}"))
}
