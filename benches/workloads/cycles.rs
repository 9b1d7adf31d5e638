//! The `cycle_flat` and `cycle` workloads shared by the benchmarks:
//! `a -> b -> c -> a`, each node adding 1 to a `#[reduce(add)]` counter, the
//! run ending after exactly `Limit::n` node executions (any node may end it).
//! `cycle` also appends the node's name to a `#[reduce(append)]` log.

use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Flat {
    /// Node executions so far.
    #[reduce(add)]
    pub counter: u64,
}

/// How many node executions a cycle run does.
pub struct Limit {
    pub n: u64,
}

#[graph(state = Flat, deps = Limit, start = a, max_steps = 1000000)]
pub mod cycle_flat {
    use super::*;

    #[node(goto = [b, END])]
    async fn a(s: &Flat, limit: &Limit) -> Step<Flat> {
        if s.counter + 1 >= limit.n {
            goto!(END, Flat::update().counter(1))
        } else {
            goto!(b, Flat::update().counter(1))
        }
    }

    #[node(goto = [c, END])]
    async fn b(s: &Flat, limit: &Limit) -> Step<Flat> {
        if s.counter + 1 >= limit.n {
            goto!(END, Flat::update().counter(1))
        } else {
            goto!(c, Flat::update().counter(1))
        }
    }

    #[node(goto = [a, END])]
    async fn c(s: &Flat, limit: &Limit) -> Step<Flat> {
        if s.counter + 1 >= limit.n {
            goto!(END, Flat::update().counter(1))
        } else {
            goto!(a, Flat::update().counter(1))
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Cyc {
    /// Node executions so far.
    #[reduce(add)]
    pub counter: u64,
    /// The name of every node that ran, in order.
    #[reduce(append)]
    pub log: Vec<String>,
}

/// The update every `cycle` node returns.
pub fn step_of(node: &str) -> CycUpdate {
    Cyc::update().counter(1).log(vec![node.to_string()])
}

#[graph(state = Cyc, deps = Limit, start = a, max_steps = 1000000)]
pub mod cycle {
    use super::*;

    #[node(goto = [b, END])]
    async fn a(s: &Cyc, limit: &Limit) -> Step<Cyc> {
        if s.counter + 1 >= limit.n { goto!(END, step_of("a")) } else { goto!(b, step_of("a")) }
    }

    #[node(goto = [c, END])]
    async fn b(s: &Cyc, limit: &Limit) -> Step<Cyc> {
        if s.counter + 1 >= limit.n { goto!(END, step_of("b")) } else { goto!(c, step_of("b")) }
    }

    #[node(goto = [a, END])]
    async fn c(s: &Cyc, limit: &Limit) -> Step<Cyc> {
        if s.counter + 1 >= limit.n { goto!(END, step_of("c")) } else { goto!(a, step_of("c")) }
    }
}
