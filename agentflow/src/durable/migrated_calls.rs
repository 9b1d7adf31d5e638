//! The tool calls a model asked for in a node attempt that a thread's move to a newer version of
//! its graph continues: the calls its journaled model replies hold (a reply journaled with
//! [`Ctx::effect`](crate::Ctx::effect) is replayed as it was, under the old tool names and
//! arguments) are moved with the journal.
//!
//! The migration reads every journaled value of the step it continues; a `tool_calls` list in
//! one (a [`ChatReply`](crate::model::ChatReply)'s, at any depth) holds the model's calls. A call
//! of a tool that `tools(old -> new)` renamed or `args(..)` maps is recorded as moved (the new
//! name, the arguments through the declared functions); a call of a tool mapped to `cancel` as
//! withdrawn. The record goes in the migration commit, in the journal of the step continued,
//! under the node's current name, with the results journaled for the calls that ran already
//! under their new keys, so a call that ran is never run again. The gateway reads the record
//! for a call of that node attempt: a moved call runs as the new version names it, a withdrawn
//! one does not run and the model hears why (or, if it ran before the move, gets the result it
//! had).

use std::collections::BTreeMap;

use agentflow_store::EffectKey;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::error::{ResumeError, ThreadError};
use super::graph_migration::Plan;
use super::io::blocking;
use super::journal::{Journal, journal_seq_of};
use super::keys::MARK;
use super::migration_chain::ToolFate;
use crate::core::error::NodeError;
use crate::core::message::ToolCall;
use crate::tool::{Code, Observation, args_hash};

/// The journal key of the calls moved by the move to version `to`.
fn record_key(to: u32) -> String {
    format!("__calls__{MARK}moved{MARK}{to}")
}

/// The version a journal key of [`record_key`] names.
fn record_version(key: &str) -> Option<u32> {
    key.strip_prefix(&format!("__calls__{MARK}moved{MARK}"))?.parse().ok()
}

/// A model's call moved by a thread's move: the call as the journaled reply holds it (its tool,
/// id and the hash of its arguments) and what it is now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MovedCall {
    /// The tool the reply names.
    pub(crate) tool: String,
    /// The call's id.
    pub(crate) id: String,
    /// The hash ([`args_hash`]) of the arguments the reply holds.
    pub(crate) args_hash: String,
    /// The call as the current version makes it (its tool's name, its arguments mapped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) to: Option<ToolCall>,
    /// Why the call does not run: its tool was mapped to `cancel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) withdrawn: Option<String>,
    /// A result was journaled for the call before the move: it ran, and is replayed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) ran: bool,
    /// For a withdrawn call that ran before the move: the result journaled for it
    /// (`{"Ok": ..}` or `{"Err": ..}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) result: Option<Value>,
}

impl MovedCall {
    /// What the model hears of a withdrawn call: the result it had if it ran before the move,
    /// else why it did not run.
    pub(crate) fn observation(&self) -> Observation {
        let (id, tool) = (&self.id, &self.tool);
        match self.result.as_ref() {
            Some(Value::Object(r)) if r.contains_key("Ok") => Observation::ok(id, tool, r["Ok"].clone()),
            Some(Value::Object(r)) if r.contains_key("Err") => {
                Observation::error(id, tool, Code::ToolError, r["Err"].as_str().unwrap_or_default().to_string())
            }
            _ => Observation::error(id, tool, Code::PermissionDenied, self.withdrawn.clone().unwrap_or_default()),
        }
    }

    /// Whether `call` is the call this record moved.
    pub(crate) fn is(&self, call: &ToolCall) -> bool {
        self.id == call.id && self.tool == call.name && self.args_hash == args_hash(&call.arguments)
    }
}

