//! Personal data masked: the fields a state marks `#[state(pii)]` show as `•••` to anyone
//! without [`Operation::SeePersonalData`], and an unmasked
//! read of them is audited.
//!
//! Masking works on JSON: a state as stored (or shown), and an update or delta, which holds
//! only the fields it sets. It replaces each personal field's value, whatever its type, with
//! the string [`MASK`]. A state's `serde` attributes may store a field under another name
//! (`#[serde(rename_all = "camelCase")]` stores `email_address` as `emailAddress`), so a key
//! is taken for a field when both spell the same once case, `_` and `-` are ignored; a field
//! given a different name with `#[serde(rename = "..")]` is not recognised.

use agentflow_store::{AuditEntry, NewAuditEntry};
use serde_json::{Map, Value, json};

use super::check::Access;
use super::operation::Operation;
use crate::core::state::Field;

/// What a masked value shows.
pub const MASK: &str = "•••";

/// The audit kind of an unmasked read of a thread whose state has personal fields.
pub const PERSONAL_DATA_READ: &str = "personal_data.read";

/// The names of the fields marked personal, in declaration order.
pub fn personal_names(fields: &[Field]) -> Vec<&'static str> {
    fields.iter().filter(|f| f.personal).map(|f| f.name).collect()
}

/// The names of the fields marked `#[state(credential)]`, in declaration order: masked on
/// every surface, for everyone (no permission unmasks them).
pub fn credential_names(fields: &[Field]) -> Vec<&'static str> {
    fields.iter().filter(|f| f.credential).map(|f| f.name).collect()
}

/// The names of the fields a stored graph description marks `"credential": true`.
pub fn credential_in_description(description: &Value) -> Vec<String> {
    marked_in_description(description, "credential")
}

fn marked_in_description(description: &Value, mark: &str) -> Vec<String> {
    let Some(fields) = description.pointer("/state/fields").and_then(Value::as_array) else { return Vec::new() };
    fields
        .iter()
        .filter(|f| f.get(mark).and_then(Value::as_bool) == Some(true))
        .filter_map(|f| f.get("name").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// The names of the fields a stored graph description marks `"personal": true`
/// ([`CompiledGraph::description`](crate::CompiledGraph::description)); none for a
/// description written before fields were marked.
pub fn personal_in_description(description: &Value) -> Vec<String> {
    marked_in_description(description, "personal")
}

/// Whether `access` lets its actor see personal data unmasked (tenants aside: the read that
/// shows the data is checked for them).
pub fn sees_personal_data(access: &Access, thread: Option<&str>) -> bool {
    access.allow(Operation::SeePersonalData, thread).is_ok()
}

/// Replaces the value of each of `personal` in the JSON object `value` (a state, an update
/// or a delta) with [`MASK`]; a field it does not hold stays absent. Returns whether any
/// value was replaced. Costs nothing when `personal` is empty or `value` is not an object.
pub fn mask_fields<N: AsRef<str>>(value: &mut Value, personal: &[N]) -> bool {
    if personal.is_empty() {
        return false;
    }
    let Value::Object(map) = value else { return false };
    mask_map(map, personal)
}

fn mask_map<N: AsRef<str>>(map: &mut Map<String, Value>, personal: &[N]) -> bool {
    let mut masked = false;
    for (key, v) in map.iter_mut() {
        if personal.iter().any(|p| same_name(p.as_ref(), key)) {
            *v = Value::String(MASK.to_string());
            masked = true;
        }
    }
    masked
}

/// Whether `key` spells field `field`, case, `_` and `-` aside.
fn same_name(field: &str, key: &str) -> bool {
    if field == key {
        return true;
    }
    let letters =
        |s: &str| -> Vec<char> { s.chars().filter(|c| *c != '_' && *c != '-').flat_map(char::to_lowercase).collect() };
    letters(field) == letters(key)
}

/// Whether any of `personal` holds a value in the JSON object `value`, i.e. whether showing
/// `value` unmasked shows personal data.
pub fn holds_personal<N: AsRef<str>>(value: &Value, personal: &[N]) -> bool {
    match value {
        Value::Object(map) => map.keys().any(|k| personal.iter().any(|p| same_name(p.as_ref(), k))),
        _ => false,
    }
}

/// The audit entry of an unmasked read: `actor` saw the personal `fields` of the thread
/// through `surface` (`app`, `cli`, `inbox`).
pub fn read_entry<N: AsRef<str>>(at: u64, actor: &str, surface: &str, fields: &[N]) -> NewAuditEntry {
    let fields: Vec<&str> = fields.iter().map(AsRef::as_ref).collect();
    NewAuditEntry::new(at, actor, PERSONAL_DATA_READ, json!({ "surface": surface, "fields": fields }))
}

/// The audit kind of a manual state update, whose detail is the update.
pub const STATE_UPDATED: &str = "state.updated";

/// What a reader sees of the values audit entries carry of a thread.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AuditMask<'a> {
    /// The fields marked personal in the thread's state.
    pub personal: &'a [&'a str],
    /// The fields marked credential: always masked.
    pub credential: &'a [&'a str],
    /// Whether the reader may see personal data.
    pub sees_personal: bool,
    /// The kind of the entries whose detail's `"value"` is an answer to a question.
    pub answer_kind: &'a str,
}

