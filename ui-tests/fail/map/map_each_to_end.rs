use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Market {
    tickers: Vec<String>,
}

#[graph(state = Market, start = plan)]
mod market {
    use super::*;

    #[node(goto = [END])]
    async fn plan(s: &Market) -> Step<Market> {
        goto!(each(END, s.tickers.clone()))
    }
}

fn main() {
    let _ = market::graph();
}
