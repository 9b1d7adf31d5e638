//! An approved tool call, for counting the durable commits it costs: a
//! graph whose one node calls an irreversible tool through the gateway, and a
//! `Store` wrapper that counts the durable write transactions it asks for.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::{Outcome as RunOutcome, RedbStore, Run, Store};
use agentflow_store::{
    ApprovalError, ApprovalPatch, ApprovalRecord, ApprovalStatus, AuditEntry, AuditError, Checkpoint,
    CheckpointSummary, CommitError, CommitReceipt, CompactError, CompactReport, Durability, EffectBatch, EffectError,
    EffectKey, EffectOutcome, FoldFn, Lease, LeaseError, NewAuditEntry, PendingWrite, ReadError, StateChain,
    StepCommit, ThreadRecord,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Refund {
    order_id: String,
    amount: u32,
}

/// Refunds an order. Irreversible, so every call needs an approval.
#[tool(risk = irreversible)]
async fn refund(args: Refund) -> Result<Value, ToolError> {
    Ok(json!({ "refunded": args.amount, "order_id": args.order_id }))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Pay {
    order: String,
    receipt: Option<Value>,
}

#[graph(state = Pay, deps = (), start = pay)]
pub mod pay_flow {
    use super::*;

    #[node(goto = [END], tools = [refund])]
    async fn pay(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let obs = cx.run_tool(refund, json!({ "order_id": s.order, "amount": 10 })).await?;
        Ok(goto!(END, Pay::update().receipt(Some(obs.body))))
    }
}

/// Durable write transactions asked of the store, by kind.
#[derive(Debug, Default)]
pub struct Counts {
    pub step_commits: AtomicU64,
    pub other: AtomicU64,
}

impl Counts {
    pub fn total(&self) -> u64 {
        self.step_commits.load(Ordering::SeqCst) + self.other.load(Ordering::SeqCst)
    }
}

/// A `RedbStore` that counts its durable write transactions: a step commit
/// with `Durability::Immediate`, and every write the `Store` trait makes
/// durable on its own (effects, audit entries, approvals, flushes).
pub struct CountingStore {
    pub inner: RedbStore,
    pub counts: Arc<Counts>,
}

impl CountingStore {
    fn other(&self) {
        self.counts.other.fetch_add(1, Ordering::SeqCst);
    }
}

impl Store for CountingStore {
    fn thread(&self, id: &str) -> Result<Option<ThreadRecord>, ReadError> {
        self.inner.thread(id)
    }
    fn list_threads(&self) -> Result<Vec<ThreadRecord>, ReadError> {
        self.inner.list_threads()
    }
    fn commit_step(&self, commit: StepCommit) -> Result<CommitReceipt, CommitError> {
        if commit.durability == Durability::Immediate {
            self.counts.step_commits.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.commit_step(commit)
    }
    fn flush(&self) -> Result<(), CommitError> {
        self.other();
        self.inner.flush()
    }
    fn checkpoint(&self, thread: &str, seq: u64) -> Result<Option<Checkpoint>, ReadError> {
        self.inner.checkpoint(thread, seq)
    }
    fn latest_checkpoint(&self, thread: &str) -> Result<Option<Checkpoint>, ReadError> {
        self.inner.latest_checkpoint(thread)
    }
    fn list_checkpoints(&self, thread: &str) -> Result<Vec<CheckpointSummary>, ReadError> {
        self.inner.list_checkpoints(thread)
    }
    fn state_chain(&self, thread: &str, seq: u64) -> Result<Option<StateChain>, ReadError> {
        self.inner.state_chain(thread, seq)
    }
    fn pending_writes(&self, thread: &str, seq: u64) -> Result<Vec<PendingWrite>, ReadError> {
        self.inner.pending_writes(thread, seq)
    }
    fn acquire_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        self.inner.acquire_lease(thread, holder, ttl_ms, now)
    }
    fn renew_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError> {
        self.inner.renew_lease(thread, holder, ttl_ms, now)
    }
    fn release_lease(&self, thread: &str, holder: &str) -> Result<(), LeaseError> {
        self.inner.release_lease(thread, holder)
    }
    fn effect(&self, key: &EffectKey) -> Result<Option<Vec<u8>>, ReadError> {
        self.inner.effect(key)
    }
    fn effect_keys(&self, thread: &str, seq: u64) -> Result<Vec<EffectKey>, ReadError> {
        self.inner.effect_keys(thread, seq)
    }
    fn record_effect(&self, key: &EffectKey, result: &[u8]) -> Result<EffectOutcome, EffectError> {
        self.other();
        self.inner.record_effect(key, result)
    }
    fn commit_effects(&self, batch: EffectBatch) -> Result<Vec<EffectOutcome>, CommitError> {
        self.other();
        self.inner.commit_effects(batch)
    }
    fn append_audit(&self, thread: &str, entry: NewAuditEntry) -> Result<u64, AuditError> {
        self.other();
        self.inner.append_audit(thread, entry)
    }
    fn list_audit(&self, thread: &str) -> Result<Vec<AuditEntry>, ReadError> {
        self.inner.list_audit(thread)
    }
    fn put_approval(&self, approval: ApprovalRecord, actor: &str) -> Result<(), ApprovalError> {
        self.other();
        self.inner.put_approval(approval, actor)
    }
    fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, ReadError> {
        self.inner.approval(id)
    }
    fn list_approvals(&self, thread: &str) -> Result<Vec<ApprovalRecord>, ReadError> {
        self.inner.list_approvals(thread)
    }
    fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, ReadError> {
        self.inner.list_pending_approvals()
    }
    fn transition_approval(
        &self,
        id: &str,
        expected: ApprovalStatus,
        to: ApprovalStatus,
        patch: ApprovalPatch,
    ) -> Result<ApprovalRecord, ApprovalError> {
        self.other();
        self.inner.transition_approval(id, expected, to, patch)
    }
    fn compact(&self, thread: &str, keep_last: usize, fold: &FoldFn<'_>) -> Result<CompactReport, CompactError> {
        self.inner.compact(thread, keep_last, fold)
    }
    fn breaker(&self, tool: &str) -> Result<Option<agentflow_store::BreakerRecord>, ReadError> {
        self.inner.breaker(tool)
    }
    fn update_breaker(
        &self,
        update: agentflow_store::BreakerUpdate,
    ) -> Result<agentflow_store::BreakerAnswer, agentflow_store::BreakerError> {
        self.other();
        self.inner.update_breaker(update)
    }
    fn read_events(
        &self,
        thread: &str,
        after: Option<agentflow_store::EventId>,
        limit: usize,
    ) -> Result<agentflow_store::EventPage, ReadError> {
        self.inner.read_events(thread, after, limit)
    }
    fn on_events(&self, wake: agentflow_store::EventWake) -> bool {
        self.inner.on_events(wake)
    }
}

/// Durable commits of one approved call: (all, of which step commits), counted
/// from just after the approver's decision to the end of the resumed run.
pub async fn commits_per_approved_call(order: &str) -> (u64, u64) {
    let counts = Arc::new(Counts::default());
    let store = CountingStore { inner: RedbStore::in_memory().expect("in-memory store"), counts: Arc::clone(&counts) };
    let graph = pay_flow::graph().app().store(Arc::new(store) as Arc<dyn Store>);
    let desk = graph.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "approver")).expect("a desk");
    let input = Pay { order: order.to_string(), receipt: None };
    let run: Run<Pay> = graph.runner(&()).thread(order).owner("agent").run(input).await.expect("the run starts");
    let RunOutcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {:?}", run.outcome) };
    let id = pending[0].payload["approval"].as_str().expect("an approval id").to_string();
    desk.approve(&id, &Approver::new("alice", ["approver"])).expect("approved");
    let before = (counts.total(), counts.step_commits.load(Ordering::SeqCst));
    let done = graph.runner(&()).thread(order).resume().await.expect("the run resumes");
    assert_eq!(done.outcome, RunOutcome::Completed);
    assert_eq!(done.state.receipt.as_ref().expect("a receipt")["result"]["refunded"], 10);
    let after = (counts.total(), counts.step_commits.load(Ordering::SeqCst));
    (after.0 - before.0, after.1 - before.1)
}
