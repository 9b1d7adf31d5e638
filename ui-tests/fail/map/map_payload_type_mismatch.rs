use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Market {
    tickers: Vec<String>,
    #[reduce(append)]
    signals: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Task {
    ticker: String,
}

#[graph(state = Market, start = plan)]
mod market {
    use super::*;

    #[node(goto = [analyst])]
    async fn plan(s: &Market) -> Step<Market> {
        goto!(each(analyst, s.tickers.clone()))
    }

    #[node(goto = [END])]
    async fn analyst(_s: &Market, #[payload] task: &Task) -> Step<Market> {
        goto!(END, Market::update().signals(vec![task.ticker.clone()]))
    }
}

fn main() {
    let _ = market::graph();
}
