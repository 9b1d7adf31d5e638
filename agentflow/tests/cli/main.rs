//! The `agentflow` command-line tool and serving over HTTP: the commands run on a store, the
//! approval inbox served to people (its pages, its limits, a browser driving it), and
//! `serve_limits` (feature `server`; the rest needs feature `cli`).

#[cfg(feature = "cli")]
mod access_fixture;
#[cfg(feature = "cli")]
mod access_matrix;
#[cfg(feature = "cli")]
mod access_tenants;
#[cfg(feature = "cli")]
mod cli;
#[cfg(feature = "cli")]
mod cli_access;
#[cfg(feature = "cli")]
mod cli_audit;
#[cfg(feature = "cli")]
mod cli_common;
#[cfg(feature = "cli")]
mod cli_mcp;
#[cfg(feature = "cli")]
mod cli_personal;
#[cfg(feature = "cli")]
mod cli_purge;
#[cfg(feature = "cli")]
mod cli_schedules;
#[cfg(feature = "cli")]
mod cli_sealed;
#[cfg(feature = "cli")]
mod cli_secrets;
#[cfg(feature = "cli")]
mod cli_state;
#[cfg(feature = "cli")]
mod cli_tail;
#[cfg(feature = "cli")]
mod cli_transfer;
#[cfg(feature = "cli")]
mod cli_versions;
#[cfg(feature = "cli")]
mod inbox_abuse;
#[cfg(feature = "cli")]
mod inbox_browser;
#[cfg(feature = "cli")]
mod inbox_browser_layout;
#[cfg(feature = "cli")]
mod inbox_common;
#[cfg(feature = "cli")]
mod owner_socket;
#[cfg(feature = "cli")]
mod serve;
#[cfg(feature = "cli")]
mod serve_decisions;
#[cfg(feature = "cli")]
mod serve_interrupts;
mod serve_limits;
#[cfg(feature = "cli")]
mod thread_page;
