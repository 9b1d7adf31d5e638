//! Durable plan-and-execute for an incident: a 504 on `payments`.
//!
//! `cargo run --example incident_504` (add `-- --crash-demo` for the crash demo)
//!
//! alert -> read-only checks (logs, metrics, upstream) -> root cause -> fix
//! plan -> a human approves the fix (restart `payments` with an idempotency
//! key; risk `external`, so the default policy asks first) -> the fix runs
//! -> verification fails -> the fix is rolled back by its compensation
//! (`#[tool(compensate = rollback_restart)]`) -> report from the audit log.
//!
//! The root cause and the plan come from `ScriptedModel`, a deterministic
//! **test double** that replays fixed answers; it is not a language model.
//! The "infrastructure" is a directory: `restarts.log` holds every restart
//! and rollback that acted (the restart is idempotent by key).
//!
//! With `--crash-demo` the run goes through child processes of this binary:
//! the first pauses for the approval; after the approval, the second claims
//! the fix and is killed with SIGKILL while the fix is in flight; a third
//! resumes the thread: the fix runs again with the same idempotency key (the
//! restart service acts once per key), verification fails and the
//! compensation rolls it back. The audit log shows one claim, the re-run
//! with the same key, and the rollback; `restarts.log` shows one restart.
//! Durable timers (the section 2) are not part of this example.
//! The upstream check has a circuit breaker (`App::circuit_breaker`): shared
//! by every thread of the store, it stops calling a dependency that failed 3
//! times in a row (it never fails here, so the breaker stays closed).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::breaker::Breaker;
use agentflow::message::Message;
use agentflow::model::{ChatRequest, ScriptedModel};
use agentflow::prelude::*;
use agentflow::saga::Compensates;
use agentflow::{RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ---------------------------------------------------------------- the infrastructure

/// What the tools reach: the incident's world, on disk so processes share it.
pub struct Ops {
    dir: PathBuf,
    model: ScriptedModel,
    /// Hang inside the restart (after it was claimed), for the crash demo.
    hang_in_fix: bool,
}

impl Ops {
    pub fn new(dir: &Path, hang_in_fix: bool) -> Self {
        // A test double: fixed answers, in order, for `diagnose` and `plan`.
        let model = ScriptedModel::new()
            .reply_text(
                "Root cause: the payments-api pool to the card gateway is exhausted after deploy v42 (max_conns 8).",
            )
            .reply_text("Plan: restart payments-api with the pool fix (deploy v43), then verify p99 < 1s and no 504s.");
        Ops { dir: dir.to_path_buf(), model, hang_in_fix }
    }

    fn log(&self, line: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("restarts.log")).unwrap();
        writeln!(f, "{line}").unwrap();
        f.sync_all().unwrap();
    }
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct ServiceArg {
    /// The service, e.g. `payments`.
    service: String,
}

/// Reads the service's recent error logs.
#[tool(risk = read)]
async fn fetch_logs(args: ServiceArg) -> Result<Value, ToolError> {
    Ok(
        json!({ "service": args.service, "errors": ["504 upstream timeout card-gateway (x214)", "pool exhausted: 8/8 in use"] }),
    )
}

/// Reads the service's latency and error-rate metrics.
#[tool(risk = read)]
async fn query_metrics(args: ServiceArg) -> Result<Value, ToolError> {
    Ok(json!({ "service": args.service, "p99_ms": 30_000, "error_rate": 0.31, "since": "deploy v42" }))
}

/// Checks the service's upstream dependencies.
#[tool(risk = read)]
async fn check_upstream(args: ServiceArg) -> Result<Value, ToolError> {
    Ok(json!({ "service": args.service, "card-gateway": "healthy", "db": "healthy" }))
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Restart {
    service: String,
    /// The deploy to restart on.
    deploy: String,
}

#[derive(Deserialize, Serialize)]
pub struct Restarted {
    service: String,
    previous: String,
}

/// Restarts a service on a deploy. The restart service acts once per idempotency key.
#[tool(risk = external, idempotent, compensate = rollback_restart)]
async fn restart_service(args: Restart, cx: &ToolCx<Ops>) -> Result<Restarted, ToolError> {
    let ops = cx.deps();
    if ops.hang_in_fix {
        std::fs::write(ops.dir.join("fix-claimed"), b"").unwrap();
        std::future::pending::<()>().await;
    }
    let slug: String = cx.idempotency_key().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if std::fs::OpenOptions::new().write(true).create_new(true).open(ops.dir.join(format!("key-{slug}"))).is_ok() {
        ops.log(&format!("restart {} on {} (key {})", args.service, args.deploy, cx.idempotency_key()));
    }
    Ok(Restarted { service: args.service, previous: "v42".into() })
}

/// Rolls a restart back to the previous deploy.
#[tool(risk = reversible, idempotent)]
async fn rollback_restart(args: Restart, cx: &ToolCx<Ops>) -> Result<(), ToolError> {
    cx.deps().log(&format!("rollback {} to {}", args.service, args.deploy));
    Ok(())
}

impl Compensates<restart_service> for Restart {
    fn from_call(_args: Restart, done: Restarted) -> Self {
        Restart { service: done.service, deploy: done.previous }
    }
}

/// Checks the service's health after the fix.
#[tool(risk = read)]
async fn check_health(args: ServiceArg) -> Result<Value, ToolError> {
    // The stand-in keeps failing: the pool fix did not help.
    Ok(json!({ "service": args.service, "p99_ms": 28_000, "healthy": false }))
}

// ---------------------------------------------------------------- the graph

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Incident {
    alert: String,
    #[reduce(append)]
    findings: Vec<Value>,
    root_cause: Option<String>,
    plan: Option<String>,
}

#[graph(state = Incident, deps = Ops, start = triage)]
mod incident {
    use super::*;

    #[node(goto = [diagnose], tools = [fetch_logs, query_metrics, check_upstream])]
    async fn triage(_s: &Incident, cx: &Ctx<Ops>) -> Result<Step<Incident>, NodeError> {
        let service = ServiceArg { service: "payments".into() };
        let mut found = Vec::new();
        for obs in [
            cx.run_tool(fetch_logs, &service).await?,
            cx.run_tool(query_metrics, &service).await?,
            cx.run_tool(check_upstream, &service).await?,
        ] {
            found.push(obs.body);
        }
        Ok(goto!(diagnose, Incident::update().findings(found)))
    }

    #[node(goto = [plan])]
    async fn diagnose(s: &Incident, cx: &Ctx<Ops>) -> Result<Step<Incident>, NodeError> {
        let req = ChatRequest::new(vec![Message::human(format!("{}; findings: {:?}", s.alert, s.findings))]);
        let reply = cx.chat(&cx.deps().model, &req).await?;
        Ok(goto!(plan, Incident::update().root_cause(Some(reply.text))))
    }

    #[node(goto = [fix])]
    async fn plan(s: &Incident, cx: &Ctx<Ops>) -> Result<Step<Incident>, NodeError> {
        let req = ChatRequest::new(vec![Message::human(s.root_cause.clone().unwrap_or_default())]);
        let reply = cx.chat(&cx.deps().model, &req).await?;
        Ok(goto!(fix, Incident::update().plan(Some(reply.text))))
    }

    #[node(goto = [verify], tools = [restart_service])]
    async fn fix(_s: &Incident, cx: &Ctx<Ops>) -> Result<Step<Incident>, NodeError> {
        let obs = cx.run_tool(restart_service, Restart { service: "payments".into(), deploy: "v43".into() }).await?;
        if !obs.is_ok() {
            return Err(NodeError::fatal(format!("the fix did not run: {}", obs.body)));
        }
        Ok(goto!(verify))
    }

    #[node(goto = [END], tools = [check_health])]
    async fn verify(_s: &Incident, cx: &Ctx<Ops>) -> Result<Step<Incident>, NodeError> {
        let health = cx.run_tool(check_health, ServiceArg { service: "payments".into() }).await?;
        if health.body["result"]["healthy"] != json!(true) {
            return Err(cx.compensate(format!("verification failed: {}", health.body["result"])));
        }
        Ok(goto!(END))
    }
}

// ---------------------------------------------------------------- driving it

pub const THREAD: &str = "incident-504";

/// The alert the incident starts from.
pub fn alert() -> Incident {
    Incident { alert: "ALERT: 504 Gateway Timeout on payments (error rate 31%)".into(), ..Default::default() }
}

pub fn app(store: Arc<dyn Store>) -> App<Incident, Ops> {
    // The upstream check is shared by every incident thread of the store: after 3 failures in a
    // row it stops being called for 30 s, and the calls answer `CIRCUIT_OPEN` instead.
    let breaker = Breaker::after(3).cool_down(Duration::from_secs(30));
    incident::graph().app().store(store).circuit_breaker("check_upstream", breaker).expect("the triage node lists it")
}

/// One run (or resume) of the thread; prints and returns its outcome.
async fn step(dir: &Path, resume: bool, hang_in_fix: bool) -> Outcome {
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(dir.join("store.redb")).expect("open the store"));
    let ops = Ops::new(dir, hang_in_fix);
    let app = app(store);
    let runner = app.runner(&ops).thread(THREAD).owner("agent:oncall").on_event(|e| println!("  {e}"));
    let run = if resume { runner.resume().await } else { runner.run(alert()).await }.expect("the run");
    println!("outcome: {}", run.outcome);
    run.outcome
}

/// A human on call approves the pending fix.
fn approve(dir: &Path) {
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(dir.join("store.redb")).expect("open the store"));
    let desk = app(store).approvals(RoleAuthorizer::new().role_for(Risk::External, "sre")).expect("the desk");
    for record in desk.pending().expect("pending approvals").into_iter().filter(|r| r.thread == THREAD) {
        println!("approving `{}`: {} {}", record.id, record.tool, record.args);
        desk.approve(&record.id, &Approver::new("alice", ["sre"])).expect("approve");
    }
}

