use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Refund {
    approved: Option<bool>,
}

#[graph(state = Refund, start = ask_human)]
mod approval {
    use super::*;

    #[node(goto = [END])]
    async fn ask_human(_s: &Refund, cx: &Ctx<()>) -> Result<Step<Refund>, NodeError> {
        let approved: bool = cx.interrupt("approve the refund?")?;
        Ok(goto!(END, Refund::update().approved(Some(approved))))
    }
}

fn main() {
    let _ = approval::graph();
}
