use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Order {
    quantity: String,
    parsed: u32,
}

fn parse(text: &str) -> Result<u32, NodeError> {
    text.parse().map_err(|e| NodeError::fatal(format!("bad quantity {text:?}: {e}")))
}

#[graph(state = Order, start = parse_quantity)]
mod orders {
    use super::*;

    #[node(goto = [END])]
    async fn parse_quantity(o: &Order) -> Result<Step<Order>, NodeError> {
        let n = parse(&o.quantity)?;
        Ok(goto!(END, Order::update().parsed(n)))
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let graph = orders::graph();
    let ok = rt.block_on(graph.run(Order { quantity: "12".into(), parsed: 0 }, &())).unwrap();
    assert!(ok.outcome.is_completed(), "{}", ok.outcome);
    assert_eq!(ok.state.parsed, 12);
    let bad = rt.block_on(graph.run(Order { quantity: "twelve".into(), parsed: 0 }, &())).unwrap();
    assert!(matches!(&bad.outcome, Outcome::Failed { node, .. } if node == "parse_quantity"), "{}", bad.outcome);
}
