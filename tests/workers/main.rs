//! Workers: claiming queued threads, commits, lost leases, parking paused runs, stopping, subgraph
//! approvals and waits, follow-up runs and their strategies (a rollback during a resume), completion webhooks, cron schedules
//! (fired once however late and however many processes race for a fire, on `RedbStore` and on
//! `PostgresStore`, skipped with one line without `AGENTFLOW_PG_URL`).

#[path = "../support/mod.rs"]
mod support;

mod follow_up_reclaims;
mod follow_up_rollback_resume;
mod follow_up_rollback_retry;
mod follow_up_versions;
mod follow_ups;
mod schedules;
mod schedules_racing;
mod schedules_revoked;
mod webhooks;
mod worker_answers;
mod worker_approval_waits;
mod worker_commits;
mod worker_lease_lost;
mod worker_naps;
mod worker_pause_park;
mod worker_stop_races;
mod worker_subgraph_approvals;
mod worker_tenants;
mod worker_versions;
mod worker_waits;
mod workers;
