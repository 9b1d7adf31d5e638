//! Email triage with a human review that can wait across processes.
//!
//! read -> classify (structured output: intent and urgency) -> route: billing, complex or
//! critical -> human review; question or feature -> retrieve docs -> draft; bug -> ticket
//! lookup -> draft. A draft goes to review when the urgency is high or critical, else it is
//! sent as is. `review` is a `#[node(interrupt)]`: it hands the reviewer the email, the
//! classification and the draft (if any) and the run stops; nothing stays in memory. Any
//! later process resumes the thread with the decision.
//!
//! ```text
//! cargo run --example email_triage                      # built-in sample, pause and approve in one go
//! cargo run --example email_triage -- --print-sample > email.txt
//! cargo run --example email_triage -- --email email.txt # starts a thread, stops at review (./agentflow.redb)
//! cargo run --example email_triage -- --list            # pending reviews
//! cargo run --example email_triage -- --thread triage-1 --approve
//! cargo run --example email_triage -- --thread triage-1 --edit "Hi Dana, ..."
//! cargo run --example email_triage -- --thread triage-1 --reject "not a bug"
//! ```
//!
//! `--db PATH` picks another store file. The model is `ScriptedModel`, a deterministic test
//! double with keyword rules, unless `AGENTFLOW_MODEL` is set: then an OpenAI-compatible
//! server is used (`OPENAI_BASE_URL`, `OPENAI_API_KEY`), with the same structured-output schema.

use std::process::ExitCode;
use std::sync::Arc;

use agentflow::message::{Message, Role};
use agentflow::model::{ChatModel, ChatReply, ChatRequest, ScriptedModel};
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{PendingKind, RedbStore, Run, RunError, Store};
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------- state
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Email {
    from: String,
    subject: String,
    body: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Intent {
    Question,
    Bug,
    Billing,
    Feature,
    Complex,
}

#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Urgency {
    Low,
    Medium,
    High,
    Critical,
}

/// What the model must answer with (validated by deserializing it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Classification {
    intent: Intent,
    urgency: Urgency,
    /// One short sentence: why.
    reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Triage {
    /// The email as received.
    raw: String,
    email: Option<Email>,
    classification: Option<Classification>,
    #[reduce(append)]
    context: Vec<String>,
    draft: Option<String>,
    /// What was sent to the customer, if anything.
    reply: Option<String>,
    resolution: Option<String>,
    #[reduce(append)]
    path: Vec<String>,
}

/// What the reviewer sees: the interrupt's payload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReviewRequest {
    email: Email,
    classification: Classification,
    draft: Option<String>,
}

/// What the reviewer answers: the resume value.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum ReviewDecision {
    Approve,
    Edit { text: String },
    Reject { reason: String },
}

// ---------------------------------------------------------------- dependencies
pub struct Services {
    pub model: Arc<dyn ChatModel>,
}

impl Services {
    /// Documentation snippets for a question or feature request.
    fn docs(&self, email: &Email) -> Vec<String> {
        let text = format!("{} {}", email.subject, email.body).to_lowercase();
        let mut docs = Vec::new();
        if text.contains("api key") || text.contains("token") {
            docs.push("docs/security#rotate: Settings > API > Rotate key; the old key works for 24 h".into());
        }
        if text.contains("export") || text.contains("csv") {
            docs.push("docs/data#export: Reports > Export > CSV, up to 1 million rows".into());
        }
        if text.contains("dark mode") || text.contains("feature") {
            docs.push("roadmap: dark mode is planned for Q3; vote at feedback.example.com".into());
        }
        if docs.is_empty() {
            docs.push("docs/faq: general help centre, help.example.com".into());
        }
        docs
    }

    /// Known issues matching a bug report.
    fn ticket(&self, email: &Email) -> String {
        let text = format!("{} {}", email.subject, email.body).to_lowercase();
        if text.contains("checkout") || text.contains("500") {
            "BUG-2231 (open, P1): checkout returns HTTP 500 since release 24.6; fix is rolling out today".into()
        } else {
            "no known issue matches; engineering will reproduce it".into()
        }
    }

