//! The `agentflow` command-line tool and serving over HTTP: the commands run on a store, the
//! approval inbox served to people (its pages, its limits, a browser driving it), and
//! `serve_limits` (feature `server`; the rest needs feature `cli`).

#[cfg(feature = "cli")]
mod cli;
#[cfg(feature = "cli")]
mod inbox_abuse;
#[cfg(feature = "cli")]
mod inbox_browser;
#[cfg(feature = "cli")]
mod inbox_common;
#[cfg(feature = "cli")]
mod serve;
mod serve_limits;
