//! HTML: every page is drawn here from plain data, every value escaped. No external script,
//! style or font; the only script is the inbox's live poll.

use std::fmt::Write as _;

use agentflow_store::{ApprovalRecord, AuditEntry, ThreadRecord};
use serde_json::Value;

use crate::core::clock::now_ms;
use crate::server::auth::Session;
use crate::server::inspect::display::{ago, brief, span};
use crate::server::inspect::stuck::Stuck;

mod context;
mod controls;
mod escape;
mod timeline;

pub(crate) use context::Context;
use context::{context_html, graph_html};
use controls::controls_html;
pub(crate) use escape::{esc, url};
pub(crate) use timeline::{Now, Step, Wait};
use timeline::{step_summary, timeline_html};

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

const STYLE: &str = "
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f4f5f8}
header{background:#1d2330;color:#fff;padding:.6em 1.2em;display:flex;gap:1.4em;align-items:center}
header a{color:#cfe0ff;text-decoration:none}header .who{margin-left:auto;color:#ccc}
header form{display:inline;margin:0}main{padding:1em 1.4em;max-width:1200px}
h1{font-size:1.35em}h2{font-size:1.1em;margin:.2em 0}
.card{background:#fff;border:1px solid #d6d9e0;border-radius:6px;padding:1em;margin:0 0 1.2em}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:1em}
pre{background:#f0f2f6;padding:.6em;border-radius:4px;overflow:auto;max-height:22em;margin:.3em 0;font-size:13px}
table{border-collapse:collapse;width:100%}td code{overflow-wrap:anywhere;word-break:break-word}td,th{text-align:left;padding:.3em .5em;border-bottom:1px solid #e2e4ea;vertical-align:top}
.risk{padding:.1em .5em;border-radius:3px;font-weight:600;font-size:.85em}
.risk-irreversible{background:#ffd7d2;color:#8a1500}.risk-external{background:#ffe9c2;color:#7a4a00}
.risk-reversible{background:#dff3dc;color:#1d5b12}.risk-read{background:#e1ecff;color:#123f86}
.meta td:first-child{color:#5a6275;width:11em}
h3{font-size:1em;margin:.7em 0 .35em}.call>h3:first-child,.decision>h3:first-child{margin-top:0}
.actions{display:flex;flex-direction:column;gap:.6em}.actions form{background:#f8f9fb;padding:.6em;border-radius:4px}
.actions form p{margin:.4em 0 0}.approval>.grid+.grid{margin-top:1em;border-top:1px solid #e2e4ea;padding-top:.4em}
summary{cursor:pointer}summary h2,summary h3{display:inline}.graph-box svg{max-width:100%;height:auto}
.timeline td.took,.timeline td.when{white-space:nowrap}.timeline tr.waiting td{background:#fff8dc}
@media(max-width:800px){.grid{grid-template-columns:1fr}}
textarea,input[type=text],input[type=password]{width:100%;box-sizing:border-box;font:13px monospace}
button{padding:.35em .9em;border-radius:4px;border:1px solid #567;background:#2f5fd0;color:#fff;cursor:pointer}
button.reject{background:#b3261e}button.plain{background:#fff;color:#234}
.flash{background:#e3f6e0;border:1px solid #8c8;padding:.6em;border-radius:4px;margin-bottom:1em}
.error{background:#fde7e5;border:1px solid #d88;padding:.8em;border-radius:4px;margin-bottom:1em}
.banner{background:#fff3c4;border:1px solid #d9b500;padding:.5em;border-radius:4px;margin-bottom:1em;display:none}
.muted{color:#5a6275}.current{font-weight:700}
";

/// The frame around every page: header, navigation, who is logged in, and a logout button.
pub(crate) fn layout(title: &str, session: Option<&Session>, body: &str) -> String {
    let who = match session {
        Some(s) => format!(
            "<span class=\"who\">{} ({})</span><form method=\"post\" action=\"/logout\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\"><button class=\"plain\" id=\"logout\">Log out</button></form>",
            esc(&s.user),
            if s.roles.is_empty() { "no roles".to_string() } else { esc(&s.roles.join(", ")) },
            esc(&s.csrf)
        ),
        None => String::new(),
    };
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} · agentflow</title>\
         <meta name=\"viewport\" content=\"width=device-width\"><style>{STYLE}</style></head><body>\
         <header><strong>agentflow</strong><a href=\"/\">Inbox</a><a href=\"/threads\">Threads</a>\
         <a href=\"/stuck\">Stuck</a><a href=\"/audit\">Audit log</a>{who}</header><main>{body}</main></body></html>",
        esc(title)
    )
}

/// The login form (its CSRF token is also in a cookie: double submit).
pub(crate) fn login(csrf: &str, message: Option<&str>) -> String {
    let msg = message.map(|m| format!("<div class=\"error\" id=\"error\">{}</div>", esc(m))).unwrap_or_default();
    layout(
        "Log in",
        None,
        &format!(
            "<h1>Log in</h1>{msg}<div class=\"card\" style=\"max-width:30em\"><form method=\"post\" action=\"/login\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\"><label>Token<br>\
             <input type=\"password\" name=\"token\" id=\"token\" autocomplete=\"current-password\" autofocus></label>\
             <p><button id=\"login\">Log in</button></p></form>\
             <p class=\"muted\">Tokens are given in the server's users file.</p></div>",
            esc(csrf)
        ),
    )
}

/// A page that says what went wrong and what to do.
pub(crate) fn error(title: &str, message: &str, session: Option<&Session>) -> String {
    error_with(title, message, session, "")
}

/// An error page with more below the message (`extra` is HTML).
pub(crate) fn error_with(title: &str, message: &str, session: Option<&Session>, extra: &str) -> String {
    layout(
        title,
        session,
        &format!(
            "<h1>{}</h1><div class=\"error\" id=\"error\">{}</div>{extra}<p><a href=\"/\">Back to the inbox</a></p>",
            esc(title),
            esc(message)
        ),
    )
}

/// The edit form again, with the arguments as sent, under a refused edit's message.
pub(crate) fn edit_again(s: &Session, id: &str, sent: &str) -> String {
    format!(
        "<div class=\"card\"><form method=\"post\" action=\"/approvals/{}/edit\" class=\"edit\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\"><label>Arguments to run with (as sent; fix and send again)<br>\
         <textarea name=\"args\" rows=\"6\" id=\"edit-args-{}\">{}</textarea></label>\
         <p><button id=\"edit-{}\">Approve with these arguments</button></p></form></div>",
        url(id),
        esc(&s.csrf),
        esc(id),
        esc(sent),
        esc(id)
    )
}

/// An approval with what is needed to judge it.
pub(crate) struct ApprovalView {
    /// The record.
    pub(crate) record: ApprovalRecord,
    /// Its thread's context.
    pub(crate) context: Context,
    /// The tool's description and JSON schema, if stored.
    pub(crate) tool: Option<Value>,
}

/// A thread paused for a person: what each of its waiting nodes asks.
pub(crate) struct InterruptView {
    /// The thread.
    pub(crate) thread: ThreadRecord,
    /// What it waits for, in the order stored (several nodes, or several
    /// instances of a map worker, may wait in one step).
    pub(crate) questions: Vec<Question>,
    /// The checkpoint the thread waits at (an answer is bound to it).
    pub(crate) checkpoint: u64,
}

/// One waiting item of a paused thread.
pub(crate) struct Question {
    /// The node.
    pub(crate) node: String,
    /// The map worker instance that asks, if the node runs as several.
    pub(crate) instance: Option<u32>,
    /// `interrupt`, `before`, `after`.
    pub(crate) kind: String,
    /// What it asks.
    pub(crate) payload: Value,
    /// The id of the question an answer answers ([`agentflow::Pending::question_id`]), for one
    /// that takes an answer: the answer is refused if the thread asks another one by then.
    pub(crate) id: Option<String>,
    /// Who answered it already and when (unix millis).
    pub(crate) answered: Option<(String, u64)>,
}

fn risk_badge(risk: &str) -> String {
    format!("<span class=\"risk risk-{0}\">{0}</span>", esc(risk))
}

fn time_left(a: &ApprovalRecord, now: u64) -> String {
    if a.expires_at <= now {
        "expired".to_string()
    } else {
        format!("{} left (expires {})", span(a.expires_at - now), ago(a.expires_at, now))
    }
}

/// One approval card: the call's arguments and facts beside the decision forms, the thread's
/// context and graph below them (the graph folds away; `graph_open` unfolds it).
fn approval_card(v: &ApprovalView, s: &Session, now: u64, graph_open: bool) -> String {
    let a = &v.record;
    let args: Value = serde_json::from_str(&a.args).unwrap_or(Value::String(a.args.clone()));
    let id = esc(&a.id);
    let tool_desc = v.tool.as_ref().and_then(|t| t["description"].as_str()).unwrap_or("");
    let schema = v.tool.as_ref().map(|t| pretty(&t["parameters"]));
    let mut out = format!(
        "<section class=\"card approval\" id=\"approval-{id}\" data-approval=\"{id}\"><h2>{} {} <span class=\"muted\">· {}</span></h2>",
        esc(&a.tool),
        risk_badge(&a.risk),
        esc(a.status.as_str())
    );
    if !tool_desc.is_empty() {
        let _ = write!(out, "<p class=\"muted\">{}</p>", esc(tool_desc));
    }
    let _ = write!(
        out,
        "<div class=\"grid\"><div class=\"call\"><h3>Arguments</h3><pre class=\"args\" id=\"args-{id}\">{}</pre>\
         <table class=\"meta\"><tr><td>Argument hash</td><td><code class=\"hash\">{}</code></td></tr>\
         <tr><td>Requested by</td><td class=\"requester\">{}</td></tr><tr><td>Reason</td><td>{}</td></tr>\
         <tr><td>Requested</td><td>{}</td></tr><tr><td>Time left</td><td class=\"expiry\">{}</td></tr>\
         <tr><td>Thread</td><td><a href=\"/threads/{}\">{}</a> at node <code>{}</code></td></tr>\
         <tr><td>Approval id</td><td><code>{id}</code></td></tr></table>",
        esc(&pretty(&args)),
        esc(&a.args_hash),
        esc(&a.requester),
        esc(&a.reason),
        ago(a.created_at, now),
        esc(&time_left(a, now)),
        url(&a.thread),
        esc(&a.thread),
        esc(&a.node),
    );
    if let Some(schema) = &schema {
        let _ =
            write!(out, "<details><summary>The tool's argument schema</summary><pre>{}</pre></details>", esc(schema));
    }
    let _ = write!(out, "</div><div class=\"decision\"><h3>Decision</h3>{}</div></div>", decision_forms(a, &args, s));
    let _ = write!(
        out,
        "<div class=\"grid\"><div class=\"context\">{}</div><details class=\"graph-box\"{}>\
         <summary><h3>Graph</h3> <span class=\"muted\">where the thread stands</span></summary>{}</details></div>",
        context_html(&v.context),
        if graph_open { " open" } else { "" },
        graph_html(v.context.description.as_ref(), std::slice::from_ref(&a.node))
    );
    out.push_str("</section>");
    out
}

/// The Approve, Reject and Edit forms of a pending approval, the decisions first; for one whose
/// call was cut off, how to settle it.
fn decision_forms(a: &ApprovalRecord, args: &Value, s: &Session) -> String {
    let id = esc(&a.id);
    if a.status != agentflow_store::ApprovalStatus::Pending {
        return format!(
            "<p class=\"muted\">This call's outcome is unknown (it started and was cut off); settle it with \
             <code>agentflow settle {id}</code>.</p>"
        );
    }
    let uid = url(&a.id);
    let csrf = esc(&s.csrf);
    format!(
        "<div class=\"actions\">\
         <form method=\"post\" action=\"/approvals/{uid}/approve\" class=\"approve\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <label>Conditions (optional; JSON or a note, recorded and handed to the model)<br>\
         <textarea name=\"conditions\" rows=\"2\" id=\"conditions-{id}\"></textarea></label>\
         <p><button id=\"approve-{id}\">Approve</button></p></form>\
         <form method=\"post\" action=\"/approvals/{uid}/reject\" class=\"reject\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <label>Reason (required; handed to the model)<br><input type=\"text\" name=\"reason\" id=\"reason-{id}\" required></label>\
         <p><button class=\"reject\" id=\"reject-{id}\">Reject</button></p></form>\
         <form method=\"post\" action=\"/approvals/{uid}/edit\" class=\"edit\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <label>Arguments to run with (checked against the tool's schema)<br>\
         <textarea name=\"args\" rows=\"6\" id=\"edit-args-{id}\">{}</textarea></label>\
         <p><button id=\"edit-{id}\">Approve with these arguments</button></p></form></div>",
        esc(&pretty(args)),
    )
}

/// The live poll: reloads when `/live` reports another version, unless a form is being
/// filled in (then a banner says so).
fn live_script(version: &str) -> String {
    format!(
        "<div class=\"banner\" id=\"changed\">Something changed elsewhere (a decision, a new request). \
         <a href=\"/\">Reload</a></div><script>(function(){{\
         var v={v:?},typing=false;\
         document.addEventListener('input',function(){{typing=true;}});\
         function poll(){{fetch('/live',{{credentials:'same-origin',cache:'no-store'}}).then(function(r){{return r.ok?r.json():null;}})\
         .then(function(j){{if(j&&j.version!==v){{if(typing){{document.getElementById('changed').style.display='block';}}\
         else{{location.reload();}}}}}}).catch(function(){{}}).finally(function(){{setTimeout(poll,2000);}});}}\
         setTimeout(poll,2000);}})();</script>",
        v = version
    )
}

/// The inbox.
pub(crate) fn inbox(
    s: &Session,
    approvals: &[ApprovalView],
    interrupts: &[InterruptView],
    stuck: &[Stuck],
    version: &str,
    flash: Option<&str>,
) -> String {
    let now = now_ms();
    let mut body = String::new();
    if let Some(f) = flash {
        let _ = write!(body, "<div class=\"flash\" id=\"flash\">{}</div>", esc(f));
    }
    body.push_str(&live_script(version));
    let asked: usize = interrupts.iter().map(|i| i.questions.len()).sum();
    let _ = write!(
        body,
        "<h1 data-version=\"{}\">Inbox: {} approval{}, {} interrupt{}</h1>",
        esc(version),
        approvals.len(),
        if approvals.len() == 1 { "" } else { "s" },
        asked,
        if asked == 1 { "" } else { "s" }
    );
    if approvals.is_empty() && interrupts.is_empty() {
        body.push_str("<p class=\"muted\" id=\"empty\">Nothing waits for a decision.</p>");
    }
    // The first card's graph is unfolded; the others' fold away, so the next decision is near.
    for (n, v) in approvals.iter().enumerate() {
        body.push_str(&approval_card(v, s, now, n == 0));
    }
    if !interrupts.is_empty() {
        body.push_str("<section class=\"card\" id=\"interrupts\"><h2>Interrupts</h2><p class=\"muted\">A paused node waits for input. Answer with the JSON value the node expects; the app's next resume of the thread continues with it (a value of the wrong shape fails the node there). Breakpoints are continued from the app.</p>");
        for i in interrupts {
            body.push_str(&interrupt_card(i, s, now));
        }
        body.push_str("</section>");
    }
    if !stuck.is_empty() {
        body.push_str("<section class=\"card\" id=\"stuck\"><h2>Stuck threads</h2>");
        body.push_str(&stuck_table(stuck, now));
        body.push_str("</section>");
    }
    layout("Inbox", Some(s), &body)
}

/// One paused thread: what each waiting node asks, each question with its own answer form (or
/// who answered it); the thread goes on once each has its answer.
fn interrupt_card(i: &InterruptView, s: &Session, now: u64) -> String {
    let tid = url(&i.thread.id);
    let mut out = format!(
        "<div class=\"interrupt\" id=\"interrupt-{id}\"><h3><a href=\"/threads/{tid}\">{id}</a> \
         <span class=\"muted\">checkpoint {seq} · {since}</span></h3>",
        id = esc(&i.thread.id),
        seq = i.checkpoint,
        since = ago(i.thread.updated_at, now),
    );
    let asked = i.questions.iter().filter(|q| q.id.is_some()).count();
    for (n, q) in i.questions.iter().enumerate() {
        let instance = q.instance.map(|n| format!(" (instance {n})")).unwrap_or_default();
        let _ = write!(
            out,
            "<p class=\"question\">at <code>{node}</code>{instance} <span class=\"muted\">{kind}</span></p>\
             <pre class=\"payload\">{payload}</pre>",
            node = esc(&q.node),
            kind = esc(&q.kind),
            payload = esc(&serde_json::to_string_pretty(&q.payload).unwrap_or_default()),
        );
        // One form per question: an element id of its own when the step asks several.
        let id = if asked > 1 { format!("{}-{n}", i.thread.id) } else { i.thread.id.clone() };
        match (&q.id, &q.answered) {
            (Some(_), Some((by, at))) => {
                let _ = write!(
                    out,
                    "<p class=\"answered\">Answered by <strong>{}</strong> {}.</p>",
                    esc(by),
                    ago(*at, now)
                );
            }
            (Some(question), None) => {
                let _ = write!(
                    out,
                    "<form method=\"post\" action=\"/threads/{tid}/answer\" class=\"answer\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
                     <input type=\"hidden\" name=\"checkpoint\" value=\"{seq}\">\
                     <input type=\"hidden\" name=\"question\" value=\"{question}\">\
                     <label>Answer (JSON)<textarea name=\"value\" rows=\"3\" id=\"answer-value-{id}\"></textarea></label>\
                     <p><button id=\"answer-{id}\">Answer</button></p></form>",
                    csrf = esc(&s.csrf),
                    seq = i.checkpoint,
                    question = esc(question),
                    id = esc(&id),
                );
            }
            (None, _) => {}
        }
    }
    let open = i.questions.iter().filter(|q| q.id.is_some() && q.answered.is_none()).count();
    if asked == 0 {
        out.push_str("<p class=\"muted\">A breakpoint: continue it from the app (resume).</p>");
    } else if open == 0 {
        out.push_str("<p class=\"answered\">Answered; waiting for the app to resume the thread.</p>");
    } else if asked > 1 {
        out.push_str(
            "<p class=\"muted\">Each question takes its own answer; the thread goes on once each has one.</p>",
        );
    }
    out.push_str("</div>");
    out
}

fn stuck_table(stuck: &[Stuck], now: u64) -> String {
    let mut out = String::from("<table><tr><th>Thread</th><th>Kind</th><th>Since</th><th>Detail</th></tr>");
    for st in stuck {
        let _ = write!(
            out,
            "<tr><td><a href=\"/threads/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            url(&st.thread),
            esc(&st.thread),
            st.reason,
            ago(st.since, now),
            esc(&st.detail)
        );
    }
    out.push_str("</table>");
    out
}

/// The stuck threads page.
pub(crate) fn stuck(s: &Session, stuck: &[Stuck], waiting: u64, overdue: u64) -> String {
    let body = format!(
        "<h1>Stuck threads</h1><p class=\"muted\">Waiting on a person for {} or more, running with an expired lease, \
         or with a timer more than {} overdue (as <code>agentflow stuck</code>).</p>{}",
        span(waiting),
        span(overdue),
        if stuck.is_empty() { "<p id=\"empty\">None.</p>".to_string() } else { stuck_table(stuck, now_ms()) }
    );
    layout("Stuck threads", Some(s), &body)
}

/// The thread list.
pub(crate) fn threads(s: &Session, list: &[(ThreadRecord, Option<String>)]) -> String {
    let now = now_ms();
    let mut body = String::from(
        "<h1>Threads</h1><table id=\"threads\"><tr><th>Thread</th><th>Status</th><th>Graph</th><th>Owner</th><th>Updated</th><th>Detail</th></tr>",
    );
    for (t, graph) in list {
        let _ = write!(
            body,
            "<tr><td><a href=\"/threads/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            url(&t.id),
            esc(&t.id),
            esc(t.status.as_str()),
            esc(graph.as_deref().unwrap_or(&t.graph_fingerprint)),
            esc(&t.owner),
            ago(t.updated_at, now),
            esc(&t.detail)
        );
    }
    body.push_str("</table>");
    layout("Threads", Some(s), &body)
}

/// A thread: status, timeline, state and graph, approvals, audit.
pub(crate) fn thread(
    s: &Session,
    t: &ThreadRecord,
    context: &Context,
    steps: &[Step],
    waiting: &[Now],
    approvals: &[ApprovalRecord],
    audit: &[AuditEntry],
) -> String {
    let now = now_ms();
    // What it is and what happened first; its state and graph below.
    let mut body = format!(
        "<h1>Thread <code>{}</code></h1><div class=\"card\"><table class=\"meta\">\
         <tr><td>Status</td><td id=\"status\">{}</td></tr><tr><td>Detail</td><td>{}</td></tr><tr><td>Owner</td><td>{}</td></tr>\
         <tr><td>Updated</td><td>{}</td></tr><tr><td>Next</td><td>{}</td></tr></table></div>\
         <div class=\"card\"><h2>Timeline</h2>{}</div>\
         <div class=\"grid\"><div class=\"card\">{}</div><div class=\"card\"><details class=\"graph-box\" open>\
         <summary><h2>Graph</h2></summary>{}</details></div></div>",
        esc(&t.id),
        esc(t.status.as_str()),
        esc(&t.detail),
        esc(&t.owner),
        ago(t.updated_at, now),
        esc(&if context.next.is_empty() { "-".to_string() } else { context.next.join(", ") }),
        timeline_html(&t.id, steps, waiting, now),
        context_html(context),
        graph_html(context.description.as_ref(), &context.next)
    );
    if !approvals.is_empty() {
        body.push_str("<div class=\"card\"><h2>Approvals</h2><table id=\"approvals\"><tr><th>Id</th><th>Tool</th><th>Status</th><th>Arguments</th><th>Decided by</th><th>Note</th></tr>");
        for a in approvals {
            let _ = write!(
                body,
                "<tr><td><code>{}</code></td><td>{} {}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                esc(&a.id),
                esc(&a.tool),
                risk_badge(&a.risk),
                esc(a.status.as_str()),
                esc(&a.args),
                esc(a.decided_by.as_deref().unwrap_or("-")),
                esc(a.decision_note.as_deref().unwrap_or(""))
            );
        }
        body.push_str("</table></div>");
    }
    body.push_str(&controls_html(s, t, context.seq));
    body.push_str("<div class=\"card\"><h2>Audit</h2>");
    body.push_str(&audit_table(audit, false));
    body.push_str("</div>");
    layout(&format!("Thread {}", t.id), Some(s), &body)
}

/// The state at one checkpoint.
pub(crate) fn checkpoint(
    s: &Session,
    thread: &str,
    seq: u64,
    state: &Value,
    warnings: &[String],
    step: Option<&Step>,
) -> String {
    let mut body = format!(
        "<h1>Thread <a href=\"/threads/{}\"><code>{}</code></a> at checkpoint {seq}</h1>",
        url(thread),
        esc(thread)
    );
    if let Some(st) = step {
        let _ = write!(
            body,
            "<p>Step {}, written by <code>{}</code> after {}; next: {}.</p>",
            st.step,
            esc(&st.source),
            esc(&if st.nodes.is_empty() { "-".to_string() } else { st.nodes.join(", ") }),
            esc(&if st.next.is_empty() { "-".to_string() } else { st.next.join(", ") })
        );
        let summary = step_summary(st);
        if !summary.is_empty() {
            let _ = write!(body, "<p id=\"took\">{summary}</p>");
        }
    }
    for w in warnings {
        let _ = write!(body, "<p class=\"muted\">Note: {}</p>", esc(w));
    }
    let _ = write!(body, "<div class=\"card\"><pre id=\"state\">{}</pre></div>", esc(&pretty(state)));
    layout(&format!("{thread} at {seq}"), Some(s), &body)
}

fn audit_table(entries: &[AuditEntry], with_thread: bool) -> String {
    let now = now_ms();
    let mut out = String::from("<table class=\"audit\"><tr>");
    if with_thread {
        out.push_str("<th>Thread</th>");
    }
    out.push_str("<th>When</th><th>Actor</th><th>Kind</th><th>Detail</th></tr>");
    for e in entries {
        out.push_str("<tr>");
        if with_thread {
            let _ = write!(out, "<td><a href=\"/threads/{}\">{}</a></td>", url(&e.thread), esc(&e.thread));
        }
        let _ = write!(
            out,
            "<td>{}</td><td class=\"actor\">{}</td><td>{}</td><td><code>{}</code></td></tr>",
            ago(e.at, now),
            esc(&e.actor),
            esc(&e.kind),
            esc(&brief(&e.detail, 300))
        );
    }
    out.push_str("</table>");
    out
}

/// The audit log of every thread, newest first.
pub(crate) fn audit(s: &Session, entries: &[AuditEntry]) -> String {
    layout("Audit log", Some(s), &format!("<h1>Audit log</h1><div class=\"card\">{}</div>", audit_table(entries, true)))
}
