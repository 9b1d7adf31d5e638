//! What a completion webhook tells: the body of the delivery a worker writes with the settle
//! that first ends or parks a run.

use agentflow_store::{NewWebhookDelivery, Store};
use serde_json::{Value, json};

use crate::access::personal::{credential_names, mask_fields, personal_names};
use crate::core::clock::now_ms;
use crate::core::state::State;
use crate::durable::history::latest_state;

/// The delivery to `url` of how `thread` (a thread of graph `graph`) stands now: its status
/// and status line, and its state at its latest checkpoint with the fields marked
/// `#[state(credential)]` left out and those marked `#[state(pii)]` masked (`•••`). A state
/// that cannot be read is sent as `null`; a thread that does not exist (its run left the queue
/// before it created it: it was cancelled, or its input did not decode) as status `not_started`.
pub(crate) fn delivery<S: State>(store: &dyn Store, thread: &str, graph: &str, url: &str) -> NewWebhookDelivery {
    let record = store.thread(thread).ok().flatten();
    let values = match latest_state::<S>(store, thread) {
        Ok(Some(state)) => serde_json::to_value(&state).map_or(Value::Null, |value| strip(value, S::FIELDS)),
        Ok(None) => Value::Null,
        Err(e) => {
            tracing::warn!(thread, error = %e, "the webhook's values could not be read; they are sent as null");
            Value::Null
        }
    };
    let (status, detail) = record.as_ref().map_or(("not_started", ""), |r| (r.status.as_str(), r.detail.as_str()));
    NewWebhookDelivery::new(url, body(thread, graph, status, detail, values))
}

/// The delivery to `url` of `thread` when nothing of it could be read: status `unknown`.
pub(crate) fn bare(thread: &str, graph: &str, url: &str) -> NewWebhookDelivery {
    NewWebhookDelivery::new(url, body(thread, graph, "unknown", "", Value::Null))
}

/// The delivery to `url` of a follow-up of `thread` that left the queue without running:
/// `status` `follow_up_failed` or `cancelled`, `why` as its detail, no values (what the thread
/// holds is an earlier run's).
pub(crate) fn not_run(thread: &str, graph: &str, url: &str, status: &str, why: &str) -> NewWebhookDelivery {
    NewWebhookDelivery::new(url, body(thread, graph, status, why, Value::Null))
}

/// A state as JSON (`value`, of a state with `fields`), less its credential fields, its
/// personal fields masked.
fn strip(mut value: Value, fields: &[crate::core::state::Field]) -> Value {
    if let Value::Object(map) = &mut value {
        for name in credential_names(fields) {
            map.remove(name);
        }
    }
    mask_fields(&mut value, &personal_names(fields));
    value
}

/// The body: `{"thread_id", "graph", "status", "detail", "finished_at", "values"}`;
/// `finished_at` is when the body was made (unix millis).
fn body(thread: &str, graph: &str, status: &str, detail: &str, values: Value) -> Vec<u8> {
    let body = json!({
        "thread_id": thread,
        "graph": graph,
        "status": status,
        "detail": detail,
        "finished_at": now_ms(),
        "values": values,
    });
    // A `Value` always serialises.
    serde_json::to_vec(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::state::{Field, ReducerKind};

    #[derive(serde::Serialize)]
    struct Profile {
        name: String,
        email: String,
        token: String,
    }

    #[test]
    fn the_values_leave_credentials_out_and_mask_personal_fields() {
        let fields = [
            Field::new("name", ReducerKind::Overwrite, "String"),
            Field::new("email", ReducerKind::Overwrite, "String").personal(),
            Field::new("token", ReducerKind::Overwrite, "String").credential(),
        ];
        let profile = Profile { name: "Ada".into(), email: "ada@example.com".into(), token: "t0k3n".into() };
        let values = strip(serde_json::to_value(&profile).unwrap(), &fields);
        assert_eq!(values, json!({ "name": "Ada", "email": "•••" }));
        let sent: Value = serde_json::from_slice(&body("t-1", "g", "completed", "done", values)).unwrap();
        assert_eq!(sent["values"], json!({ "name": "Ada", "email": "•••" }));
        assert_eq!(
            (&sent["thread_id"], &sent["status"], &sent["detail"]),
            (&json!("t-1"), &json!("completed"), &json!("done"))
        );
        assert!(sent["finished_at"].as_u64().unwrap() > 1_600_000_000_000);
        let body: Value = serde_json::from_slice(&bare("t-1", "g", "http://127.0.0.1/").payload).unwrap();
        assert_eq!((&body["status"], &body["values"]), (&json!("unknown"), &Value::Null));
        assert!(body["finished_at"].as_u64().unwrap() > 1_600_000_000_000);
    }
}
