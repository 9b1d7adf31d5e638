//! Driving the adversarial suite: the world a case runs in (store, agent, desk and script),
//! each operation applied to it, and the invariants checked after every operation.

use crate::adversarial_script::*;
use crate::adversarial_world::*;
use agentflow::approval::{ApprovalDesk, ApprovalStatus, Approver, RoleAuthorizer, Settlement};
use agentflow::model::{ChatRequest, ScriptedModel};
use agentflow::prelude::*;
use agentflow::tool::{Decision, Risk, RiskPolicy};
use agentflow::{RedbStore, Run, Store};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

// ---------------------------------------------------------------- driving

pub const ROLE: &str = "ops";
pub const OWNER: &str = "agent:support-bot";
pub const SHORT_TTL: Duration = Duration::from_millis(60);

pub fn alice() -> Approver {
    Approver::new("alice", [ROLE])
}

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Polls a future at most `left` times, or until `cut` fires, then drops
/// it (`None`): a crash at whatever await it had reached.
pub struct PollLimit<F> {
    pub fut: Pin<Box<F>>,
    pub left: u32,
    pub cut: Option<Pin<Box<tokio::time::Sleep>>>,
}

pub fn limit<F: Future>(fut: F, polls: u32, cut_ms: Option<u64>) -> PollLimit<F> {
    let cut = cut_ms.map(|ms| Box::pin(tokio::time::sleep(Duration::from_millis(ms))));
    PollLimit { fut: Box::pin(fut), left: polls, cut }
}

impl<F: Future> Future for PollLimit<F> {
    type Output = Option<F::Output>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let cut = self.cut.as_mut().is_some_and(|sleep| sleep.as_mut().poll(cx).is_ready());
        if self.left == 0 || cut {
            return Poll::Ready(None);
        }
        self.left -= 1;
        self.fut.as_mut().poll(cx).map(Some)
    }
}

pub struct World {
    pub store: Arc<dyn Store>,
    pub graph: App<Desk, Deps>,
    pub desk: ApprovalDesk,
    pub deps: Deps,
    pub script: Arc<Mutex<Script>>,
    /// The threads of the case; the last is the one driven. A completed
    /// thread is followed by a new one.
    pub threads: Vec<String>,
    pub thread: String,
    /// `RunAgain` settlements per (thread, node, tool, canonical args).
    pub run_again: HashMap<(String, String, String, String), usize>,
}

impl World {
    pub fn new(thread: &str, short_ttl: bool) -> Self {
        Self::with_graph(one_node::graph(), thread, short_ttl)
    }

