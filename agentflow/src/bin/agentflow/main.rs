//! `agentflow`: inspect and operate the threads of an agentflow store from a
//! shell, without the graph's Rust types (build with the `cli` feature:
//! `cargo install agentflow-runtime --features cli`, or `cargo run -p
//! agentflow-runtime --features cli --bin agentflow -- ...`).
//!
//! The tool opens the store a graph persists to (`--store PATH` for a redb
//! file, `--store postgres://...` for PostgreSQL, or the `AGENTFLOW_STORE`
//! environment variable) and reads what the executor wrote there: threads,
//! checkpoints, pending interrupts, approvals, the audit log and the graph's
//! description (its Mermaid drawing, state fields and tools, stored under
//! the graph's fingerprint when a thread of it is created). States are
//! stored as JSON, so `show` and `diff` fold a thread's state from its
//! snapshot and updates with the reducers named in that description.
//!
//! `answer THREAD --value JSON --as USER` records the answer to a thread waiting in
//! `cx.interrupt` ([`ApprovalDesk::answer_interrupt`](agentflow::approval::ApprovalDesk::answer_interrupt));
//! the app's next plain `resume()` of the thread continues with it, or, for a thread a worker
//! ran, a worker does (the answer wakes the run it parked in the queue). With `--question ID`
//! (the id `show THREAD` prints) the answer is for that question alone, and refused if the thread
//! asks another question by then ([`ApprovalDesk::answer_question`](agentflow::approval::ApprovalDesk::answer_question)).
//! A step that asks several questions is answered one question at a time this way (an answer
//! without `--question` is refused then); it goes on once each has its answer. `--all-alike`
//! answers every question of the step with one value, when they all ask the very same thing.
//!
//! Decisions (`approve`, `edit`, `reject`, `cancel`, `settle`) go through the
//! library's [`ApprovalDesk`](agentflow::approval::ApprovalDesk) with a
//! [`RoleAuthorizer`](agentflow::approval::RoleAuthorizer): the same
//! authorization (no self-approval, the role the risk class needs, the
//! two-person rule when asked for) and the same compare-and-set as an app's
//! own desk, and the same audit entries, naming the `--as` user. A decision
//! says who goes on with the thread: a worker, by itself, for a thread whose
//! run is in the run queue (submitted to workers); otherwise the app's resume.
//!
//! The tool holds the store, and holding the store permits everything (see
//! the `Store` trait's trust boundary): `--as` and `--role` are asserted by
//! whoever runs it, not proven. The checks keep honest operators from
//! mistakes (approving their own request, deciding outside their role,
//! deciding twice); give the tool, like the store file or URL, only to
//! people trusted to decide approvals.
//!
//! Every command prints a table for people, or JSON with stable field names
//! with `--json`.
//!
//! `serve` is the approval inbox: a web page (loopback by default) where
//! users named in a `--users` file log in with a token and decide approvals
//! through the same desk and authorizer, with CSRF-checked forms, live
//! updates and `/metrics` (see the `serve` module).
//!
//! # Exit codes
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | done |
//! | 1 | not found (thread, checkpoint, approval, store file) or refused (a decision the authorizer or the compare-and-set refused, edited arguments that do not fit the tool's schema, a thread that exists already on import, compacting an unfinished thread) |
//! | 2 | usage: bad arguments, bad JSON in `--set`/`--args`, an update the app could not read back, an unreadable export file, an output that cannot be written |
//! | 3 | store busy or unreachable: another process has the redb file open, a run holds the thread (`update`, `fork`, `answer`), or the PostgreSQL server cannot be reached |
//! | 4 | store error: the store is damaged, of an unsupported format, or a read or write failed |
//! | 5 | the thread's state cannot be computed without the graph's Rust types (a custom reducer, an update that does not fit, an update naming a key the stored state does not hold) |
//!
//! A reader that stops reading the output (`agentflow audit --json | head -1`: standard output
//! is a pipe closed by its reader) ends the command early with code 0 and nothing on standard
//! error, as `SIGPIPE` ends a C tool: the reader chose to stop. Any other error writing
//! standard output (a full disk) is code 2 with a message.

