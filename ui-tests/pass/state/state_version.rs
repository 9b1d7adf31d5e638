use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
#[state(version = 2)]
struct Ticket {
    text: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Unversioned {
    text: String,
}

fn main() {
    assert_eq!(<Ticket as State>::VERSION, 2);
    assert_eq!(<Unversioned as State>::VERSION, 1);
    assert_eq!(<Ticket as State>::NAME, "Ticket");
    let update = Ticket::update().text("x".into());
    let mut t = Ticket::default();
    t.apply(update);
    assert_eq!(t.text, "x");
}