    /// "Sends" a reply. Called through `cx.effect`, so a resumed node does not send twice.
    fn send(&self, to: &str, text: &str, key: &str) -> String {
        println!("    [outbox] sending {} characters to {to} (idempotency key {key})", text.len());
        format!("sent to {to}")
    }
}

// ---------------------------------------------------------------- the graph
#[graph(state = Triage, deps = Services, start = read)]
pub mod triage {
    use super::*;

    #[node(goto = [classify])]
    async fn read(s: &Triage) -> Step<Triage> {
        goto!(classify, Triage::update().email(Some(parse_email(&s.raw))).path(vec!["read".into()]))
    }

    #[node(goto = [retrieve_docs, lookup_ticket, review], retry = 2)]
    async fn classify(s: &Triage, cx: &Ctx<Services>) -> Result<Step<Triage>, NodeError> {
        let email = s.email.clone().unwrap_or_default();
        let messages = vec![
            Message::system("You triage customer emails for a software company."),
            Message::human(format!("From: {}\nSubject: {}\n\n{}", email.from, email.subject, email.body)),
        ];
        let c: Classification = cx.structured(&*cx.deps().model, ChatRequest::new(messages), 2).await?.value;
        let human = matches!(c.intent, Intent::Billing | Intent::Complex) || c.urgency == Urgency::Critical;
        let u = Triage::update().classification(Some(c.clone())).path(vec!["classify".into()]);
        Ok(if human {
            goto!(review, u)
        } else if c.intent == Intent::Bug {
            goto!(lookup_ticket, u)
        } else {
            goto!(retrieve_docs, u)
        })
    }

    #[node(goto = [draft])]
    async fn retrieve_docs(s: &Triage, deps: &Services) -> Step<Triage> {
        let docs = deps.docs(s.email.as_ref().expect("read ran"));
        goto!(draft, Triage::update().context(docs).path(vec!["retrieve_docs".into()]))
    }

    #[node(goto = [draft])]
    async fn lookup_ticket(s: &Triage, deps: &Services) -> Step<Triage> {
        let ticket = deps.ticket(s.email.as_ref().expect("read ran"));
        goto!(draft, Triage::update().context(vec![ticket]).path(vec!["lookup_ticket".into()]))
    }

    #[node(goto = [review, END])]
    async fn draft(s: &Triage, cx: &Ctx<Services>) -> Result<Step<Triage>, NodeError> {
        let (email, c) = (s.email.clone().unwrap_or_default(), s.classification.clone().expect("classified"));
        let prompt = format!(
            "Write a short, friendly reply.\nCustomer: {}\nSubject: {}\nIntent: {:?}\nContext:\n{}",
            email.from,
            email.subject,
            c.intent,
            s.context.iter().map(|c| format!("- {c}")).collect::<Vec<_>>().join("\n")
        );
        let reply = cx.chat(&*cx.deps().model, &ChatRequest::new(vec![Message::human(prompt)])).await?;
        let u = Triage::update().draft(Some(reply.text.clone())).path(vec!["draft".into()]);
        if c.urgency >= Urgency::High {
            return Ok(goto!(review, u));
        }
        let text = &reply.text;
        let receipt = cx.effect("send-reply", |key| async move { Ok(cx.deps().send(&email.from, text, &key)) }).await?;
        let resolution = format!("auto-reply ({:?} urgency needs no review), {receipt}", c.urgency).to_lowercase();
        Ok(goto!(END, u.reply(Some(reply.text.clone())).resolution(Some(resolution))))
    }

