//! A graph served as an MCP tool (`agentflow::mcp::serve_stdio`, the `mcp_served` example), driven
//! by the official TypeScript client (`tests/mcp/ts_client.mjs`, `@modelcontextprotocol/sdk` from
//! `mcp/node_modules`) over stdio, in three processes on one store file:
//! 1. the client lists the tool, runs a small claim to its end (the personal field masked), and
//!    a large one to its approval (the waiting answer names the thread and the approval); deciding
//!    the approval through the tool is refused;
//! 2. this test decides the approval at the approval desk, as a person would;
//! 3. a new client session resumes the thread with `{}` and gets the finished state.
//!
//! The example is built with `cargo build --example mcp_served` (offline: nothing is downloaded);
//! a test binary run as the MCP server would print the harness's lines into the protocol's stream.
//! Skipped outside CI when `mcp/node_modules` is not installed (see `support::mcp`).

#[path = "../../examples/mcp_served.rs"]
#[allow(dead_code, reason = "this test uses the example's graph and policy, not its `main`")]
mod mcp_served_example;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agentflow::Store;
use agentflow::access::RoleAccess;
use agentflow::approval::{ApprovalStatus, Approver};
use serde_json::Value;

use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;
use mcp_served_example::{POLICY, authorizer, claims};

/// The repository root (the root package's directory).
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Builds the `mcp_served` example (at most 15 minutes: other builds may hold the lock) and
/// returns its executable.
fn build_example() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--offline", "--example", "mcp_served", "--message-format=json-render-diagnostics"])
        .current_dir(root())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    let output = run_bounded(&mut cmd, Duration::from_secs(900));
    assert!(output.status.success(), "cargo build --example mcp_served failed ({})", output.status);
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "mcp_served")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo reported no executable for the example:\n{stdout}"))
}

/// Runs `cmd` to its end, killed (and the test failed) after `limit`.
fn run_bounded(cmd: &mut Command, limit: Duration) -> std::process::Output {
    let child = cmd.stdout(Stdio::piped()).spawn().unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(output) = rx.recv_timeout(limit) else {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        panic!("{cmd:?} did not finish within {limit:?}");
    };
    output.expect("the process's output")
}

/// Runs the TypeScript client with `args` (its stderr shown), and the JSON summary it printed.
fn ts_client(args: &[&str]) -> Value {
    let script = root().join("tests/mcp/ts_client.mjs");
    let mut cmd = Command::new("node");
    cmd.arg(&script).args(args).current_dir(root()).stdin(Stdio::null()).stderr(Stdio::piped());
    let output = run_bounded(&mut cmd, Duration::from_secs(120));
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "the TypeScript client failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("the client's summary is not JSON ({e}):\n{stdout}"))
}

/// Decides `approval` at the approval desk on the store file `db`, as a person of acme who may.
fn approve_at_the_desk(db: &Path, approval: &str) {
    let store: Arc<dyn Store> = Arc::new(open_redb(db).expect("open the store file"));
    let app = claims::graph().app().store(store).access(RoleAccess::from_json(POLICY).unwrap());
    let alice = Approver::new("alice", ["approver"]).for_tenants(["acme"]);
    let desk = app.acting_as(&alice).approvals(authorizer()).expect("the desk");
    let record = desk.approve(approval, &alice).expect("alice approves the refund");
    assert_eq!(record.status, ApprovalStatus::Approved);
}

#[test]
fn the_typescript_client_gets_a_result_and_a_waiting_answer_then_resumes_after_the_decision() {
    if crate::support::mcp::everything_bin().is_none() {
        return;
    }
    let program = build_example();
    let db = temp_dir("mcp-served").join("claims.redb");
    let (program, db_arg) = (program.to_str().expect("a UTF-8 path"), db.to_str().expect("a UTF-8 path"));

    let first = ts_client(&["start", program, "--store", db_arg]);
    assert_eq!(first["tool"], "refund_claim", "{first}");
    let done = &first["done"];
    assert_eq!((&done["status"], &done["thread"]), (&Value::from("done"), &Value::from("claim-small")), "{first}");
    assert_eq!(done["state"]["outcome"]["credited"], 20, "{first}");
    assert_eq!(done["state"]["customer"], agentflow::access::personal::MASK, "{first}");
    let waiting = &first["waiting"];
    assert_eq!((&waiting["status"], &waiting["thread"]), (&Value::from("waiting"), &Value::from("claim-big")));
    let approval = waiting["waiting_for"][0]["id"].as_str().expect("the approval's id").to_string();
    assert_eq!(waiting["waiting_for"][0]["kind"], "approval", "{first}");
    assert!(first["refused"].as_str().unwrap().contains(&format!("`{approval}` is an approval")), "{first}");
    assert!(first["unknown"].as_str().unwrap().contains("no thread `no-such-thread`"), "{first}");

    // The server process is gone (its client closed stdin): the file is free for the desk.
    approve_at_the_desk(&db, &approval);

    let second = ts_client(&["resume", "claim-big", program, "--store", db_arg]);
    let done = &second["done"];
    assert_eq!((&done["status"], &done["thread"]), (&Value::from("done"), &Value::from("claim-big")), "{second}");
    assert_eq!(done["state"]["outcome"]["result"]["refunded"], 90, "{second}");
    std::fs::remove_dir_all(db.parent().unwrap()).ok();
}

