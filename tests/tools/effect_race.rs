//! Two executors of one thread (the first lost its lease to the second, and does not know it
//! yet) reach the same effect, or the same compensation. The journal's *started* marker
//! decides: the executor whose marker was already there does not run it. Here the second
//! executor is played by a store that writes the same marker right before the first one's batch.

use crate::support::hooked_store;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::prelude::*;
use agentflow::saga::Compensates;
use agentflow::{RedbStore, Store};
use hooked_store::Hooked;
use serde::{Deserialize, Serialize};
use serde_json::json;

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

#[graph(state = Charges, deps = Card, start = charge)]
mod retried_billing {
    use super::*;

    /// `charge` with retries: a retry after the lost race finds the call open.
    #[node(goto = [END], retry = 3)]
    async fn charge(_s: &Charges, cx: &Ctx<Card>) -> Result<Step<Charges>, NodeError> {
        let n = cx
            .effect("charge-card", |_key| async {
                Ok::<_, NodeError>(cx.deps().charged.fetch_add(1, Ordering::SeqCst) + 1)
            })
            .await?;
        Ok(goto!(END, Charges::update().n(n)))
    }
}

/// `Ctx::effect`: the executor that lost the race "does not run the effect (its node gets a
/// transient error; a retry finds the call open and asks a human)".
#[tokio::test]
async fn a_retry_after_losing_the_race_asks_a_human_and_never_runs_the_effect() {
    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = retried_billing::graph().app().store(Arc::new(raced(Arc::clone(&inner))));
    let card = Card::default();
    let run = app.runner(&card).thread("race-retry").run(Charges::default()).await.unwrap();
    assert_eq!(card.charged.load(Ordering::SeqCst), 0, "a retry ran the effect the other executor started");
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].kind, agentflow::PendingKind::OutcomeUnknown, "{pending:?}");
    let open: Vec<_> = inner
        .list_approvals("race-retry")
        .unwrap()
        .into_iter()
        .filter(|a| a.status == agentflow::approval::ApprovalStatus::OutcomeUnknown)
        .collect();
    assert_eq!(open.len(), 1, "{open:?}");
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

// ---------------------------------------------------------------- a compensation

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Booking {
    pub held: bool,
}

