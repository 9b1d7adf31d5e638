//! A compensation reaches the reversible calls of a subgraph child: when the parent fails after
//! its child completed, the child's calls are undone with the parent's own, newest first across
//! the tree, each once, and `Compensated { undone, .. }` counts them all.

use std::sync::{Arc, Mutex};

use agentflow::prelude::*;
use agentflow::saga::Compensates;
use agentflow::{RedbStore, Store};
use serde::{Deserialize, Serialize};

/// What the tools did, in order.
static LEDGER: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn ledger() -> Vec<String> {
    LEDGER.lock().unwrap().clone()
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Hold {
    item: String,
}

#[derive(Deserialize, Serialize)]
pub struct Held {
    hold: String,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct HoldRef {
    hold: String,
}

/// Places a hold on an item.
#[tool(risk = reversible, compensate = release)]
async fn place(args: Hold) -> Result<Held, ToolError> {
    LEDGER.lock().unwrap().push(format!("place {}", args.item));
    Ok(Held { hold: format!("h-{}", args.item) })
}

/// Releases a hold.
#[tool(risk = reversible)]
async fn release(args: HoldRef) -> Result<(), ToolError> {
    LEDGER.lock().unwrap().push(format!("release {}", args.hold));
    Ok(())
}

impl Compensates<place> for HoldRef {
    fn from_call(_args: Hold, held: Held) -> Self {
        HoldRef { hold: held.hold }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Booking {
    item: String,
    hold: Option<String>,
}

#[graph(state = Booking, start = book)]
pub mod booking {
    use super::*;

    #[node(goto = [END], tools = [place])]
    async fn book(s: &Booking, cx: &Ctx<()>) -> Result<Step<Booking>, NodeError> {
        let obs = cx.run_tool(place, serde_json::json!({ "item": s.item })).await?;
        Ok(goto!(END, Booking::update().hold(obs.body["result"]["hold"].as_str().map(str::to_string))))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Trip {
    #[reduce(append)]
    log: Vec<String>,
}

#[graph(state = Trip, start = hotel)]
pub mod trip {
    use super::*;

    #[node(goto = [car], tools = [place])]
    async fn hotel(_s: &Trip, cx: &Ctx<()>) -> Result<Step<Trip>, NodeError> {
        cx.run_tool(place, serde_json::json!({ "item": "hotel" })).await?;
        Ok(goto!(car, Trip::update().log(vec!["hotel".into()])))
    }

    #[node(goto = [flight], subgraphs = [booking])]
    async fn car(_s: &Trip, cx: &Ctx<()>) -> Result<Step<Trip>, NodeError> {
        let booked = cx.subgraph(booking::graph(), Booking { item: "car".into(), hold: None }).await?;
        Ok(goto!(flight, Trip::update().log(vec![format!("car {:?}", booked.hold)])))
    }

    #[node(goto = [END])]
    async fn flight(_s: &Trip) -> Result<Step<Trip>, NodeError> {
        Err(NodeError::fatal("the flight is sold out"))
    }
}

#[tokio::test]
async fn a_parents_compensation_undoes_its_childs_calls_too_newest_first_each_once() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = trip::graph().app().store(Arc::clone(&store));
    let run = app.runner(&()).thread("trip-1").run(Trip::default()).await.unwrap();
    let Outcome::Compensated { undone, .. } = &run.outcome else { panic!("not compensated: {:?}", run.outcome) };
    let mine: Vec<String> = ledger().into_iter().filter(|l| l.contains("hotel") || l.contains("car")).collect();
    assert_eq!(
        mine,
        ["place hotel", "place car", "release h-car", "release h-hotel"],
        "the child's hold was not released, or not first"
    );
    let undone: Vec<(&str, &str)> = undone.iter().map(|u| (u.node.as_str(), u.tool.as_str())).collect();
    assert_eq!(undone, [("book", "place"), ("hotel", "place")]);

    // Each once: resuming the compensated thread undoes nothing again.
    let _ = app.runner(&()).thread("trip-1").resume().await;
    let releases =
        ledger().iter().filter(|l| l.starts_with("release h-hotel") || l.starts_with("release h-car")).count();
    assert_eq!(releases, 2, "a compensation ran twice: {:?}", ledger());
}

#[graph(state = Booking, start = book)]
pub mod broken_booking {
    use super::*;

    #[node(goto = [confirm], tools = [place])]
    async fn book(s: &Booking, cx: &Ctx<()>) -> Result<Step<Booking>, NodeError> {
        cx.run_tool(place, serde_json::json!({ "item": s.item })).await?;
        Ok(goto!(confirm, Booking::update()))
    }

    #[node(goto = [END])]
    async fn confirm(_s: &Booking) -> Result<Step<Booking>, NodeError> {
        Err(NodeError::fatal("the rental desk is closed"))
    }
}

#[graph(state = Trip, start = hotel)]
pub mod broken_trip {
    use super::*;

    #[node(goto = [car], tools = [place])]
    async fn hotel(_s: &Trip, cx: &Ctx<()>) -> Result<Step<Trip>, NodeError> {
        cx.run_tool(place, serde_json::json!({ "item": "inn" })).await?;
        Ok(goto!(car, Trip::update().log(vec!["inn".into()])))
    }

    #[node(goto = [END], subgraphs = [broken_booking])]
    async fn car(_s: &Trip, cx: &Ctx<()>) -> Result<Step<Trip>, NodeError> {
        cx.subgraph(broken_booking::graph(), Booking { item: "van".into(), hold: None }).await?;
        Ok(goto!(END, Trip::update()))
    }
}

#[tokio::test]
async fn a_call_the_childs_own_compensation_undid_is_not_undone_again_by_the_parent() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = broken_trip::graph().app().store(Arc::clone(&store));
    let run = app.runner(&()).thread("trip-2").run(Trip::default()).await.unwrap();
    let Outcome::Compensated { undone, .. } = &run.outcome else { panic!("not compensated: {:?}", run.outcome) };
    let mine: Vec<String> = ledger().into_iter().filter(|l| l.contains("inn") || l.contains("van")).collect();
    assert_eq!(mine, ["place inn", "place van", "release h-van", "release h-inn"]);
    assert_eq!(undone.iter().map(|u| u.node.as_str()).collect::<Vec<_>>(), ["hotel"]);
}
