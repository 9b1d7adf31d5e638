//! The gateway's circuit-breaker checks: whether a call may run its tool
//! (and what it does when it may not), and what the run of the tool's body
//! reports back. The rule is in the [`breaker`](crate::breaker) module.

use serde_json::{Value, json};

use super::Ctx;
use crate::breaker::{Breaker, BreakerState, OnOpen};
use crate::core::error::NodeError;
use crate::core::message::ToolCall;
use crate::durable::{Entry, Journal, now_ms};
use crate::event::Activity;
use crate::interrupt::{Pending, PendingKind};
use crate::tool::{Code, Observation, Risk, Tool};
use agentflow_store::{BreakerAnswer, BreakerError, BreakerOp, BreakerRecord, BreakerUpdate};

/// A call the breaker let through: it reports its outcome under `holder`.
pub(super) struct Held {
    breaker: Breaker,
    holder: String,
    /// The breaker was closed with no failures when the call was admitted.
    clean: bool,
}

impl<D: Sync + 'static> Ctx<'_, D> {
    /// Asks the tool's breaker whether `call` may run. `Ok(Ok(None))`: no
    /// breaker guards it (no breaker configured, no store, its result is
    /// replayed from the journal, or it was cut off mid-way and the tool is
    /// not idempotent, so a human settles it); `Ok(Ok(Some(held)))`: it runs and reports;
    /// `Ok(Err(observation))`: refused with `CIRCUIT_OPEN`; `Err(..)`: the
    /// run waits on a durable timer ([`OnOpen::Wait`]) or the store failed.
    /// `journaled`: the call goes through the effect journal (any call but a
    /// read, and a read under an approval).
    pub(super) async fn breaker_admit(
        &self,
        tool: &'static dyn Tool,
        call: &ToolCall,
        journaled: bool,
    ) -> Result<Result<Option<Held>, Observation>, NodeError> {
        let (Some(journal), Some(breaker)) = (self.journal, self.scope.gateway.breakers.of(tool.name()).copied())
        else {
            return Ok(Ok(None));
        };
        // A call whose result is journaled is replayed, and one cut off mid-way (started, never
        // ended) is left to a human unless the tool is idempotent: the tool does not run again,
        // so the breaker has nothing to refuse (its refusal would say the tool did not run, of
        // a call that may have acted).
        // An idempotent call cut off mid-way runs again with the same key: the breaker is asked,
        // and a refusal says that the earlier run may have acted.
        let mut cut_off = false;
        if journaled {
            match journal.entry(self.node, &self.call_key(tool, call)).await? {
                Entry::Recorded(_) => return Ok(Ok(None)),
                Entry::Open { .. } if !tool.idempotent() && tool.risk() != Risk::Read => return Ok(Ok(None)),
                Entry::Open { .. } => cut_off = true,
                Entry::Clear { .. } => {}
            }
        }
        // The probe's holder is kept in a text column: a model's call id with a NUL byte is
        // escaped, as in its journal key, under `0:`; an id that starts as an escaped or marked
        // one would is marked `1:`, so two distinct ids never share a holder.
        let id = if call.id.contains('\0') {
            format!("0:{}", super::tools::escape_nul(&call.id))
        } else if call.id.starts_with("0:") || call.id.starts_with("1:") {
            format!("1:{}", call.id)
        } else {
            call.id.clone()
        };
        let holder = self.instance_key(format!("{}/{}/{}/{id}", journal.thread, journal.seq, self.node));
        // Decided from a read when the move would change nothing: a closed
        // breaker admits, an open one in its cool-down (or a half-open one
        // whose probe another call holds) refuses. So neither guarded calls
        // to a healthy tool nor refused calls write, or queue on the record.
        let read = self.breaker_read(journal, tool.name()).await?;
        let now = now_ms();
        let record = match read {
            None => return Ok(Ok(Some(Held { breaker, holder, clean: true }))),
            Some(r) if r.state == BreakerState::Closed => {
                return Ok(Ok(Some(Held { breaker, holder, clean: r.failures == 0 })));
            }
            Some(r) if now < r.open_until && r.probe.as_deref() != Some(holder.as_str()) => r,
            // The cool-down is over (or this call holds the probe): take it by compare-and-set.
            Some(_) => {
                let answer = self.breaker_move(journal, tool.name(), BreakerOp::Admit, &holder, &breaker).await?;
                if answer.admitted {
                    return Ok(Ok(Some(Held { breaker, holder, clean: false })));
                }
                answer.record
            }
        };
        let record = &record;
        // Open: a probe may run once the cool-down ends. Half-open: another
        // call is probing; look again after a cool-down (or when its lease
        // ends, if sooner).
        let retry_at = match record.state {
            BreakerState::Open => record.open_until,
            _ => record.open_until.min(now.saturating_add(breaker.cool_down_ms())),
        }
        .max(now.saturating_add(1));
        match breaker.policy() {
            OnOpen::Wait => {
                let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
                let payload = json!({ "until": retry_at, "breaker": tool.name() });
                signal.pause = Some(Pending {
                    node: self.node.to_string(),
                    instance: self.instance(),
                    kind: PendingKind::Sleep,
                    payload,
                });
                Err(NodeError::needs_input(format!(
                    "node `{}` waits until unix ms {retry_at} for the circuit breaker of `{}` to let a trial call through",
                    self.node,
                    tool.name()
                )))
            }
            OnOpen::Observe => {
                let detail = if record.state == BreakerState::Open {
                    format!(
                        "the circuit breaker of `{}` is open after {} consecutive failures; the tool did not run. \
                         A trial call may run from unix ms {retry_at}",
                        tool.name(),
                        record.failures
                    )
                } else {
                    format!(
                        "the circuit breaker of `{}` is half-open: a trial call is running; the tool did not run. \
                         Try again after unix ms {retry_at}",
                        tool.name()
                    )
                };
                let detail = if cut_off {
                    format!(
                        "{detail}. An earlier run of this call was cut off mid-way and may have acted; called \
                         again once the breaker lets it through, it runs with the same idempotency key"
                    )
                } else {
                    detail
                };
                let mut obs = Observation::error(&call.id, tool.name(), Code::CircuitOpen, detail);
                if let Value::Object(body) = &mut obs.body {
                    body.insert("retry_at".into(), json!(retry_at));
                }
                Ok(Err(obs))
            }
        }
    }