    #[node(goto = [END], interrupt)]
    async fn review(s: &Triage, cx: &Ctx<Services>) -> Result<Step<Triage>, NodeError> {
        let request = ReviewRequest {
            email: s.email.clone().unwrap_or_default(),
            classification: s.classification.clone().expect("classified"),
            draft: s.draft.clone(),
        };
        // First run: the run stops here. On resume: the reviewer's decision.
        let decision: ReviewDecision = cx.interrupt(&request)?;
        let (reply, mut resolution) = match decision {
            ReviewDecision::Approve => match &s.draft {
                Some(draft) => (Some(draft.clone()), "approved by the reviewer".to_string()),
                None => (None, "approved: handed to a human agent (there was no draft to send)".to_string()),
            },
            ReviewDecision::Edit { text } => (Some(text), "edited by the reviewer".to_string()),
            ReviewDecision::Reject { reason } => (None, format!("rejected by the reviewer: {reason}; nothing sent")),
        };
        if let Some(text) = &reply {
            let to = request.email.from.clone();
            let receipt = cx.effect("send-reply", |key| async move { Ok(cx.deps().send(&to, text, &key)) }).await?;
            resolution = format!("{resolution}, {receipt}");
        }
        Ok(goto!(END, Triage::update().reply(reply).resolution(Some(resolution)).path(vec!["review".into()])))
    }
}

/// A thread's input: the email as received.
pub fn input(raw: &str) -> Triage {
    Triage { raw: raw.to_string(), ..Triage::default() }
}

/// The reviewer's decisions in the demo, in turn for each later sample that pauses for review.
pub fn demo_decisions() -> [ReviewDecision; 2] {
    [
        ReviewDecision::Edit {
            text: "Hi Lee, we refunded the duplicate May charge; it shows on your card within 5 days.".into(),
        },
        ReviewDecision::Reject { reason: "the on-call team is already handling INC-88".into() },
    ]
}

fn parse_email(raw: &str) -> Email {
    let mut email = Email::default();
    let mut lines = raw.lines();
    for line in lines.by_ref() {
        if line.trim().is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("From:") {
            email.from = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("Subject:") {
            email.subject = v.trim().to_string();
        }
    }
    email.body = lines.collect::<Vec<_>>().join("\n").trim().to_string();
    email
}

// ---------------------------------------------------------------- the model
/// The test double: keyword rules standing in for an LLM, for both calls.
pub fn scripted_model() -> ScriptedModel {
    ScriptedModel::new().respond_with(|req: &ChatRequest| {
        let human = req.messages.iter().rev().find(|m| m.role == Role::Human).map_or("", |m| m.content.as_str());
        if req.response_schema.is_some() {
            return Ok(ChatReply::text(serde_json::to_string(&keyword_classify(human)).unwrap_or_default()));
        }
        let field = |name: &str| {
            human.lines().find_map(|l| l.strip_prefix(name)).map_or(String::new(), |v| v.trim().to_string())
        };
        // "dana@acme.example" -> "Dana"
        let local = field("Customer:").split(['@', ' ', '.']).next().unwrap_or_default().to_string();
        let mut name: String =
            local.chars().take(1).flat_map(char::to_uppercase).chain(local.chars().skip(1)).collect();
        if name.is_empty() {
            name = "there".into();
        }
        let context: Vec<&str> = human.lines().filter_map(|l| l.strip_prefix("- ")).collect();
        Ok(ChatReply::text(format!(
            "Hi {name},\n\nthanks for writing about \"{}\". {}\n\nBest regards,\nSupport",
            field("Subject:"),
            context.iter().map(|c| format!("{c}.")).collect::<Vec<_>>().join(" ")
        )))
    })
}

fn keyword_classify(text: &str) -> Classification {
    let t = text.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| t.contains(w));
    let (intent, why) = if has(&["lawyer", "legal", "gdpr", "contract", "breach"]) {
        (Intent::Complex, "legal or contractual matter")
    } else if has(&["charged", "invoice", "refund", "billing", "payment"]) {
        (Intent::Billing, "about money")
    } else if has(&["error", "crash", "bug", "broken", "500", "fails"]) {
        (Intent::Bug, "reports something broken")
    } else if has(&["feature", "would be great", "please add", "dark mode"]) {
        (Intent::Feature, "asks for something new")
    } else {
        (Intent::Question, "asks how to do something")
    };
    let urgency = if has(&["production", "outage", "all users", "losing"]) {
        Urgency::Critical
    } else if has(&["urgent", "asap", "today"]) {
        Urgency::High
    } else if has(&["soon", "blocked"]) {
        Urgency::Medium
    } else {
        Urgency::Low
    };
    Classification { intent, urgency, reason: format!("keyword rules: {why}") }
}