/// The calls moved in the node attempt `node` continues, if the step it runs in continues a
/// thread's move ([`Journal::moved_to`]); none otherwise (nothing is read).
pub(crate) async fn moved_calls(journal: &Journal, node: &str) -> Result<Vec<MovedCall>, NodeError> {
    let Some(to) = journal.moved_to else { return Ok(Vec::new()) };
    let key = journal.key(node, &record_key(to));
    let bytes = blocking(&journal.store, move |s| s.effect(&key))
        .await
        .and_then(|r| Ok(r?))
        .map_err(|e| NodeError::transient(format!("effect journal unavailable: {e}")))?;
    let Some(bytes) = bytes else { return Ok(Vec::new()) };
    serde_json::from_slice(&bytes).map_err(|e| {
        NodeError::fatal(format!("the calls moved by the thread's move to version {to} do not decode: {e}"))
    })
}

/// The model's calls in a journaled value: every `tool_calls` list of calls in it.
fn calls_in(value: &Value, out: &mut Vec<ToolCall>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("tool_calls", Value::Array(items)) => {
                        out.extend(items.iter().filter_map(|c| serde_json::from_value::<ToolCall>(c.clone()).ok()));
                    }
                    _ => calls_in(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| calls_in(v, out)),
        _ => {}
    }
}

/// The journal key of a call of `tool` with id `id` and arguments hashed `hash`, as the gateway
/// writes it (without the instance's suffix).
fn call_key(tool: &str, id: &str, hash: &str) -> String {
    let hash = &hash[..hash.len().min(16)];
    if id.contains('\0') {
        format!("tool0:{tool}:{}:{hash}", id.replace('\\', "\\\\").replace('\0', "\\0"))
    } else {
        format!("tool:{tool}:{id}:{hash}")
    }
}

/// `key` with its call part `from` replaced by `to`, if `key` is `from`'s result, one of its
/// markers or an instance's.
fn rekeyed(key: &str, from: &str, to: &str) -> Option<String> {
    let rest = key.strip_prefix(from)?;
    (rest.is_empty() || rest.starts_with('[') || rest.starts_with(MARK)).then(|| format!("{to}{rest}"))
}

/// Whether `key` is the result journaled for the call keyed `call` (an instance's included).
fn is_result(key: &str, call: &str) -> bool {
    match key.strip_prefix(call) {
        Some(rest) => rest.is_empty() || (rest.starts_with('[') && !rest.contains(MARK)),
        None => false,
    }
}

/// A node's journal in the step a move continues: the node's name now, and its entries.
struct NodeJournal<'e> {
    now: &'e str,
    effects: &'e [&'e (EffectKey, Vec<u8>)],
}

