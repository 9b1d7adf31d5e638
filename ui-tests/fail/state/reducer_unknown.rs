use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    #[reduce(apend)]
    evidence: Vec<String>,
}

fn main() {}
