//! Durable runs on PostgresStore against the server at `AGENTFLOW_PG_URL`.

#[path = "../support/mod.rs"]
mod support;

mod postgres_runs;
