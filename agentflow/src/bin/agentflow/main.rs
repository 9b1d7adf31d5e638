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
//! # Who acts: `--as`, `--role`, `--tenant`, `--access`
//!
//! These global flags (given before or after the command) say who runs a command and what
//! they may do; every command is checked through the library's
//! [`Access`](agentflow::access::Access):
//!
//! - `--as USER` (or `AGENTFLOW_AS`): who acts. Required by the commands that record who
//!   acted (`approve`, `edit`, `reject`, `cancel`, `settle`, `answer`, `fork`, `update`,
//!   `run`), and by every command under `--access`.
//! - `--role ROLE` (repeatable): the user's roles, checked by the approval authorizer and by
//!   the `--access` policy.
//! - `--tenant TENANT` (repeatable): the tenants the user acts for. A thread of another
//!   tenant reads exactly like a missing one (exit code 1, the same message) and is left out
//!   of listings. None: every tenant.
//! - `--access FILE` (or `AGENTFLOW_ACCESS`): a role-access policy, JSON of operation names
//!   to lists of roles (`{"read_state": ["viewer", "operator"], "fork": ["operator"]}`); an
//!   operation it gives no role is denied (exit code 1 with the reason). Without it every
//!   operation is allowed, as before these flags. The operations: `threads`, `pending`,
//!   `stuck` need `list`; `show`, `graph`, `tail` need `read_state`; `history`, `diff`, `export`
//!   need `read_history`; `update` needs `update_state`; `fork` `fork`; `compact` `compact`; `purge` and `hold` `purge`;
//!   `import` `start` (for each thread of the file, of its tenant); the decisions `decide`;
//!   `answer` `answer`; `run resume|cancel|pause` `resume`, `cancel`, `pause`.
//!
//! **Trust boundary.** The tool opens the store itself, and holding the store permits
//! everything (see the `Store` trait's trust boundary): `--as`, `--role` and `--tenant` are
//! asserted by whoever runs it, not proven, and whoever can run it can run it with other
//! flags, or open the store file or URL without it. Its checks guard against mistakes of the
//! people who use it (acting outside their role or tenant, approving their own request,
//! deciding twice), not against whoever holds the store: give the tool, like the store file
//! or URL, only to people trusted with every thread, and give others the inbox (`serve`),
//! which checks each logged-in user on the server's side.
//!
//! **A file a server holds.** A redb file is open in one process at a time. While an
//! agentflow server (`agentflow::server::Server`, or `serve`) holds it, `pending`, `show`,
//! `tail`, `approve`, `reject`, `edit` and `schedules` go through the server's Unix socket, which the file's sidecar
//! (`<file>.owner`) names: the server acts as the person its users file maps the OS user running
//! the tool to (`"os_user"`), checks that person's roles and tenants, and records decisions in
//! their name (`--as`, if given, must name that person; `--role`, `--tenant`, `--access` and
//! `--roles-for` are the server's settings then). Every other command fails with exit code 3,
//! naming the server.
//!
//! `run resume|cancel|pause THREAD --as USER` asks the run queue, as an app's
//! `submit_resume`, `cancel_run` and `pause_run` do ([`RunControls`](agentflow::RunControls)):
//! resume queues the thread for a worker of its graph (named by the graph's stored
//! description); cancel and pause ask its queued or running run to stop at its next step
//! boundary (exit code 1 when the thread has no queued run).
//!
//! Every command prints a table for people, or JSON with stable field names
//! with `--json`.
//!
//! `threads --versions` counts the threads by graph id and version (from the stored graph
//! descriptions; one stored before graphs had versions is version 1) with how many may still
//! resume: once a version has none, the `migrate(from = ..)` of that version can be dropped.
//!
//! `graphs lock [CARGO TEST ARGS..]` and `graphs check [CARGO TEST ARGS..]` open no store: they
//! run `cargo test ARGS agentflow_graph_lock` (the cargo `CARGO` names, else `cargo` from
//! `PATH`), the test `#[graph]` generates for each released graph, with `AGENTFLOW_LOCK=write`
//! for `lock` (each graph's version gets its lock written) and without it for `check` (each graph
//! is compared with its locks); the command ends with cargo's exit code.
//!
//! `serve` is the approval inbox: a web page (loopback by default) where
//! users named in a `--users` file log in with a token and decide approvals
//! through the same desk and authorizer, with CSRF-checked forms, live
//! updates and `/metrics` (see the `serve` module). `serve --access FILE`
//! checks every page and form for the logged-in user (their roles, and the
//! `tenants` the users file gives them).
//!
//! # Exit codes
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | done |
//! | 1 | not found (thread, checkpoint, approval, store file; a thread of a tenant the user does not act for) or refused (an operation the `--access` policy denies, a decision the authorizer or the compare-and-set refused, edited arguments that do not fit the tool's schema, a thread that exists already on import, compacting an unfinished thread, purging a thread under legal hold, a run control for a thread with no queued run) |
//! | 2 | usage: bad arguments (a command that records who acted without `--as`, `--access` without `--as`, an unreadable `--access` file), bad JSON in `--set`/`--args`, an update the app could not read back, an unreadable export file, an output that cannot be written |
//! | 3 | store busy or unreachable: another process has the redb file open (a server holding it answers `pending`, `show`, `tail`, `approve`, `reject`, `edit` and `schedules` only), a run holds the thread (`update`, `fork`, `answer`, `purge`), or the PostgreSQL server cannot be reached |
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

