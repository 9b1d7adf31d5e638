use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
#[state(versoin = 2)]
struct Ticket {
    #[reduce(apend)]
    evidence: Vec<String>,
    #[reduce(add, append)]
    revisions: u32,
    #[reduce(append)]
    text: String,
}

fn main() {}
