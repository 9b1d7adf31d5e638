//! Model calls counted against the run's budgets: a chat, and structured
//! output (a reply parsed and validated into a typed value).

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::Ctx;
use crate::core::budget::Budget;
use crate::core::error::NodeError;
use crate::event::Activity;
use crate::model::{Ask, ChatModel, ChatReply, ChatRequest, ChunkSink, Fed, ModelError, Structured};
use crate::stream::StreamMode;
use crate::telemetry::{attrs, capture, content, names, spans};
use tracing::Instrument;

/// The class of a model error for the `error.type` attribute (never its message).
fn model_error_type(e: &ModelError) -> &'static str {
    match e {
        ModelError::RateLimited { .. } => "rate_limited",
        ModelError::Timeout => "timeout",
        ModelError::Http { .. } => "http",
        ModelError::Transport(_) => "transport",
        ModelError::MalformedReply(_) => "malformed_reply",
        ModelError::Auth { .. } => "auth",
        ModelError::InvalidOutput { .. } => "invalid_output",
        ModelError::ResponseTooLarge { .. } => "response_too_large",
        ModelError::Config(_) => "config",
        ModelError::ScriptExhausted { .. } => "script_exhausted",
        ModelError::UnexpectedRequest { .. } => "unexpected_request",
    }
}

impl<D> Ctx<'_, D> {
    /// Calls a model, counted against the run's budgets: the call and its
    /// tokens are reserved first (a call past a limit is never sent) and
    /// settled with the usage the model reports.
    ///
    /// When the run is read as a stream with
    /// [`StreamMode::Messages`](crate::StreamMode::Messages), the model is
    /// asked with [`ChatModel::chat_stream`] and each chunk goes to the
    /// stream as it arrives (waiting while the stream's buffer is full); the
    /// call is counted the same way, from the whole reply.
    pub async fn chat<M: ChatModel + ?Sized>(&self, model: &M, request: &ChatRequest) -> Result<ChatReply, NodeError> {
        let span = spans::chat(model.provider_name(), model.request_model());
        if capture::enabled() && !span.is_disabled() {
            let (system, input) = content::input_messages(&request.messages, self.masked);
            if let Some(system) = system {
                attrs::set_text(&span, names::SYSTEM_INSTRUCTIONS, system);
            }
            attrs::set_text(&span, names::INPUT_MESSAGES, input);
        }
        let answer = self.chat_call(model, request).instrument(span.clone()).await;
        match &answer {
            Ok(Ok(reply)) => {
                spans::end_chat(&span, &reply.model, reply.usage, reply.finish_reason.as_deref());
                if capture::enabled() && !span.is_disabled() {
                    let output = content::output_messages(
                        &reply.text,
                        &reply.tool_calls,
                        reply.finish_reason.as_deref(),
                        self.masked,
                    );
                    attrs::set_text(&span, names::OUTPUT_MESSAGES, output);
                }
            }
            Ok(Err(e)) => spans::failed(&span, model_error_type(e)),
            Err(_) => spans::failed(&span, "budget_exhausted"),
        }
        let reply = answer??;
        if self.scope.meter.tokens_exhausted() {
            return Err(self.exhausted(Budget::Tokens));
        }
        Ok(reply)
    }

    /// The model call of [`Ctx::chat`]: `Err` when a budget refuses it, `Ok(Err)` when the model
    /// fails.
    async fn chat_call<M: ChatModel + ?Sized>(
        &self,
        model: &M,
        request: &ChatRequest,
    ) -> Result<Result<ChatReply, ModelError>, NodeError> {
        let reserve = match self.scope.meter.begin_model_call(request.max_output_tokens) {
            Ok(reserve) => reserve,
            Err(which) => return Err(self.exhausted(which)),
        };
        let site = self.scope.gateway.probe.as_ref().map(|probe| (probe, self.call_site()));
        let replayed = site.as_ref().and_then(|(probe, site)| probe.model_call(site));
        let answer = match (replayed, self.scope.outlet.as_deref().filter(|o| o.wants(StreamMode::Messages))) {
            (Some(replayed), _) => replayed,
            (None, Some(outlet)) => {
                let origin = self.origin();
                let push = move |chunk| outlet.message(origin, chunk);
                model.chat_stream(request, &ChunkSink::with_room(&push, outlet)).await
            }
            (None, None) => model.chat(request).await,
        };
        if let Some((probe, site)) = &site {
            probe.model_reply(site, &answer);
        }
        match answer {
            Ok(reply) => {
                self.scope.meter.end_model_call(reserve, reply.usage);
                (self.scope.activity)(Activity::ModelCall {
                    node: self.node,
                    model: model.name().to_string(),
                    tool_calls: reply.tool_calls.len(),
                    usage: reply.usage,
                });
                Ok(Ok(reply))
            }
            Err(e) => {
                self.scope.meter.abort_model_call(reserve);
                Ok(Err(e))
            }
        }
    }

    /// Where the next model call of this attempt is made, for a crash test's probe.
    fn call_site(&self) -> crate::probe::CallSite {
        let call = {
            let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
            signal.model_calls += 1;
            signal.model_calls
        };
        crate::probe::CallSite {
            thread: self.journal.map(|j| j.thread.clone()).unwrap_or_default(),
            seq: self.journal.map_or(u64::from(self.step), |j| j.seq),
            node: self.node.to_string(),
            instance: self.instance(),
            attempt: self.attempt,
            answered: self.resume.is_some() || self.kept_answer.is_some(),
            call,
        }
    }

    /// Asks `model` for a `T` like [`structured_request`](crate::model::structured_request), but every call,
    /// re-asks included, goes through [`Ctx::chat`]: it counts against the
    /// run's model-call and token budgets and is reported as an activity.
    ///
    /// A reply that still does not parse after `max_reasks` re-asks is a
    /// correctable [`NodeError`] naming the problem; an exhausted budget ends
    /// the run as `BudgetExhausted`.
    pub async fn structured<T, M>(
        &self,
        model: &M,
        req: ChatRequest,
        max_reasks: u32,
    ) -> Result<Structured<T>, NodeError>
    where
        T: JsonSchema + DeserializeOwned,
        M: ChatModel + ?Sized,
    {
        let mut ask = Ask::<T>::new(req, max_reasks);
        loop {
            let reply = self.chat(model, &ask.req).await?;
            match ask.feed(reply) {
                Fed::Done(done) => return Ok(done),
                Fed::Again => {}
                Fed::Invalid(error) => {
                    return Err(NodeError::correctable(format!("{error} (after {} re-asks)", ask.reasks)));
                }
            }
        }
    }
}
