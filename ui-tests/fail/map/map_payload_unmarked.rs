// A map worker whose payload parameter lacks `#[payload]`: reported once, at the payload, as
// the missing attribute (not as a parameter too many). The payload comes second; written
// after the context, it must move as well.
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

    #[node(goto = [analyst, critic])]
    async fn plan(s: &Market) -> Step<Market> {
        goto!([each(analyst, s.tickers.clone()), each(critic, s.tickers.clone())])
    }

    #[node(goto = [END])]
    async fn analyst(_s: &Market, ticker: &String, _cx: &Ctx<()>) -> Step<Market> {
        goto!(END, Market::update().signals(vec![ticker.clone()]))
    }

    #[node(goto = [END])]
    async fn critic(_s: &Market, _cx: &Ctx<()>, ticker: &String) -> Step<Market> {
        goto!(END, Market::update().signals(vec![ticker.clone()]))
    }
}

fn main() {
    let _ = market::graph();
}