impl Plan<'_> {
    /// The records of the model's calls moved in the nodes the thread continues, and the results
    /// journaled for those that ran, under their new keys (see the module docs).
    pub(super) fn move_calls(&mut self) -> Result<Vec<(EffectKey, Vec<u8>)>, ThreadError> {
        let found = self.found;
        let mut by_node: BTreeMap<&str, Vec<&(EffectKey, Vec<u8>)>> = BTreeMap::new();
        for effect in &found.effects {
            by_node.entry(effect.0.node.as_str()).or_default().push(effect);
        }
        let mut out = Vec::new();
        for (node, effects) in by_node {
            let now = self.nodes.get(node).cloned().unwrap_or_else(|| node.to_string());
            if now == super::migration_chain::END {
                continue;
            }
            // What an earlier move at this step made of the calls (the newest record).
            let earlier: Vec<MovedCall> = effects
                .iter()
                .filter_map(|(k, v)| Some((record_version(&k.key)?, v)))
                .max_by_key(|(version, _)| *version)
                .and_then(|(_, v)| serde_json::from_slice(v).ok())
                .unwrap_or_default();
            let mut calls = Vec::new();
            for (key, value) in &effects {
                if record_version(&key.key).is_some() || key.key.contains(MARK) {
                    continue;
                }
                if let Ok(value) = serde_json::from_slice::<Value>(value) {
                    calls_in(&value, &mut calls);
                }
            }
            let mut moved = Vec::new();
            for call in calls {
                let hash = args_hash(&call.arguments);
                let before = earlier.iter().find(|m| m.is(&call)).cloned();
                if moved.iter().any(|m: &MovedCall| m.is(&call)) {
                    continue;
                }
                let at = NodeJournal { now: &now, effects: &effects };
                let record = self.move_call(&at, &call, hash, before, &mut out)?;
                moved.extend(record);
            }
            if !moved.is_empty() {
                let key = EffectKey::new(
                    self.thread(),
                    journal_seq_of(&found.latest),
                    now.as_str(),
                    record_key(self.chain.to()),
                );
                out.push((key, Self::encode("the moved calls", &moved)?));
            }
        }
        Ok(out)
    }

    /// The record of `call` (journaled in `at`) moved to the current version, `before` what an
    /// earlier move made of it; `None` when nothing moves it. The results journaled for it go to
    /// `out` under its new key.
    fn move_call(
        &mut self,
        at: &NodeJournal<'_>,
        call: &ToolCall,
        hash: String,
        before: Option<MovedCall>,
        out: &mut Vec<(EffectKey, Vec<u8>)>,
    ) -> Result<Option<MovedCall>, ThreadError> {
        let (now, effects) = (at.now, at.effects);
        if before.as_ref().is_some_and(|b| b.withdrawn.is_some()) {
            return Ok(before);
        }
        let current = before.as_ref().and_then(|b| b.to.clone()).unwrap_or_else(|| call.clone());
        let current_key = call_key(&current.name, &current.id, &args_hash(&current.arguments));
        let (name, maps) = match self.chain.tool(&current.name) {
            ToolFate::Cancel => {
                self.tools.insert(current.name.clone(), "cancel".into());
                let reason = format!(
                    "the call of `{}` was withdrawn when the thread moved from version {} to version {} of graph `{}`, \
                     which no longer calls it; it did not run",
                    current.name,
                    self.chain.from,
                    self.chain.to(),
                    self.chain.release.id
                );
                // A call that ran before the move keeps its result.
                let result = effects
                    .iter()
                    .find(|(k, _)| is_result(&k.key, &current_key))
                    .and_then(|(_, v)| serde_json::from_slice::<Value>(v).ok());
                self.calls.push(json!({
                    "node": now, "call": call.id, "tool": current.name, "to": "cancel",
                    "args_hash": hash, "ran": result.is_some(),
                }));
                let ran = result.is_some();
                return Ok(Some(MovedCall { withdrawn: Some(reason), result, ran, ..Self::record_of(call, hash) }));
            }
            ToolFate::Keep(name, maps) => (name, maps),
        };
        if name == current.name && maps.is_empty() {
            return Ok(before);
        }
        if name != current.name {
            self.tools.insert(current.name.clone(), name.clone());
        }
        let mut args = current.arguments.clone();
        for map in &maps {
            args = map(args).map_err(|reason| ResumeError::CallArgsRefused {
                thread: self.thread().to_string(),
                call: call.id.clone(),
                tool: name.clone(),
                from: self.chain.from,
                to: self.chain.to(),
                reason,
            })?;
        }
        let ran = effects.iter().any(|(k, _)| is_result(&k.key, &current_key));
        let to = ToolCall::new(current.id.clone(), name.clone(), args);
        let to_hash = args_hash(&to.arguments);
        let to_key = call_key(&to.name, &to.id, &to_hash);
        for (key, value) in effects {
            if let Some(renamed) = rekeyed(&key.key, &current_key, &to_key) {
                out.push((EffectKey { node: now.to_string(), key: renamed, ..key.clone() }, value.clone()));
            }
        }
        self.calls.push(json!({
            "node": now, "call": call.id, "tool": current.name, "to": name,
            "args_hash": hash, "to_args_hash": to_hash, "ran": ran,
        }));
        Ok(Some(MovedCall { to: Some(to), ran, ..Self::record_of(call, hash) }))
    }

    /// A record of `call` (its arguments hashed `hash`) that moves nothing yet.
    fn record_of(call: &ToolCall, hash: String) -> MovedCall {
        MovedCall {
            tool: call.name.clone(),
            id: call.id.clone(),
            args_hash: hash,
            to: None,
            withdrawn: None,
            ran: false,
            result: None,
        }
    }
}
