use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    #[reduce(add)]
    scores: Vec<u32>,
}

fn main() {}
