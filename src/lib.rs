//! Hosts the guides' doctests.
//!
//! Every guide under `docs/guides/` is the documentation of one empty module below, so
//! `cargo test --workspace` compiles and runs the guides' Rust blocks as doctests, with the
//! dev-dependencies of this package (`agentflow` with the `cli` and `testing` features,
//! `agentflow-store` with `postgres`, tokio with its macros and multi-threaded runtime).
//! The package is never published and this library exports nothing.
#![doc(hidden)]

/// State and reducers.
#[doc = include_str!("../docs/guides/state-and-reducers.md")]
pub mod state_and_reducers {}

/// Nodes, routes and what the compiler checks.
#[doc = include_str!("../docs/guides/nodes-and-routes.md")]
pub mod nodes_and_routes {}

/// Tools and models.
#[doc = include_str!("../docs/guides/tools-and-models.md")]
pub mod tools_and_models {}

/// Budgets and errors.
#[doc = include_str!("../docs/guides/budgets-and-errors.md")]
pub mod budgets_and_errors {}

/// Durable runs and resume.
#[doc = include_str!("../docs/guides/durable-runs.md")]
pub mod durable_runs {}

/// Humans in the loop: interrupts, approvals, the inbox.
#[doc = include_str!("../docs/guides/humans-in-the-loop.md")]
pub mod humans_in_the_loop {}

/// Map-reduce.
#[doc = include_str!("../docs/guides/map-reduce.md")]
pub mod map_reduce {}

/// Subgraphs.
#[doc = include_str!("../docs/guides/subgraphs.md")]
pub mod subgraphs {}

/// Streaming.
#[doc = include_str!("../docs/guides/streaming.md")]
pub mod streaming {}

/// Durable timers.
#[doc = include_str!("../docs/guides/durable-timers.md")]
pub mod durable_timers {}

/// Saga compensation.
#[doc = include_str!("../docs/guides/saga-compensation.md")]
pub mod saga_compensation {}

/// Circuit breakers.
#[doc = include_str!("../docs/guides/circuit-breakers.md")]
pub mod circuit_breakers {}

/// Workers and PostgreSQL.
#[doc = include_str!("../docs/guides/workers-and-postgres.md")]
pub mod workers_and_postgres {}

/// Who may do what: roles, tenants and the audit log.
#[doc = include_str!("../docs/guides/access-and-tenants.md")]
pub mod access_and_tenants {}

/// What is stored, and for how long: secrets, personal data, encryption, purge, retention.
#[doc = include_str!("../docs/guides/storage-rules.md")]
pub mod storage_rules {}

/// The CLI and operating runs.
#[doc = include_str!("../docs/guides/cli-and-operations.md")]
pub mod cli_and_operations {}

/// Testing your graph: the crash matrix.
#[doc = include_str!("../docs/guides/crash-testing.md")]
pub mod crash_testing {}

/// Guarantees in detail.
#[doc = include_str!("../docs/guides/guarantees.md")]
pub mod guarantees {}

/// Benchmarks: how to run them.
#[doc = include_str!("../docs/guides/benchmarks.md")]
pub mod benchmarks {}

/// MCP: tools from MCP servers, and a graph served as one.
#[doc = include_str!("../docs/guides/mcp.md")]
pub mod mcp {}

/// OpenTelemetry: runs as traces, one per thread.
#[doc = include_str!("../docs/guides/opentelemetry.md")]
pub mod opentelemetry {}

/// The server: graphs hosted over HTTP.
#[doc = include_str!("../docs/guides/server.md")]
pub mod server {}

/// Releasing a graph: versions, locks and migrations.
#[doc = include_str!("../docs/guides/releases.md")]
pub mod releases {}