/// `println!` for commands: writes the line to standard output through [`out::write`] and
/// returns its [`Outcome`] (use it with `?`), so a closed pipe or a failed write ends the
/// command instead of panicking.
macro_rules! outln {
    () => {
        $crate::out::write(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::write(format_args!($($arg)*))
    };
}

mod decide;
mod fold;
mod inspect;
mod open;
mod operate;
mod out;
mod serve;
mod stuck;
mod transfer;
mod types;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// What `--help` prints after the commands.
const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  not found (thread, checkpoint, approval, store file) or refused (a decision the
     authorizer or the compare-and-set refused; a thread that exists already on import)
  2  usage: bad arguments, bad JSON, an unreadable export file, an output that cannot
     be written (a reader that stops reading, as `| head`, ends the command with 0)
  3  store busy or unreachable: another process has the redb file open, a run holds
     the thread (update, fork, answer), or the PostgreSQL server cannot be reached
  4  store error: damaged, unsupported format, a read or write failed
  5  the state cannot be computed without the graph's Rust types (a custom reducer, an
     update naming a key the stored state does not hold)";

/// Inspect and operate agentflow threads: list, show, diff, decide approvals, audit, fork,
/// update, compact, export/import, draw the graph, find stuck threads.
#[derive(Parser, Debug)]
#[command(name = "agentflow", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// The store: a redb file path, or a postgres:// URL.
    #[arg(long, env = "AGENTFLOW_STORE", global = true)]
    pub store: Option<String>,
    /// The PostgreSQL schema the store lives in (default `agentflow`).
    #[arg(long, env = "AGENTFLOW_PG_SCHEMA", global = true, value_name = "NAME")]
    pub schema: Option<String>,
    /// Print JSON (stable field names) instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// List threads.
    Threads(inspect::ThreadsArgs),
    /// A thread's state, status, what it waits for, and its budget usage.
    Show {
        /// The thread id.
        thread: String,
    },
    /// A thread's checkpoints, oldest first.
    History {
        /// The thread id.
        thread: String,
    },
    /// What changed in a thread's state between two checkpoints (JSON pointer paths).
    Diff {
        /// The thread id.
        thread: String,
        /// The earlier checkpoint.
        seq_a: u64,
        /// The later checkpoint.
        seq_b: u64,
    },
    /// Everything waiting for a person: interrupts, approvals, unknown outcomes.
    Pending,
    /// Approve a pending tool call as requested (optionally with --conditions JSON).
    Approve(decide::DecideArgs),
    /// Approve a pending tool call with other arguments (--args JSON).
    Edit(decide::DecideArgs),
    /// Reject a pending tool call (--reason is handed to the model).
    Reject(decide::DecideArgs),
    /// Withdraw a pending tool call; it will not run.
    Cancel(decide::DecideArgs),
    /// Settle a call whose outcome is unknown: --succeeded JSON, --failed REASON or --run-again.
    Settle(decide::DecideArgs),
    /// Answer a thread waiting in `cx.interrupt` (--value JSON); the app's next resume() (or a worker) uses it.
    Answer(decide::AnswerArgs),
    /// The audit log of one thread, or of every thread.
    Audit {
        /// The thread id (every thread when left out).
        thread: Option<String>,
    },
    /// Branch a thread at a checkpoint: the next resume continues from there.
    Fork(operate::ForkArgs),
    /// Write a manual update (JSON object of state fields) as a new checkpoint, audited; each
    /// value is checked against the field's Rust type named in the graph's stored description.
    Update(operate::UpdateArgs),
    /// Drop a finished thread's older checkpoints, keeping the newest ones.
    Compact(operate::CompactArgs),
    /// Write a thread (checkpoints, writes, effects, approvals, audit log, graph) as JSON lines,
    /// followed by its subgraph children's threads.
    Export(transfer::ExportArgs),
    /// Restore threads written by `export` into this store.
    Import(transfer::ImportArgs),
    /// The Mermaid drawing of a thread's graph.
    Graph {
        /// The thread id.
        thread: String,
    },
    /// Threads waiting on a person too long, runs whose lease expired with no worker, overdue timers.
    Stuck(stuck::StuckArgs),
    /// The approval inbox: a web page to judge and decide approvals, with /metrics.
    Serve(serve::ServeArgs),
}