fn report(dir: &Path) {
    let store = RedbStore::open(dir.join("store.redb")).expect("open the store");
    println!("\n== report: audit log of {THREAD}");
    for e in store.list_audit(THREAD).expect("audit") {
        println!("  #{:<2} {:<26} {}", e.seq, e.kind, e.detail);
    }
    println!("\n== restarts.log (what the restart service did)");
    let done = std::fs::read_to_string(dir.join("restarts.log")).unwrap_or_default();
    for line in done.lines() {
        println!("  {line}");
    }
    let audit = store.list_audit(THREAD).expect("audit");
    let kind = |k: &str| audit.iter().filter(|e| e.kind == k).count();
    println!(
        "\nthe fix was claimed {} time(s), re-run with its key {} time(s), acted {} time(s); rolled back {} time(s)",
        kind("approval.executing"),
        kind("effect.rerun"),
        done.lines().filter(|l| l.starts_with("restart ")).count(),
        kind("saga.compensated"),
    );
}

fn child(dir: &Path, what: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("this binary"));
    cmd.args(["--child", what]).env("INCIDENT_DIR", dir).stderr(Stdio::inherit());
    cmd
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let dir = PathBuf::from(std::env::var("INCIDENT_DIR").expect("INCIDENT_DIR"));
        match args.get(i + 1).map(String::as_str) {
            Some("start") => drop(step(&dir, false, false).await),
            Some("claim") => drop(step(&dir, true, true).await),
            _ => drop(step(&dir, true, false).await),
        }
        return;
    }
    let dir = std::env::temp_dir().join(format!("agentflow-incident-504-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    if args.iter().any(|a| a == "--crash-demo") {
        println!("== process 1: triage, diagnose, plan; the fix waits for approval");
        assert!(child(&dir, "start").status().expect("child").success());
        approve(&dir);
        println!("== process 2: claims the approved fix; SIGKILL while it is in flight");
        let mut second = child(&dir, "claim").spawn().expect("child");
        while !dir.join("fix-claimed").exists() {
            if let Some(status) = second.try_wait().expect("child status") {
                panic!("process 2 ended ({status}) before it claimed the fix");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        second.kill().expect("SIGKILL");
        second.wait().expect("reap");
        println!("== process 3: resumes; the idempotent fix runs again with the same key, verify fails, rollback");
        assert!(child(&dir, "resume").status().expect("child").success());
    } else {
        let outcome = step(&dir, false, false).await;
        assert!(matches!(outcome, Outcome::Interrupted { .. }), "the fix waits for approval");
        approve(&dir);
        step(&dir, true, false).await;
    }
    report(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}
