//! Several processes: runs killed (SIGKILL) or left by one process and resumed in another (a
//! follow-up run among them), and workers in separate processes, and examples run as their own
//! processes; the server's event streams as clients read them (a program, the AG-UI client
//! under Node, a browser).

#[path = "../support/mod.rs"]
mod support;

mod crash;
mod crash_graph_migration;
mod crash_open;
mod crash_purge;
mod crash_upgrade;
mod examples_run;
mod follow_up_kill;
mod graph_upgrade;
mod idempotent_start;
mod mcp_served;
mod otel_grpc;
mod otel_trace;
mod promises_durability_exit;
mod second_process;
mod server;
mod server_stop;
mod sse_reader;
mod stream;
mod stream_ag_ui;
mod stream_browser;
mod subgraph_crash;
mod worker_processes;
