//! A graph as large as the largest example's (`examples/support_router.rs`: seven nodes, a
//! branch, a fan-out and its join, a bounded loop), with a refund at its end that waits for a
//! person and a durable timer after it: the inbox draws the graph beside the decision, and the
//! thread's timeline shows the wait for the approval and the sleep.

use std::sync::Arc;
use std::time::Duration;

use agentflow::Store;
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::refund;

/// How long `settle` sleeps on its durable timer.
pub const SETTLE: Duration = Duration::from_millis(1500);

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Case {
    pub order: String,
    pub amount: u32,
    pub intent: Option<String>,
    #[reduce(append)]
    pub evidence: Vec<String>,
    pub draft: Option<String>,
    #[reduce(add)]
    pub revisions: u32,
    pub receipt: Option<Value>,
    pub settled: bool,
}

#[graph(state = Case, start = classify, max_steps = 20)]
pub mod escalation {
    use super::*;

    #[node(goto = [lookup, escalate])]
    async fn classify(c: &Case) -> Step<Case> {
        if c.amount == 0 {
            goto!(escalate, Case::update().intent(Some("question".into())))
        } else {
            goto!(lookup, Case::update().intent(Some("refund".into())))
        }
    }

    #[node(goto = [END])]
    async fn escalate(_c: &Case) -> Step<Case> {
        goto!(END, Case::update().draft(Some("Forwarded to a person.".into())))
    }

    #[node(goto = [search_orders, search_policy])]
    async fn lookup(_c: &Case) -> Step<Case> {
        goto!([search_orders, search_policy])
    }

    #[node(goto = [draft], writes = [evidence])]
    async fn search_orders(c: &Case) -> Step<Case> {
        goto!(draft, Case::update().evidence(vec![format!("order {}: paid, not shipped", c.order)]))
    }

    #[node(goto = [draft], writes = [evidence])]
    async fn search_policy(_c: &Case) -> Step<Case> {
        goto!(draft, Case::update().evidence(vec!["policy: an order not shipped is refunded in full".into()]))
    }

    #[node(goto = [review])]
    async fn draft(c: &Case) -> Step<Case> {
        let text = format!("Refund {} on order {} (draft {})", c.amount, c.order, c.revisions + 1);
        goto!(review, Case::update().draft(Some(text)).revisions(1))
    }

    #[node(goto = [draft, refund_order])]
    async fn review(c: &Case) -> Step<Case> {
        if c.revisions < 2 { goto!(draft) } else { goto!(refund_order) }
    }

    #[node(goto = [settle], tools = [refund])]
    async fn refund_order(c: &Case, cx: &Ctx<()>) -> Result<Step<Case>, NodeError> {
        let obs = cx.run_tool(refund, json!({ "order_id": c.order, "amount": c.amount })).await?;
        Ok(goto!(settle, Case::update().receipt(Some(obs.body))))
    }

    /// The payment provider settles a refund within a moment: wait for it on a durable timer.
    #[node(goto = [END], sleep)]
    async fn settle(_c: &Case, cx: &Ctx<()>) -> Result<Step<Case>, NodeError> {
        cx.sleep(SETTLE).await?;
        Ok(goto!(END, Case::update().settled(true)))
    }
}

/// Adds `t-large`: a refund of 120 on order B-7, paused for its approval at `refund_order`.
pub async fn add_large(store: Arc<dyn Store>) {
    let run = escalation::graph()
        .app()
        .store(store)
        .runner(&())
        .thread("t-large")
        .owner("agent")
        .run(Case { order: "B-7".into(), amount: 120, ..Case::default() })
        .await
        .expect("paused run");
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
}

/// Resumes `t-large` in this process (the file is open only during the run).
pub async fn resume_large(store: Arc<dyn Store>) -> agentflow::Run<Case> {
    escalation::graph().app().store(store).runner(&()).thread("t-large").resume().await.expect("resume")
}
