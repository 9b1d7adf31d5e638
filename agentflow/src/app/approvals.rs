//! The App's approval desk: [`App::approvals`], the desk for deciding the graph's approvals.

use std::sync::Arc;

use crate::app::App;
use crate::approval::{ApprovalDesk, Authorizer};
use crate::core::state::State;
use crate::durable::HistoryError;
use crate::tool::Tool;

impl<S: State, D> App<S, D> {
    /// The desk for deciding this graph's approvals, in its store, checking deciding and
    /// answering with the app's access policy ([`App::access`]) besides `authorizer`.
    pub fn approvals(&self, authorizer: impl Authorizer) -> Result<ApprovalDesk, HistoryError> {
        let store = self.setup.store.clone().ok_or(HistoryError::NoStore)?;
        let mut tools: Vec<&'static dyn Tool> = Vec::new();
        for t in self.setup.graph.nodes().iter().flat_map(|n| n.tools.iter().copied()) {
            if !tools.iter().any(|k| k.name() == t.name()) {
                tools.push(t);
            }
        }
        Ok(ApprovalDesk::with_tools(store, tools, Arc::new(authorizer))
            .access_shared(Arc::clone(self.setup.access.policy()))
            .reading_as(self.actor()))
    }
}
