//! Two executors of one thread (the first lost its lease to the second, and does not know it
//! yet) reach the same effect. The journal's *started* marker decides: the executor whose
//! marker was already there does not run the effect. Here the second executor is played by a
//! store that writes the same marker right before the first one's batch.

#[path = "fixtures/hooked_store.rs"]
mod hooked_store;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::prelude::*;
use agentflow::{RedbStore, Store};
use hooked_store::Hooked;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Charges {
    #[reduce(add)]
    pub n: u32,
}

#[derive(Default)]
pub struct Card {
    charged: AtomicU32,
}

#[graph(state = Charges, deps = Card, start = charge)]
mod billing {
    use super::*;

    #[node(goto = [END])]
    async fn charge(_s: &Charges, cx: &Ctx<Card>) -> Result<Step<Charges>, NodeError> {
        let n = cx
            .effect("charge-card", |_key| async {
                Ok::<_, NodeError>(cx.deps().charged.fetch_add(1, Ordering::SeqCst) + 1)
            })
            .await?;
        Ok(goto!(END, Charges::update().n(n)))
    }
}

/// A store that, before the first batch holding a *started* marker of `charge-card`, writes that
/// marker itself: another executor started the same run of the effect first.
fn raced(inner: Arc<dyn Store>) -> Hooked {
    let mut store = Hooked::new(inner);
    store.before_effects = Some(Box::new(|inner, batch| {
        for (key, value) in &batch.effects {
            if key.key.starts_with("charge-card\u{1f}started\u{1f}") {
                inner.record_effect(key, value).expect("the other executor's marker");
            }
        }
        Ok(())
    }));
    store
}

#[tokio::test]
async fn an_effect_another_executor_started_first_is_not_run_again() {
    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = billing::graph().app().store(Arc::new(raced(Arc::clone(&inner))));
    let card = Card::default();
    let run = app.runner(&card).thread("race").run(Charges::default()).await.unwrap();
    assert_eq!(card.charged.load(Ordering::SeqCst), 0, "the effect ran beside the other executor's run of it");
    let Outcome::Failed { error, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert!(error.message.contains("started by another executor"), "{error}");
}

#[tokio::test]
async fn without_a_race_the_effect_runs_once() {
    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = billing::graph().app().store(Arc::new(Hooked::new(Arc::clone(&inner))));
    let card = Card::default();
    let run = app.runner(&card).thread("calm").run(Charges::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(card.charged.load(Ordering::SeqCst), 1);
    assert_eq!(run.state.n, 1);
}
