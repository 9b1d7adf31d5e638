//! The one key scheme of map-reduce instances: the instances of a map worker share a node and
//! a step, so each keys its effects, tool calls and approval holders apart.

/// The key under which instance `instance` of a map worker journals `key` (its effects, tool
/// calls and approvals' holders): the instances of a worker share a node and a step, so each
/// keys them apart as `key[i]`. A node run that is not a map instance keeps `key`.
pub(crate) fn instance_key(key: String, instance: Option<u32>) -> String {
    match instance {
        Some(i) => format!("{key}[{i}]"),
        None => key,
    }
}