fn model() -> (Arc<dyn ChatModel>, String) {
    if std::env::var("AGENTFLOW_MODEL").is_ok_and(|m| !m.trim().is_empty()) {
        match agentflow::model::OpenAiCompatible::from_env() {
            Ok(m) => {
                let name = m.name().to_string();
                return (Arc::new(m), name);
            }
            Err(e) => eprintln!("AGENTFLOW_MODEL is set but the model cannot be used ({e}); using the test double"),
        }
    }
    (
        Arc::new(scripted_model()),
        "scripted-test-double (ScriptedModel with keyword rules: a deterministic stand-in, not an LLM)".into(),
    )
}

// ---------------------------------------------------------------- samples
pub const SAMPLES: [(&str, &str); 4] = [
    (
        "urgent-bug",
        "From: dana@acme.example\nSubject: Checkout fails with error 500\n\n\
         Since this morning some of our customers get error 500 at checkout.\n\
         This is urgent, please fix it today.\n",
    ),
    (
        "question",
        "From: sam@example.org\nSubject: How do I rotate an API key?\n\n\
         Hi, how do I rotate the API key of our team account?\n",
    ),
    (
        "billing",
        "From: lee@example.net\nSubject: Charged twice in May\n\n\
         My card was charged twice for the May subscription. Can you fix that soon?\n",
    ),
    (
        "critical-outage",
        "From: ops@bigcorp.example\nSubject: Production outage\n\n\
         Our production API fails for all users since 09:12. Nothing works.\n",
    ),
];

// ---------------------------------------------------------------- output
fn print_payload(thread: &str, run: &Run<Triage>) -> bool {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { return false };
    for p in pending.iter().filter(|p| p.kind == PendingKind::Interrupt) {
        println!("paused at `{}` for a human review; thread id: {thread}", p.node);
        let pretty = serde_json::to_string_pretty(&p.payload).unwrap_or_default();
        println!("review payload:\n{}", indent(&pretty, "  "));
    }
    true
}

fn print_final(thread: &str, run: &Run<Triage>) {
    let s = &run.state;
    println!("final state of {thread}:");
    if let Some(e) = &s.email {
        println!("  email:          {} / {:?}", e.from, e.subject);
    }
    if let Some(c) = &s.classification {
        println!("  classification: {:?} / {:?} ({})", c.intent, c.urgency, c.reason);
    }
    for c in &s.context {
        println!("  context:        {c}");
    }
    println!("  draft:          {}", s.draft.as_deref().map_or("(none)".into(), one_line));
    println!("  reply sent:     {}", s.reply.as_deref().map_or("(none)".into(), one_line));
    println!("  resolution:     {}", s.resolution.as_deref().unwrap_or("(none)"));
    println!("  path:           {}", s.path.join(" -> "));
    println!("outcome: {}", run.outcome);
}

fn flag(decision: &ReviewDecision) -> String {
    match decision {
        ReviewDecision::Approve => "--approve".into(),
        ReviewDecision::Edit { text } => format!("--edit {text:?}"),
        ReviewDecision::Reject { reason } => format!("--reject {reason:?}"),
    }
}

fn one_line(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > 90 { format!("{}...", flat.chars().take(87).collect::<String>()) } else { flat }
}

fn indent(text: &str, by: &str) -> String {
    text.lines().map(|l| format!("{by}{l}")).collect::<Vec<_>>().join("\n")
}