impl<'a> AuditMask<'a> {
    /// The mask for a reader of a thread whose state marks `personal` and `credential`
    /// fields; `sees_personal`: whether the reader may see personal data; `answer_kind`: the
    /// kind of the entries that record answers to questions.
    pub fn new(personal: &'a [&'a str], credential: &'a [&'a str], sees_personal: bool, answer_kind: &'a str) -> Self {
        AuditMask { personal, credential, sees_personal, answer_kind }
    }

    /// Masks `entries` for the reader: in a [`STATE_UPDATED`] entry (its detail is the update)
    /// the credential fields always, and the personal ones for a reader who may not see
    /// personal data; for such a reader, when the state has personal fields, also the whole
    /// `"value"` of an answer (an answer is not a state field, so which of it is personal is
    /// not known). Returns whether personal fields were left unmasked, i.e. whether the read
    /// is one to audit.
    pub fn apply(&self, entries: &mut [AuditEntry]) -> bool {
        let mut shown = false;
        for e in entries {
            if e.kind == STATE_UPDATED {
                mask_fields(&mut e.detail, self.credential);
                if !self.sees_personal {
                    mask_fields(&mut e.detail, self.personal);
                } else if holds_personal(&e.detail, self.personal) {
                    shown = true;
                }
            } else if e.kind == self.answer_kind
                && !self.personal.is_empty()
                && !self.sees_personal
                && let Some(value) = e.detail.get_mut("value")
            {
                *value = Value::String(MASK.to_string());
            }
        }
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{Actor, AllowAll, RoleAccess};
    use crate::core::state::ReducerKind;

    #[test]
    fn personal_fields_show_as_dots_whatever_their_type() {
        let mut state = json!({"email": "ada@example.com", "age": 36, "tags": ["x"], "count": 2});
        assert!(mask_fields(&mut state, &["email", "age", "tags", "missing"]));
        assert_eq!(state, json!({"email": MASK, "age": MASK, "tags": MASK, "count": 2}));
        // An update sets some fields only: absent ones stay absent.
        let mut update = json!({"count": 3});
        assert!(!mask_fields(&mut update, &["email"]));
        assert_eq!(update, json!({"count": 3}));
        let mut none = json!({"email": "ada@example.com"});
        assert!(!mask_fields::<&str>(&mut none, &[]));
        assert_eq!(none["email"], "ada@example.com");
    }

    #[test]
    fn renamed_keys_are_recognised() {
        let mut state = json!({"emailAddress": "ada@example.com", "HOME-TOWN": "Paris", "other": 1});
        mask_fields(&mut state, &["email_address", "home_town"]);
        assert_eq!(state, json!({"emailAddress": MASK, "HOME-TOWN": MASK, "other": 1}));
        assert!(holds_personal(&json!({"emailAddress": 1}), &["email_address"]));
        assert!(!holds_personal(&json!({"other": 1}), &["email_address"]));
    }

    #[test]
    fn descriptions_name_their_personal_fields() {
        let d = json!({"state": {"fields": [
            {"name": "email", "reducer": "overwrite", "type": "String", "personal": true},
            {"name": "count", "reducer": "add", "type": "u32", "personal": false},
            {"name": "old", "reducer": "overwrite", "type": "String"}
        ]}});
        assert_eq!(personal_in_description(&d), ["email"]);
        assert!(personal_in_description(&json!({"state": {}})).is_empty());
        let fields = [
            Field::new("email", ReducerKind::Overwrite, "String").personal(),
            Field::new("n", ReducerKind::Add, "u32"),
        ];
        assert_eq!(personal_names(&fields), ["email"]);
    }

    #[test]
    fn audit_details_mask_updated_fields_and_answers() {
        let entry = |kind: &str, detail: Value| AuditEntry {
            thread: "t".into(),
            seq: 0,
            at: 0,
            actor: "a".into(),
            kind: kind.into(),
            detail,
            detail_hash: String::new(),
            link: String::new(),
        };
        let log = || {
            vec![
                entry(STATE_UPDATED, json!({"email": "ada@example.com", "token": "tok-1", "n": 2})),
                entry("interrupt.answered", json!({"node": "ask", "value": {"email": "ada@example.com"}})),
                entry("note", json!({"email": "kept: not a state value"})),
            ]
        };
        let mut hidden = log();
        assert!(!AuditMask::new(&["email"], &["token"], false, "interrupt.answered").apply(&mut hidden));
        assert_eq!(hidden[0].detail, json!({"email": MASK, "token": MASK, "n": 2}));
        assert_eq!(hidden[1].detail, json!({"node": "ask", "value": MASK}));
        assert_eq!(hidden[2].detail, log()[2].detail);
        let mut shown = log();
        assert!(AuditMask::new(&["email"], &["token"], true, "interrupt.answered").apply(&mut shown));
        assert_eq!(shown[0].detail, json!({"email": "ada@example.com", "token": MASK, "n": 2}));
        assert_eq!(shown[1].detail, log()[1].detail);
        // A state without personal fields: answers stay, credentials are still masked.
        let mut plain = log();
        assert!(!AuditMask::new(&[], &["token"], false, "interrupt.answered").apply(&mut plain));
        assert_eq!((plain[0].detail["token"].as_str(), &plain[1].detail), (Some(MASK), &log()[1].detail));
    }

    #[test]
    fn descriptions_name_their_credential_fields() {
        let d = json!({"state": {"fields": [
            {"name": "email", "personal": true, "credential": false},
            {"name": "token", "personal": false, "credential": true}
        ]}});
        assert_eq!(credential_in_description(&d), ["token"]);
        let fields = [Field::new("token", ReducerKind::Overwrite, "String").credential()];
        assert_eq!(credential_names(&fields), ["token"]);
    }

    #[test]
    fn only_the_permission_unmasks() {
        let policy = RoleAccess::new().allow(Operation::SeePersonalData, "dpo");
        assert!(sees_personal_data(&Access::new(policy.clone(), Actor::new("d", ["dpo"])), Some("t")));
        assert!(!sees_personal_data(&Access::new(policy, Actor::new("v", ["viewer"])), Some("t")));
        assert!(sees_personal_data(&Access::new(AllowAll, Actor::process()), None));
        let e = read_entry(5, "d", "cli", &["email"]);
        assert_eq!((e.kind.as_str(), e.actor.as_str()), (PERSONAL_DATA_READ, "d"));
        assert_eq!(e.detail, json!({"surface": "cli", "fields": ["email"]}));
    }
}