mod access;
mod audit;
mod decide;
mod governance;
mod graphs;
mod inspect;
mod mcp;
mod open;
mod operate;
mod out;
mod personal;
mod remote;
mod runs;
mod schedules;
mod serve;
mod stuck;
mod tail;
mod transfer;
mod versions;

use std::process::ExitCode;

use agentflow::access::Operation;
use clap::{Parser, Subcommand};

/// What `--help` prints after the commands.
const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  not found (thread, checkpoint, approval, store file; a thread of another tenant
     than --tenant names) or refused (an operation the --access policy denies, a
     decision the authorizer or the compare-and-set refused, a thread that exists
     already on import, a run control for a thread with no queued run)
  2  usage: bad arguments (no --as where it is needed), bad JSON, an unreadable export
     or access file, an output that cannot be written (a reader that stops reading,
     as `| head`, ends the command with 0)
  3  store busy or unreachable: another process has the redb file open (a server
     holding it answers pending, show, tail, approve, reject and edit only), a run holds
     the thread (update, fork, answer), or the PostgreSQL server cannot be reached;
     for `mcp snapshot`, the MCP server cannot be started or reached
  4  store error: damaged, unsupported format, a read or write failed
  5  the state cannot be computed without the graph's Rust types (a custom reducer, an
     update naming a key the stored state does not hold)";

/// Inspect and operate agentflow threads: list, show, diff, decide approvals, audit, fork,
/// update, compact, export/import, draw the graph, find stuck threads, control queued runs.
/// `--as`, `--role`, `--tenant` and `--access` say who acts and what they may do.
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
    /// Who acts, their roles and tenants, and the access policy checked.
    #[command(flatten)]
    pub who: access::AccessArgs,
    /// The key store and key-encryption key of a sealed store.
    #[command(flatten)]
    pub sealing: open::SealingArgs,
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
    /// The audit log of one thread, or of every thread; `audit verify` checks it was not changed.
    Audit(audit::AuditArgs),
    /// Branch a thread at a checkpoint: the next resume continues from there.
    Fork(operate::ForkArgs),
    /// Write a manual update (JSON object of state fields) as a new checkpoint, audited; each
    /// value is checked against the field's Rust type named in the graph's stored description.
    Update(operate::UpdateArgs),
    /// Drop a finished thread's older checkpoints, keeping the newest ones.
    Compact(operate::CompactArgs),
    /// Remove a thread's data and its subgraph children's for good (states, writes, journal,
    /// approval arguments, audit details); their records and audit logs stay as tombstones.
    Purge(governance::PurgeArgs),
    /// Place a legal hold on a thread (`--reason`), which refuses its purge, or lift it
    /// (`--release`).
    Hold(governance::HoldArgs),
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
    /// Resume, cancel or pause a thread's run in the run queue (workers act on it).
    Run(runs::RunArgs),
    /// The cron schedules (when each fires next, what its last fire started); `schedules delete
    /// ID` removes one.
    Schedules(schedules::SchedulesArgs),
    /// A thread's event log, one line an entry (`--json`: its AG-UI events); `--follow` waits
    /// for more until the run ends.
    Tail(tail::TailArgs),
    /// The approval inbox: a web page to judge and decide approvals, with /metrics.
    Serve(serve::ServeArgs),
    /// MCP servers: `mcp snapshot` prints the snapshot of a server's tools to commit.
    Mcp(mcp::McpArgs),
    /// Released graphs' locks: `graphs lock` writes the lock of each graph's version, `graphs
    /// check` checks each graph against its locks (both run `cargo test` on the lock tests).
    Graphs(graphs::GraphsArgs),
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

