//! Structured output against the scripted test double: schema sent, replies
//! validated, malformed replies re-asked a bounded number of times.

use agentflow::message::{Message, Role};
use agentflow::model::{ChatReply, ModelError, ScriptedModel, structured};
use agentflow::model::{parse_reply, response_schema};
use agentflow::{ErrorClass, NodeError};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Intent {
    Question,
    Bug,
    Billing,
}

/// How to route a customer email.
#[derive(Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Classification {
    intent: Intent,
    summary: String,
}

const VALID: &str = r#"{"intent": "billing", "summary": "charged twice"}"#;

fn email() -> Vec<Message> {
    vec![Message::human("I was charged twice this month.")]
}

#[tokio::test]
async fn malformed_then_valid_succeeds_after_one_reask() {
    let model = ScriptedModel::new()
        .reply_text(r#"{"intent": "refund", "summary": "charged twice"}"#)
        .reply_text(format!("```json\n{VALID}\n```"));
    let out = structured::<Classification, _>(&model, email(), 2).await.unwrap();
    assert_eq!(out.value, Classification { intent: Intent::Billing, summary: "charged twice".into() });
    assert_eq!(out.reasks, 1);
    assert_eq!((out.usage.calls, out.usage.is_complete()), (2, true));

    let requests = model.requests();
    let first = &requests[0];
    let schema = first.response_schema.as_ref().unwrap();
    assert_eq!(schema.name, "Classification");
    assert_eq!(schema.schema["additionalProperties"], false);
    assert_eq!(first.messages[0].role, Role::System);
    assert!(first.messages[0].content.contains("\"billing\""));
    // The bad reply and a correction naming the problem are fed back.
    let second = &requests[1].messages;
    assert_eq!(second.len(), 4);
    assert_eq!(second[2].role, Role::Ai);
    assert!(second[3].content.contains("unknown variant `refund`"), "{}", second[3].content);
}

#[tokio::test]
async fn always_malformed_fails_after_max_reasks() {
    let model = ScriptedModel::new()
        .reply_text("sure, it's billing")
        .reply_text(r#"{"intent": "billing"}"#)
        .reply_text(r#"{"intent": "billing", "summary": "x", "urgency": "high"}"#);
    let err = structured::<Classification, _>(&model, email(), 2).await.unwrap_err();
    assert_eq!(err.reasks, 2);
    assert_eq!(err.usage.calls, 3);
    assert_eq!(model.calls(), 3);
    assert_eq!(err.class(), ErrorClass::Correctable);
    match &err.error {
        ModelError::InvalidOutput { detail, raw } => {
            assert!(detail.contains("unknown field `urgency`"), "{detail}");
            assert!(raw.contains("urgency"));
        }
        other => panic!("expected InvalidOutput, got {other:?}"),
    }
    let node = NodeError::from(err);
    assert_eq!(node.class, ErrorClass::Correctable);
    assert!(node.message.contains("after 2 re-asks"), "{}", node.message);
}

#[tokio::test]
async fn zero_reasks_means_one_attempt() {
    let model = ScriptedModel::new().reply_text("{}").reply_text(VALID);
    let err = structured::<Classification, _>(&model, email(), 0).await.unwrap_err();
    assert_eq!((err.reasks, model.calls()), (0, 1));
}

#[tokio::test]
async fn model_errors_pass_through_with_usage_so_far() {
    let model = ScriptedModel::new().reply(ChatReply::text("not json")).unknown_usage().fail(ModelError::Timeout);
    let err = structured::<Classification, _>(&model, email(), 3).await.unwrap_err();
    assert_eq!(err.error, ModelError::Timeout);
    assert_eq!(err.class(), ErrorClass::Transient);
    assert_eq!((err.usage.calls, err.usage.unknown_calls, err.reasks), (1, 1, 1));
}

#[tokio::test]
async fn caller_system_message_is_kept_and_extended() {
    let model = ScriptedModel::new().reply_text(VALID);
    let messages = vec![Message::system("You triage email."), email().remove(0)];
    structured::<Classification, _>(&model, messages, 0).await.unwrap();
    let sent = &model.requests()[0].messages;
    assert_eq!(sent.len(), 2);
    assert!(sent[0].content.starts_with("You triage email.\n\n"));
}

#[test]
fn helpers() {
    assert_eq!(response_schema::<Classification>().schema["required"], serde_json::json!(["intent", "summary"]));
    assert!(parse_reply::<Classification>(VALID).is_ok());
    assert!(parse_reply::<Classification>("").unwrap_err().contains("empty"));
}
