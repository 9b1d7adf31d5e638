//! A redb file held by a running agentflow server: the file is open in one process at a time,
//! so instead of failing, `pending`, `show`, `tail`, `approve`, `reject`, `edit` and `schedules`
//! ask the server through the Unix socket its sidecar names (`<file>.owner`, see
//! [`agentflow_store::redb_owner`]). The server acts as the person its users file maps this OS
//! user to (`"os_user"`), checks that person's roles and tenants, and records decisions in
//! their name; `--as`, `--role`, `--tenant`, `--access` and `--roles-for` are the server's to
//! decide then. Every other command needs the file itself and fails with exit code 3, naming
//! the server.
//!
//! Each request is HTTP/1.1 on its own connection to the socket, on the server's JSON API
//! (`GET /api/approvals`, `GET /api/threads/{thread}`, `.../state`, `.../pending`,
//! `POST /api/threads/{thread}/approvals/{id}/approve|reject|edit`, `GET /api/schedules`,
//! `DELETE /api/schedules/{id}`); `--json` prints its answers as they are. `tail` reads the stream route (`GET /api/threads/{thread}/stream`) as
//! its events come ([`tail`]).
//!
//! A server is asked only when the sidecar, the socket and the process answering on it are all
//! the store file's owner's, and that process is the one the sidecar names ([`trust`]);
//! otherwise the command fails with exit code 3 saying what did not match, and nothing is sent.

use std::path::Path;
use std::time::Duration;

use agentflow::server::inspect::display::{ago, brief};
use agentflow_store::redb_owner::{self, Owner};
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

mod schedules;
mod tail;
mod trust;

use crate::access::AccessArgs;
use crate::decide::{DecideArgs, Kind};
use crate::out::{self, now_ms};
use crate::{Command, Failure, Outcome, code};

/// What the commands that go through a server's socket are, for messages.
pub const THROUGH_SOCKET: &str =
    "`agentflow pending`, `show`, `tail`, `approve`, `reject`, `edit` and `schedules` reach it through its socket";
/// The response header naming the person the server acted as (percent-encoded UTF-8).
const PERSON_HEADER: &str = agentflow::server::PERSON_HEADER;
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest answer read.
const MAX_ANSWER: usize = 64 << 20;

/// Runs `command` through the server holding redb file `spec`, if its sidecar names a live one
/// of the file's owner; else fails with `busy` (what opening the file said), with why a sidecar
/// of another account is not believed.
pub fn held(spec: &str, command: &Command, who: &AccessArgs, json: bool, busy: Failure) -> Outcome {
    let file = Path::new(spec);
    let (Some(owner), Some(uid)) = (redb_owner::read(file), redb_owner::file_uid(file)) else {
        return Err(match trust::untrusted_sidecar(file) {
            Some(why) => Failure::new(busy.code, format!("{}; {why}", busy.message)),
            None => busy,
        });
    };
    let server = Server { owner, uid, spec: spec.to_string() };
    let decide = |kind, args: &DecideArgs| server.decide(kind, args, who, json);
    match command {
        Command::Pending => server.pending(json),
        Command::Show { thread } => server.show(thread, json),
        Command::Tail(args) => server.tail(args, json),
        Command::Schedules(args) => server.schedules(args, json),
        Command::Approve(args) => decide(Kind::Approve, args),
        Command::Reject(args) => decide(Kind::Reject, args),
        Command::Edit(args) => decide(Kind::Edit, args),
        _ => Err(Failure::new(
            code::BUSY,
            format!(
                "{spec}: the store is held by the agentflow server {}, which owns the file while it runs; {THROUGH_SOCKET}, \
                 and programs through its HTTP API; this command needs the file itself: stop the server and run it again",
                server.owner.describe()
            ),
        )),
    }
}

/// The server holding the file, as its sidecar names it.
struct Server {
    owner: Owner,
    /// The uid of the store file's owner: the socket's and the server's must be it.
    uid: u32,
    spec: String,
}

/// An answer of the server.
struct Answer {
    status: StatusCode,
    /// The person the server acted as.
    person: Option<String>,
    body: Value,
}

