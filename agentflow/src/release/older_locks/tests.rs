//! The checks of a graph against older locks, on hand-built locks and migrations.

use serde_json::{Value, json};

use super::problems;
use crate::release::{ArgsMigration, GraphMigration, ToolMigration};

/// A lock of `version` with one approval tool (`refund`, its `amount` typed `amount_type`), one
/// read tool and the state field `amount` of type `field_type` at state version `state`.
fn lock(version: u32, amount_type: &str, field_type: &str, state: u32) -> Value {
    json!({
        "format": 1, "id": "support", "version": version,
        "nodes": { "review": { "goto": ["END"], "tools": ["refund", "lookup"] } },
        "tools": {
            "refund": { "risk": "irreversible", "approval": true,
                        "schema": { "properties": { "amount": { "type": amount_type } } } },
            "lookup": { "risk": "read", "approval": false,
                        "schema": { "properties": { "q": { "type": amount_type } } } },
        },
        "state": { "name": "Doc", "version": state, "fields": [
            { "name": "amount", "type": field_type, "reducer": "overwrite" },
            { "name": "note", "type": "String", "reducer": "overwrite" },
        ] },
    })
}

fn rewrite(args: Value) -> Result<Value, String> {
    Ok(args)
}

#[test]
fn an_unchanged_graph_has_no_problems_with_an_older_lock() {
    assert!(problems(&lock(1, "integer", "u32", 1), None, &lock(2, "integer", "u32", 1), &[]).is_empty());
}

#[test]
fn a_field_type_changed_under_the_same_state_version_is_named_with_the_attribute_to_raise() {
    let found = problems(&lock(1, "integer", "u32", 1), None, &lock(2, "integer", "f64", 1), &[]);
    assert_eq!(
        found,
        vec![
            "field `amount` of `Doc` changed type from u32 to f64 between version 1 and 2, and the state's version \
             stayed 1: raise `#[state(version = 2)]` and register `App::migration(1, ..)` to convert the stored states"
        ]
    );
    // The state's version was raised: its migrations convert the stored states.
    assert!(problems(&lock(1, "integer", "u32", 1), None, &lock(2, "integer", "f64", 2), &[]).is_empty());
}

#[test]
fn an_approval_tools_changed_schema_needs_an_args_migration_in_the_chain() {
    let (older, now) = (lock(1, "integer", "u32", 1), lock(3, "number", "u32", 1));
    let found = problems(&older, None, &now, &[]);
    assert_eq!(found.len(), 1, "the read tool's schema may change: {found:?}");
    assert_eq!(
        found[0],
        "an approval of `refund` may be pending in threads of version 1, and the argument schema of `refund` \
         changed since (at /properties/amount/type: \"integer\" -> \"number\"): add \
         `migrate(from = 1, args(refund = path::to::fn))` to rewrite the pending arguments, or \
         `args(refund = cancel)` to cancel those approvals"
    );
    // `args(..)` anywhere in the chain from version 1 covers it, a map or a cancel.
    for args in [ArgsMigration::Map(rewrite), ArgsMigration::Cancel] {
        let chain = [GraphMigration::new(1, &[], &[], &[]), GraphMigration::new(2, &[], &[], &[])];
        let with_args = [chain[0], GraphMigration { args: Box::leak(Box::new([("refund", args)])), ..chain[1] }];
        assert!(problems(&older, None, &now, &with_args).is_empty());
    }
    // A migration outside the chain (from the current version on) does not.
    let later = [GraphMigration::new(3, &[], &[], &[("refund", ArgsMigration::Cancel)])];
    assert_eq!(problems(&older, None, &now, &later).len(), 1);
}

#[test]
fn a_renamed_tool_is_followed_through_the_chain_and_a_cancelled_one_is_covered() {
    let older = lock(1, "integer", "u32", 1);
    let mut now = lock(2, "number", "u32", 1);
    let tools = now["tools"].as_object_mut().unwrap();
    let refund = tools.remove("refund").unwrap();
    tools.insert("repay".into(), refund);
    let renamed = [GraphMigration::new(1, &[], &[("refund", ToolMigration::Rename("repay"))], &[])];
    let found = problems(&older, None, &now, &renamed);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("an approval of `refund` may be pending in threads of version 1"), "{found:?}");
    assert!(found[0].contains("the argument schema of `repay` changed"), "{found:?}");
    assert!(found[0].contains("add `migrate(from = 1, args(repay = path::to::fn))`"), "{found:?}");
    // Tools named by a path in `migrate(..)` are compared by their last segment.
    let mapped = [GraphMigration::new(
        1,
        &[],
        &[("kit::refund", ToolMigration::Rename("kit::repay"))],
        &[("kit::repay", ArgsMigration::Cancel)],
    )];
    assert!(problems(&older, None, &now, &mapped).is_empty());
    let cancelled = [GraphMigration::new(1, &[], &[("refund", ToolMigration::Cancel)], &[])];
    assert!(problems(&older, None, &now, &cancelled).is_empty());
    // A tool the graph no longer lists, with no migration, is the compiler's to report.
    assert!(problems(&older, None, &now, &[]).is_empty());
}

#[test]
fn a_problem_a_later_lock_shares_is_said_once_with_the_later_remedy() {
    let (v1, v2, now) = (lock(1, "integer", "u32", 1), lock(2, "integer", "u32", 1), lock(3, "number", "f64", 1));
    let at_2 = problems(&v2, None, &now, &[]);
    assert_eq!(at_2.len(), 2, "{at_2:?}");
    assert!(at_2[0].starts_with("field `amount` of `Doc` changed type from u32 to f64 between version 2 and 3"));
    assert!(at_2[1].contains("add `migrate(from = 2, args(refund = path::to::fn))`"), "{at_2:?}");
    // Version 1 had the same field type and arguments as version 2: the remedies for version 2
    // cover its threads.
    assert!(problems(&v1, Some(&v2), &now, &[]).is_empty());
    // Version 2 changed them: version 1's threads need their own.
    let changed = lock(2, "string", "i64", 1);
    let at_1 = problems(&v1, Some(&changed), &now, &[]);
    assert_eq!(at_1.len(), 2, "{at_1:?}");
    assert!(at_1[1].contains("add `migrate(from = 1, args(refund = path::to::fn))`"), "{at_1:?}");
    // A tool renamed at version 1 is looked up under its new name in the later lock.
    let mut renamed_v2 = v2.clone();
    let tools = renamed_v2["tools"].as_object_mut().unwrap();
    let refund = tools.remove("refund").unwrap();
    tools.insert("repay".into(), refund.clone());
    let mut renamed_now = now.clone();
    renamed_now["tools"].as_object_mut().unwrap().remove("refund");
    renamed_now["tools"]["repay"] = now["tools"]["refund"].clone();
    let chain = [GraphMigration::new(1, &[], &[("refund", ToolMigration::Rename("repay"))], &[])];
    assert_eq!(problems(&v1, None, &renamed_now, &chain).len(), 2);
    let found = problems(&v1, Some(&renamed_v2), &renamed_now, &chain);
    assert!(found.is_empty(), "{found:?}");
}