/// A command's failure: the exit code and the one-line message.
#[derive(Debug)]
pub struct Failure {
    /// The exit code (see the crate docs).
    pub code: u8,
    /// What went wrong and what to do.
    pub message: String,
}

/// Exit codes.
pub mod code {
    /// Done; also a command whose output's reader stopped reading.
    pub const DONE: u8 = 0;
    /// Not found, or refused.
    pub const NOT_FOUND: u8 = 1;
    /// Bad arguments or input.
    pub const USAGE: u8 = 2;
    /// The store is held by another process or cannot be reached.
    pub const BUSY: u8 = 3;
    /// The store failed.
    pub const STORE: u8 = 4;
    /// The state cannot be computed without the graph's types.
    pub const OPAQUE: u8 = 5;
}

impl Failure {
    /// A failure with `code`.
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure { code, message: message.into() }
    }
    /// Exit code 1.
    pub fn not_found(message: impl Into<String>) -> Self {
        Failure::new(code::NOT_FOUND, message)
    }
    /// Exit code 2.
    pub fn usage(message: impl Into<String>) -> Self {
        Failure::new(code::USAGE, message)
    }
    /// Exit code 4.
    pub fn store(e: impl std::fmt::Display) -> Self {
        Failure::new(code::STORE, e.to_string())
    }
    /// Standard output's reader stopped reading (a closed pipe): the command ends here, with
    /// exit code 0 and no message.
    pub fn output_closed() -> Self {
        Failure::new(code::DONE, "")
    }
}

/// The result of a command.
pub type Outcome = Result<(), Failure>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of the output chose to stop reading: nothing went wrong.
        Err(f) if f.code == code::DONE => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("agentflow: {}", out::printable_line(&f.message));
            ExitCode::from(f.code)
        }
    }
}

fn run(cli: Cli) -> Outcome {
    let spec = cli.store.clone().ok_or_else(|| {
        Failure::usage(
            "no store given: pass --store PATH (a redb file) or --store postgres://..., or set AGENTFLOW_STORE",
        )
    })?;
    let json = cli.json;
    if let Command::Serve(args) = &cli.command {
        return serve::serve(&spec, cli.schema.as_deref(), args);
    }
    // Import may create the store (once its file parsed: a bad file leaves no store behind);
    // every other command needs it to exist.
    if let Command::Import(args) = &cli.command {
        let threads = transfer::read(&args.file)?;
        let store = open::open(&spec, cli.schema.as_deref(), true)?;
        return transfer::import(&store, threads, json);
    }
    let store = open::open(&spec, cli.schema.as_deref(), false)?;
    let store = &store;
    match cli.command {
        Command::Threads(args) => inspect::threads(store.as_ref(), &args, json),
        Command::Show { thread } => inspect::show(store.as_ref(), &thread, json),
        Command::History { thread } => inspect::history(store.as_ref(), &thread, json),
        Command::Diff { thread, seq_a, seq_b } => inspect::diff(store.as_ref(), &thread, seq_a, seq_b, json),
        Command::Pending => inspect::pending(store, json),
        Command::Approve(args) => decide::decide(store, decide::Kind::Approve, &args, json),
        Command::Edit(args) => decide::decide(store, decide::Kind::Edit, &args, json),
        Command::Reject(args) => decide::decide(store, decide::Kind::Reject, &args, json),
        Command::Cancel(args) => decide::decide(store, decide::Kind::Cancel, &args, json),
        Command::Answer(args) => decide::answer(store, &args, json),
        Command::Settle(args) => decide::decide(store, decide::Kind::Settle, &args, json),
        Command::Audit { thread } => operate::audit(store, thread.as_deref(), json),
        Command::Fork(args) => operate::fork(store, &args, json),
        Command::Update(args) => operate::update(store, &args, json),
        Command::Compact(args) => operate::compact(store, &args, json),
        Command::Export(args) => transfer::export(store, &args),
        // Handled above, before the store is opened.
        Command::Import(_) => Ok(()),
        Command::Graph { thread } => inspect::graph(store.as_ref(), &thread, json),
        Command::Stuck(args) => stuck::stuck(store, &args, json),
        Command::Serve(_) => Ok(()),
    }
}
