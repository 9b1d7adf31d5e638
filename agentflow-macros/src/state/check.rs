//! Rules over the state IR.

use super::ir::{Mark, Reducer, StateIr};
use crate::diag::{Diagnostics, Kind};

/// The update tracks set fields in a `u64`.
pub const MAX_FIELDS: usize = 64;

pub fn check_all(ir: &StateIr, diags: &mut Diagnostics) {
    check_field_count(ir, diags);
    check_secret_reducers(ir, diags);
    check_marks(ir, diags);
}

// The typed update records which fields it sets in one bit each, so that
// same-step conflicts cost one AND at run time.
fn check_field_count(ir: &StateIr, diags: &mut Diagnostics) {
    if ir.fields.len() > MAX_FIELDS {
        diags.push(
            Kind::Syntax,
            ir.loc,
            format!(
                "`{}` has {} fields; a state supports at most {MAX_FIELDS}: group related fields into nested structs",
                ir.name,
                ir.fields.len()
            ),
        );
    }
}

// A `Secret` holds a reference; combining two would need both values, which
// the state never has, so only overwrite fits.
fn check_secret_reducers(ir: &StateIr, diags: &mut Diagnostics) {
    for f in ir.fields.iter().filter(|f| f.secret && f.reducer != Reducer::Overwrite) {
        diags.push(
            Kind::SecretReducer,
            f.loc,
            format!(
                "field `{}` holds a `Secret`: a reducer would combine secret values; \
                 keep the default overwrite reducer (remove this `#[reduce(..)]`)",
                f.name
            ),
        );
    }
}

// Each mark once per field; `credential` lets a field hold a credential-like
// value itself, which a `Secret` field never does.
fn check_marks(ir: &StateIr, diags: &mut Diagnostics) {
    for f in &ir.fields {
        for (i, (mark, loc)) in f.marks.iter().enumerate() {
            if f.marks[..i].iter().any(|(m, _)| m == mark) {
                diags.push(
                    Kind::FieldMark,
                    *loc,
                    format!("`{}` is given twice on field `{}`; remove one", mark.keyword(), f.name),
                );
            } else if *mark == Mark::Credential && f.secret {
                diags.push(
                    Kind::FieldMark,
                    *loc,
                    format!(
                        "field `{}` is a `Secret`, which stores only its reference: it never holds the \
                         credential itself, so remove `credential`",
                        f.name
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::Loc;
    use crate::state::ir::FieldIr;

    fn field(name: &str, reducer: Reducer, marks: &[Mark], secret: bool) -> FieldIr {
        FieldIr {
            name: name.into(),
            reducer,
            loc: Loc::DUMMY,
            marks: marks.iter().map(|m| (*m, Loc::DUMMY)).collect(),
            secret,
        }
    }

    fn check(fields: Vec<FieldIr>) -> Vec<(Kind, String)> {
        let ir = StateIr { name: "S".into(), version: 1, fields, loc: Loc::DUMMY };
        let mut diags = Diagnostics::default();
        check_all(&ir, &mut diags);
        diags.into_vec().into_iter().map(|d| (d.kind, d.message)).collect()
    }

    #[test]
    fn a_secret_field_takes_only_overwrite() {
        assert!(check(vec![field("key", Reducer::Overwrite, &[], true)]).is_empty());
        for reducer in [Reducer::Append, Reducer::Add, Reducer::Merge, Reducer::Messages, Reducer::Custom] {
            let found = check(vec![field("key", reducer.clone(), &[], true)]);
            assert_eq!(found.len(), 1, "{reducer:?}: {found:?}");
            assert_eq!(found[0].0, Kind::SecretReducer);
            assert!(found[0].1.contains("field `key` holds a `Secret`"), "{}", found[0].1);
            assert!(found[0].1.contains("keep the default overwrite reducer"), "{}", found[0].1);
        }
        // Other fields keep their reducers.
        assert!(check(vec![field("log", Reducer::Append, &[], false)]).is_empty());
    }

    #[test]
    fn marks_may_not_repeat() {
        assert!(check(vec![field("email", Reducer::Overwrite, &[Mark::Personal, Mark::Credential], false)]).is_empty());
        let found = check(vec![field("email", Reducer::Overwrite, &[Mark::Personal, Mark::Personal], false)]);
        assert_eq!(found, [(Kind::FieldMark, "`pii` is given twice on field `email`; remove one".to_string())]);
        let found = check(vec![field("t", Reducer::Overwrite, &[Mark::Credential, Mark::Credential], false)]);
        assert_eq!(found.len(), 1);
        assert!(found[0].1.starts_with("`credential` is given twice"), "{}", found[0].1);
    }

    #[test]
    fn a_secret_field_needs_no_credential_mark() {
        let found = check(vec![field("key", Reducer::Overwrite, &[Mark::Credential], true)]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, Kind::FieldMark);
        assert!(found[0].1.contains("remove `credential`"), "{}", found[0].1);
        // Personal data may be a secret's reference too.
        assert!(check(vec![field("key", Reducer::Overwrite, &[Mark::Personal], true)]).is_empty());
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let found = check(vec![
            field("a", Reducer::Add, &[Mark::Credential], true),
            field("b", Reducer::Overwrite, &[Mark::Personal, Mark::Personal], false),
        ]);
        let kinds: Vec<Kind> = found.iter().map(|f| f.0).collect();
        assert_eq!(kinds, [Kind::SecretReducer, Kind::FieldMark, Kind::FieldMark]);
    }
}
