//! A follow-up reminder on a durable timer, surviving the process that set it.
//!
//! write -> wait -> remind. `write` has the model draft a message to a customer and sends it;
//! `wait` is a `#[node(sleep)]` that calls `cx.sleep(..)`: the wake time is journaled, the run
//! ends as `Outcome::Sleeping` and the thread's status is `sleeping`, with its timer in the store.
//! Nothing stays in memory. `App::wake`, in this process or any later one, resumes the thread
//! once it is due (a long-running process would start a `Scheduler`, which does the same for every
//! due timer); `wait` runs again, its `sleep` returns at once, and `remind` sends the follow-up. Both sends go through `cx.effect`, so each happens once even if a node runs again:
//! every send appends one line to an outbox file, which is how you (and the tests) can count them.
//!
//! ```text
//! cargo run --example follow_up                                  # send, sleep 2 s, wake and remind, in one process
//! cargo run --example follow_up -- --exit-while-sleeping         # send, then exit while the thread sleeps
//! cargo run --example follow_up -- --status                      # the threads, their status and timers
//! cargo run --example follow_up -- --wake                        # later, in a new process: fire what is due
//! cargo run --example follow_up -- --after 10 --exit-while-sleeping   # a 10 s follow-up
//! ```
//!
//! `--db PATH` (or `AGENTFLOW_FOLLOW_UP_DB`) picks the redb store file, by default
//! `agentflow-follow-up/follow_up.redb` under the system temp dir; `--outbox PATH` the outbox
//! file, by default the store's path with the extension `outbox`. The model is `ScriptedModel`,
//! a deterministic test double that writes both messages from a template; no LLM is called.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agentflow::message::{Message, Role};
use agentflow::model::{ChatModel, ChatReply, ChatRequest, ScriptedModel};
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::timer::now_ms;
use agentflow::{RedbStore, Store};
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------- state

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct FollowUp {
    customer: String,
    topic: String,
    /// How long after the first message the follow-up is due, in milliseconds.
    wait_ms: u64,
    /// The first message, as sent.
    message: Option<String>,
    /// The follow-up, as sent.
    reminder: Option<String>,
    #[reduce(append)]
    path: Vec<String>,
}

// ---------------------------------------------------------------- dependencies

pub struct Services {
    pub model: Arc<dyn ChatModel>,
    pub outbox: Outbox,
}

/// Where messages go: one line per message appended to a file, `KIND<TAB>THREAD<TAB>UNIX_MS<TAB>
/// pid=PID<TAB>KEY<TAB>TEXT`, so anyone can count what was sent.
pub struct Outbox {
    pub path: PathBuf,
}

impl Outbox {
    /// Sends (appends) one message. Called through `cx.effect`, so a node that runs again does
    /// not send twice: `key` is the effect's idempotency key.
    fn send(&self, kind: &str, thread: &str, to: &str, text: &str, key: &str) -> std::io::Result<String> {
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&self.path)?;
        writeln!(file, "{kind}\t{thread}\t{}\tpid={}\t{key}\t{flat}", now_ms(), std::process::id())?;
        println!("    [outbox] {kind} to {to}: {flat:?}");
        Ok(format!("{kind} sent to {to}"))
    }
}

fn io_error(e: std::io::Error) -> NodeError {
    NodeError::transient(format!("the outbox cannot be written: {e}"))
}

// ---------------------------------------------------------------- the graph

#[graph(state = FollowUp, deps = Services, start = write)]
pub mod reminder {
    use super::*;

    /// Drafts the first message with the model and sends it.
    #[node(goto = [wait])]
    async fn write(s: &FollowUp, cx: &Ctx<Services>) -> Result<Step<FollowUp>, NodeError> {
        let prompt = format!("Write to {} about {}.", s.customer, s.topic);
        let text = cx.chat(&*cx.deps().model, &ChatRequest::new(vec![Message::human(prompt)])).await?.text;
        let thread = cx.thread().unwrap_or("-").to_string();
        let (to, body) = (&s.customer, &text);
        cx.effect("send-message", |key| async move {
            cx.deps().outbox.send("message", &thread, to, body, &key).map_err(io_error)
        })
        .await?;
        Ok(goto!(wait, FollowUp::update().message(Some(text)).path(vec!["write".into()])))
    }

    /// Waits for the follow-up on a durable timer. The first run ends here (`Sleeping`); when
    /// the thread is resumed once due, the node runs again and `sleep` returns at once.
    #[node(goto = [remind], sleep)]
    async fn wait(s: &FollowUp, cx: &Ctx<Services>) -> Result<Step<FollowUp>, NodeError> {
        cx.sleep(Duration::from_millis(s.wait_ms)).await?;
        Ok(goto!(remind, FollowUp::update().path(vec!["wait".into()])))
    }

