//! What a model server reports cannot break a run: an absurd `Retry-After`
//! waits at most the node's retry cap, and absurd token usage saturates
//! instead of panicking or wrapping.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentflow::model::{ChatModel, ChatReply, ChatRequest, ModelError, ScriptedModel, Usage, UsageTally};
use agentflow::prelude::*;
use agentflow::{Budget, Event, Limits};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Chat {
    #[reduce(append)]
    replies: Vec<String>,
}

pub struct Deps {
    model: ScriptedModel,
    calls: usize,
}

/// Asks the model `calls` times; retried on a transient error, waiting at
/// most 20 ms between attempts.
#[graph(state = Chat, deps = Deps, start = ask)]
mod chat {
    use super::*;

    #[node(goto = [END], retry(attempts = 2, base = 1ms, max_delay = 20ms))]
    async fn ask(_s: &Chat, cx: &Ctx<Deps>) -> Result<Step<Chat>, NodeError> {
        let mut replies = Vec::new();
        for _ in 0..cx.deps().calls {
            let request = ChatRequest::new(vec![agentflow::message::Message::human("hi")]).with_max_output_tokens(10);
            replies.push(cx.chat(&cx.deps().model, &request).await?.text);
        }
        Ok(goto!(END, Chat::update().replies(replies)))
    }
}

/// Guards the tests against a run that would wait a day.
const GUARD: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_retry_after_of_a_day_waits_the_retry_policys_max_delay() {
    let rate_limited =
        ModelError::RateLimited { retry_after: Some(Duration::from_secs(86_400)), message: "slow".into() };
    let deps = Deps { model: ScriptedModel::new().fail(rate_limited).reply_text("hello"), calls: 1 };
    let delays = Arc::new(Mutex::new(Vec::new()));
    let seen = delays.clone();
    let graph = chat::graph();
    let run = graph.app().runner(&deps).on_event(move |e| {
        if let Event::NodeRetrying { delay, .. } = e {
            seen.lock().unwrap().push(delay);
        }
    });
    let run =
        tokio::time::timeout(GUARD, run.run(Chat::default())).await.expect("the node slept past its cap").unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.replies, ["hello"]);
    assert_eq!(*delays.lock().unwrap(), [Duration::from_millis(20)], "the wait is the node's max_delay");
}

fn reporting(usage: Usage) -> ChatReply {
    ChatReply { text: "ok".into(), usage: Some(usage), ..ChatReply::default() }
}

#[test]
fn usage_sums_saturate() {
    assert_eq!(Usage::new(u64::MAX, 1).total(), u64::MAX);
    assert_eq!(Usage::new(u64::MAX, 2) + Usage::new(1, u64::MAX), Usage::new(u64::MAX, u64::MAX));
    let mut tally = UsageTally::default();
    tally.record(Some(Usage::new(u64::MAX, u64::MAX)));
    tally.record(Some(Usage::new(u64::MAX, 7)));
    assert_eq!(tally.known, Usage::new(u64::MAX, u64::MAX));
    assert_eq!(tally.calls, 2);
}

#[tokio::test]
async fn absurd_reported_usage_saturates_the_runs_token_count() {
    // Two calls whose usage sums past u64::MAX: the count stops at the top
    // instead of panicking (debug) or wrapping to a small number (release).
    let huge = Usage::new(u64::MAX - 5, 0);
    let model = ScriptedModel::new().reply(reporting(huge)).reply(reporting(huge));
    assert_eq!(model.name(), "scripted-test-double");
    let deps = Deps { model, calls: 2 };
    let run = chat::graph().run(Chat::default(), &deps).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.usage.tokens, u64::MAX);
    assert_eq!(run.usage.model_calls, 2);
}

#[tokio::test]
async fn absurd_reported_usage_exhausts_a_token_budget() {
    let model = ScriptedModel::new().reply(reporting(Usage::new(u64::MAX, u64::MAX))).reply_text("never asked");
    let deps = Deps { model, calls: 2 };
    let graph = chat::graph();
    let run = graph.app().runner(&deps).limits(Limits::none().tokens(1_000)).run(Chat::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::Tokens });
    assert_eq!(run.usage.tokens, u64::MAX);
    assert_eq!(run.usage.model_calls, 1);
    assert_eq!(deps.model.remaining(), 1, "the second call was never sent");
}
