use std::time::Duration;

use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Followup {
    reminded: bool,
}

#[graph(state = Followup, start = remind)]
mod followup {
    use super::*;

    #[node(goto = [END])]
    async fn remind(_s: &Followup, cx: &Ctx<()>) -> Result<Step<Followup>, NodeError> {
        cx.sleep(Duration::from_secs(3600)).await?;
        Ok(goto!(END, Followup::update().reminded(true)))
    }
}

fn main() {
    let _ = followup::graph();
}