    /// Fires the reminder: drafted by the model, sent once.
    #[node(goto = [END])]
    async fn remind(s: &FollowUp, cx: &Ctx<Services>) -> Result<Step<FollowUp>, NodeError> {
        let prompt = format!("Write a short follow-up to {} about {}: no answer yet.", s.customer, s.topic);
        let text = cx.chat(&*cx.deps().model, &ChatRequest::new(vec![Message::human(prompt)])).await?.text;
        let thread = cx.thread().unwrap_or("-").to_string();
        let (to, body) = (&s.customer, &text);
        cx.effect("send-reminder", |key| async move {
            cx.deps().outbox.send("reminder", &thread, to, body, &key).map_err(io_error)
        })
        .await?;
        Ok(goto!(END, FollowUp::update().reminder(Some(text)).path(vec!["remind".into()])))
    }
}

/// A thread's input: who to write to, about what, and when to follow up.
pub fn input(after: Duration) -> FollowUp {
    FollowUp {
        customer: "dana@acme.example".into(),
        topic: "the renewal quote Q-311".into(),
        wait_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
        ..FollowUp::default()
    }
}

// ---------------------------------------------------------------- the model

/// The test double: a template standing in for an LLM, the same in every process (it keeps no
/// script position, so a process that only wakes threads answers like the one that started them).
pub fn scripted_model() -> ScriptedModel {
    ScriptedModel::new().respond_with(|req: &ChatRequest| {
        let human = req.messages.iter().rev().find(|m| m.role == Role::Human).map_or("", |m| m.content.as_str());
        let topic = human.split(" about ").nth(1).unwrap_or("your request");
        let topic = topic.split(':').next().unwrap_or(topic).trim_end_matches('.');
        Ok(ChatReply::text(if human.contains("follow-up") {
            format!("Hi Dana, just following up on {topic}: shall I hold the price for you? Best, Sam")
        } else {
            format!("Hi Dana, here is {topic}, valid for 30 days. Let me know what you think. Best, Sam")
        }))
    })
}

// ---------------------------------------------------------------- commands

type Graph = App<FollowUp, Services>;

/// A usage, file or store problem, or any agentflow error.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn open(db: &Path) -> Result<(Graph, Arc<RedbStore>), BoxError> {
    if let Some(dir) = db.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let store = Arc::new(RedbStore::open(db).map_err(|e| format!("cannot open the store `{}`: {e}", db.display()))?);
    Ok((reminder::graph().app().store(store.clone()), store))
}

/// Starts a new thread (the next free `follow-up-N`): it sends the message and sleeps.
async fn start(graph: &Graph, store: &RedbStore, services: &Services, after: Duration) -> Result<String, BoxError> {
    let taken: BTreeSet<String> = store.list_threads()?.into_iter().map(|t| t.id).collect();
    let thread = (1..).map(|n| format!("follow-up-{n}")).find(|t| !taken.contains(t)).unwrap_or_default();
    println!("starting {thread}: a message now, a follow-up in {} s", after.as_secs_f64());
    let run = graph.runner(services).thread(&thread).run(input(after)).await?;
    println!("run: {}", run.outcome);
    if !matches!(run.outcome, Outcome::Sleeping { .. }) {
        return Err(format!("{thread} did not go to sleep: {}", run.outcome).into());
    }
    println!("{thread} is sleeping; the run has ended and nothing of it is held in memory");
    Ok(thread)
}

/// Resumes every sleeping thread of the store with `App::wake`, each once it is due, earliest
/// first; the sleeping threads.
async fn wake(graph: &Graph, store: &RedbStore, services: &Services) -> Result<BTreeSet<String>, BoxError> {
    let mut due = Vec::new();
    for t in store.list_threads()?.into_iter().filter(|t| t.status == ThreadStatus::Sleeping) {
        let at = store.thread_timer(&t.id)?.unwrap_or(0);
        match Duration::from_millis(at.saturating_sub(now_ms())) {
            Duration::ZERO => println!("{} was due; firing now", t.id),
            due_in => println!("{} sleeps; due in {:.1} s", t.id, due_in.as_secs_f64()),
        }
        due.push((at, t.id));
    }
    if due.is_empty() {
        println!("no thread is sleeping: no reminder to fire");
    }
    due.sort();
    for (at, thread) in &due {
        tokio::time::sleep(Duration::from_millis(at.saturating_sub(now_ms()))).await;
        // `Ok(None)`: nothing to resume here, such as a thread of another graph in the same store
        // or one another process is resuming right now.
        match graph.wake(thread, services).await {
            Ok(Some(run)) => println!("woke {thread}: {}", run.outcome),
            Ok(None) => println!("{thread} not woken: another graph's thread, or another process holds it"),
            Err(e) => println!("woke {thread}: failed: {e}"),
        }
    }
    Ok(due.into_iter().map(|(_, thread)| thread).collect())
}

