//! Reading a stored thread without its graph's Rust types: its description, its state folded
//! from the stored snapshot and updates, what it waits for, the stuck threads, an edit checked
//! against a tool's schema, sign-offs; what the inbox pages and the `agentflow` tool show.
//!
//! Everything here reads what the store keeps as JSON (the graph's description under its
//! fingerprint, the state's snapshot and updates, the recorded interrupts, the audit log), so
//! it works in a program that does not have the graph's types. One file a concept:
//!
//! - [`description`]: a thread's stored graph description, and graph names for listings;
//! - [`fold`]: the state at a checkpoint, folded through the reducers the description names,
//!   and what changed between two states;
//! - [`field_type`]: a JSON value checked against a state field's Rust type as the description
//!   writes it;
//! - [`waits`]: what a paused thread waits for;
//! - [`stuck`]: the threads no one is moving forward;
//! - [`edit_check`]: an edited approval checked against the tool's stored JSON schema;
//! - [`sign_offs`]: what the sign-offs of an approval waiting for more approvers approved;
//! - [`personal`]: personal and credential fields masked, and a read of personal data audited;
//! - [`display`]: times and values shown to people.
//!
//! A read that fails answers an [`InspectError`]: the thread is not there, or the store failed
//! or holds a record that does not decode.

pub mod description;
pub mod display;
pub mod edit_check;
mod error;
pub mod field_type;
pub mod fold;
pub mod personal;
pub mod sign_offs;
pub mod stuck;
pub mod waits;

pub use error::InspectError;