// ---------------------------------------------------------------- commands
type Graph = App<Triage, Services>;

/// A command's failure: a usage or file problem, or any agentflow error
/// (which every run, history and store error converts into with `?`).
#[derive(Debug)]
pub enum CliError {
    Usage(String),
    Agentflow(agentflow::Error),
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::Usage(message) => f.write_str(message),
            CliError::Agentflow(e) => write!(f, "{e}"),
        }
    }
}

impl From<String> for CliError {
    fn from(message: String) -> Self {
        CliError::Usage(message)
    }
}

impl From<agentflow::Error> for CliError {
    fn from(e: agentflow::Error) -> Self {
        CliError::Agentflow(e)
    }
}

impl From<RunError> for CliError {
    fn from(e: RunError) -> Self {
        CliError::Agentflow(e.into())
    }
}

impl From<agentflow::persist::HistoryError> for CliError {
    fn from(e: agentflow::persist::HistoryError) -> Self {
        CliError::Agentflow(e.into())
    }
}

const DEFAULT_DB: &str = "agentflow.redb";

fn open(db: &str) -> Result<(Graph, Arc<RedbStore>), CliError> {
    let store =
        Arc::new(RedbStore::open(db).map_err(|e| CliError::Usage(format!("cannot open the store `{db}`: {e}")))?);
    Ok((triage::graph().app().store(store.clone()), store))
}

/// The next free `triage-N`: derived from the threads in the store, so runs
/// in a row (and in new processes) never reuse an id.
fn next_thread(store: &RedbStore) -> Result<u64, CliError> {
    let threads = store.list_threads().map_err(agentflow::Error::from)?;
    let max = threads.iter().filter_map(|t| t.id.strip_prefix("triage-")?.parse::<u64>().ok()).max();
    Ok(max.map_or(1, |n| n + 1))
}

async fn start(db: &str, file: &str, services: &Services) -> Result<(), CliError> {
    let raw = if file == "-" {
        std::io::read_to_string(std::io::stdin()).map_err(|e| CliError::Usage(format!("cannot read stdin: {e}")))?
    } else {
        std::fs::read_to_string(file).map_err(|e| CliError::Usage(format!("cannot read `{file}`: {e}")))?
    };
    let (graph, store) = open(db)?;
    let mut n = next_thread(&store)?;
    let (thread, run) = loop {
        let thread = format!("triage-{n}");
        match graph.runner(services).thread(&thread).owner("email_triage").run(input(&raw)).await {
            Err(RunError::ThreadExists { .. }) => n += 1,
            Err(e) => return Err(e.into()),
            Ok(run) => break (thread, run),
        }
    };
    println!("store: {db}");
    if print_payload(&thread, &run) {
        println!("decide it from any process:");
        let db_flag = if db == DEFAULT_DB { String::new() } else { format!(" --db {db}") };
        for flag in ["--approve", "--edit \"TEXT\"", "--reject \"REASON\""] {
            println!("  cargo run --example email_triage --{db_flag} --thread {thread} {flag}");
        }
        println!(
            "or answer it in the approval inbox (`cargo run -p agentflow-runtime --features cli --bin agentflow -- serve --store {db} --users USERS.json`; `cargo run --example approval_inbox` writes a users file) with"
        );
        println!(
            "  {{\"decision\": \"approve\"}}, {{\"decision\": \"edit\", \"text\": \"..\"}} or {{\"decision\": \"reject\", \"reason\": \"..\"}}"
        );
        println!("then continue it: cargo run --example email_triage --{db_flag} --thread {thread} --resume");
    } else {
        print_final(&thread, &run);
    }
    Ok(())
}

