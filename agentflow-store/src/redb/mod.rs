//! The redb backend: [`RedbStore`], the [`Store`](crate::Store) on an embedded redb file, with
//! its tables, its single writer thread and the staging of every write.

mod approvals;
mod audit;
mod breakers;
mod compact;
mod effects;
pub(crate) mod error;
mod event_log;
mod follow_ups;
mod idempotency;
mod leases;
mod listings;
pub mod owner;
mod purge;
mod queue;
mod reads;
mod redb_store;
mod restore;
mod schedules;
mod step_commit;
mod step_facts;
mod store_impl;
pub mod tables;
mod thread_numbers;
mod upgrade;
mod webhooks;
mod writer;

pub use redb_store::{RedbStore, RedbStoreBuilder};
