//! Tools: typed async functions a model may call, each with a risk class.
//!
//! Write them with `#[tool(risk = read)]` on an `async fn` taking a typed
//! argument struct; its doc comment becomes the description and schemars
//! gives the JSON schema. A node lists the tools it may use
//! (`#[node(tools = [add, multiply])]`); every call goes through one gateway
//! ([`Ctx::call_tool`](crate::Ctx::call_tool)) that validates the arguments,
//! applies the [`Policy`] and, where the policy says so, asks a human first.

mod contract;
mod observation;
mod policy;
mod validate;

#[cfg(feature = "mcp")]
pub(crate) use contract::RemoteCall;
pub(crate) use contract::RemoteTools;
pub use contract::{AnyDeps, Compensation, Risk, Tool, ToolCx, ToolError, ToolSet, schema_of};
pub use observation::{Code, Observation};
pub use policy::{Decision, OnReject, OwnerRequired, Policy, RiskPolicy};
pub(crate) use validate::clip_deep_args;
pub use validate::{ArgumentError, args_hash, canonical_json, check_args_shape, validate_args};