impl Server {
    /// `pending`, as the server's `GET /api/approvals` answers it.
    fn pending(&self, as_json: bool) -> Outcome {
        let answer = self.get("/api/approvals")?;
        self.acting_as(&answer);
        let body = self.ok(answer)?;
        if as_json {
            return out::json(&body);
        }
        let now = now_ms();
        let approvals = body["approvals"].as_array().cloned().unwrap_or_default();
        let interrupts = body["interrupts"].as_array().cloned().unwrap_or_default();
        let mut rows: Vec<Vec<String>> = approvals
            .iter()
            .map(|a| {
                let status = text(&a["status"]);
                let what = if status == "OUTCOME_UNKNOWN" { "outcome_unknown" } else { "approval" };
                let when = match (status.as_str(), a["expires_at"].as_u64()) {
                    ("PENDING", Some(at)) => format!("expires {}", ago(at, now)),
                    _ => "-".to_string(),
                };
                vec![
                    what.to_string(),
                    text(&a["id"]),
                    text(&a["thread"]),
                    format!("{} ({})", text(&a["tool"]), text(&a["risk"])),
                    text(&a["requester"]),
                    when,
                    brief(&a["args"], 60),
                ]
            })
            .collect();
        // The thread's owner is who an interrupt waits for, as `pending` prints locally.
        let mut owners = std::collections::BTreeMap::<String, String>::new();
        for p in &interrupts {
            let thread = text(&p["thread"]);
            if !owners.contains_key(&thread) {
                let answer = self.get(&format!("/api/threads/{}", segment(&thread)))?;
                let owner = if answer.status.is_success() { text(&answer.body["owner"]) } else { "-".to_string() };
                owners.insert(thread.clone(), owner);
            }
            rows.push(vec![
                text(&p["kind"]),
                text(&p["node"]),
                thread.clone(),
                "-".into(),
                owners.get(&thread).cloned().unwrap_or_default(),
                format!("since {}", ago(p["since"].as_u64().unwrap_or(now), now)),
                brief(&p["payload"], 60),
            ]);
        }
        out::table(&["KIND", "ID/NODE", "THREAD", "TOOL", "REQUESTER", "WHEN", "ARGS/PAYLOAD"], &rows)
    }

    /// `show`: the thread, its state and what it waits for, from three of the server's routes.
    fn show(&self, thread: &str, as_json: bool) -> Outcome {
        let base = format!("/api/threads/{}", segment(thread));
        let answer = self.get(&base)?;
        self.acting_as(&answer);
        if answer.status == StatusCode::NOT_FOUND {
            // In the tool's terms, as `show` says it of the file (a thread of another tenant is
            // not found either); `agentflow threads` needs the file, so it waits for the server.
            return Err(Failure::not_found(format!(
                "no thread `{thread}` in the store (none you may see); `agentflow pending` lists the threads waiting \
                 for a person, and `agentflow threads` lists them all once the server {} stops",
                self.owner.describe()
            )));
        }
        let record = self.ok(answer)?;
        let state = self.get(&format!("{base}/state")).and_then(|a| self.ok(a))?;
        let waits = self.get(&format!("{base}/pending")).and_then(|a| self.ok(a))?;
        if as_json {
            return out::json(&json!({ "thread": record, "state": state, "waits": waits }));
        }
        let now = now_ms();
        let detail = text(&record["detail"]);
        outln!("thread:    {}", text(&record["id"]))?;
        outln!(
            "status:    {}{}",
            text(&record["status"]),
            if detail.is_empty() { String::new() } else { format!(" ({detail})") }
        )?;
        let graph = record["graph"].as_str().unwrap_or("-");
        outln!("graph:     {graph} ({})", text(&record["fingerprint"]))?;
        outln!("owner:     {}", text(&record["owner"]))?;
        outln!("updated:   {}", record["updated_at"].as_u64().map_or("-".to_string(), |at| ago(at, now)))?;
        outln!("seq:       {}", state["seq"].as_u64().map_or("-".to_string(), |s| s.to_string()))?;
        let next: Vec<String> = state["next"].as_array().into_iter().flatten().map(text).collect();
        outln!("next:      {}", if next.is_empty() { "-".to_string() } else { next.join(", ") })?;
        for p in waits["pending"].as_array().into_iter().flatten() {
            outln!("waits for: {} at `{}`: {}", text(&p["kind"]), text(&p["node"]), brief(&p["payload"], 100))?;
            if let Some(question) = p["question"].as_str() {
                outln!(
                    "question:  {question} (`answer --question` refuses an answer if the thread asks another by then)"
                )?;
            }
        }
        for a in waits["approvals"].as_array().into_iter().flatten() {
            outln!(
                "approval:  {} {} `{}` ({}) requested by {}: {}",
                text(&a["id"]),
                text(&a["status"]),
                text(&a["tool"]),
                text(&a["risk"]),
                text(&a["requester"]),
                brief(&a["args"], 80)
            )?;
        }
        for w in state["warnings"].as_array().into_iter().flatten() {
            outln!("warning:   {}", text(w))?;
        }
        outln!(
            "note:      the `timer`, `limits` and `used` lines are not shown through the server; `agentflow show` \
             prints them when no server holds the file"
        )?;
        outln!("state:")?;
        out::write_block(&format!("{}\n", serde_json::to_string_pretty(&state["state"]).unwrap_or_default()))
    }

