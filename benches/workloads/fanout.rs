//! The `fanout` workload shared by the benchmarks: start -> split -> 8
//! parallel branches, each appending to a reducer list -> join -> END.

use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Fan {
    /// One entry per node that ran.
    #[reduce(append)]
    pub log: Vec<String>,
}

#[graph(state = Fan, start = start)]
pub mod fanout {
    use super::*;

    #[node(goto = [split])]
    async fn start(_s: &Fan) -> Step<Fan> {
        goto!(split, Fan::update().log(vec!["start".to_string()]))
    }

    #[node(goto = [b0, b1, b2, b3, b4, b5, b6, b7])]
    async fn split(_s: &Fan) -> Step<Fan> {
        goto!([b0, b1, b2, b3, b4, b5, b6, b7], Fan::update().log(vec!["split".to_string()]))
    }

    #[node(goto = [join])]
    async fn b0(_s: &Fan) -> Step<Fan> {
        goto!(join, Fan::update().log(vec!["b0".to_string()]))
    }
    #[node(goto = [join])]
    async fn b1(_s: &Fan) -> Step<Fan> {
        goto!(join, Fan::update().log(vec!["b1".to_string()]))
    }
    #[node(goto = [join])]
    async fn b2(_s: &Fan) -> Step<Fan> {
        goto!(join, Fan::update().log(vec!["b2".to_string()]))
    }
    #[node(goto = [join])]
    async fn b3(_s: &Fan) -> Step<Fan> {
        goto!(join, Fan::update().log(vec!["b3".to_string()]))
    }
    #[node(goto = [join])]
    async fn b4(_s: &Fan) -> Step<Fan> {
        goto!(join, Fan::update().log(vec!["b4".to_string()]))
    }
    #[node(goto = [join])]
    async fn b5(_s: &Fan) -> Step<Fan> {
        goto!(join, Fan::update().log(vec!["b5".to_string()]))
    }
    #[node(goto = [join])]
    async fn b6(_s: &Fan) -> Step<Fan> {
        goto!(join, Fan::update().log(vec!["b6".to_string()]))
    }
    #[node(goto = [join])]
    async fn b7(_s: &Fan) -> Step<Fan> {
        goto!(join, Fan::update().log(vec!["b7".to_string()]))
    }

    #[node(goto = [END])]
    async fn join(_s: &Fan) -> Step<Fan> {
        goto!(END, Fan::update().log(vec!["join".to_string()]))
    }
}

/// Nodes per run: start, split, 8 branches, join.
pub const FAN_NODES: usize = 11;
