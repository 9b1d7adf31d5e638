//! Map-reduce: the instances of a map worker, one per payload, at most its `parallel` at once,
//! each finished write kept before its slot is reused. What sets one instance's effects, tool
//! calls and approvals apart is [`instance_key`](crate::core::instance_key).

use std::future::Future;
use std::pin::Pin;

use futures_util::{FutureExt, StreamExt};

use super::exec::{Exec, Halt};
use crate::core::state::State;
use crate::core::step::Step;
use crate::durable::{FinishedWrites, Journal, PersistError};
use crate::graph::{DEFAULT_PARALLEL, NodeId};

impl<S: State, D: Sync> Exec<'_, S, D> {
    /// Runs the instances of map worker `id`, one per payload, at most its
    /// `parallel` at once; returns their results in payload order, whatever
    /// order they finished in. Instances in `kept` finished before (a resumed
    /// step) and are not run again. With a `keeper`, see [`Exec::run_kept_instances`].
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_instances(
        &self,
        id: NodeId,
        items: &[serde_json::Value],
        kept: Vec<Step<S>>,
        state: &S,
        (step, step_span): (u32, &tracing::Span),
        journal: Option<&Journal>,
        keeper: Option<&FinishedWrites>,
    ) -> Result<Vec<(NodeId, Result<Step<S>, Halt>)>, PersistError> {
        let parallel = self.plan.spec.nodes.get(id.index()).and_then(|n| n.parallel).unwrap_or(DEFAULT_PARALLEL).max(1);
        let mut slots: Vec<Option<Result<Step<S>, Halt>>> = items.iter().map(|_| None).collect();
        for s in kept {
            if let Some(slot) = s.instance.and_then(|i| slots.get_mut(i as usize)) {
                *slot = Some(Ok(s));
            }
        }
        let todo: Vec<usize> = slots.iter().enumerate().filter(|(_, s)| s.is_none()).map(|(i, _)| i).collect();
        let run = |i: usize| async move {
            let instance = (u32::try_from(i).unwrap_or(u32::MAX), &items[i]);
            (i, self.run_node(id, state, (step, step_span), journal, Some(instance), None).await)
        };
        match keeper {
            Some(keeper) => self.run_kept_instances(id, todo, parallel, keeper, &mut slots, run).await?,
            None => {
                let mut runs = futures_util::stream::iter(todo).map(run).buffer_unordered(parallel);
                while let Some((i, result)) = runs.next().await {
                    slots[i] = Some(result);
                }
            }
        }
        Ok(slots.into_iter().flatten().map(|r| (id, r)).collect())
    }

    /// Runs instances `todo` of map worker `id` as [`Exec::run_instances`] does, and commits
    /// the write of each one that finishes before its slot is given to another: at most
    /// `parallel` instances have started and not had their write committed, so a crash re-runs
    /// at most that many of those that started. Writes that finish while a commit is under way
    /// (or together) share the next commit.
    async fn run_kept_instances<F, Fut>(
        &self,
        id: NodeId,
        todo: Vec<usize>,
        parallel: usize,
        keeper: &FinishedWrites,
        slots: &mut [Option<Result<Step<S>, Halt>>],
        run: F,
    ) -> Result<(), PersistError>
    where
        F: Fn(usize) -> Fut,
        Fut: Future<Output = (usize, Result<Step<S>, Halt>)>,
    {
        let node = self.name(id);
        let mut todo = todo.into_iter();
        let mut running = futures_util::stream::FuturesUnordered::new();
        // Finished, their writes not yet in a commit.
        let mut queued: Vec<usize> = Vec::new();
        // Finished and not yet committed: `queued` and those of the commit under way.
        let mut held = 0;
        let mut committing = 0;
        let mut commit: Option<KeepCommit> = None;
        loop {
            while running.len() + held < parallel {
                let Some(i) = todo.next() else { break };
                running.push(run(i));
            }
            if commit.is_none() && !queued.is_empty() {
                let mut writes = Vec::with_capacity(queued.len());
                for i in queued.drain(..) {
                    if let Some(Ok(done)) = &slots[i] {
                        writes.push(keeper.write(node, done, |n| self.name(n))?);
                    }
                }
                committing = writes.len();
                let keeper = keeper.clone();
                commit = Some(Box::pin(async move { keeper.keep(writes).await }));
            }
            if running.is_empty() && commit.is_none() {
                return Ok(());
            }
            tokio::select! {
                Some(first) = running.next(), if !running.is_empty() => {
                    let mut finished = vec![first];
                    // What finished together goes into one commit.
                    while let Some(Some(more)) = running.next().now_or_never() {
                        finished.push(more);
                    }
                    for (i, result) in finished {
                        if result.is_ok() {
                            queued.push(i);
                            held += 1;
                        }
                        slots[i] = Some(result);
                    }
                }
                kept = async {
                    match commit.as_mut() {
                        Some(commit) => commit.await,
                        None => std::future::pending().await,
                    }
                }, if commit.is_some() => {
                    commit = None;
                    kept?;
                    held -= committing;
                    committing = 0;
                }
            }
        }
    }
}

/// The commit of finished writes under way in [`Exec::run_kept_instances`].
type KeepCommit = Pin<Box<dyn Future<Output = Result<(), PersistError>> + Send>>;