fn list(db: &str) -> Result<(), CliError> {
    let (graph, store) = open(db)?;
    let threads = store.list_threads().map_err(agentflow::Error::from)?;
    let mut rows = 0;
    for t in threads.iter().filter(|t| t.status == ThreadStatus::Interrupted) {
        for p in graph.pending(&t.id)? {
            let Ok(r) = serde_json::from_value::<ReviewRequest>(p.payload.clone()) else { continue };
            if rows == 0 {
                println!("{:<12} {:<9} {:<9} {:<32} draft", "thread", "intent", "urgency", "subject");
            }
            rows += 1;
            let draft: String = r.draft.as_deref().map_or("(none)".into(), |d| one_line(d).chars().take(48).collect());
            let (intent, urgency) =
                (format!("{:?}", r.classification.intent), format!("{:?}", r.classification.urgency));
            let subject: String = r.email.subject.chars().take(32).collect();
            println!("{:<12} {:<9} {:<9} {subject:<32} {draft}", t.id, intent.to_lowercase(), urgency.to_lowercase());
        }
    }
    if rows == 0 {
        println!("no pending reviews in {db}");
    }
    Ok(())
}

/// Resumes `thread` with the answer someone recorded in the approval inbox (or with
/// `agentflow answer`): a plain `resume()` continues with it.
async fn resume(db: &str, thread: &str, services: &Services) -> Result<(), CliError> {
    let (graph, _store) = open(db)?;
    println!("resuming {thread} with the answer recorded for it");
    let run = graph.runner(services).thread(thread).resume().await?;
    print_final(thread, &run);
    Ok(())
}

async fn decide(db: &str, thread: &str, decision: ReviewDecision, services: &Services) -> Result<(), CliError> {
    let (graph, _store) = open(db)?;
    println!("resuming {thread} with {}", flag(&decision));
    let run = graph.runner(services).thread(thread).resume_with(decision).await?;
    print_final(thread, &run);
    Ok(())
}

/// No arguments: a sample end to end in one process, paused and approved.
async fn demo(services: &Services, model_name: &str) -> Result<(), CliError> {
    let path = std::env::temp_dir().join(format!("agentflow-email-triage-{}.redb", std::process::id()));
    let db = path.to_string_lossy().to_string();
    let result = async {
        let (graph, _store) = open(&db)?;
        println!("email_triage demo; model: {model_name}");
        println!("store: {db} (temporary; the CLI flags use ./agentflow.redb)\n");
        let (name, raw) = SAMPLES[0];
        println!("== sample `{name}`:\n{}\n", indent(raw.trim_end(), "  | "));
        let run = graph.runner(services).thread("demo-1").owner("email_triage").run(input(raw)).await?;
        println!("run: {}", run.outcome);
        print_payload("demo-1", &run);
        println!("\nThe run has ended and the thread waits in the store. Resuming it with the reviewer's");
        println!("decision, here `--approve` (the CLI does this from a second process):");
        let run = graph.runner(services).thread("demo-1").resume_with(ReviewDecision::Approve).await?;
        print_final("demo-1", &run);

        println!("\n== the other routes, briefly");
        let mut decisions = demo_decisions().into_iter();
        for (i, (name, raw)) in SAMPLES.iter().enumerate().skip(1) {
            let thread = format!("demo-{}", i + 1);
            println!("sample `{name}`:");
            let mut run = graph.runner(services).thread(&thread).run(input(raw)).await?;
            if matches!(run.outcome, Outcome::Interrupted { .. }) {
                let draft = match &graph.pending(&thread)?[0].payload["draft"] {
                    serde_json::Value::String(d) => format!("draft: {}", one_line(d)),
                    _ => "no draft: it goes straight to a person".into(),
                };
                let decision = decisions.next().expect("a decision per paused sample");
                println!("  paused for review ({draft}); resuming with {}", flag(&decision));
                run = graph.runner(services).thread(&thread).resume_with(decision).await?;
            }
            let s = &run.state;
            let c = s.classification.as_ref().expect("classified");
            println!("  {:?}/{:?}: {}", c.intent, c.urgency, s.path.join(" -> "));
            println!("  resolution: {}; outcome: {}", s.resolution.as_deref().unwrap_or("-"), run.outcome);
        }
        println!("\nTwo processes: `--print-sample > email.txt`, `--email email.txt`, `--list`, then `--thread ID --approve`.");
        Ok::<(), CliError>(())
    }
    .await;
    let _ = std::fs::remove_file(&path);
    result
}