    pub fn with_graph(graph: CompiledGraph<Desk, Deps>, thread: &str, short_ttl: bool) -> Self {
        let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().expect("in-memory store"));
        let policy = RiskPolicy::default()
            .risk(Risk::Reversible, Decision::Run)
            .risk(Risk::External, Decision::Run)
            .risk(Risk::Irreversible, Decision::NeedsApproval);
        let graph = graph.app().store(Arc::clone(&store)).policy(policy).approval_ttl(if short_ttl {
            SHORT_TTL
        } else {
            Duration::from_secs(3600)
        });
        let authorizer = RoleAuthorizer::new().role_for(Risk::Irreversible, ROLE).role_for(Risk::Reversible, ROLE);
        let authorizer = authorizer.role_for(Risk::External, ROLE);
        let desk = graph.approvals(authorizer).unwrap();
        let script = Arc::new(Mutex::new(Script::default()));
        let model = {
            let script = Arc::clone(&script);
            ScriptedModel::new().respond_with(move |_req: &ChatRequest| Ok(serve(&script)))
        };
        let deps = Deps { model: Arc::new(model) };
        World {
            store,
            graph,
            desk,
            deps,
            script,
            threads: vec![thread.to_string()],
            thread: thread.to_string(),
            run_again: HashMap::new(),
        }
    }

    pub fn started(&self) -> bool {
        self.graph.state(&self.thread).ok().flatten().is_some()
    }

    /// Moves on to a new thread once the current one completed.
    pub fn next_thread(&mut self) {
        let completed = matches!(self.graph.state(&self.thread), Ok(Some(snapshot)) if snapshot.next.is_empty());
        if completed {
            self.thread = format!("{}.{}", self.threads[0], self.threads.len());
            self.threads.push(self.thread.clone());
        }
    }

    /// A run of the thread: a fresh run the first time, a resume after.
    pub async fn go(&self, deadline: Option<Duration>) -> Result<Run<Desk>, agentflow::RunError> {
        let mut runner = self.graph.runner(&self.deps).thread(self.thread.clone()).owner(OWNER);
        if let Some(limit) = deadline {
            runner = runner.timeout(limit);
        }
        if self.started() { runner.resume().await } else { runner.run(Desk::default()).await }
    }

    pub async fn apply(&mut self, op: &Op) {
        self.next_thread();
        match op {
            Op::Model(reply) => self.script.lock().unwrap().queue.push_back(reply.clone()),
            Op::Drive(replies) => {
                self.script.lock().unwrap().queue.extend(replies.iter().cloned());
                let run = self.go(None).await;
                self.check_read_back(run);
            }
            Op::Deadline { ms } => {
                let run = self.go(Some(Duration::from_millis(*ms))).await;
                self.check_read_back(run);
            }
            Op::Crash { replies, polls, ms } => {
                self.script.lock().unwrap().queue.extend(replies.iter().cloned());
                let run = limit(self.go(None), *polls, *ms).await;
                if let Some(run) = run {
                    self.check_read_back(run);
                }
            }
            Op::LeaseLoss { polls } => {
                let mut run = limit(self.go(None), *polls, None);
                let early = (&mut run).await;
                // Another executor whose clock is past the lease's expiry.
                let stolen = self.store.acquire_lease(&self.thread, "thief", 60_000, now_ms() + 120_000).is_ok();
                let result = match early {
                    Some(result) => Some(result),
                    None => {
                        run.left = u32::MAX;
                        run.await
                    }
                };
                if stolen {
                    self.store.release_lease(&self.thread, "thief").expect("the thief gives the thread back");
                }
                if let Some(Ok(run)) = result
                    && !stolen
                {
                    self.check_read_back(Ok(run));
                }
            }
            Op::Decide { pick, how } => self.decide(*pick, *how).await,
            Op::Continue { how, then, crash } => {
                let waiting = self.waiting().len();
                for pick in 0..waiting {
                    // Decided ones leave the list; the first waiting one is next.
                    let _ = pick;
                    self.decide(0, *how).await;
                    if matches!(how, Human::LetExpire) {
                        break;
                    }
                }
                self.script.lock().unwrap().queue.push_back(then.clone());
                let limit_polls = crash.unwrap_or(u32::MAX);
                let cut = crash.map(|polls| polls as u64);
                if let Some(run) = limit(self.go(None), limit_polls, cut).await {
                    self.check_read_back(run);
                }
            }
            Op::UpdateState { amount } => {
                let update = Desk::update().log(vec![format!("a human noted {amount}")]).fees(vec![amount * 0.15]);
                let _ = self.graph.update_state(&self.thread, update, "human:bob");
            }
            Op::Fork { pick } => {
                if let Ok(history) = self.graph.history(&self.thread)
                    && !history.is_empty()
                {
                    let seq = history[pick % history.len()].seq;
                    let _ = self.graph.fork(&self.thread, seq, "human:bob");
                }
            }
        }
    }

    /// The current thread's records waiting for a human.
    pub fn waiting(&self) -> Vec<agentflow::approval::ApprovalRecord> {
        self.desk
            .for_thread(&self.thread)
            .unwrap()
            .into_iter()
            .filter(|r| matches!(r.status, ApprovalStatus::Pending | ApprovalStatus::OutcomeUnknown))
            .collect()
    }

    pub async fn decide(&mut self, pick: usize, how: Human) {
        let waiting = self.waiting();
        if waiting.is_empty() {
            return;
        }
        let record = &waiting[pick % waiting.len()];
        let id = record.id.as_str();
        let unknown = record.status == ApprovalStatus::OutcomeUnknown;
        let _ = match how {
            Human::LetExpire => {
                tokio::time::sleep(SHORT_TTL + Duration::from_millis(10)).await;
                return;
            }
            Human::Approve if !unknown => self.desk.approve(id, &alice()),
            Human::Edit(amount) if !unknown => {
                let mut args: Value = serde_json::from_str(&record.args).unwrap();
                args["amount"] = json!(amount);
                self.desk.edit(id, &alice(), args)
            }
            Human::Reject if !unknown => self.desk.reject(id, &alice(), "not today"),
            Human::Cancel if !unknown => self.desk.cancel(id, &alice()),
            Human::Succeeded if unknown => self.desk.settle(id, &alice(), Settlement::Succeeded(json!({"by": "hand"}))),
            Human::Failed if unknown => self.desk.settle(id, &alice(), Settlement::Failed("it did not act".into())),
            Human::RunAgain if unknown => {
                let settled = self.desk.settle(id, &alice(), Settlement::RunAgain);
                if settled.is_ok() {
                    let binding =
                        (record.thread.clone(), record.node.clone(), record.tool.clone(), record.args.clone());
                    *self.run_again.entry(binding).or_default() += 1;
                }
                settled
            }
            _ => return,
        };
    }

    /// Invariant 4: what a completed or paused run returned is what reads back.
    pub fn check_read_back(&self, run: Result<Run<Desk>, agentflow::RunError>) {
        let Ok(run) = run else { return };
        if !matches!(run.outcome, Outcome::Completed | Outcome::Interrupted { .. }) {
            return;
        }
        let stored = self.graph.state(&self.thread).expect("the thread reads back").expect("a committed state").state;
        let bits =
            |d: &Desk| (d.log.clone(), d.fees.iter().map(|f| f.to_bits()).collect::<Vec<_>>(), d.total.to_bits());
        assert_eq!(bits(&stored), bits(&run.state), "the committed state reads back as the run returned it");
        if run.outcome == Outcome::Completed {
            // 3. A call cut off mid-way is never left out of sight: once the
            // thread completed, no approval is still `EXECUTING`.
            let approvals = self.store.list_approvals(&self.thread).expect("the approvals read back");
            let executing: Vec<_> = approvals.iter().filter(|r| r.status == ApprovalStatus::Executing).collect();
            assert!(executing.is_empty(), "a completed thread left approvals executing: {executing:#?}");
        }
    }

    /// Invariants 1 to 3, against the ledger, the approval records and the
    /// audit log.
    pub fn check(&self) {
        for e in ledger() {
            assert!(self.threads.contains(&e.thread), "a call ran for an unknown thread: {e:?}");
        }
        for thread in &self.threads {
            self.check_thread(thread);
        }
    }

    pub fn check_thread(&self, thread: &str) {
        let ledger: Vec<Executed> = ledger().into_iter().filter(|e| e.thread == thread).collect();
        let approvals = self.store.list_approvals(thread).expect("the approvals read back");
        let audit = self.store.list_audit(thread).expect("the audit log reads back");
        let approved = |id: &str| {
            audit.iter().any(|e| e.kind == "approval.approved" && e.detail.get("approval") == Some(&json!(id)))
        };
        let mut by_binding: HashMap<(String, String, String, String), Vec<&Executed>> = HashMap::new();
        let mut by_key: HashMap<&str, Vec<&Executed>> = HashMap::new();
        for e in ledger.iter().filter(|e| e.tool != "lookup") {
            by_binding
                .entry((e.thread.clone(), e.node.clone(), e.tool.to_string(), e.args.clone()))
                .or_default()
                .push(e);
            by_key.entry(e.key.as_str()).or_default().push(e);
        }
        for ((thread, node, tool, args), runs) in &by_binding {
            let run_again = self.run_again.get(&(thread.clone(), node.clone(), tool.clone(), args.clone()));
            let run_again = run_again.copied().unwrap_or(0);
            // `tag_order` (reversible) and `open_ticket` (external) run by the
            // policy's `Run`; the irreversible tools only with an approval.
            if needs_approval(tool) {
                // 1. Each run matches an approval granted for exactly this call.
                let granted: Vec<_> = approvals
                    .iter()
                    .filter(|r| &r.thread == thread && &r.node == node && &r.tool == tool && &r.args == args)
                    .filter(|r| approved(&r.id))
                    .collect();
                assert!(
                    !granted.is_empty(),
                    "`{tool}` ran with {args} without an approval for exactly that call; approvals: {approvals:#?}"
                );
                // 2. No approval ran twice: one run per approval, plus one per
                // human's `RunAgain`.
                assert!(
                    runs.len() <= granted.len() + run_again,
                    "`{tool}` with {args} ran {} times under {} approvals ({run_again} run again): {runs:#?}",
                    runs.len(),
                    granted.len()
                );
            }
        }
        for (key, runs) in &by_key {
            let tool = runs[0].tool;
            let binding = (runs[0].thread.clone(), runs[0].node.clone(), tool.to_string(), runs[0].args.clone());
            let reruns = audit
                .iter()
                .filter(|e| e.kind == "effect.rerun" && e.detail.get("idempotency_key") == Some(&json!(key)))
                .count();
            if idempotent(tool) {
                // 2. An idempotent re-run is audited, each one.
                assert!(runs.len() <= 1 + reruns, "`{key}` ran {} times, {reruns} re-runs audited", runs.len());
            } else {
                // 3. A non-idempotent call is never re-run silently.
                assert_eq!(reruns, 0, "a non-idempotent call `{key}` was re-run on its own");
                let again = self.run_again.get(&binding).copied().unwrap_or(0);
                assert!(
                    runs.len() <= 1 + again,
                    "`{key}` ran {} times with {again} `RunAgain` decisions: {runs:#?}",
                    runs.len()
                );
            }
        }
    }
}
