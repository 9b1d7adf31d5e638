// A node marked `sleep` may wait on a durable timer, with `sleep` or
// `sleep_until`, and may also be an `interrupt` node.
use std::time::{Duration, SystemTime};

use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Followup {
    reminded: bool,
}

#[graph(state = Followup, start = wait)]
mod followup {
    use super::*;

    #[node(goto = [remind], sleep)]
    async fn wait(_s: &Followup, cx: &Ctx<()>) -> Result<Step<Followup>, NodeError> {
        cx.sleep(Duration::from_secs(3600)).await?;
        Ok(goto!(remind))
    }

    #[node(goto = [END], interrupt, sleep)]
    async fn remind(_s: &Followup, cx: &Ctx<()>) -> Result<Step<Followup>, NodeError> {
        cx.sleep_until(SystemTime::now() + Duration::from_secs(60)).await?;
        let again: bool = cx.interrupt("remind again?")?;
        Ok(goto!(END, Followup::update().reminded(again)))
    }
}

fn main() {
    let _ = followup::graph();
}
