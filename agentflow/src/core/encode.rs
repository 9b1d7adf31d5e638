//! The one way agentflow turns a value into JSON it keeps: states, updates,
//! pending writes, interrupts, effect results, tool results, audit details,
//! resume values and tool arguments all pass through here.
//!
//! serde_json writes NaN and the infinities as `null`, which reads back as
//! something else (`0.0` through a default, `None`, or not at all), and it
//! writes JSON of any depth but reads none nested 128 levels deep. So before
//! a value is serialised it is walked once: a non-finite float, or nesting
//! deeper than the limit, is refused with a [`ValueError`] naming the place
//! (`state.prices[3]`); the walk is [`value_check`](super::value_check). What passes reads
//! back equal to what was written.

use serde::Serialize;
use serde_json::Value;

pub use agentflow_store::{MAX_DOCUMENT_DEPTH, MAX_JSON_DEPTH};

pub use super::value_check::ValueError;
use super::value_check::inspect;

/// `what` ("the input state") to the root of a path (`state`).
pub(crate) fn last_word(what: &'static str) -> &'static str {
    what.rsplit(' ').next().unwrap_or(what)
}

/// Serialises `value` as a stored document named `root` (`state`,
/// `update`, ...), refusing non-finite floats and nesting deeper than
/// [`MAX_DOCUMENT_DEPTH`].
pub(crate) fn to_bytes<T: Serialize + ?Sized>(value: &T, root: &'static str) -> Result<Vec<u8>, ValueError> {
    inspect(value, root, MAX_DOCUMENT_DEPTH)?;
    serde_json::to_vec(value).map_err(|e| unserializable(root, &e))
}

/// Converts `value` to JSON that is stored inside a larger document,
/// refusing non-finite floats and nesting deeper than `limit`.
pub(crate) fn to_value<T: Serialize + ?Sized>(
    value: &T,
    root: &'static str,
    limit: usize,
) -> Result<Value, ValueError> {
    inspect(value, root, limit)?;
    serde_json::to_value(value).map_err(|e| unserializable(root, &e))
}

fn unserializable(root: &str, e: &serde_json::Error) -> ValueError {
    ValueError::Unserializable { path: root.to_string(), message: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::value_check::check_json;
    use serde::ser;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[derive(serde::Serialize)]
    struct Quote {
        prices: Vec<f64>,
        best: Option<f32>,
        by_shop: BTreeMap<String, f64>,
        tag: Tag,
    }

    #[derive(serde::Serialize)]
    enum Tag {
        Plain,
        Scored(f64),
        Pair(u8, f64),
        Detail { weight: f64 },
    }

    fn quote() -> Quote {
        Quote {
            prices: vec![1.0, 2.5, 0.1 + 0.2],
            best: Some(1.5),
            by_shop: BTreeMap::from([("corner shop".to_string(), 3.0), ("web".to_string(), 4.0)]),
            tag: Tag::Plain,
        }
    }

    fn not_finite(e: ValueError) -> (String, &'static str) {
        match e {
            ValueError::NotFinite { path, value } => (path, value),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn finite_values_encode_as_serde_json_does() {
        let q = quote();
        assert_eq!(to_bytes(&q, "state").unwrap(), serde_json::to_vec(&q).unwrap());
        assert_eq!(to_value(&q, "state", MAX_JSON_DEPTH).unwrap(), serde_json::to_value(&q).unwrap());
    }

    #[test]
    fn non_finite_floats_are_refused_by_name() {
        let mut q = quote();
        q.prices[2] = f64::NAN;
        assert_eq!(not_finite(to_bytes(&q, "state").unwrap_err()), ("state.prices[2]".into(), "NaN"));
        let mut q = quote();
        q.best = Some(f32::INFINITY);
        assert_eq!(not_finite(to_bytes(&q, "state").unwrap_err()), ("state.best".into(), "inf"));
        let mut q = quote();
        q.by_shop.insert("corner shop".into(), f64::NEG_INFINITY);
        assert_eq!(
            not_finite(to_bytes(&q, "update").unwrap_err()),
            (r#"update.by_shop["corner shop"]"#.into(), "-inf")
        );
        for (tag, path) in [
            (Tag::Scored(f64::NAN), "state.tag.Scored"),
            (Tag::Pair(1, f64::NAN), "state.tag.Pair[1]"),
            (Tag::Detail { weight: f64::NAN }, "state.tag.Detail.weight"),
        ] {
            let q = Quote { tag, ..quote() };
            assert_eq!(not_finite(to_bytes(&q, "state").unwrap_err()).0, path);
        }
        assert_eq!(not_finite(to_bytes(&f64::NAN, "result").unwrap_err()), ("result".into(), "NaN"));
        let message = to_bytes(&vec![f64::NAN], "state").unwrap_err().to_string();
        assert!(message.contains("`state[0]` is NaN") && message.contains("read back changed"), "{message}");
    }

    fn nested(depth: usize) -> Value {
        (0..depth).fold(json!(1), |inner, _| json!([inner]))
    }

    #[test]
    fn depth_is_counted_as_serde_json_reads_it() {
        let at_limit = nested(MAX_DOCUMENT_DEPTH);
        let bytes = to_bytes(&at_limit, "state").unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap(), at_limit);
        let over = nested(MAX_DOCUMENT_DEPTH + 1);
        assert!(serde_json::from_slice::<Value>(&serde_json::to_vec(&over).unwrap()).is_err());
        match to_bytes(&over, "state").unwrap_err() {
            ValueError::TooDeep { path, limit } => {
                assert_eq!(limit, MAX_DOCUMENT_DEPTH);
                assert_eq!(path, format!("state{}", "[0]".repeat(MAX_DOCUMENT_DEPTH)));
            }
            other => panic!("{other:?}"),
        }
        // Variants open objects too: {"Detail": {"weight": ..}} is two levels.
        #[derive(serde::Serialize)]
        struct Wrap(Vec<Tag>);
        let tags = Wrap(vec![Tag::Detail { weight: 1.0 }]);
        assert!(to_value(&tags, "v", 3).is_ok());
        assert!(matches!(to_value(&tags, "v", 2), Err(ValueError::TooDeep { .. })));
        // Bytes are an array in serde_json's output.
        struct Bytes;
        impl Serialize for Bytes {
            fn serialize<Se: ser::Serializer>(&self, s: Se) -> Result<Se::Ok, Se::Error> {
                s.serialize_bytes(&[1, 2])
            }
        }
        assert_eq!(serde_json::to_string(&Bytes).unwrap(), "[1,2]");
        assert!(to_value(&[Bytes], "v", 2).is_ok());
        assert!(matches!(to_value(&[Bytes], "v", 1), Err(ValueError::TooDeep { .. })));
        assert!(check_json(&nested(MAX_JSON_DEPTH), "args").is_ok());
        let e = check_json(&json!({"a": nested(MAX_JSON_DEPTH)}), "args").unwrap_err();
        assert!(
            matches!(&e, ValueError::TooDeep { path, limit: MAX_JSON_DEPTH } if path.starts_with("args.a[0]")),
            "{e}"
        );
    }

    #[test]
    fn serialiser_failures_are_named() {
        let mut map = BTreeMap::new();
        map.insert(vec![1u8], 1.0);
        let e = to_bytes(&json!({"ok": 1}), "state").map(|_| ()).and_then(|()| to_bytes(&map, "state").map(|_| ()));
        assert!(matches!(e, Err(ValueError::Unserializable { .. })), "{e:?}");
    }
}
