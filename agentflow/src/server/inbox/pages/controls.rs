//! The thread page's controls: resume, cancel or pause the thread's queued run, fork it at a
//! checkpoint. Each is a CSRF-carrying form; the server checks the user's access again.

use agentflow_store::ThreadRecord;

use super::{Session, esc, url};

/// The controls card of thread `t`, the newest checkpoint offered as the fork's default.
pub(crate) fn controls_html(s: &Session, t: &ThreadRecord, latest: Option<u64>) -> String {
    let uid = url(&t.id);
    let csrf = esc(&s.csrf);
    let button = |action: &str, label: &str, note: &str| {
        format!(
            "<form method=\"post\" action=\"/threads/{uid}/{action}\" class=\"{action}\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <button id=\"{action}\">{label}</button> <span class=\"muted\">{note}</span></form>"
        )
    };
    format!(
        "<div class=\"card\" id=\"controls\"><h2>Controls</h2><div class=\"actions\">{}{}{}\
         <form method=\"post\" action=\"/threads/{uid}/fork\" class=\"fork\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <label>Fork at checkpoint <input name=\"seq\" inputmode=\"numeric\" size=\"6\" value=\"{}\"></label> \
         <button id=\"fork\">Fork</button> <span class=\"muted\">the next resume continues from there</span></form>\
         </div></div>",
        button("resume", "Resume", "queue the thread for a worker"),
        button("pause", "Pause", "stop the queued run at its next step boundary"),
        button("cancel", "Cancel run", "stop the queued run for good"),
        latest.map(|seq| seq.to_string()).unwrap_or_default(),
    )
}
