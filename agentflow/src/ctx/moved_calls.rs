//! The model's calls a thread's move to a newer version of its graph moved: a call of a reply
//! journaled before the move, made again by the node attempt the move continues, runs as the
//! current version names it, or, withdrawn, does not run (see
//! [`migrated_calls`](crate::durable::MovedCall)).

use serde_json::Value;

use super::Ctx;
use crate::core::error::NodeError;
use crate::core::message::ToolCall;
use crate::durable::{Entry, MovedCall, decode_effect};
use crate::tool::{Code, Observation, Tool};

impl<D> Ctx<'_, D> {
    /// What the thread's move made of `call`, if this attempt continues a move and the move
    /// recorded the call (nothing is read otherwise).
    pub(super) async fn moved_call(&self, call: &ToolCall) -> Result<Option<MovedCall>, NodeError> {
        let Some(journal) = self.journal.filter(|j| j.moved_to.is_some()) else { return Ok(None) };
        let moved = crate::durable::moved_calls(journal, self.node).await?;
        Ok(moved.into_iter().find(|m| m.is(call)))
    }

    /// The result journaled before the thread's move for `call` as this attempt makes it (under
    /// its current key, this map instance's included), replayed; `None` when the journal holds
    /// none, so the call goes through the policy and its approval like any other. The journal
    /// is read whatever the tool's risk: a read that ran under an approval is replayed too.
    pub(super) async fn replayed_move(
        &self,
        tool: &'static dyn Tool,
        call: &ToolCall,
    ) -> Result<Option<Observation>, NodeError> {
        let Some(journal) = self.journal else { return Ok(None) };
        let key = self.call_key(tool, call);
        let Entry::Recorded(bytes) = journal.entry(self.node, &key).await? else { return Ok(None) };
        let result: Result<Value, String> = decode_effect(&bytes, &key)?;
        Ok(Some(match result {
            Ok(value) => Observation::ok(&call.id, tool.name(), value),
            Err(msg) => Observation::error(&call.id, tool.name(), Code::ToolError, msg),
        }))
    }
}
