use std::collections::{BTreeMap, HashMap};

use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Stats {
    #[reduce(append)]
    log: Vec<String>,
    #[reduce(add)]
    count: u64,
    #[reduce(add)]
    score: f64,
    #[reduce(merge)]
    tags: BTreeMap<String, u32>,
    #[reduce(merge)]
    seen: HashMap<String, bool>,
    last: Option<String>,
}

#[graph(state = Stats, start = first)]
mod stats {
    use super::*;

    #[node(goto = [second])]
    async fn first(_s: &Stats) -> Step<Stats> {
        goto!(
            second,
            Stats::update()
                .log(vec!["a".into()])
                .count(1)
                .score(0.5)
                .tags(BTreeMap::from([("x".into(), 1)]))
                .seen(HashMap::from([("a".into(), true)]))
                .last(Some("first".into()))
        )
    }

    #[node(goto = [END])]
    async fn second(_s: &Stats) -> Step<Stats> {
        goto!(
            END,
            Stats::update()
                .log(vec!["b".into()])
                .count(2)
                .score(1.0)
                .tags(BTreeMap::from([("x".into(), 2), ("y".into(), 3)]))
                .last(Some("second".into()))
        )
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let input = Stats { count: 10, ..Stats::default() };
    let run = rt.block_on(stats::graph().run(input, &())).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    let s = run.state;
    assert_eq!(s.log, ["a", "b"]);
    assert_eq!(s.count, 13);
    assert_eq!(s.score, 1.5);
    assert_eq!(s.tags, BTreeMap::from([("x".into(), 2), ("y".into(), 3)]));
    assert_eq!(s.seen.len(), 1);
    assert_eq!(s.last.as_deref(), Some("second"));
}
