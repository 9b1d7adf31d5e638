//! The chain of a graph's declared migrations from a thread's stored version to the current
//! one: where each stored node name goes, and what becomes of an approval pending for a tool.

use crate::release::{ArgsMap, ArgsMigration, GraphMigration, Release, ToolMigration};

/// The node name a migration maps a node to when the thread no longer goes there.
pub(super) const END: &str = "END";

/// The declared migrations from a stored version to the current one, in order; a version
/// without a `migrate(from = ..)` changes nothing.
pub(super) struct Chain<'r> {
    pub(super) release: &'r Release,
    pub(super) from: u32,
    steps: Vec<Option<&'r GraphMigration>>,
}

/// Where a name goes through the chain.
#[derive(Debug, PartialEq)]
pub(super) enum NodeFate {
    /// The node of this name.
    At(String),
    /// Mapped to `END`: the thread no longer goes there.
    End,
}

/// What becomes of an approval pending for a tool through the chain.
pub(super) enum ToolFate {
    /// Asked for the tool under this name, its arguments through these functions in order.
    Keep(String, Vec<ArgsMap>),
    /// Cancelled.
    Cancel,
}

impl<'r> Chain<'r> {
    pub(super) fn new(release: &'r Release, from: u32) -> Self {
        let steps =
            (from..release.version).map(|k| release.migrations.iter().find(|m| m.from == k)).collect::<Vec<_>>();
        Chain { release, from, steps }
    }

    pub(super) fn to(&self) -> u32 {
        self.release.version
    }

    pub(super) fn node(&self, name: &str) -> NodeFate {
        let mut name = name.to_string();
        for step in self.steps.iter().flatten() {
            if let Some((_, to)) = step.nodes.iter().find(|(from, _)| *from == name) {
                if *to == END {
                    return NodeFate::End;
                }
                name = (*to).to_string();
            }
        }
        NodeFate::At(name)
    }

    pub(super) fn tool(&self, name: &str) -> ToolFate {
        let mut name = name.to_string();
        let mut maps = Vec::new();
        for step in self.steps.iter().flatten() {
            match step.tools.iter().find(|(from, _)| tool_name(from) == name).map(|(_, to)| to) {
                Some(ToolMigration::Rename(to)) => name = tool_name(to).to_string(),
                Some(ToolMigration::Cancel) => return ToolFate::Cancel,
                None => {}
            }
            match step.args.iter().find(|(tool, _)| tool_name(tool) == name).map(|(_, how)| how) {
                Some(ArgsMigration::Map(f)) => maps.push(*f),
                Some(ArgsMigration::Cancel) => return ToolFate::Cancel,
                None => {}
            }
        }
        ToolFate::Keep(name, maps)
    }
}

/// A tool's name as `migrate(..)` writes it (an identifier or a path) as the tool calls itself:
/// its last segment.
fn tool_name(written: &str) -> &str {
    written.rsplit("::").next().unwrap_or(written).trim()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn upper(v: Value) -> Result<Value, String> {
        Ok(Value::from(v.as_str().unwrap_or_default().to_uppercase()))
    }

    static STEPS: [GraphMigration; 2] = [
        GraphMigration::new(1, &[("a", "b"), ("gone", "END")], &[("mail", ToolMigration::Rename("tools::send"))], &[]),
        GraphMigration::new(
            3,
            &[("b", "c")],
            &[("wire", ToolMigration::Cancel)],
            &[("send", ArgsMigration::Map(upper))],
        ),
    ];

    #[test]
    fn the_chain_composes_the_declared_steps_and_a_missing_one_changes_nothing() {
        let release = Release::new("g", 4, &STEPS, "{}", "");
        let chain = Chain::new(&release, 1);
        assert_eq!(chain.node("a"), NodeFate::At("c".into()), "1 -> 2 renames, 2 -> 3 is missing, 3 -> 4 renames");
        assert_eq!(chain.node("gone"), NodeFate::End);
        assert_eq!(chain.node("kept"), NodeFate::At("kept".into()));
        // From version 2, the first step does not apply.
        assert_eq!(Chain::new(&release, 2).node("a"), NodeFate::At("a".into()));
        let ToolFate::Keep(name, maps) = chain.tool("mail") else { panic!("cancelled") };
        assert_eq!((name.as_str(), maps.len()), ("send", 1), "renamed by its last path segment, then mapped");
        assert_eq!(maps[0](Value::from("hi")), Ok(Value::from("HI")));
        assert!(matches!(chain.tool("wire"), ToolFate::Cancel));
        assert!(matches!(chain.tool("other"), ToolFate::Keep(name, maps) if name == "other" && maps.is_empty()));
    }
}
