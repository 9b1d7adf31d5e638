//! `graphs lock` and `graphs check`: run the lock test `#[graph]` generates for each released
//! graph (`agentflow_graph_lock`) through `cargo test`, writing the lock of each graph's version
//! or checking each graph against its locks.

use std::ffi::OsString;
use std::process::Command as Process;

use agentflow::release::LOCK_ENV;
use clap::{Args, Subcommand};

use crate::{Failure, Outcome};

/// The test `#[graph]` generates in the module of each released graph.
pub const LOCK_TEST: &str = "agentflow_graph_lock";

/// `graphs`.
#[derive(Args, Debug)]
pub struct GraphsArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: GraphsAction,
}

/// `graphs lock` or `graphs check`.
#[derive(Subcommand, Debug)]
pub enum GraphsAction {
    /// Write the lock of each released graph's version: `AGENTFLOW_LOCK=write cargo test ARGS
    /// agentflow_graph_lock`. Commit the files it writes under `graphs/<id>/`.
    Lock(CargoArgs),
    /// Check each released graph against its locks: `cargo test ARGS agentflow_graph_lock`.
    Check(CargoArgs),
}

/// What is handed to `cargo test`.
#[derive(Args, Debug)]
pub struct CargoArgs {
    /// Arguments for `cargo test`, placed before the test name (`-p CRATE`, `--example NAME`,
    /// `--features F`); those after `--` go to the test binaries.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "CARGO TEST ARGS")]
    pub args: Vec<String>,
}

/// The arguments of `cargo`: `test`, the given arguments up to a `--`, the lock test's name,
/// then the rest (`--` and the test binaries' arguments).
pub fn cargo_args(args: &[String]) -> Vec<String> {
    let split = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let mut out = vec!["test".to_string()];
    out.extend_from_slice(&args[..split]);
    out.push(LOCK_TEST.into());
    out.extend_from_slice(&args[split..]);
    out
}

/// The cargo to run: `CARGO` when set (cargo sets it for the programs it runs), else `cargo`
/// from `PATH`.
fn cargo_program() -> OsString {
    std::env::var_os("CARGO").filter(|c| !c.is_empty()).unwrap_or_else(|| "cargo".into())
}

/// `graphs lock` and `graphs check`: runs cargo and ends with its exit code.
pub fn graphs(args: &GraphsArgs) -> Outcome {
    let (write, given) = match &args.action {
        GraphsAction::Lock(a) => (true, a),
        GraphsAction::Check(a) => (false, a),
    };
    let program = cargo_program();
    let mut cargo = Process::new(&program);
    cargo.args(cargo_args(&given.args));
    if write {
        cargo.env(LOCK_ENV, "write");
    } else {
        // A variable left set in the shell would write instead of check.
        cargo.env_remove(LOCK_ENV);
    }
    let shown = program.to_string_lossy();
    let status = cargo.status().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Failure::usage(format!(
                "cannot run `{shown}`: no such program; install Rust's cargo (https://rustup.rs), or set CARGO to \
                 the cargo to run"
            ))
        } else {
            Failure::usage(format!("cannot run `{shown}`: {e}"))
        }
    })?;
    if status.success() {
        return Ok(());
    }
    let what = if write {
        "the locks were not all written"
    } else {
        "a released graph does not match its locks, or the tests do not build"
    };
    match status.code() {
        // Cargo's own code; 0 would read as success, so a code that wraps to it is 1.
        Some(code) => Err(Failure::new(
            u8::try_from(code).ok().filter(|c| *c != 0).unwrap_or(1),
            format!("`cargo test` failed with exit code {code}: {what} (see cargo's output above)"),
        )),
        None => Err(Failure::new(1, format!("`cargo test` was stopped by a signal: {what}"))),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{GraphsAction, cargo_args};
    use crate::{Cli, Command};

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn the_test_name_goes_after_cargos_arguments_and_before_the_test_binaries() {
        assert_eq!(cargo_args(&[]), ["test", "agentflow_graph_lock"]);
        assert_eq!(
            cargo_args(&strings(&["-p", "support", "--example", "x"])),
            ["test", "-p", "support", "--example", "x", "agentflow_graph_lock"]
        );
        assert_eq!(
            cargo_args(&strings(&["-p", "support", "--", "--nocapture"])),
            ["test", "-p", "support", "agentflow_graph_lock", "--", "--nocapture"]
        );
    }

    #[test]
    fn cargos_flags_are_taken_as_they_are() {
        let cli = Cli::try_parse_from(["agentflow", "graphs", "check", "-p", "support", "--release", "--", "-q"])
            .expect("parses");
        let Command::Graphs(args) = cli.command else { panic!("graphs: {:?}", cli.command) };
        let GraphsAction::Check(given) = args.action else { panic!("check: {:?}", args.action) };
        assert_eq!(given.args, ["-p", "support", "--release", "--", "-q"]);
        let cli = Cli::try_parse_from(["agentflow", "graphs", "lock"]).expect("parses");
        let Command::Graphs(args) = cli.command else { panic!("graphs: {:?}", cli.command) };
        assert!(matches!(args.action, GraphsAction::Lock(ref given) if given.args.is_empty()));
    }
}
