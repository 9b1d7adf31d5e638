//! A key given to `cx.effect` names one effect of a node attempt:
//!
//! - a node that charges alice and then bob under one key does not get alice's receipt back
//!   for bob: the second call is refused (fatal, naming the key), bob's charge never runs, and
//!   the run does not end `Completed`;
//! - a retry of the node (a new attempt) uses the key again and gets its journaled result.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::prelude::*;
use agentflow::{ErrorClass, RedbStore, Store};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Receipts {
    #[reduce(append)]
    receipts: Vec<String>,
}

/// The payment provider: who was charged, in order.
#[derive(Default)]
pub struct Payments {
    charged: Mutex<Vec<String>>,
    /// Attempts of the `charge_once` node so far.
    attempts: AtomicU32,
}

impl Payments {
    fn charge(&self, customer: &str) -> String {
        let mut charged = self.charged.lock().unwrap();
        charged.push(customer.to_string());
        format!("receipt {} for {customer}", charged.len())
    }

    fn charged(&self) -> Vec<String> {
        self.charged.lock().unwrap().clone()
    }
}

#[graph(state = Receipts, deps = Payments, start = charge_both)]
mod one_key_twice {
    use super::*;

    #[node(goto = [END])]
    async fn charge_both(_s: &Receipts, cx: &Ctx<Payments>) -> Result<Step<Receipts>, NodeError> {
        let alice: String = cx.effect("charge", |_| async { Ok(cx.deps().charge("alice")) }).await?;
        let bob: String = cx.effect("charge", |_| async { Ok(cx.deps().charge("bob")) }).await?;
        Ok(goto!(END, Receipts::update().receipts(vec![alice, bob])))
    }
}

#[graph(state = Receipts, deps = Payments, start = charge_once)]
mod retried {
    use super::*;

    #[node(goto = [END], retry = 2)]
    async fn charge_once(_s: &Receipts, cx: &Ctx<Payments>) -> Result<Step<Receipts>, NodeError> {
        let alice: String = cx.effect("charge", |_| async { Ok(cx.deps().charge("alice")) }).await?;
        if cx.deps().attempts.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(NodeError::transient("fails after its charge; the retry replays it"));
        }
        Ok(goto!(END, Receipts::update().receipts(vec![alice])))
    }
}

#[tokio::test]
async fn a_second_effect_under_one_key_in_one_attempt_is_refused_naming_the_key() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let payments = Payments::default();
    let run = one_key_twice::graph()
        .app()
        .store(store)
        .runner(&payments)
        .thread("alice-and-bob")
        .run(Receipts::default())
        .await
        .unwrap();
    let Outcome::Failed { node, error } = &run.outcome else {
        panic!("bob was answered with alice's receipt: the run ended {:?} with {:?}", run.outcome, run.state.receipts);
    };
    assert_eq!(node, "charge_both");
    assert_eq!(error.class, ErrorClass::Fatal);
    assert!(error.message.contains("`charge`"), "the error names the key: {}", error.message);
    assert_eq!(payments.charged(), ["alice"], "bob's charge ran under a refused key");
    assert!(run.state.receipts.is_empty());
}

#[tokio::test]
async fn without_a_store_the_second_effect_under_one_key_is_refused_too() {
    let payments = Payments::default();
    let run = one_key_twice::graph().app().runner(&payments).run(Receipts::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{:?}", run.outcome);
    assert_eq!(payments.charged(), ["alice"]);
}

#[tokio::test]
async fn a_retry_of_the_node_reuses_the_key_and_gets_its_journaled_result() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let payments = Payments::default();
    let run =
        retried::graph().app().store(store).runner(&payments).thread("retried").run(Receipts::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(payments.attempts.load(Ordering::SeqCst), 2);
    assert_eq!(payments.charged(), ["alice"], "the retry charged alice again");
    assert_eq!(run.state.receipts, ["receipt 1 for alice"]);
}
