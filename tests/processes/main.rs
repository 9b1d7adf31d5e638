//! Several processes: runs killed (SIGKILL) or left by one process and resumed in another, and
//! workers in separate processes, and examples run as their own processes.

#[path = "../support/mod.rs"]
mod support;

mod crash;
mod crash_open;
mod crash_purge;
mod crash_upgrade;
mod examples_run;
mod mcp_served;
mod otel_grpc;
mod otel_trace;
mod promises_durability_exit;
mod second_process;
mod server;
mod server_stop;
mod subgraph_crash;
mod worker_processes;