    /// Arms the report of a run of the tool's body that is cut off before it
    /// ends (a node timeout drops the call): dropped armed, it records a
    /// failure, unless the run was cancelled. [`Ctx::breaker_report`]
    /// disarms it.
    pub(super) fn breaker_watch(&self, tool: &'static dyn Tool, held: &Held) -> CutOff {
        let update = self.journal.map(|journal| {
            let actor = format!("executor:{}", self.node);
            let update = BreakerUpdate::new(
                tool.name(),
                BreakerOp::Failed,
                &held.holder,
                held.breaker.rule(),
                0,
                &journal.thread,
                &actor,
            );
            (std::sync::Arc::clone(&journal.store), update)
        });
        CutOff { update, cancel: self.scope.cancel.clone() }
    }

    /// Reports the outcome of a run of the tool's body the breaker let
    /// through. The tool already ran, so a store failure here is logged, not
    /// turned into the call's error (the breaker misses one report).
    pub(super) async fn breaker_report(&self, tool: &'static dyn Tool, held: &Held, mut watch: CutOff, failed: bool) {
        watch.update = None;
        let Some(journal) = self.journal else { return };
        // A success changes nothing on a closed breaker with no failures: no
        // write (nor a read, when it was so when the call was admitted).
        if !failed
            && (held.clean
                || self
                    .breaker_read(journal, tool.name())
                    .await
                    .is_ok_and(|r| r.is_none_or(|r| r.state == BreakerState::Closed && r.failures == 0)))
        {
            return;
        }
        let op = if failed { BreakerOp::Failed } else { BreakerOp::Succeeded };
        if let Err(e) = self.breaker_move(journal, tool.name(), op, &held.holder, &held.breaker).await {
            tracing::warn!(parent: None, tool = tool.name(), error = %e, "the circuit breaker could not record a call's outcome");
        }
    }

    async fn breaker_read(&self, journal: &Journal, tool: &str) -> Result<Option<BreakerRecord>, NodeError> {
        let name = tool.to_string();
        crate::durable::blocking(&journal.store, move |s| s.breaker(&name))
            .await
            .map_err(|e| NodeError::transient(e.to_string()))?
            .map_err(|e| NodeError::transient(format!("circuit breaker of `{tool}`: {e}")))
    }

    async fn breaker_move(
        &self,
        journal: &Journal,
        tool: &str,
        op: BreakerOp,
        holder: &str,
        breaker: &Breaker,
    ) -> Result<BreakerAnswer, NodeError> {
        let actor = format!("executor:{}", self.node);
        let update = BreakerUpdate::new(tool, op, holder, breaker.rule(), now_ms(), &journal.thread, &actor);
        let answer = crate::durable::blocking(&journal.store, move |s| s.update_breaker(update))
            .await
            .map_err(|e| NodeError::transient(e.to_string()))?
            .map_err(|e| match e {
                e @ BreakerError::Unsupported { .. } => NodeError::fatal(format!("circuit breaker of `{tool}`: {e}")),
                e => NodeError::transient(format!("circuit breaker of `{tool}`: {e}")),
            })?;
        if answer.changed() {
            (self.scope.activity)(Activity::CircuitBreaker {
                node: self.node,
                tool: tool.to_string(),
                from: answer.from,
                to: answer.record.state,
                failures: answer.record.failures,
            });
        }
        Ok(answer)
    }
}

/// The failure report of a call in flight, sent if the call is dropped
/// before it ends (see [`Ctx::breaker_watch`]).
pub(super) struct CutOff {
    update: Option<(std::sync::Arc<dyn agentflow_store::Store>, BreakerUpdate)>,
    cancel: tokio_util::sync::CancellationToken,
}

impl Drop for CutOff {
    fn drop(&mut self) {
        let Some((store, mut update)) = self.update.take() else { return };
        // A cancelled run stopped the call; the tool did not fail. (Its
        // probe, if it held one, is taken over after the probe timeout.)
        if self.cancel.is_cancelled() {
            return;
        }
        // Drop cannot wait for the store: the report is written by a
        // blocking task (best effort, as a report after the call ran).
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        update.now = now_ms();
        runtime.spawn_blocking(move || {
            if let Err(e) = store.update_breaker(update) {
                tracing::warn!(parent: None, error = %e, "the circuit breaker could not record a call cut off by a timeout");
            }
        });
    }
}
