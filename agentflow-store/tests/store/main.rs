//! The stores (redb and PostgreSQL): the conformance suite, concurrency, damaged and older files,
//! records skipped on read, JSON depth limits and the defaults of the `Store` trait.

mod common;
#[cfg(feature = "postgres")]
mod pg_common;

mod audit_chain;
mod bit_flips;
mod concurrency;
mod conformance;
mod corruption;
mod json_depth;
mod older_formats;
mod open_file;
mod postgres_conformance;
mod postgres_events;
mod postgres_settle_race;
mod postgres_skipped_records;
mod postgres_store;
mod sealed_conformance;
mod skipped_records;
mod store_defaults;
