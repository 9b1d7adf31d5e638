use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
enum Phase {
    #[default]
    Draft,
    Review,
}

fn main() {}
