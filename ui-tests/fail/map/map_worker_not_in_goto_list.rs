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

    #[node(goto = [summarize])]
    async fn plan(s: &Market) -> Step<Market> {
        if s.tickers.is_empty() {
            goto!(summarize)
        } else {
            goto!(each(analyst, s.tickers.clone()))
        }
    }

    #[node(goto = [summarize])]
    async fn analyst(_s: &Market, #[payload] ticker: &String) -> Step<Market> {
        goto!(summarize, Market::update().signals(vec![ticker.clone()]))
    }

    #[node(goto = [END])]
    async fn summarize(_s: &Market) -> Step<Market> {
        goto!(END)
    }
}

fn main() {
    let _ = market::graph();
}