// ------------------------------------------------------------ in this process, over a pipe

mod in_process {
    use std::sync::Arc;

    use agentflow::Store;
    use agentflow::access::{Actor, Operation, RoleAccess};
    use agentflow::mcp::{ServeOptions, serve_io};
    use agentflow::prelude::*;
    use serde::{Deserialize, Serialize};
    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf};

    use crate::support::questions::{DELETE, REFUND, Ran, two_questions};
    use crate::support::stores::store;

    /// A bare MCP client: JSON-RPC lines over one end of a pipe whose other end is served.
    struct Client {
        lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
        write: WriteHalf<DuplexStream>,
        id: u64,
        tool: &'static str,
    }

    impl Client {
        /// Serves `two_questions` for `actor` and completes MCP's handshake with it.
        async fn serving(actor: Actor) -> Client {
            Client::serving_on(store(), ServeOptions::new(actor)).await
        }

        /// Serves `two_questions` on `store` with `options` and completes MCP's handshake.
        async fn serving_on(store: Arc<dyn Store>, options: ServeOptions) -> Client {
            let policy = RoleAccess::new()
                .allow(Operation::Start, "agent")
                .allow(Operation::Resume, "agent")
                .allow(Operation::Answer, "agent")
                .allow(Operation::ReadState, "agent")
                .allow(Operation::ReadState, "viewer");
            let app = two_questions::graph().app().store(store).access(policy);
            let (ours, theirs) = tokio::io::duplex(1 << 16);
            let (read, write) = tokio::io::split(theirs);
            tokio::spawn(serve_io(app, Ran::default(), options, read, write));
            Client::handshake(ours, "two_questions").await
        }

        /// Completes MCP's handshake over `ours`, whose other end is served; calls go to `tool`.
        async fn handshake(ours: DuplexStream, tool: &'static str) -> Client {
            let (read, write) = tokio::io::split(ours);
            let mut client = Client { lines: BufReader::new(read).lines(), write, id: 0, tool };
            let init = client
                .request(
                    "initialize",
                    json!({"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "raw-test-client", "version": "0"}}),
                )
                .await;
            assert_eq!(init["result"]["serverInfo"]["name"], "agentflow", "{init}");
            client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
            client
        }

        async fn send(&mut self, message: Value) {
            self.write.write_all(format!("{message}\n").as_bytes()).await.unwrap();
        }

        async fn request(&mut self, method: &str, params: Value) -> Value {
            self.id += 1;
            let id = self.id;
            self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
            loop {
                let line = tokio::time::timeout(std::time::Duration::from_secs(30), self.lines.next_line())
                    .await
                    .expect("an answer within 30 s")
                    .unwrap()
                    .expect("the server is still there");
                let message: Value = serde_json::from_str(&line).unwrap();
                if message["id"] == id {
                    return message;
                }
            }
        }

        /// Calls the tool with `arguments`: its result.
        async fn call(&mut self, arguments: Value) -> Value {
            let answer = self.request("tools/call", json!({"name": self.tool, "arguments": arguments})).await;
            answer["result"].clone()
        }
    }

    fn text(result: &Value) -> String {
        result["content"].as_array().unwrap().iter().filter_map(|c| c["text"].as_str()).collect::<Vec<_>>().join("\n")
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_resume_that_does_not_name_its_question_is_refused_while_two_wait() {
        let mut client = Client::serving(Actor::new("mcp-agent", ["agent"])).await;
        let started = client.call(json!({"thread": "q-1", "input": {}})).await;
        assert_eq!(started["structuredContent"]["status"], "waiting", "{started}");
        let items = started["structuredContent"]["waiting_for"].as_array().unwrap().clone();
        assert_eq!(items.len(), 2, "{started}");
        let id_of = |asks: &str| -> String {
            let item = items.iter().find(|i| i["asks"]["question"] == asks).expect("the question is listed");
            assert_eq!(item["kind"], "interrupt");
            item["id"].as_str().unwrap().to_string()
        };
        let (refund, delete) = (id_of(REFUND), id_of(DELETE));

        // One bare value for two different questions: refused, naming both; nothing answered.
        let bare = client.call(json!({"thread": "q-1", "resume": true})).await;
        assert_eq!(bare["isError"], true, "{bare}");
        let why = text(&bare);
        assert!(why.contains("waits on 2 questions") && why.contains(&refund) && why.contains(&delete), "{why}");

        // Each answer names its question: the first leaves the other waiting, the second finishes.
        let first = client.call(json!({"thread": "q-1", "resume": {refund.clone(): true}})).await;
        assert_eq!(first["structuredContent"]["status"], "waiting", "{first}");
        let left = first["structuredContent"]["waiting_for"].as_array().unwrap();
        assert_eq!(left.len(), 1, "{first}");
        assert_eq!(left[0]["id"], delete.as_str(), "{first}");
        let second = client.call(json!({"thread": "q-1", "resume": {delete.clone(): false}})).await;
        assert_eq!(second["structuredContent"]["status"], "done", "{second}");
        assert_eq!(second["structuredContent"]["state"], json!({"refunded": true, "deleted": false}), "{second}");
        assert_eq!(second["isError"], false, "{second}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_operation_the_actor_may_not_perform_is_an_error_naming_the_permission() {
        let mut client = Client::serving(Actor::new("vic", ["viewer"])).await;
        let refused = client.call(json!({"thread": "q-2", "input": {}})).await;
        assert_eq!(refused["isError"], true, "{refused}");
        assert_eq!(refused["structuredContent"]["status"], "failed", "{refused}");
        let why = text(&refused);
        assert!(why.contains("`vic` may not start threads") && why.contains("`agent` role"), "{why}");

        // A call that is not the tool's: a protocol error, not a result.
        let other = client.request("tools/call", json!({"name": "other", "arguments": {}})).await;
        assert!(other["error"]["message"].as_str().unwrap().contains("no tool `other`"), "{other}");

        // The tool, as listed.
        let listed = client.request("tools/list", json!({})).await;
        let tools = listed["result"]["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 1, "{listed}");
        assert_eq!(tools[0]["name"], "two_questions");
        assert_eq!(tools[0]["inputSchema"]["required"], json!(["thread"]));
    }

    /// The ids of the questions `result` waits on, by what they ask: (refund, delete).
    fn question_ids(result: &Value) -> (String, String) {
        let items = result["structuredContent"]["waiting_for"].as_array().expect("a waiting answer");
        let id_of = |asks: &str| -> String {
            let item = items.iter().find(|i| i["asks"]["question"] == asks).expect("the question is listed");
            item["id"].as_str().unwrap().to_string()
        };
        (id_of(REFUND), id_of(DELETE))
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_answer_of_the_wrong_shape_leaves_the_thread_waiting_and_says_why() {
        let mut client = Client::serving(Actor::new("mcp-agent", ["agent"])).await;
        let started = client.call(json!({"thread": "q-3", "input": {}})).await;
        let (refund, delete) = question_ids(&started);
        let first = client.call(json!({"thread": "q-3", "resume": {refund.clone(): true}})).await;
        assert_eq!(first["structuredContent"]["status"], "waiting", "{first}");

        // A string where the question asks for a yes or no: an error, and the thread still waits.
        let wrong = client.call(json!({"thread": "q-3", "resume": "notabool"})).await;
        assert_eq!(wrong["isError"], true, "{wrong}");
        let content = &wrong["structuredContent"];
        assert_eq!(content["status"], "waiting", "{wrong}");
        let waits: Vec<&str> =
            content["waiting_for"].as_array().unwrap().iter().filter_map(|i| i["id"].as_str()).collect();
        assert!(waits.contains(&delete.as_str()), "{wrong}");
        let why = content["error"].as_str().unwrap();
        assert!(why.contains("does not have the shape it expects"), "{why}");
        let said = text(&wrong);
        assert!(said.contains("still waiting for an answer to question"), "{said}");
        assert!(!said.contains("Failed {") && !said.contains("failed"), "words, not Rust's types: {said}");

        // A later answer of the right shape finishes it.
        let right = client.call(json!({"thread": "q-3", "resume": {delete.clone(): false}})).await;
        assert_eq!(right["structuredContent"]["status"], "done", "{right}");
        assert_eq!(right["structuredContent"]["state"], json!({"refunded": true, "deleted": false}), "{right}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn another_tenants_thread_reads_as_no_thread_and_its_id_as_taken() {
        let shared = store();
        let acme_actor = Actor::new("acme-agent", ["agent"]).for_tenants(["acme"]);
        let beta_actor = Actor::new("beta-agent", ["agent"]).for_tenants(["beta"]);
        let mut acme = Client::serving_on(shared.clone(), ServeOptions::new(acme_actor)).await;
        let mut beta = Client::serving_on(shared, ServeOptions::new(beta_actor)).await;
        let started = acme.call(json!({"thread": "t1", "input": {}})).await;
        assert_eq!(started["structuredContent"]["status"], "waiting", "{started}");

        // Resuming acme's thread reads exactly as resuming a thread that does not exist.
        let foreign = beta.call(json!({"thread": "t1", "resume": {}})).await;
        let missing = beta.call(json!({"thread": "t9", "resume": {}})).await;
        assert_eq!(foreign["isError"], true, "{foreign}");
        assert_eq!(foreign["structuredContent"]["error"], "no thread `t1`; start it with `input`", "{foreign}");
        assert_eq!(text(&foreign).replace("t1", "T"), text(&missing).replace("t9", "T"));

        // Starting under its id: taken, whose unsaid.
        let taken = beta.call(json!({"thread": "t1", "input": {}})).await;
        assert_eq!(taken["isError"], true, "{taken}");
        let why = taken["structuredContent"]["error"].as_str().unwrap();
        assert_eq!(why, "the thread id `t1` is taken; start the thread under another id");

        // The owner's tenant is told it exists, and how a caller of the tool continues it.
        let own = acme.call(json!({"thread": "t1", "input": {}})).await;
        let why = own["structuredContent"]["error"].as_str().unwrap();
        assert!(why.contains("exists already") && why.contains("call again with `resume`"), "{why}");
        assert!(!why.contains(".resume()"), "{why}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_actor_of_several_tenants_starts_threads_once_the_program_names_the_tenant() {
        let multi = Actor::new("multi", ["agent"]).for_tenants(["acme", "beta"]);
        let mut unnamed = Client::serving(multi.clone()).await;
        let refused = unnamed.call(json!({"thread": "m1", "input": {}})).await;
        assert_eq!(refused["isError"], true, "{refused}");
        let why = text(&refused);
        assert!(why.contains("tenants `acme`, `beta`") && why.contains("`ServeOptions::tenant`"), "{why}");

        let mut named = Client::serving_on(store(), ServeOptions::new(multi).tenant("beta")).await;
        let started = named.call(json!({"thread": "m1", "input": {}})).await;
        assert_eq!(started["structuredContent"]["status"], "waiting", "{started}");
    }

    #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
    pub struct Contact {
        #[state(pii)]
        pub email: String,
        pub visits: u32,
    }

    #[graph(state = Contact, start = visit)]
    pub mod contacts {
        use super::*;

        #[node(goto = [END])]
        async fn visit(c: &Contact) -> Step<Contact> {
            goto!(END, Contact::update().visits(c.visits + 1))
        }
    }

    /// Runs `contacts` to its end as `actor` (who may see personal data when it is a `dpo`):
    /// the state returned, and the kinds of the thread's audit entries with their detail.
    async fn visit_as(actor: Actor) -> (Value, Vec<(String, String, Value)>) {
        let policy = RoleAccess::new().allow(Operation::Start, "agent").allow(Operation::SeePersonalData, "dpo");
        let store = store();
        let app = contacts::graph().app().store(store.clone()).access(policy);
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(theirs);
        tokio::spawn(serve_io(app, (), ServeOptions::new(actor), read, write));
        let mut client = Client::handshake(ours, "contacts").await;
        let done = client.call(json!({"thread": "c-1", "input": {"email": "ada@example.com", "visits": 1}})).await;
        assert_eq!(done["structuredContent"]["status"], "done", "{done}");
        let audit = store.list_audit("c-1").unwrap().into_iter().map(|e| (e.kind, e.actor, e.detail)).collect();
        (done["structuredContent"]["state"].clone(), audit)
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn personal_fields_are_masked_unless_the_actor_may_see_them_and_then_the_read_is_audited() {
        let (masked, audit) = visit_as(Actor::new("agent-1", ["agent"])).await;
        assert_eq!(masked, json!({"email": agentflow::access::personal::MASK, "visits": 2}));
        assert!(audit.iter().all(|(kind, ..)| kind != "personal_data.read"), "{audit:?}");

        let (shown, audit) = visit_as(Actor::new("dora", ["agent", "dpo"])).await;
        assert_eq!(shown, json!({"email": "ada@example.com", "visits": 2}));
        let reads: Vec<_> = audit.iter().filter(|(kind, ..)| kind == "personal_data.read").collect();
        assert_eq!(reads.len(), 1, "{audit:?}");
        assert_eq!(reads[0].1, "dora");
        assert_eq!(reads[0].2, json!({"surface": "mcp", "fields": ["email"]}));
    }
}
