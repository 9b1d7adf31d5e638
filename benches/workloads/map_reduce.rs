//! The `map_reduce` workload: one sender sends N payloads to one worker
//! (`goto!(each(work, items))`), each instance appends one short string to a
//! reducer list, then a join routes to END.

use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Mapped {
    /// The payloads to send.
    pub items: Vec<String>,
    /// One entry per instance, in payload order.
    #[reduce(append)]
    pub log: Vec<String>,
}

#[graph(state = Mapped, start = send)]
pub mod map_reduce {
    use super::*;

    #[node(goto = [work])]
    async fn send(s: &Mapped) -> Step<Mapped> {
        goto!(each(work, s.items.clone()))
    }

    #[node(goto = [join])]
    async fn work(_s: &Mapped, #[payload] item: &str) -> Step<Mapped> {
        goto!(join, Mapped::update().log(vec![item.to_string()]))
    }

    #[node(goto = [END])]
    async fn join(_s: &Mapped) -> Step<Mapped> {
        goto!(END)
    }
}

/// `n` short payloads.
pub fn input(n: usize) -> Mapped {
    Mapped { items: (0..n).map(|i| format!("t{i}")).collect(), log: Vec::new() }
}

/// The same work by hand: one future per payload under `join_all`, their
/// updates applied in payload order.
pub async fn hand(s: &Mapped) -> Mapped {
    let updates = futures_util::future::join_all(
        s.items.iter().map(|item| async move { Mapped::update().log(vec![item.to_string()]) }),
    )
    .await;
    let mut out = s.clone();
    for u in updates {
        out.apply(u);
    }
    out
}
