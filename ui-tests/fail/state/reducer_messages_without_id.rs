use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Chat {
    #[reduce(messages)]
    history: Vec<String>,
}

fn main() {}
