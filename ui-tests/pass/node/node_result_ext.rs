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

    // `?` on a foreign error: the node says how the executor treats it.
    #[node(goto = [END])]
    async fn read(r: &Report) -> Result<Step<Report>, NodeError> {
        let text = std::fs::read_to_string(&r.path).fatal()?;
        Ok(goto!(END, Report::update().text(Some(text))))
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let graph = reports::graph();
    let input = Report { path: "/no/such/file".into(), text: None };
    let run = rt.block_on(graph.run(input, &())).unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(node, "read");
    assert_eq!(error.class, agentflow::ErrorClass::Fatal);
    assert!(run.state.text.is_none());
}
