//! A graph's upgrade through every cut: a thread parked in `interrupt` (after a journaled
//! effect) on version 1 is resumed on version 2, which renamed the node and changed a state
//! field's type, with the process killed before and after each write of that resume. Each cut
//! leaves the thread wholly on version 1 (and resumable) or wholly on version 2 with one
//! `graph.migrated`; each ends as the uncut resume did, the effect journaled on version 1 never
//! run again. A thread parked on the approval of a tool call its model asked for (the reply
//! journaled) is moved likewise, to a version that renamed its node and the tool and maps the
//! arguments: at each cut the call runs once, under the new name, from the reply journaled on
//! version 1.

use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::__private::with_release;
use agentflow::message::ToolCall;
use agentflow::model::ChatReply;
use agentflow::prelude::*;
use agentflow::release::{ArgsMigration, GraphMigration, Release, ToolMigration};
use agentflow::testing::{Answers, Check, UpgradeMatrix};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Default)]
pub struct Till {
    charges: AtomicU32,
    /// How often the model was asked (its reply is journaled).
    asked: AtomicU32,
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

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Mail {
    to: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Text {
    recipient: String,
}

/// Mails a receipt.
#[tool(risk = irreversible)]
pub async fn email(args: Mail) -> Result<Value, ToolError> {
    Ok(json!({ "mailed": args.to }))
}

/// Messages a receipt.
#[tool(risk = irreversible)]
pub async fn message(args: Text) -> Result<Value, ToolError> {
    Ok(json!({ "messaged": args.recipient }))
}

/// What the model answers (counted): a call of `email`.
fn reply(till: &Till) -> ChatReply {
    till.asked.fetch_add(1, Ordering::SeqCst);
    let mut reply = ChatReply::text("");
    reply.tool_calls = vec![ToolCall::new("call-1", "email", json!({ "to": "ann" }))];
    reply
}

fn mail_to_text(args: Value) -> Result<Value, String> {
    Ok(json!({ "recipient": args.get("to").cloned().ok_or("no `to`")? }))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Receipt {
    #[reduce(append)]
    pub log: Vec<String>,
}

#[graph(state = Receipt, deps = Till, start = notify)]
pub mod mail_v1 {
    use super::*;

    #[node(goto = [END], tools = [email])]
    async fn notify(_s: &Receipt, cx: &Ctx<Till>) -> Result<Step<Receipt>, NodeError> {
        let reply = cx.effect("reply", |_| async { Ok::<_, NodeError>(reply(cx.deps())) }).await?;
        let seen = cx.call_tools(&reply.tool_calls).await?;
        Ok(goto!(END, Receipt::update().log(seen.iter().map(|o| format!("{}: {}", o.tool, o.body)).collect())))
    }
}

#[graph(state = Receipt, deps = Till, start = announce)]
pub mod mail_v2 {
    use super::*;

    #[node(goto = [END], tools = [message])]
    async fn announce(_s: &Receipt, cx: &Ctx<Till>) -> Result<Step<Receipt>, NodeError> {
        let reply = cx.effect("reply", |_| async { Ok::<_, NodeError>(reply(cx.deps())) }).await?;
        let seen = cx.call_tools(&reply.tool_calls).await?;
        Ok(goto!(END, Receipt::update().log(seen.iter().map(|o| format!("{}: {}", o.tool, o.body)).collect())))
    }
}

static MAIL_MOVE: [GraphMigration; 1] = [GraphMigration::new(
    1,
    &[("notify", "announce")],
    &[("email", ToolMigration::Rename("message"))],
    &[("message", ArgsMigration::Map(mail_to_text))],
)];

#[test]
fn a_call_the_model_asked_for_moves_with_its_thread_wholly_or_not_at_all_at_every_cut() {
    let till = Till::default();
    let old = with_release(mail_v1::graph(), Release::new("mail", 1, &[], "{}", "")).app();
    let new = with_release(mail_v2::graph(), Release::new("mail", 2, &MAIL_MOVE, "{}", "")).app();
    let report = UpgradeMatrix::new(old, &till, new, &till).input(Receipt::default()).run().unwrap();
    assert!(report.is_clean(), "{report}");
    let agentflow::testing::Ending::Finished { outcome, state } = &report.reference else { panic!("{report}") };
    assert_eq!(outcome, "completed");
    assert_eq!(state["log"], json!([r#"message: {"ok":true,"result":{"messaged":"ann"}}"#]));
    assert_eq!(till.asked.load(Ordering::SeqCst), 1, "asked once, parking on version 1; replayed after");
    let migration = report.boundaries.iter().find(|b| b.items.iter().any(|i| i.contains("graph.migrated")));
    let migration = migration.unwrap_or_else(|| panic!("no boundary writes `graph.migrated`: {:?}", report.boundaries));
    for cut in report.trials.iter().filter(|t| t.boundary == migration.key) {
        assert!(cut.reached, "{cut:?}");
    }
    assert_eq!(report.violations_of(Check::MigrationTorn).count(), 0);
}
