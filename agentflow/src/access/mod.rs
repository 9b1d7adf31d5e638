//! Who may do what: the [`Operation`]s on stored threads, the [`Actor`] who asks, the
//! [`AccessPolicy`] that decides, and [`Access`], the pair of a policy and an actor that every
//! operation is checked through.
//!
//! Every operation on a stored thread is checked twice:
//! - **tenants**: a thread's tenant is fixed when it is created (a subgraph child takes its
//!   parent's); an actor acts for every tenant or for the ones it names, and a thread of
//!   another tenant is *not found* for it (its existence is not revealed), and is left out of
//!   listings;
//! - **roles**: the policy says whether the actor may perform the operation
//!   ([`AllowAll`], the default, or [`RoleAccess`], a role per operation).
//!
//! An [`App`](crate::App) checks its operations for the actor the call names (`fork`,
//! `update_state`, the `_as` controls) or else for its own actor ([`App::acting_as`],
//! default [`Actor::process`]); an actor a call names acts only within the tenants of the
//! app's actor ([`Access::on_behalf_of`]). The approval desk checks deciding and answering
//! for the approver and its reads for its reader; the `agentflow` CLI and its inbox check
//! each command for the user they are told (`--as`, the users file). Runs the app starts for
//! itself (subgraph children, a worker's claims, the scheduler's wakes) are not checked again.
//!
//! Thread ids are one namespace per store: starting a thread under an id another tenant
//! uses is refused as existing. Give threads ids that reveal nothing.
//!
//! **Trust boundary.** These checks run in the process that holds the store. Whoever holds
//! the store file or its URL holds every thread: the CLI opens the store itself, so its checks
//! guard against mistakes of people who use it, not against whoever can run it with other
//! flags or open the file. Give the store, like a database password, only to the processes
//! that enforce these rules for others (an app, the inbox).
//!
//! [`App::acting_as`]: crate::App::acting_as

mod actor;
mod check;
mod operation;
pub mod personal;
mod policy;

pub use actor::{Actor, Tenants};
pub use check::{Access, AccessError};
pub use operation::Operation;
pub use policy::{AccessPolicy, AllowAll, RoleAccess, RoleAccessError};
