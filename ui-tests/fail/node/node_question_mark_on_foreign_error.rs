use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Report {
    path: String,
    text: Option<String>,
}

#[graph(state = Report, start = read)]
mod reports {
    use super::*;

    #[node(goto = [END])]
    async fn read(r: &Report) -> Result<Step<Report>, NodeError> {
        let text = std::fs::read_to_string(&r.path)?;
        Ok(goto!(END, Report::update().text(Some(text))))
    }
}

fn main() {
    let _ = reports::graph();
}
