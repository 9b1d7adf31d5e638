//! `Idempotency-Key` on `POST /api/threads`: a client that sends a start again (it lost the
//! answer, it retries after a timeout) with the same key gets the answer of the first instead of a
//! second run.
//!
//! The key is the caller's: two callers' equal keys are different keys. It is kept with the run
//! it started for 24 hours ([`IDEMPOTENCY_KEY_TTL_MS`](agentflow_store::IDEMPOTENCY_KEY_TTL_MS)),
//! with the SHA-256 of the request's body in a canonical form (its JSON with every object's keys
//! sorted, the defaults filled in). The same key with the same body names the thread the first
//! start made; with another body it is refused (422 `idempotency_key_reused`).

use agentflow_store::IdempotencyKey;
use axum::http::HeaderMap;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::bodies::StartRun;
use super::caller::Caller;
use super::problem::Problem;

/// The header the key comes in.
pub(crate) const HEADER: &str = "idempotency-key";
/// The longest key taken.
const MAX_KEY: usize = 200;

/// The idempotency key of a start by `caller` with `body`, if the request sends one.
///
/// # Errors
///
/// 400 for a key that is empty, longer than 200 characters, or not printable ASCII.
pub(crate) fn key_of(headers: &HeaderMap, caller: &Caller, body: &StartRun) -> Result<Option<IdempotencyKey>, Problem> {
    let Some(value) = headers.get(HEADER) else { return Ok(None) };
    let key = value.as_bytes();
    if key.is_empty() || key.len() > MAX_KEY || !key.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(Problem::bad_request(format!(
            "the Idempotency-Key header is 1 to {MAX_KEY} printable ASCII characters (a UUID does); nothing was \
             started"
        )));
    }
    let key = String::from_utf8_lossy(key).into_owned();
    Ok(Some(IdempotencyKey::new(caller.actor().id.clone(), key, digest(body))))
}

/// The SHA-256 (hex) of `body` in canonical form.
fn digest(body: &StartRun) -> String {
    let document = json!({
        "graph": body.graph,
        "input": body.input,
        "thread": body.thread,
        "tenant": body.tenant,
        "wait": body.wait,
        "wait_ms": body.wait_ms,
        "multitask_strategy": body.multitask_strategy,
        "webhook": body.webhook,
    });
    let mut text = String::new();
    canonical(&document, &mut text);
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// `value` as JSON text with every object's keys in order, whatever order it holds them in.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(key) {
                    canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(body: Value) -> StartRun {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn equal_bodies_have_one_digest_whatever_their_key_order_and_defaults() {
        let a = start(json!({ "graph": "g", "input": { "b": 1, "a": { "y": [1, { "q": 2, "p": 1 }], "x": null } } }));
        let b = start(
            json!({ "input": { "a": { "x": null, "y": [1, { "p": 1, "q": 2 }] }, "b": 1 }, "graph": "g", "wait": false }),
        );
        assert_eq!(digest(&a), digest(&b));
        assert_eq!(digest(&a).len(), 64);
        let c = start(json!({ "graph": "g", "input": { "b": 2, "a": { "y": [1, { "q": 2, "p": 1 }], "x": null } } }));
        assert_ne!(digest(&a), digest(&c));
        let waited = start(
            json!({ "graph": "g", "input": { "b": 1, "a": { "y": [1, { "q": 2, "p": 1 }], "x": null } }, "wait": true }),
        );
        assert_ne!(digest(&a), digest(&waited));
        let mut text = String::new();
        canonical(&json!({ "b": "é\"", "a": [true, 1.5] }), &mut text);
        assert_eq!(text, r#"{"a":[true,1.5],"b":"é\""}"#);
    }
}
