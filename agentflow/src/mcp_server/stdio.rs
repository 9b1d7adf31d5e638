//! A graph served as an MCP tool over standard input and output: [`serve_stdio`].
//!
//! The tool starts or continues a durable thread of the App's graph per call, as the actor the
//! program names ([`ServeOptions::new`]), checked like any operation of the App. What a call
//! looks like and what it returns is in `call.rs`.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;

use super::call::{
    Call, Plan, Shaped, failed, parse_call, plan_resume, refused_answer, run_error, shape, still_waiting,
    thread_exists, unknown_thread,
};
use crate::access::Actor;
use crate::access::personal::sees_personal_data;
use crate::access::personal::{credential_names, holds_personal, mask_fields, personal_names, read_entry};
use crate::app::App;
use crate::core::state::State;
use crate::durable::HistoryError;
use crate::mcp_client::McpError;
use crate::outcome::{Run, RunError};

/// How [`serve_stdio`] presents the graph, and who its calls act as.
///
/// ```
/// use agentflow::access::Actor;
/// use agentflow::mcp::ServeOptions;
///
/// let options = ServeOptions::new(Actor::new("mcp-agent", ["agent"]).for_tenants(["acme"]))
///     .tool_name("refund")
///     .description("Refunds a claim; large refunds wait for a person's approval.");
/// assert_eq!(options.actor().id, "mcp-agent");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeOptions {
    actor: Actor,
    tool_name: Option<String>,
    description: Option<String>,
    tenant: Option<String>,
    input_schema: Option<Value>,
}

impl ServeOptions {
    /// Every call acts as `actor`: starting a thread needs
    /// [`Operation::Start`](crate::access::Operation::Start), continuing one
    /// [`Resume`](crate::access::Operation::Resume) and
    /// [`ReadState`](crate::access::Operation::ReadState) (the call reads what the thread waits
    /// for), answering its questions [`Answer`](crate::access::Operation::Answer), each checked
    /// by the App's access policy ([`App::access`]) on the threads of the actor's tenants. The
    /// final state shows personal fields (`#[state(pii)]`) only to an actor allowed
    /// [`SeePersonalData`](crate::access::Operation::SeePersonalData) (and such a read is
    /// audited); credential fields never.
    pub fn new(actor: impl Into<Actor>) -> Self {
        ServeOptions { actor: actor.into(), tool_name: None, description: None, tenant: None, input_schema: None }
    }

    /// The tool's name (default: the graph's name).
    #[must_use]
    pub fn tool_name(mut self, name: impl Into<String>) -> Self {
        self.tool_name = Some(name.into());
        self
    }

    /// The tool's description, which the model that calls it reads (default: one naming the
    /// graph and how calls start and resume threads).
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// The tenant the threads a call starts belong to (default: the actor's tenant when it
    /// acts for exactly one, else none).
    #[must_use]
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// The JSON schema of the `input` argument, the graph's state (default: one made from
    /// the state's fields and their Rust types; give the state's own, e.g. from `schemars`,
    /// for a precise one).
    #[must_use]
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// The actor the calls act as.
    pub fn actor(&self) -> &Actor {
        &self.actor
    }
}

/// Serves `app`'s graph as one MCP tool on standard input and output, until the client closes
/// them; `deps` are the graph's dependencies, as for [`App::runner`].
///
/// A call `{"thread": "t-1", "input": {..}}` starts thread `t-1` (the app needs a store) and
/// runs it to its end or to a pause; `{"thread": "t-1", "resume": {..}}` continues it: each
/// waiting question named by its id with its answer, `{}` after a person decided the
/// approval it waited for. A finished run returns
/// `{"status": "done", "thread", "state"}`, a paused one
/// `{"status": "waiting", "thread", "waiting_for": [..]}` (each item with its `kind`, `node`,
/// and `id`: a question's id, an approval's id), as the `structuredContent` of a result that
/// is not an error; a failed run, a refused operation (naming the permission missing) or a
/// call that cannot be read is a result with `isError: true`. A resume that does not say which
/// of several waiting questions an answer is for is refused with the list of them. An answer
/// of the wrong shape for its question (a string where it asks for a yes or no) leaves the
/// thread waiting: the result has `isError: true`, `"status": "waiting"`, the reason in
/// `error` and what the thread still waits for. Approvals are decided by people at the
/// approval desk, not through the tool.
///
/// Thread ids are one namespace in the store, across tenants; the caller chooses them. A
/// caller learns nothing of a thread of a tenant its actor does not act for beyond that its id
/// is in use: resuming one answers as for an id no thread has ("no thread `t-1`; start it with
/// `input`"), and starting a thread under its id answers "the thread id `t-1` is taken; start
/// the thread under another id", without saying whose it is. Starting under the id of a thread
/// the actor can see answers that it exists and to call again with `resume`. Give callers ids
/// they cannot guess others' by (e.g. a random suffix) when tenants share a store. An actor
/// acting for several tenants starts threads only when [`ServeOptions::tenant`] names theirs.
///
/// What a client sees for a message that is not a request of this tool: a call of another tool
/// name is a JSON-RPC error (invalid params); `arguments` that are not an object a JSON-RPC
/// error from the MCP library (method not found). A line that is not JSON, or a request cut
/// short, gets no answer (the library logs it and keeps serving), so a client waiting on it
/// waits for its own timeout; the same for a line over the library's bound (16 MiB).
///
/// Returns when the client goes away; [`McpError::Protocol`] if it did not complete MCP's
/// handshake. Nothing else may write to standard output meanwhile (log to standard error).
pub async fn serve_stdio<S, D>(app: App<S, D>, deps: D, options: ServeOptions) -> Result<(), McpError>
where
    S: State,
    D: Send + Sync + 'static,
{
    let (stdin, stdout) = rmcp::transport::stdio();
    serve_io(app, deps, options, stdin, stdout).await
}

