// `each(..)` to a node without a payload, `parallel` on a node that is no
// map worker, and a worker as the start node: all reported together.
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Market {
    tickers: Vec<String>,
    #[reduce(append)]
    signals: Vec<String>,
}

#[graph(state = Market, start = analyst)]
mod market {
    use super::*;

    #[node(goto = [summarize])]
    async fn analyst(_s: &Market, #[payload] ticker: &String) -> Step<Market> {
        goto!(summarize, Market::update().signals(vec![ticker.clone()]))
    }

    #[node(goto = [report], parallel = 4)]
    async fn summarize(s: &Market) -> Step<Market> {
        goto!(each(report, s.signals.clone()))
    }

    #[node(goto = [END])]
    async fn report(_s: &Market) -> Step<Market> {
        goto!(END)
    }
}

fn main() {
    let _ = market::graph();
}
