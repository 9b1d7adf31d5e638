//! Where two JSON values differ, as JSON pointers with the values before and after, for the
//! lock checks' messages.

use serde_json::Value;

/// How many differences a message names before it counts the rest.
const LISTED: usize = 4;

/// Longer values are left out of a message (their place is named).
const SHOWN: usize = 60;

/// Where `before` and `after` differ, for a message: `at /properties/amount/type: "integer" ->
/// "number"`, at most [`LISTED`] places and a count of the rest. Empty when they are equal.
pub(super) fn differences(before: &Value, after: &Value) -> String {
    let mut places = Vec::new();
    walk(before, after, &mut String::new(), &mut places);
    let mut out: Vec<String> = places.iter().take(LISTED).cloned().collect();
    if places.len() > LISTED {
        out.push(format!("and {} more", places.len() - LISTED));
    }
    out.join("; ")
}

fn walk(before: &Value, after: &Value, at: &mut String, places: &mut Vec<String>) {
    match (before, after) {
        _ if before == after => {}
        (Value::Object(b), Value::Object(a)) => {
            let mut keys: Vec<&String> = b.keys().chain(a.keys().filter(|k| !b.contains_key(*k))).collect();
            keys.sort();
            for key in keys {
                let (x, y) = (b.get(key).unwrap_or(&Value::Null), a.get(key).unwrap_or(&Value::Null));
                if b.contains_key(key) != a.contains_key(key) {
                    let len = at.len();
                    at.push('/');
                    at.push_str(&escape(key));
                    let what = if b.contains_key(key) { "removed" } else { "added" };
                    places.push(format!("at {at}: {what}"));
                    at.truncate(len);
                    continue;
                }
                let len = at.len();
                at.push('/');
                at.push_str(&escape(key));
                walk(x, y, at, places);
                at.truncate(len);
            }
        }
        (Value::Array(b), Value::Array(a)) if b.len() == a.len() => {
            for (i, (x, y)) in b.iter().zip(a).enumerate() {
                let len = at.len();
                at.push_str(&format!("/{i}"));
                walk(x, y, at, places);
                at.truncate(len);
            }
        }
        _ => {
            let (x, y) = (before.to_string(), after.to_string());
            let place = if at.is_empty() { "/" } else { at.as_str() };
            if x.len() > SHOWN || y.len() > SHOWN {
                places.push(format!("at {place}"));
            } else {
                places.push(format!("at {place}: {x} -> {y}"));
            }
        }
    }
}

/// A key as a JSON pointer token.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests;
