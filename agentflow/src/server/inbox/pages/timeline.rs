//! A thread's timeline drawn: each checkpoint with how long its step took and what it waited
//! for, and a last row for what the thread waits for now.

use std::fmt::Write as _;

use super::escape::{esc, url};
use crate::server::inspect::display::ago;

/// One checkpoint in a thread's timeline.
pub(crate) struct Step {
    /// Its sequence number.
    pub(crate) seq: u64,
    /// The super-step.
    pub(crate) step: u64,
    /// How it was written (`input`, `loop`, `update`, `fork`).
    pub(crate) source: String,
    /// The nodes that ran.
    pub(crate) nodes: Vec<String>,
    /// The nodes to run next.
    pub(crate) next: Vec<String>,
    /// Unix millis.
    pub(crate) at: u64,
    /// Millis from the checkpoint the step continued to this one (waits included); `None` for
    /// the first checkpoint, or one whose predecessor is gone.
    pub(crate) took: Option<u64>,
    /// What the step waited for, in the order found.
    pub(crate) waits: Vec<Wait>,
}

/// Something a step waited for.
pub(crate) enum Wait {
    /// A node slept on a durable timer, from the step's start (or the decision it waited for
    /// before) until its wake time (unix millis).
    Slept { node: String, from: u64, until: u64 },
    /// A call of `tool` waited for its approval, from its request to its decision.
    Approval { tool: String, from: u64, decided: u64, by: String, outcome: String },
}

