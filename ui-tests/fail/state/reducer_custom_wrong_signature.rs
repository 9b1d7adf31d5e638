use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

fn keep_longest(old: &mut String, new: &str) {
    if new.len() > old.len() {
        *old = new.to_string();
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    #[reduce(custom = keep_longest)]
    text: String,
}

fn main() {}