const USAGE: &str = "usage: email_triage [--db PATH] [--email FILE | --list | --thread ID (--approve | --edit TEXT | --reject REASON | --resume) | --print-sample [NAME]]
  (no arguments)      run a built-in sample end to end: pause at review, then approve
  --email FILE        start a thread from an email (`-` for stdin); stops at review and prints the thread id
  --list              list the threads waiting for a review
  --thread ID ...     resume a waiting thread with a decision, in this (new) process
  --thread ID --resume  resume it with the answer given in the approval inbox (`agentflow serve`)
                      or with `agentflow answer`
  --print-sample NAME print a sample email: urgent-bug (default), question, billing, critical-outage
  --db PATH           the store file (default ./agentflow.redb)";

enum Command {
    Demo,
    Start(String),
    List,
    Decide(String, ReviewDecision),
    Resume(String),
    PrintSample(String),
}

fn parse(args: &[String]) -> Result<(Command, String), String> {
    let mut db = DEFAULT_DB.to_string();
    let (mut email, mut list, mut thread, mut decision, mut sample) = (None, false, None, None, None);
    let mut resume = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| it.next().cloned().ok_or_else(|| format!("`{flag}` needs a value"));
        match arg.as_str() {
            "--db" => db = value("--db")?,
            "--email" => email = Some(value("--email")?),
            "--list" => list = true,
            "--thread" => thread = Some(value("--thread")?),
            "--approve" => decision = Some(ReviewDecision::Approve),
            "--edit" => decision = Some(ReviewDecision::Edit { text: value("--edit")? }),
            "--reject" => decision = Some(ReviewDecision::Reject { reason: value("--reject")? }),
            "--resume" => resume = true,
            "--print-sample" => sample = Some(it.next().cloned().unwrap_or_else(|| "urgent-bug".into())),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if resume {
        return match (email, list, thread, decision, sample) {
            (None, false, Some(t), None, None) => Ok((Command::Resume(t), db)),
            _ => Err("`--resume` goes with `--thread ID` alone".into()),
        };
    }
    let command = match (email, list, thread, decision, sample) {
        (None, false, None, None, None) => Command::Demo,
        (Some(file), false, None, None, None) => Command::Start(file),
        (None, true, None, None, None) => Command::List,
        (None, false, Some(t), Some(d), None) => Command::Decide(t, d),
        (None, false, None, None, Some(name)) => Command::PrintSample(name),
        (None, false, Some(_), None, None) => {
            return Err("`--thread` needs `--approve`, `--edit TEXT`, `--reject REASON` or `--resume`".into());
        }
        (None, false, None, Some(_), None) => return Err("a decision needs `--thread ID` (see `--list`)".into()),
        _ => return Err("use one of `--email`, `--list`, `--thread` or `--print-sample`".into()),
    };
    Ok((command, db))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, db) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let (model, model_name) = model();
    let services = Services { model };
    let result = match command {
        Command::Demo => demo(&services, &model_name).await,
        Command::Start(file) => {
            println!("model: {model_name}");
            start(&db, &file, &services).await
        }
        Command::List => list(&db),
        Command::Decide(thread, decision) => decide(&db, &thread, decision, &services).await,
        Command::Resume(thread) => resume(&db, &thread, &services).await,
        Command::PrintSample(name) => match SAMPLES.iter().find(|(n, _)| *n == name) {
            Some((_, raw)) => {
                print!("{raw}");
                Ok(())
            }
            None => {
                let names: Vec<&str> = SAMPLES.iter().map(|(n, _)| *n).collect();
                Err(format!("no sample `{name}`; the samples are {}", names.join(", ")).into())
            }
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