/// What a paused thread waits for now.
pub(crate) enum Now {
    /// A durable timer of `node` (or the circuit breaker of a tool, or a subgraph's timer).
    Sleeping { node: String, until: Option<u64>, breaker: Option<String>, subgraph: Option<String> },
    /// A person's decision on an approval.
    Approval { node: String, approval: Option<String> },
    /// An answer to the node's `interrupt`.
    Answer { node: String },
    /// A breakpoint `before` or `after` the node.
    Breakpoint { node: String, when: &'static str },
    /// A call that was cut off, to settle.
    Unknown { node: String, approval: Option<String> },
    /// What it waits for cannot be read from the store.
    Unreadable { message: String },
}

/// A duration for people, finer than [`span`](crate::server::inspect::display::span): `85 ms`, `1.5 s`, `42 s`,
/// `3 min 20 s`, `2 h 5 min`, `4 d 3 h`.
pub(crate) fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match ms {
        0..1000 => format!("{ms} ms"),
        1000..10_000 => format!("{s}.{} s", ms % 1000 / 100),
        10_000..60_000 => format!("{s} s"),
        60_000..3_600_000 => format!("{} min {} s", s / 60, s % 60),
        3_600_000..86_400_000 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Unix millis as a UTC date and time: `2026-12-06 15:02:03 UTC`.
pub(crate) fn utc(ms: u64) -> String {
    let c = crate::core::clock::civil(ms);
    format!("{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC", c.year, c.month, c.day, c.hour, c.minute, c.second)
}

fn wait_text(w: &Wait) -> String {
    match w {
        Wait::Slept { node, from, until } => format!(
            "slept {} until {} (<code>{}</code>)",
            duration(until.saturating_sub(*from)),
            utc(*until),
            esc(node)
        ),
        Wait::Approval { tool, from, decided, by, outcome } => format!(
            "approval of <code>{}</code>: {}, {} by {}",
            esc(tool),
            duration(decided.saturating_sub(*from)),
            esc(outcome),
            esc(by)
        ),
    }
}

fn now_text(n: &Now, now: u64) -> String {
    let until_text = |until: &Option<u64>| match until {
        Some(u) if *u > now => format!("{} ({})", utc(*u), ago(*u, now)),
        Some(u) => format!("{} (due {}: the next resume wakes it)", utc(*u), ago(*u, now)),
        None => "a time the store does not hold".to_string(),
    };
    match n {
        Now::Sleeping { node, until, breaker: Some(tool), .. } => format!(
            "Waiting until {} for the circuit breaker of <code>{}</code> to let a trial call through (node <code>{}</code>).",
            until_text(until),
            esc(tool),
            esc(node)
        ),
        Now::Sleeping { node, until, subgraph: Some(sub), .. } => format!(
            "Waiting on its subgraph <code>{}</code>, sleeping until {} (node <code>{}</code>).",
            esc(sub),
            until_text(until),
            esc(node)
        ),
        Now::Sleeping { node, until, .. } => {
            format!("Sleeping until {} in node <code>{}</code>.", until_text(until), esc(node))
        }
        Now::Approval { node, approval } => format!(
            "Waiting for a decision on approval <code>{}</code> (node <code>{}</code>) in the <a href=\"/\">inbox</a>.",
            esc(approval.as_deref().unwrap_or("?")),
            esc(node)
        ),
        Now::Answer { node } => {
            format!("Waiting for an answer at node <code>{}</code> (the <a href=\"/\">inbox</a> takes it).", esc(node))
        }
        Now::Breakpoint { node, when } => {
            format!("Paused at a breakpoint {when} node <code>{}</code>: the app continues it.", esc(node))
        }
        Now::Unknown { node, approval } => format!(
            "A call of node <code>{}</code> was cut off and its outcome is unknown: settle approval <code>{}</code>.",
            esc(node),
            esc(approval.as_deref().unwrap_or("?"))
        ),
        Now::Unreadable { message } => format!("What it waits for cannot be shown: {}", esc(message)),
    }
}

/// How long a step took and what it waited for, in a sentence (the checkpoint's page).
pub(crate) fn step_summary(st: &Step) -> String {
    let mut out = match st.took {
        Some(ms) => format!("The step took {}", duration(ms)),
        None => return String::new(),
    };
    if !st.waits.is_empty() {
        let waits: Vec<String> = st.waits.iter().map(wait_text).collect();
        let _ = write!(out, "; it waited: {}", waits.join("; "));
    }
    out.push('.');
    out
}

/// The timeline table: a row per checkpoint, and a last row (`#waiting`) for what the thread
/// waits for now, if anything.
pub(crate) fn timeline_html(thread: &str, steps: &[Step], waiting: &[Now], now: u64) -> String {
    let mut out = String::from(
        "<table id=\"timeline\" class=\"timeline\"><tr><th>Checkpoint</th><th>Step</th><th>Source</th><th>Ran</th>\
         <th>Next</th><th>When</th><th>Took</th><th>Waited</th></tr>",
    );
    for st in steps {
        let waits: Vec<String> = st.waits.iter().map(wait_text).collect();
        let _ = write!(
            out,
            "<tr><td><a href=\"/threads/{}/at/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"when\" title=\"{}\">{}</td><td class=\"took\">{}</td><td class=\"waits\">{}</td></tr>",
            url(thread),
            st.seq,
            st.seq,
            st.step,
            esc(&st.source),
            esc(&st.nodes.join(", ")),
            esc(&st.next.join(", ")),
            utc(st.at),
            ago(st.at, now),
            st.took.map_or_else(|| "-".to_string(), duration),
            waits.join("; ")
        );
    }
    if !waiting.is_empty() {
        let items: Vec<String> = waiting.iter().map(|n| now_text(n, now)).collect();
        let _ = write!(
            out,
            "<tr class=\"waiting\" id=\"waiting\"><td><strong>Now</strong></td><td colspan=\"7\">{}</td></tr>",
            items.join("<br>")
        );
    }
    out.push_str("</table>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(duration(0), "0 ms");
        assert_eq!(duration(85), "85 ms");
        assert_eq!(duration(1_500), "1.5 s");
        assert_eq!(duration(9_999), "9.9 s");
        assert_eq!(duration(42_000), "42 s");
        assert_eq!(duration(200_000), "3 min 20 s");
        assert_eq!(duration(7_500_000), "2 h 5 min");
        assert_eq!(duration(4 * 86_400_000 + 3 * 3_600_000), "4 d 3 h");
        assert_eq!(duration(u64::MAX), format!("{} d {} h", u64::MAX / 1000 / 86_400, u64::MAX / 1000 % 86_400 / 3600));
    }

    #[test]
    fn times_are_utc_calendar_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        // 2000-02-29 (a leap day of a century year) 12:34:56.
        assert_eq!(utc(951_827_696_000), "2000-02-29 12:34:56 UTC");
        assert_eq!(utc(1_796_491_323_999), "2026-12-05 17:22:03 UTC");
        // The largest time does not overflow.
        assert!(utc(u64::MAX).ends_with(" UTC"));
    }

    #[test]
    fn a_stored_name_is_escaped_in_the_timeline() {
        let step = Step {
            seq: 3,
            step: 2,
            source: "loop".into(),
            nodes: vec!["<b>".into()],
            next: vec![],
            at: 0,
            took: Some(1_200),
            waits: vec![
                Wait::Slept { node: "<i>".into(), from: 0, until: 1_000 },
                Wait::Approval {
                    tool: "<t>".into(),
                    from: 0,
                    decided: 2_000,
                    by: "<u>".into(),
                    outcome: "approved".into(),
                },
            ],
        };
        let waiting = [Now::Sleeping { node: "<s>".into(), until: Some(5_000), breaker: None, subgraph: None }];
        let html = timeline_html("t<1>", &[step], &waiting, 1_000);
        for raw in ["<b>", "<i>", "<t>", "<u>", "<s>", "t<1>"] {
            assert!(!html.contains(raw), "{raw} unescaped: {html}");
        }
        assert!(html.contains("slept 1.0 s until 1970-01-01 00:00:01 UTC"), "{html}");
        assert!(html.contains("approval of <code>&lt;t&gt;</code>: 2.0 s, approved by &lt;u&gt;"), "{html}");
        assert!(html.contains("Sleeping until 1970-01-01 00:00:05 UTC (in 4s)"), "{html}");
        assert!(html.contains("/threads/t%3C1%3E/at/3"), "{html}");
    }
}