    /// `approve`, `reject`, `edit`: finds the approval's thread among the waiting approvals,
    /// then decides it as the person the server maps this OS user to.
    fn decide(&self, kind: Kind, args: &DecideArgs, who: &AccessArgs, as_json: bool) -> Outcome {
        let (verb, body) = match kind {
            Kind::Approve => match &args.conditions {
                Some(c) => ("approve", json!({ "conditions": out::parse_json("--conditions", c)? })),
                None => ("approve", json!({})),
            },
            Kind::Reject => {
                let reason = args.reason.as_deref().ok_or_else(|| Failure::usage("reject needs --reason"))?;
                ("reject", json!({ "reason": reason }))
            }
            Kind::Edit => {
                let text = args.args.as_deref().ok_or_else(|| Failure::usage("edit needs --args JSON"))?;
                ("edit", json!({ "args": out::parse_json("--args", text)? }))
            }
            Kind::Cancel | Kind::Settle => return Err(self.needs_the_file()),
        };
        let id = args.approval.as_str();
        let waiting = self.get("/api/approvals")?;
        let person = waiting.person.clone();
        // The decision is recorded in the name of the server's person: not another one's.
        if let (Some(asked), Some(person)) = (&who.user, &person)
            && asked != person
        {
            return Err(Failure::usage(format!(
                "the store is held by the agentflow server {}, which acts as `{person}` for this OS user (its users \
                 file maps it so) and would record the decision in that name, not `{asked}`; drop --as (and \
                 AGENTFLOW_AS), or run the command as the OS user of `{asked}`",
                self.owner.describe()
            )));
        }
        let waiting = self.ok(waiting)?;
        let Some(thread) =
            waiting["approvals"].as_array().into_iter().flatten().find(|a| a["id"] == id).map(|a| text(&a["thread"]))
        else {
            return Err(Failure::not_found(format!(
                "the agentflow server {} has no approval `{id}` waiting for a decision (decided already, or no such \
                 approval among the threads you may see); `agentflow pending` lists the waiting ones",
                self.owner.describe()
            )));
        };
        let path = format!("/api/threads/{}/approvals/{}/{verb}", segment(&thread), segment(id));
        let answer = self.call(Method::POST, &path, Some(body))?;
        self.acting_as(&answer);
        let person = answer.person.clone().or(person).unwrap_or_else(|| "-".to_string());
        let record = self.ok(answer)?;
        if as_json {
            return out::json(&record);
        }
        let status = record["status"].as_str().map_or_else(|| "decided".to_string(), str::to_string);
        if record["waiting"] == true {
            outln!(
                "approval {id} is still {status}: sign-off by {person} recorded; another approver must approve the same \
                 arguments with the same conditions"
            )?;
        } else {
            outln!("approval {id} is {status} (by {person}); {}", self.who_goes_on(&thread))?;
        }
        Ok(())
    }

    /// What makes the thread of a decided approval go on, as `approve` says it locally: a
    /// worker of the server when the run of its top thread is in the run queue, else the app's
    /// resume of it.
    fn who_goes_on(&self, thread: &str) -> String {
        // A subgraph child goes on with its parent: the top thread is the one resumed or queued.
        let mut top = thread.to_string();
        let mut view = Value::Null;
        for _ in 0..64 {
            match self.get(&format!("/api/threads/{}", segment(&top))) {
                Ok(a) if a.status.is_success() => view = a.body,
                _ => return format!("thread {top} goes on as its run is set up (the server did not say more)"),
            }
            match view["parent"].as_str() {
                Some(parent) => top = parent.to_string(),
                None => break,
            }
        }
        if view["run"].is_object() {
            format!("a worker resumes thread {top} by itself (its run is in the run queue); nothing to resume")
        } else {
            format!("resume thread {top} to go on (it is not in the run queue, so no worker resumes it)")
        }
    }

    /// Says on standard error who answered and as whom.
    fn acting_as(&self, answer: &Answer) {
        let person = answer.person.as_deref().map_or_else(String::new, |p| format!(" as `{p}`"));
        eprintln!(
            "agentflow: {} is held by the agentflow server {}; answered through its socket{person}",
            self.spec,
            self.owner.describe()
        );
    }