fn status(store: &RedbStore) -> Result<(), BoxError> {
    let threads = store.list_threads()?;
    if threads.is_empty() {
        println!("no threads yet");
    }
    for t in threads {
        let timer = match store.thread_timer(&t.id)? {
            Some(at) if at > now_ms() => {
                format!(", due in {:.1} s", Duration::from_millis(at - now_ms()).as_secs_f64())
            }
            Some(_) => ", due now (run `--wake`)".into(),
            None => String::new(),
        };
        println!("{:<14} {:?}{timer}", t.id, t.status);
    }
    Ok(())
}

/// The outbox's lines of `threads`.
fn print_outbox(outbox: &Outbox, threads: &BTreeSet<String>) {
    if threads.is_empty() {
        return;
    }
    let text = std::fs::read_to_string(&outbox.path).unwrap_or_default();
    let names: Vec<&str> = threads.iter().map(String::as_str).collect();
    println!("\noutbox {}, the lines of {}:", outbox.path.display(), names.join(", "));
    for line in text.lines() {
        let fields: Vec<&str> = line.splitn(6, '\t').collect();
        if let [kind, thread, _, pid, _, text] = fields[..]
            && threads.contains(thread)
        {
            println!("  {kind:<8} {thread:<14} {pid:<10} {text}");
        }
    }
}

const USAGE: &str =
    "usage: follow_up [--db PATH] [--outbox PATH] [--after SECONDS] [--exit-while-sleeping | --wake | --status]
  (no flag)              start a thread, let it sleep, wake it when due and send the reminder
  --exit-while-sleeping  start a thread and exit while it sleeps
  --wake                 fire the follow-ups of the sleeping threads (waits for those not due yet)
  --status               list the threads, their status and timers
  --after SECONDS        when the follow-up is due after the first message (default 2)
  --db PATH              the store file (default: AGENTFLOW_FOLLOW_UP_DB, or follow_up.redb in a temp dir)
  --outbox PATH          the outbox file (default: the store's path with the extension `outbox`)";

#[derive(PartialEq)]
enum Command {
    OneProcess,
    ExitWhileSleeping,
    Wake,
    Status,
}

struct Options {
    command: Command,
    db: PathBuf,
    outbox: PathBuf,
    after: Duration,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut command = Command::OneProcess;
    let (mut db, mut outbox, mut after) = (None, None, Duration::from_secs(2));
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| it.next().cloned().ok_or_else(|| format!("`{flag}` needs a value"));
        let mut set = |c: Command| {
            if command != Command::OneProcess {
                return Err("use one of `--exit-while-sleeping`, `--wake` and `--status`".to_string());
            }
            command = c;
            Ok(())
        };
        match arg.as_str() {
            "--exit-while-sleeping" => set(Command::ExitWhileSleeping)?,
            "--wake" => set(Command::Wake)?,
            "--status" => set(Command::Status)?,
            "--db" => db = Some(PathBuf::from(value("--db")?)),
            "--outbox" => outbox = Some(PathBuf::from(value("--outbox")?)),
            "--after" => {
                let v = value("--after")?;
                after = v
                    .parse::<f64>()
                    .ok()
                    .and_then(|s| Duration::try_from_secs_f64(s).ok())
                    .ok_or_else(|| format!("`--after {v}`: expected seconds, such as 2 or 0.5"))?;
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let db = db
        .or_else(|| std::env::var_os("AGENTFLOW_FOLLOW_UP_DB").map(PathBuf::from))
        .unwrap_or_else(|| std::env::temp_dir().join("agentflow-follow-up").join("follow_up.redb"));
    let outbox = outbox.unwrap_or_else(|| db.with_extension("outbox"));
    Ok(Options { command, db, outbox, after })
}

async fn run(options: Options) -> Result<(), BoxError> {
    let (graph, store) = open(&options.db)?;
    let model: Arc<dyn ChatModel> = Arc::new(scripted_model());
    let services = Services { model, outbox: Outbox { path: options.outbox.clone() } };
    println!("store: {}", options.db.display());
    println!("model: scripted-test-double (ScriptedModel with a template: a deterministic stand-in, not an LLM)");
    let threads = match options.command {
        Command::Status => return status(&store),
        Command::OneProcess => {
            let thread = start(&graph, &store, &services, options.after).await?;
            println!("\nThis process resumes it when it is due:");
            let mut woken = wake(&graph, &store, &services).await?;
            woken.insert(thread);
            woken
        }
        Command::ExitWhileSleeping => {
            let thread = start(&graph, &store, &services, options.after).await?;
            let db = options.db.display();
            println!("\nexiting while it sleeps; once it is due, fire the reminder from a new process:");
            println!("  cargo run --example follow_up -- --db {db} --outbox {} --wake", options.outbox.display());
            BTreeSet::from([thread])
        }
        Command::Wake => wake(&graph, &store, &services).await?,
    };
    print_outbox(&services.outbox, &threads);
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    run_with_args(std::env::args().skip(1).collect()).await
}

/// The example's `main` with its command-line arguments (without the program's name).
pub(crate) async fn run_with_args(args: Vec<String>) -> ExitCode {
    let options = match parse(&args) {
        Ok(options) => options,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(options).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
