use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Market {
    tickers: Vec<String>,
    #[reduce(append)]
    signals: Vec<String>,
}

#[graph(state = Market, start = plan)]
mod market {
    use super::*;

    #[node(goto = [analyst])]
    async fn plan(_s: &Market) -> Step<Market> {
        goto!(analyst)
    }

    #[node(goto = [END])]
    async fn analyst(_s: &Market, #[payload] ticker: &String) -> Step<Market> {
        goto!(END, Market::update().signals(vec![ticker.clone()]))
    }
}

fn main() {
    let _ = market::graph();
}