    fn needs_the_file(&self) -> Failure {
        Failure::new(
            code::BUSY,
            format!(
                "{}: the store is held by the agentflow server {}; {THROUGH_SOCKET}; this command needs the file \
                 itself: stop the server and run it again",
                self.spec,
                self.owner.describe()
            ),
        )
    }

    fn get(&self, path: &str) -> Result<Answer, Failure> {
        self.call(Method::GET, path, None)
    }

    /// The body of a successful answer; a refusal as the failure with its exit code.
    fn ok(&self, answer: Answer) -> Result<Value, Failure> {
        if answer.status.is_success() {
            return Ok(answer.body);
        }
        let message = answer.body["error"]["message"]
            .as_str()
            .map_or_else(|| format!("it answered {}", answer.status), str::to_string);
        let exit = match answer.status {
            StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => code::USAGE,
            s if s.is_server_error() => code::STORE,
            _ => code::NOT_FOUND,
        };
        Err(Failure::new(exit, format!("the agentflow server {}: {message}", self.owner.describe())))
    }

    /// The refusal of a server that is not the one the sidecar names, or not the store file
    /// owner's: `why` says what did not match.
    fn untrusted(&self, why: &str) -> Failure {
        Failure::new(
            code::BUSY,
            format!(
                "{}: the store is held by a process that the sidecar names as the agentflow server {}, but {why}",
                self.spec,
                self.owner.describe()
            ),
        )
    }

    /// A runtime for a client of the server's socket, once the socket is checked ([`trust`]).
    pub(super) fn client_runtime(&self) -> Result<tokio::runtime::Runtime, Failure> {
        trust::check_socket(&self.owner, self.uid).map_err(|why| self.untrusted(&why))?;
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::store(format!("cannot start the client for the server's socket: {e}")))
    }

    /// The failure of a socket that did not answer (`e` says how).
    pub(super) fn unanswered(&self, e: &str) -> Failure {
        Failure::new(
            code::BUSY,
            format!(
                "{}: the store is held by the agentflow server {}, and its socket did not answer ({e}); try again, or \
                 stop the server to open the file",
                self.spec,
                self.owner.describe()
            ),
        )
    }

    /// One request on a connection of its own, sent only once the socket and the process on
    /// its other end are checked ([`trust`]).
    fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<Answer, Failure> {
        let runtime = self.client_runtime()?;
        let unanswered = |e: String| self.unanswered(&e);
        runtime.block_on(async {
            let stream =
                tokio::net::UnixStream::connect(&self.owner.socket).await.map_err(|e| unanswered(e.to_string()))?;
            trust::check_peer(&stream, &self.owner, self.uid).map_err(|why| self.untrusted(&why))?;
            tokio::time::timeout(REQUEST_TIMEOUT, request(stream, method, path, body))
                .await
                .unwrap_or_else(|_| Err(format!("no answer in {} s", REQUEST_TIMEOUT.as_secs())))
                .map_err(unanswered)
        })
    }
}

async fn request(
    stream: tokio::net::UnixStream,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Result<Answer, String> {
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    let driver = tokio::spawn(connection);
    let mut request = Request::builder().method(method).uri(path).header(header::HOST, "localhost");
    let body = match body {
        Some(value) => {
            request = request.header(header::CONTENT_TYPE, "application/json");
            Body::from(value.to_string())
        }
        None => Body::empty(),
    };
    let request = request.body(body).map_err(|e| e.to_string())?;
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    let status = response.status();
    let person = response.headers().get(PERSON_HEADER).and_then(|v| v.to_str().ok()).and_then(percent_decode);
    let bytes = axum::body::to_bytes(Body::new(response.into_body()), MAX_ANSWER).await.map_err(|e| e.to_string())?;
    driver.abort();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).map_err(|e| format!("its answer is not JSON: {e}"))?
    };
    Ok(Answer { status, person, body })
}

/// A JSON value as text: a string as itself, anything else as JSON.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `s` as one path segment: every byte but the unreserved ones percent-encoded.
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Percent-encoded UTF-8 decoded; `None` for anything else.
fn percent_decode(s: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(s.len());
    let mut rest = s.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = tail.get(..2)?;
            bytes.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_encoded_and_names_decoded() {
        assert_eq!(segment("t-1.a_b~"), "t-1.a_b~");
        assert_eq!(segment("a/b c?"), "a%2Fb%20c%3F");
        assert_eq!(segment("é"), "%C3%A9");
        assert_eq!(percent_decode("al%C3%A9x").as_deref(), Some("aléx"));
        assert_eq!(percent_decode("bad%4"), None);
        assert_eq!(percent_decode("%FF"), None);
    }
}