/// [`serve_stdio`] on another byte stream: MCP's stdio framing (one JSON-RPC message a line)
/// read from `reader` and written to `writer`, e.g. a socket's two halves, until `reader`
/// ends.
pub async fn serve_io<S, D, R, W>(
    app: App<S, D>,
    deps: D,
    options: ServeOptions,
    reader: R,
    writer: W,
) -> Result<(), McpError>
where
    S: State,
    D: Send + Sync + 'static,
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let served = Served::new(app, deps, options);
    let name = served.tool.name.to_string();
    let running = served.serve((reader, writer)).await.map_err(|e| McpError::Protocol {
        server: name.clone(),
        why: format!("the client did not complete MCP's handshake: {e}"),
    })?;
    running
        .waiting()
        .await
        .map_err(|e| McpError::Protocol { server: name, why: format!("serving stopped unexpectedly: {e}") })?;
    Ok(())
}

/// The MCP server: the app acting as the configured actor, and the one tool.
struct Served<S: State, D> {
    app: App<S, D>,
    deps: Arc<D>,
    owner: String,
    tenant: Option<String>,
    tool: Tool,
}

impl<S: State, D: Send + Sync + 'static> Served<S, D> {
    fn new(app: App<S, D>, deps: D, options: ServeOptions) -> Self {
        let app = app.acting_as(options.actor);
        let actor = app.actor().clone();
        let tenant = options.tenant.or_else(|| match &actor.tenants {
            crate::access::Tenants::Only(set) if set.len() == 1 => set.iter().next().cloned(),
            _ => None,
        });
        let graph = app.graph().name();
        let name = options.tool_name.unwrap_or_else(|| graph.to_string());
        let description = options.description.unwrap_or_else(|| {
            format!(
                "Runs graph `{graph}` as a durable thread: `input` starts thread `thread` from the given state, \
                 `resume` continues it (answers by question id; {{}} once a person decided its approval). Returns \
                 the final state, or what the thread waits for."
            )
        });
        let input = options.input_schema.unwrap_or_else(|| super::call::state_schema(S::FIELDS));
        let tool = Tool::new(name, description, super::call::input_schema(input))
            .with_raw_output_schema(Arc::new(super::call::output_schema()));
        Served { app, deps: Arc::new(deps), owner: actor.id, tenant, tool }
    }

    /// Carries out one call.
    async fn carry_out(&self, call: Call) -> Shaped {
        let thread = call.thread().to_string();
        let run = match call {
            Call::Start { thread, input } => {
                let input: S = match serde_json::from_value(input) {
                    Ok(input) => input,
                    Err(e) => return failed(&thread, &format!("`input` is not a `{}`: {e}", S::NAME)),
                };
                if let Some(why) = self.no_tenant() {
                    return failed(&thread, &why);
                }
                let mut runner = self.app.runner(&*self.deps).thread(thread.clone()).owner(self.owner.clone());
                if let Some(tenant) = &self.tenant {
                    runner = runner.tenant(tenant.clone());
                }
                match runner.run(input).await {
                    Err(RunError::ThreadExists { .. }) => {
                        return failed(&thread, &thread_exists(&thread, self.sees(&thread)));
                    }
                    run => run,
                }
            }
            Call::Resume { thread, resume } => {
                let pending = match self.app.pending(&thread) {
                    Ok(pending) => pending,
                    Err(HistoryError::UnknownThread { .. }) => return failed(&thread, &unknown_thread(&thread)),
                    Err(e) => return failed(&thread, &e.to_string()),
                };
                match plan_resume(&thread, &pending, resume) {
                    Err(refusal) => return failed(&thread, &refusal.0),
                    Ok(plan) => self.resume(&thread, plan).await,
                }
            }
        };
        match run {
            Ok(run) => self.shape_run(&thread, run),
            Err(e) => failed(&thread, &run_error(&thread, &e)),
        }
    }

    /// Why this server cannot start threads, when its actor acts for named tenants only and
    /// it names none for new threads (a thread of no tenant would be one the actor cannot
    /// reach): the program serving the tool must choose.
    fn no_tenant(&self) -> Option<String> {
        let actor = self.app.actor();
        if self.tenant.is_some() || actor.acts_for(None) {
            return None;
        }
        let tenants = match &actor.tenants {
            crate::access::Tenants::Only(set) if !set.is_empty() => {
                let names: Vec<String> = set.iter().map(|t| format!("`{t}`")).collect();
                format!("tenants {}", names.join(", "))
            }
            _ => "no tenant".to_string(),
        };
        Some(format!(
            "`{}` acts for {tenants}, and this server names no tenant for the threads it starts: the program \
             serving the tool must set `ServeOptions::tenant`",
            actor.id
        ))
    }

    /// Whether the actor can see thread `thread` (it exists and is of a tenant the actor acts
    /// for); `false` when it cannot be read.
    fn sees(&self, thread: &str) -> bool {
        let Some(store) = self.app.backing_store() else { return false };
        matches!(store.thread(thread), Ok(Some(record)) if self.app.setup.access.sees(&record))
    }

    /// Continues `thread` as `plan` says: the result of the last step.
    async fn resume(&self, thread: &str, plan: Plan) -> Result<Run<S>, RunError> {
        let runner = || self.app.runner(&*self.deps).thread(thread).owner(self.owner.clone());
        match plan {
            Plan::Continue => runner().resume().await,
            Plan::Answer(answers) => {
                let mut last = None;
                // Each answer is recorded on its own; the one that completes the step's set
                // continues the thread (earlier ones come back interrupted on the rest).
                for (id, value) in answers {
                    last = Some(runner().resume_answering(&id, value).await?);
                }
                last.ok_or_else(|| RunError::NotWaiting { thread: thread.to_string(), status: "no answer".into() })
            }
        }
    }

    /// The result for a run of `thread`: its state masked for the actor (an unmasked read of
    /// personal fields is audited, as the App's reads are).
    fn shape_run(&self, thread: &str, run: Run<S>) -> Shaped {
        let personal = personal_names(S::FIELDS);
        let credential = credential_names(S::FIELDS);
        let access = &self.app.setup.access;
        let sees = sees_personal_data(access, Some(thread));
        // An answer of the wrong shape: the thread still waits where it asked.
        if let Some(why) = refused_answer(&run.outcome)
            && let Ok(pending) = self.app.pending(thread)
            && !pending.is_empty()
        {
            return still_waiting(thread, why, &pending, !sees && !personal.is_empty());
        }
        let mut state = match serde_json::to_value(&run.state) {
            Ok(state) => state,
            Err(e) => return failed(thread, &format!("the state cannot be shown as JSON: {e}")),
        };
        mask_fields(&mut state, &credential);
        let done = run.outcome.is_completed();
        if !sees {
            mask_fields(&mut state, &personal);
        } else if done
            && holds_personal(&state, &personal)
            && let Some(store) = self.app.backing_store()
        {
            let entry = read_entry(crate::durable::now_ms(), &access.actor().id, "mcp", &personal);
            if let Err(e) = store.append_audit(thread, entry) {
                return failed(
                    thread,
                    &format!("the read of personal data could not be audited, so it is not shown: {e}"),
                );
            }
        }
        shape(thread, &run.outcome, state, !sees && !personal.is_empty())
    }
}

impl<S: State, D: Send + Sync + 'static> ServerHandler for Served<S, D> {
    fn get_info(&self) -> ServerConfig {
        let graph = self.app.graph().name();
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("agentflow", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!("One tool, `{}`: runs graph `{graph}` as durable threads.", self.tool.name))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![self.tool.clone()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != self.tool.name {
            let message = format!("no tool `{}`; this server has one tool, `{}`", request.name, self.tool.name);
            return Err(ErrorData::invalid_params(message, None));
        }
        let shaped = match parse_call(request.arguments.as_ref()) {
            Ok(call) => self.carry_out(call).await,
            Err(refusal) => failed("", &refusal.0),
        };
        Ok(result(shaped).into())
    }
}

/// The MCP result: the line for people, the structured content also as JSON text (for clients
/// that read only text), and `isError`.
fn result(shaped: Shaped) -> CallToolResult {
    let mut result = if shaped.is_error {
        CallToolResult::structured_error(shaped.value)
    } else {
        CallToolResult::structured(shaped.value)
    };
    result.content.insert(0, ContentBlock::text(shaped.text));
    result
}
