use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
}

#[graph(state = Ticket, start = classify)]
mod support {
    use super::*;

    #[node(goto = [END])]
    async fn classify(t: &Ticket) -> Result<Step<Ticket>, std::num::ParseIntError> {
        let _n: u32 = t.text.parse()?;
        Ok(goto!(END))
    }
}

fn main() {
    let _ = support::graph();
}
