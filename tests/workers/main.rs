//! Workers: claiming queued threads, commits, lost leases, parking paused runs, stopping, subgraph
//! approvals and waits.

#[path = "../support/mod.rs"]
mod support;

mod worker_answers;
mod worker_approval_waits;
mod worker_commits;
mod worker_lease_lost;
mod worker_naps;
mod worker_pause_park;
mod worker_stop_races;
mod worker_subgraph_approvals;
mod worker_tenants;
mod worker_waits;
mod workers;
