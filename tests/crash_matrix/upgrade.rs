//! A graph's upgrade through every cut: a thread parked in `interrupt` (after a journaled
//! effect) on version 1 is resumed on version 2, which renamed the node and changed a state
//! field's type, with the process killed before and after each write of that resume. Each cut
//! leaves the thread wholly on version 1 (and resumable) or wholly on version 2 with one
//! `graph.migrated`; each ends as the uncut resume did, the effect journaled on version 1 never
//! run again.

use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::__private::with_release;
use agentflow::prelude::*;
use agentflow::release::{GraphMigration, Release};
use agentflow::testing::{Answers, Check, UpgradeMatrix};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Default)]
pub struct Till {
    charges: AtomicU32,
}

mod v1 {
    use super::*;

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
    pub struct Sale {
        /// In cents.
        pub amount: u32,
        pub receipt: Option<String>,
        #[reduce(append)]
        pub log: Vec<String>,
    }

    #[graph(state = Sale, deps = Till, start = open)]
    pub mod flow {
        use super::*;

        #[node(goto = [review])]
        async fn open(_s: &Sale) -> Step<Sale> {
            goto!(review, Sale::update().log(vec!["opened".into()]))
        }

        #[node(goto = [END], interrupt)]
        async fn review(_s: &Sale, cx: &Ctx<Till>) -> Result<Step<Sale>, NodeError> {
            let receipt = cx
                .effect("charge", |_| async move {
                    Ok::<_, NodeError>(format!("receipt-{}", cx.deps().charges.fetch_add(1, Ordering::SeqCst)))
                })
                .await?;
            let answer: String = cx.interrupt(json!({ "receipt": receipt }))?;
            Ok(goto!(END, Sale::update().receipt(Some(receipt)).log(vec![answer])))
        }
    }
}

mod v2 {
    use super::*;

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
    #[state(version = 2)]
    pub struct Sale {
        /// In currency units.
        pub amount: f64,
        pub receipt: Option<String>,
        #[reduce(append)]
        pub log: Vec<String>,
    }

    #[graph(state = Sale, deps = Till, start = open)]
    pub mod flow {
        use super::*;

        #[node(goto = [human_review])]
        async fn open(_s: &Sale) -> Step<Sale> {
            goto!(human_review, Sale::update().log(vec!["opened".into()]))
        }

        #[node(goto = [END], interrupt)]
        async fn human_review(_s: &Sale, cx: &Ctx<Till>) -> Result<Step<Sale>, NodeError> {
            let receipt = cx
                .effect("charge", |_| async move {
                    Ok::<_, NodeError>(format!("receipt-{}", cx.deps().charges.fetch_add(1, Ordering::SeqCst)))
                })
                .await?;
            let answer: String = cx.interrupt(json!({ "receipt": receipt }))?;
            Ok(goto!(END, Sale::update().receipt(Some(receipt)).log(vec![answer])))
        }
    }
}

static MIGRATE: [GraphMigration; 1] = [GraphMigration::new(1, &[("review", "human_review")], &[], &[])];

#[test]
fn a_thread_moves_to_the_new_version_wholly_or_not_at_all_at_every_cut() {
    let till = Till::default();
    let old = with_release(v1::flow::graph(), Release::new("sale", 1, &[], "{}", "")).app();
    let new =
        with_release(v2::flow::graph(), Release::new("sale", 2, &MIGRATE, "{}", "")).app().migration(1, |mut s| {
            s["amount"] = json!(s["amount"].as_u64().ok_or("`amount` is not a number of cents")? as f64 / 100.0);
            Ok(s)
        });
    let report = UpgradeMatrix::new(old, &till, new, &till)
        .input(v1::Sale { amount: 1999, ..v1::Sale::default() })
        .answers(Answers::new().interrupt("human_review", "approved"))
        .run()
        .unwrap();
    assert!(report.is_clean(), "{report}");
    let agentflow::testing::Ending::Finished { outcome, state } = &report.reference else { panic!("{report}") };
    assert_eq!(outcome, "completed");
    assert_eq!(state["amount"], json!(19.99));
    assert_eq!(state["receipt"], "receipt-0", "the charge journaled on version 1 served version 2");
    assert_eq!(state["log"], json!(["opened", "approved"]));
    assert_eq!(till.charges.load(Ordering::SeqCst), 1, "charged once, parking on version 1");
    let migration = report.boundaries.iter().find(|b| b.items.iter().any(|i| i.contains("graph.migrated")));
    let migration = migration.unwrap_or_else(|| panic!("no boundary writes `graph.migrated`: {:?}", report.boundaries));
    for cut in report.trials.iter().filter(|t| t.boundary == migration.key) {
        assert!(cut.reached, "{cut:?}");
    }
    assert!(report.trials.iter().filter(|t| t.reached).count() >= 4, "{report}");
    assert_eq!(report.violations_of(Check::MigrationTorn).count(), 0);
}
