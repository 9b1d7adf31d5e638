//! A deploy across processes: a process of version 1 of a graph parks a thread in `interrupt`
//! (after a journaled effect) on a redb file and exits; a process of version 2, which renamed
//! the node, added a state field and declared `migrate(from = 1, nodes(ask -> confirm))`,
//! answers and completes it. The effect the first process journaled is not run again, and the
//! thread says `graph.migrated` once.

use std::path::Path;
use std::sync::Arc;

use agentflow::Store;
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::support::process::own_test;
use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;

mod v1 {
    use super::*;

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
    pub struct Ticket {
        pub receipt: Option<String>,
        pub answer: Option<String>,
    }

    #[graph(state = Ticket, start = ask, id = "ticket")]
    pub mod flow {
        use super::*;

        #[node(goto = [END], interrupt)]
        async fn ask(_t: &Ticket, cx: &Ctx<()>) -> Result<Step<Ticket>, NodeError> {
            let receipt =
                cx.effect("open", |_| async { Ok::<_, NodeError>(format!("pid-{}", std::process::id())) }).await?;
            let answer: String = cx.interrupt(json!({ "receipt": receipt }))?;
            Ok(goto!(END, Ticket::update().receipt(Some(receipt)).answer(Some(answer))))
        }
    }
}

mod v2 {
    use super::*;

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
    pub struct Ticket {
        pub receipt: Option<String>,
        pub answer: Option<String>,
        /// New in version 2.
        #[serde(default)]
        pub priority: u8,
    }

    #[graph(state = Ticket, start = confirm, id = "ticket", version = 2, migrate(from = 1, nodes(ask -> confirm)))]
    pub mod flow {
        use super::*;

        #[node(goto = [END], interrupt)]
        async fn confirm(_t: &Ticket, cx: &Ctx<()>) -> Result<Step<Ticket>, NodeError> {
            let receipt =
                cx.effect("open", |_| async { Ok::<_, NodeError>(format!("pid-{}", std::process::id())) }).await?;
            let answer: String = cx.interrupt(json!({ "receipt": receipt }))?;
            Ok(goto!(END, Ticket::update().receipt(Some(receipt)).answer(Some(answer)).priority(2)))
        }
    }
}

fn store_at(dir: &Path) -> Arc<dyn Store> {
    Arc::new(open_redb(dir.join("threads.redb")).expect("open the store"))
}

/// The process of version 1: parks thread `t-1` and exits.
#[tokio::test]
#[ignore = "child process of `a_thread_parked_by_a_version_1_process_completes_in_a_version_2_process`"]
async fn graph_upgrade_park_child() {
    let Ok(dir) = std::env::var("AGENTFLOW_GRAPH_UPGRADE_DIR") else { return };
    let app = v1::flow::graph().app().store(store_at(Path::new(&dir)));
    let run = app.runner(&()).thread("t-1").run(v1::Ticket::default()).await.expect("the run");
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
}

#[tokio::test]
async fn a_thread_parked_by_a_version_1_process_completes_in_a_version_2_process() {
    let dir = temp_dir("graph-upgrade");
    let out = own_test(module_path!(), "graph_upgrade_park_child")
        .env("AGENTFLOW_GRAPH_UPGRADE_DIR", &dir)
        .output()
        .expect("run the version 1 process");
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));

    let app = v2::flow::graph().app().store(store_at(&dir));
    assert_eq!(app.graph().version(), 2);
    let done = app.runner(&()).thread("t-1").resume_with("yes").await.expect("the resume on version 2");
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.answer.as_deref(), Some("yes"));
    assert_eq!(done.state.priority, 2);
    let receipt = done.state.receipt.expect("a receipt");
    assert_ne!(receipt, format!("pid-{}", std::process::id()), "the effect ran again in the version 2 process");
    let migrated: Vec<_> = app.audit_log("t-1").unwrap().into_iter().filter(|e| e.kind == "graph.migrated").collect();
    assert_eq!(migrated.len(), 1, "{migrated:?}");
    assert_eq!(migrated[0].detail["nodes"], json!({ "ask": "confirm" }));
    assert_eq!((migrated[0].detail["from"].as_u64(), migrated[0].detail["to"].as_u64()), (Some(1), Some(2)));
}