impl From<agentflow::server::inspect::InspectError> for Failure {
    /// Not there: exit code 1; anything else is the store's (exit code 4).
    fn from(e: agentflow::server::inspect::InspectError) -> Self {
        match e {
            agentflow::server::inspect::InspectError::NotFound(message) => Failure::not_found(message),
            other => Failure::store(other),
        }
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
    // MCP and lock commands open no store.
    if let Command::Mcp(args) = &cli.command {
        return mcp::mcp(args);
    }
    if let Command::Graphs(args) = &cli.command {
        return graphs::graphs(args);
    }
    open::configure(&cli.sealing, matches!(cli.command, Command::Import(_)))?;
    let spec = cli.store.clone().ok_or_else(|| {
        Failure::usage(
            "no store given: pass --store PATH (a redb file) or --store postgres://..., or set AGENTFLOW_STORE",
        )
    })?;
    let json = cli.json;
    if let Command::Serve(args) = &cli.command {
        // The inbox checks each logged-in user: who runs the server is not who acts.
        if cli.who.user.is_some() || !cli.who.roles.is_empty() || !cli.who.tenants.is_empty() {
            return Err(Failure::usage(
                "serve checks each logged-in user (their roles and tenants come from the --users file); \
                 --as, --role and --tenant do not apply to it (unset AGENTFLOW_AS if it is set)",
            ));
        }
        let policy = access::policy(cli.who.access.as_ref())?;
        return serve::serve(&spec, cli.schema.as_deref(), args, policy);
    }
    let guard = access::Guard::new(&cli.who)?;
    let guard = &guard;
    // Import may create the store (once its file parsed: a bad file leaves no store behind);
    // every other command needs it to exist.
    if let Command::Import(args) = &cli.command {
        let threads = transfer::read(&args.file)?;
        // An import writes approvals as decided, effects as done and audit entries as the file
        // says: it needs `update_state` and `decide` besides `start`.
        for t in &threads {
            let id = &t.thread().id;
            guard.access().check_start(id, t.thread().tenant.as_deref()).map_err(access::denied)?;
            for op in [Operation::UpdateState, Operation::Decide] {
                guard.access().allow(op, Some(id)).map_err(access::denied)?;
            }
        }
        transfer::check_parents(&threads, |parent| {
            open::open(&spec, cli.schema.as_deref(), false).ok().and_then(|s| s.thread(parent).ok().flatten())
        })?;
        let store = open::open(&spec, cli.schema.as_deref(), true)?;
        let importer = guard.actor().id.clone();
        return transfer::import(&store, threads, &importer, json);
    }
    let store = match open::open(&spec, cli.schema.as_deref(), false) {
        // A redb file a server holds: some commands go through the server's socket.
        Err(busy) if busy.code == code::BUSY => return remote::held(&spec, &cli.command, &cli.who, json, busy),
        opened => opened?,
    };
    let store = &store;
    let read = |op: Operation, thread: &str| guard.thread(store.as_ref(), op, thread).map(drop);
    match cli.command {
        Command::Threads(args) => inspect::threads(store.as_ref(), guard, &args, json),
        Command::Show { thread } => {
            read(Operation::ReadState, &thread)?;
            inspect::show(store.as_ref(), guard, &thread, json)
        }
        Command::History { thread } => {
            read(Operation::ReadHistory, &thread)?;
            inspect::history(store.as_ref(), &thread, json)
        }
        Command::Diff { thread, seq_a, seq_b } => {
            read(Operation::ReadHistory, &thread)?;
            inspect::diff(store.as_ref(), guard, &thread, seq_a, seq_b, json)
        }
        Command::Pending => inspect::pending(store, guard, json),
        Command::Approve(args) => decide::decide(store, guard, decide::Kind::Approve, &args, json),
        Command::Edit(args) => decide::decide(store, guard, decide::Kind::Edit, &args, json),
        Command::Reject(args) => decide::decide(store, guard, decide::Kind::Reject, &args, json),
        Command::Cancel(args) => decide::decide(store, guard, decide::Kind::Cancel, &args, json),
        Command::Answer(args) => decide::answer(store, guard, &args, json),
        Command::Settle(args) => decide::decide(store, guard, decide::Kind::Settle, &args, json),
        Command::Audit(audit::AuditArgs { action: Some(audit::AuditAction::Verify { thread }), .. }) => {
            audit::verify(store.as_ref(), guard, thread.as_deref(), json)
        }
        Command::Audit(audit::AuditArgs { thread, action: None }) => {
            operate::audit(store, guard, thread.as_deref(), json)
        }
        Command::Fork(args) => {
            let actor = guard.named("fork")?;
            read(Operation::Fork, &args.thread)?;
            operate::fork(store, &args, &actor.id, json)
        }
        Command::Update(args) => {
            let actor = guard.named("update")?;
            read(Operation::UpdateState, &args.thread)?;
            operate::update(store, &args, &actor.id, json)
        }
        Command::Compact(args) => {
            read(Operation::Compact, &args.thread)?;
            operate::compact(store, &args, json)
        }
        Command::Purge(args) => {
            let actor = guard.named("purge")?;
            read(Operation::Purge, &args.thread)?;
            governance::purge(store, &args, &actor.id, json)
        }
        Command::Hold(args) => {
            let actor = guard.named("hold")?;
            read(Operation::Purge, &args.thread)?;
            governance::hold(store, &args, &actor.id, json)
        }
        Command::Export(args) => {
            read(Operation::ReadHistory, &args.thread)?;
            personal::export(store.as_ref(), guard.access(), &args.thread)?;
            transfer::export(store, &args)
        }
        // Handled above, before the store is opened.
        Command::Import(_) => Ok(()),
        Command::Graph { thread } => {
            read(Operation::ReadState, &thread)?;
            inspect::graph(store.as_ref(), &thread, json)
        }
        Command::Stuck(args) => stuck::stuck(store, guard, &args, json),
        Command::Run(args) => runs::run(store, guard, &args, json),
        Command::Tail(args) => tail::tail(store, guard, &args, json),
        Command::Schedules(args) => schedules::schedules(store.as_ref(), guard, &args, json),
        Command::Serve(_) | Command::Mcp(_) | Command::Graphs(_) => Ok(()),
    }
}
