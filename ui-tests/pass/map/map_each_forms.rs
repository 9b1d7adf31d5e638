// Every valid form of map-reduce: `each(worker, payloads)` alone, with an
// update, beside a plain target; a payload taken by reference (`&str` borrows
// a `String`) or by value;
// a worker with the context, the deps or neither; `parallel = N`.
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Market {
    tickers: Vec<String>,
    #[reduce(append)]
    signals: Vec<String>,
    #[reduce(add)]
    count: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Task {
    ticker: String,
}

struct Desk;

#[graph(state = Market, deps = Desk, start = plan)]
mod market {
    use super::*;

    #[node(goto = [analyst, quick, plain, audit])]
    async fn plan(s: &Market) -> Step<Market> {
        let tasks: Vec<Task> = s.tickers.iter().map(|t| Task { ticker: t.clone() }).collect();
        match s.tickers.len() {
            0 => goto!(each(analyst, tasks)),
            1 => goto!(each(quick, s.tickers.iter().map(|t| t.len() as u32)), Market::update().count(1)),
            _ => goto!([each(plain, s.tickers.clone()), audit], Market::update().count(2)),
        }
    }

    #[node(goto = [END], parallel = 4)]
    async fn analyst(_s: &Market, #[payload] task: &Task, cx: &Ctx<Desk>) -> Step<Market> {
        let _ = cx.instance();
        goto!(END, Market::update().signals(vec![task.ticker.clone()]))
    }

    #[node(goto = [END])]
    async fn quick(_s: &Market, #[payload] n: u32, _desk: &Desk) -> Step<Market> {
        goto!(END, Market::update().count(n))
    }

    #[node(goto = [END])]
    async fn plain(_s: &Market, #[payload] ticker: &str) -> Step<Market> {
        goto!(END, Market::update().signals(vec![ticker.to_string()]))
    }

    #[node(goto = [END])]
    async fn audit(_s: &Market) -> Step<Market> {
        goto!(END)
    }
}

fn main() {
    let _ = market::graph();
}
