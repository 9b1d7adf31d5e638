//! The journal of the step a thread's move to a newer version of its graph continues, under the
//! names the current version gives: a renamed node's entries go under its new name, and the
//! entries of a node's direct calls ([`Ctx::run_tool`](crate::Ctx::run_tool)), whose keys name
//! the node and the tool, are re-keyed as the current version makes the same call, so a call
//! that ran before the move is replayed, not run again.
//!
//! A direct call's key is `tool:{tool}:{node}-{tool}-{n}:{hash}` (or under `tool0:`), `hash` the
//! first 16 characters of its arguments' hash. A key a node chose itself
//! ([`Ctx::effect`](crate::Ctx::effect)) stays as it was: the node asks it again under the same
//! key. A direct call of a tool whose arguments `args(..)` maps is re-keyed by its arguments
//! mapped, which the approval it ran under keeps; without them the move is refused
//! ([`ResumeError::DirectCallArgsUnknown`]) rather than run the call twice.

use agentflow_store::EffectKey;
use serde_json::Value;

use super::approval_key::direct_call_id;
use super::error::{ResumeError, ThreadError};
use super::graph_migration::Plan;
use super::keys::MARK;
use super::migration_chain::{END, ToolFate};
use crate::tool::args_hash;

/// A direct call's journal key, taken apart.
#[derive(Debug, PartialEq)]
struct DirectKey<'k> {
    /// `tool:` or `tool0:`.
    prefix: &'k str,
    tool: &'k str,
    n: u32,
    hash: &'k str,
    /// An instance's suffix and a marker, as the key has them.
    rest: &'k str,
}

impl<'k> DirectKey<'k> {
    /// `key`, journaled by node `node`, as a direct call's key; `None` for any other key.
    fn parse(key: &'k str, node: &str) -> Option<Self> {
        let (prefix, body) = ["tool:", "tool0:"].iter().find_map(|p| Some((*p, key.strip_prefix(p)?)))?;
        body.match_indices(':').find_map(|(at, _)| {
            let tool = &body[..at];
            let id = body[at + 1..].strip_prefix(&format!("{node}-{tool}-"))?;
            let (n, after) = id.split_once(':')?;
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let n: u32 = n.parse().ok()?;
            let hash = after.get(..16)?;
            let rest = &after[16..];
            if !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            (rest.is_empty() || rest.starts_with('[') || rest.starts_with(MARK)).then_some(DirectKey {
                prefix,
                tool,
                n,
                hash,
                rest,
            })
        })
    }

    /// The key of the same call made by `node` of tool `tool`, its arguments hashed `hash`.
    fn at(&self, node: &str, tool: &str, hash: &str) -> String {
        let DirectKey { prefix, n, rest, .. } = self;
        format!("{prefix}{tool}:{}:{hash}{rest}", direct_call_id(node, tool, *n))
    }
}

impl Plan<'_> {
    /// The journaled effects of the paused step as the current version asks them: a renamed
    /// node's under its new name, its direct calls' re-keyed (see the module docs).
    pub(super) fn effects(&mut self) -> Result<Vec<(EffectKey, Vec<u8>)>, ThreadError> {
        let mut moved = Vec::new();
        for (key, value) in &self.found.effects {
            let now = match self.nodes.get(&key.node) {
                Some(now) if now == END => continue,
                Some(now) => now.clone(),
                None => key.node.clone(),
            };
            let renamed = match DirectKey::parse(&key.key, &key.node) {
                Some(call) => self.direct_call(&key.node, &now, &call)?,
                None => key.key.clone(),
            };
            if now != key.node || renamed != key.key {
                moved.push((EffectKey { node: now, key: renamed, ..key.clone() }, value.clone()));
            }
        }
        Ok(moved)
    }

    /// The key the current version's node `now` (`old` when the call was journaled) asks the
    /// direct call `call` under.
    fn direct_call(&mut self, old: &str, now: &str, call: &DirectKey<'_>) -> Result<String, ThreadError> {
        let (name, maps) = match self.chain.tool(call.tool) {
            // The current version does not call it: its entries stay with the node as they are.
            ToolFate::Cancel => return Ok(call.at(now, call.tool, call.hash)),
            ToolFate::Keep(name, maps) => (name, maps),
        };
        if maps.is_empty() {
            return Ok(call.at(now, &name, call.hash));
        }
        let id = direct_call_id(old, call.tool, call.n);
        let unknown = || ResumeError::DirectCallArgsUnknown {
            thread: self.thread().to_string(),
            node: old.to_string(),
            call: call.n,
            tool: call.tool.to_string(),
            now: name.clone(),
            from: self.chain.from,
            to: self.chain.to(),
        };
        let mut args = self.direct_call_args(call).ok_or_else(unknown)?;
        for map in &maps {
            args = map(args).map_err(|reason| ResumeError::CallArgsRefused {
                thread: self.thread().to_string(),
                call: id.clone(),
                tool: name.clone(),
                from: self.chain.from,
                to: self.chain.to(),
                reason,
            })?;
        }
        let hash = args_hash(&args);
        Ok(call.at(now, &name, &hash[..hash.len().min(16)]))
    }

    /// The arguments of the direct call `call`, as the approval it was asked under keeps them
    /// (its arguments hashed as the key's, so not an edit's).
    fn direct_call_args(&self, call: &DirectKey<'_>) -> Option<Value> {
        self.found.approvals.iter().filter(|r| r.thread == self.thread() && r.tool == call.tool).find_map(|r| {
            let args: Value = serde_json::from_str(&r.args).ok()?;
            args_hash(&args).starts_with(call.hash).then_some(args)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "0123456789abcdef";

    #[test]
    fn a_direct_calls_key_is_taken_apart_and_a_nodes_own_key_is_not() {
        let key = format!("tool:charge:review-charge-2:{HASH}");
        let call = DirectKey::parse(&key, "review").unwrap();
        assert_eq!((call.prefix, call.tool, call.n, call.hash, call.rest), ("tool:", "charge", 2, HASH, ""));
        assert_eq!(
            call.at("human_review", "bill", "fedcba9876543210"),
            "tool:bill:human_review-bill-2:fedcba9876543210"
        );
        let marked = format!("tool:charge:review-charge-1:{HASH}[3]{MARK}started{MARK}1");
        let call = DirectKey::parse(&marked, "review").unwrap();
        assert_eq!(call.at("r", "charge", HASH), format!("tool:charge:r-charge-1:{HASH}[3]{MARK}started{MARK}1"));
        assert!(DirectKey::parse("charge:review-1", "review").is_none());
        assert!(DirectKey::parse(&format!("tool:charge:call-1:{HASH}"), "review").is_none());
        assert!(DirectKey::parse(&format!("tool:charge:review-charge-1:{HASH}x"), "review").is_none());
        let escaped = format!("tool0:charge:review-charge-1:{HASH}");
        assert_eq!(DirectKey::parse(&escaped, "review").map(|c| c.prefix), Some("tool0:"));
        let colon = format!("tool:a:b:review-a:b-1:{HASH}");
        assert_eq!(DirectKey::parse(&colon, "review").map(|c| c.tool), Some("a:b"));
    }
}