#[derive(Default)]
pub struct Seats {
    holds: AtomicU32,
    releases: AtomicU32,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Seat {
    seat: String,
}

/// Holds a seat.
#[tool(risk = reversible, compensate = release_seat)]
async fn hold_seat(args: Seat, cx: &ToolCx<Seats>) -> Result<Seat, ToolError> {
    cx.deps().holds.fetch_add(1, Ordering::SeqCst);
    Ok(args)
}

/// Releases a held seat. Not idempotent.
#[tool(risk = reversible)]
async fn release_seat(_args: Seat, cx: &ToolCx<Seats>) -> Result<(), ToolError> {
    cx.deps().releases.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

impl Compensates<hold_seat> for Seat {
    fn from_call(_args: Seat, held: Seat) -> Self {
        held
    }
}

#[graph(state = Booking, deps = Seats, start = book)]
mod booking {
    use super::*;

    #[node(goto = [END], tools = [hold_seat])]
    async fn book(_s: &Booking, cx: &Ctx<Seats>) -> Result<Step<Booking>, NodeError> {
        cx.run_tool(hold_seat, json!({ "seat": "12A" })).await?;
        Err(cx.compensate("the payment was declined"))
    }
}

/// A store that, before the first batch holding a *started* marker of a compensation, writes
/// that marker itself: another executor started the same run of the compensation first.
fn raced_compensation(inner: Arc<dyn Store>) -> Hooked {
    fn plant(inner: &dyn Store, batch: &agentflow_store::EffectBatch) -> Result<(), agentflow_store::CommitError> {
        for (key, value) in &batch.effects {
            if key.key.starts_with("compensate:") && key.key.contains("\u{1f}started\u{1f}") {
                inner.record_effect(key, value).expect("the other executor's marker");
            }
        }
        Ok(())
    }
    let mut store = Hooked::new(inner);
    // Whichever way the marker is written: in a batch, or alone.
    store.before_effects = Some(Box::new(plant));
    store.before_record = Some(Box::new(plant));
    store
}

#[tokio::test]
async fn a_compensation_another_executor_started_first_is_not_run_again() {
    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = booking::graph().app().store(Arc::new(raced_compensation(Arc::clone(&inner))));
    let seats = Seats::default();
    let ended = app.runner(&seats).thread("race").run(Booking::default()).await;
    assert_eq!(seats.holds.load(Ordering::SeqCst), 1);
    assert_eq!(seats.releases.load(Ordering::SeqCst), 0, "the compensation ran beside the other executor's run of it");
    let said = match &ended {
        Ok(run) => format!("{:?}", run.outcome),
        Err(e) => e.to_string(),
    };
    assert!(said.contains("started by another executor"), "{said}");
}

#[tokio::test]
async fn without_a_race_the_compensation_runs_once() {
    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = booking::graph().app().store(Arc::new(Hooked::new(Arc::clone(&inner))));
    let seats = Seats::default();
    let run = app.runner(&seats).thread("calm").run(Booking::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Compensated { .. }), "{:?}", run.outcome);
    assert_eq!((seats.holds.load(Ordering::SeqCst), seats.releases.load(Ordering::SeqCst)), (1, 1));
}

// ---------------------------------------------------------------- the saga log's entry

/// A completed call that names a compensation is in the saga log as soon as its result is
/// journaled: the entry is written in the same transaction. Here the process "dies" at a
/// write of the entry on its own (the store panics there, standing in for a SIGKILL); none
/// happens, the node's failure after the call compensates the thread, and the seat is
/// released. (Written on its own after the result, the entry was lost, and the failed run had
/// nothing to undo.)
#[tokio::test]
async fn a_completed_call_is_in_the_saga_log_with_its_result() {
    #[graph(state = Booking, deps = Seats, start = book)]
    mod book_then_fail {
        use super::*;

        #[node(goto = [END], tools = [hold_seat])]
        async fn book(_s: &Booking, cx: &Ctx<Seats>) -> Result<Step<Booking>, NodeError> {
            cx.run_tool(hold_seat, json!({ "seat": "14C" })).await?;
            Err(NodeError::fatal("the payment provider is down"))
        }
    }

    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let mut store = Hooked::new(Arc::clone(&inner));
    store.before_audit = Some(Box::new(|_, entry| {
        assert_ne!(entry.kind, "saga.step", "the process dies here: the saga entry is written on its own");
    }));
    let app = book_then_fail::graph().app().store(Arc::new(store));
    let seats = Seats::default();
    let ended = app.runner(&seats).thread("seat").run(Booking::default()).await;
    let said = match &ended {
        Ok(run) => format!("{:?}", run.outcome),
        Err(e) => e.to_string(),
    };
    assert_eq!(seats.holds.load(Ordering::SeqCst), 1);
    assert_eq!(seats.releases.load(Ordering::SeqCst), 1, "the held seat was not released: {said}");
    assert!(matches!(ended.map(|r| r.outcome), Ok(Outcome::Compensated { .. })), "{said}");
    let logged = inner.list_audit("seat").unwrap().into_iter().filter(|e| e.kind == "saga.step").count();
    assert_eq!(logged, 1);
}

/// A run compensating a thread it no longer holds (another executor took the lease while it
/// stalled) starts no compensation: the compensation's *started* marker is fenced by the run's
/// lease. The run ends `RunError::LeaseLost` naming the new holder, as any run that lost its
/// thread does.
#[tokio::test]
async fn a_compensation_by_a_run_that_lost_its_thread_ends_lease_lost_and_undoes_nothing() {
    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let mut store = Hooked::new(Arc::clone(&inner));
    store.before_effects = Some(Box::new(|inner, batch| {
        if batch.effects.iter().any(|(k, _)| k.key.starts_with("compensate:") && k.key.contains("\u{1f}started\u{1f}"))
        {
            // Another executor, whose clock says the lease expired, takes the thread.
            let later = agentflow::timer::now_ms() + 86_400_000;
            inner.acquire_lease(&batch.thread, "thief", 86_400_000 * 2, later).expect("the thief takes the thread");
        }
        Ok(())
    }));
    let app = booking::graph().app().store(Arc::new(store));
    let seats = Seats::default();
    let ended = app.runner(&seats).thread("stolen").run(Booking::default()).await;
    let Err(agentflow::RunError::LeaseLost { holder, .. }) = &ended else { panic!("{:?}", ended.map(|r| r.outcome)) };
    assert_eq!(holder.as_deref(), Some("thief"));
    assert_eq!((seats.holds.load(Ordering::SeqCst), seats.releases.load(Ordering::SeqCst)), (1, 0));
}

/// Runs of `book_retry_then_cancel`'s node.
static REPLAY_ATTEMPTS: AtomicU32 = AtomicU32::new(0);

/// A result journaled without its saga entry (as a release before the entry rode with the
/// result journaled it, played here by a store that drops the entry from the batch) gets the
/// entry when the call is replayed: the node's retry replays the held seat, and the
/// compensation that follows releases it.
#[tokio::test]
async fn a_result_journaled_without_its_saga_entry_gets_it_on_replay() {
    #[graph(state = Booking, deps = Seats, start = book)]
    mod book_retry_then_cancel {
        use super::*;

        #[node(goto = [END], tools = [hold_seat], retry(attempts = 2, base = 1ms, jitter = false))]
        async fn book(_s: &Booking, cx: &Ctx<Seats>) -> Result<Step<Booking>, NodeError> {
            cx.run_tool(hold_seat, json!({ "seat": "3F" })).await?;
            if REPLAY_ATTEMPTS.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(NodeError::transient("the booking page timed out"));
            }
            Err(cx.compensate("the traveller cancelled"))
        }
    }

    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let mut store = Hooked::new(Arc::clone(&inner));
    // Journals each batch with its `saga.step` entries left out, as an older release did.
    store.rewrite_effects = Some(Box::new(|mut batch| {
        batch.audit.retain(|e| e.kind != "saga.step");
        batch
    }));
    let app = book_retry_then_cancel::graph().app().store(Arc::new(store));
    let seats = Seats::default();
    let run = app.runner(&seats).thread("replayed").run(Booking::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Compensated { .. }), "{:?}", run.outcome);
    assert_eq!(REPLAY_ATTEMPTS.load(Ordering::SeqCst), 2, "the node was retried");
    assert_eq!((seats.holds.load(Ordering::SeqCst), seats.releases.load(Ordering::SeqCst)), (1, 1));
}
