//! A supervisor that delegates to child graphs: two research children run at
//! once, then a writer child whose `publish` call needs a human's approval,
//! which pauses the whole tree until it is approved.
//!
//! `cargo run --example delegation`
//!
//! Each child is a thread of its own under the supervisor's (`post-1/delegate.0.0`
//! and so on), with its own checkpoints in the store, so a crash or a pause
//! anywhere in the tree resumes where it stopped. The example prints the tree
//! of threads while it waits for the approval and after it completes, the
//! pending item with its path through the tree, and how deep each graph
//! delegates (`DELEGATION_DEPTH`, checked at compile time against
//! `max_depth`, 3 by default).
//!
//! No language model is involved: the nodes are plain functions, so the run
//! is the same every time. The "search index" and the "blog" are stand-ins
//! reached through the graphs' deps.

use std::sync::{Arc, Mutex};

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{Outcome, RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ---------------------------------------------------------------- deps and tools

/// What the tools reach: a search index and a blog, both stand-ins.
#[derive(Default)]
pub struct Newsroom {
    published: Mutex<Vec<String>>,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub struct Query {
    /// What to look for.
    topic: String,
}

/// Searches the (stand-in) index. Read-only.
#[tool(risk = read)]
async fn search_docs(args: Query) -> Result<Value, ToolError> {
    Ok(json!({ "hits": [format!("{}: three sources agree", args.topic), format!("{}: one dissent", args.topic)] }))
}

#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub struct Post {
    /// The text to publish.
    body: String,
}

/// Publishes a post. Irreversible: readers see it at once.
#[tool(risk = irreversible)]
async fn publish_post(args: Post, deps: &Newsroom) -> Result<Value, ToolError> {
    deps.published.lock().unwrap().push(args.body.clone());
    Ok(json!({ "url": "https://blog.example/posts/1", "chars": args.body.len() }))
}

// ---------------------------------------------------------------- research: a child

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Research {
    topic: String,
    findings: Vec<String>,
}

#[graph(state = Research, deps = Newsroom, start = gather)]
pub mod research {
    use super::*;

    #[node(goto = [END], tools = [search_docs])]
    async fn gather(s: &Research, cx: &Ctx<Newsroom>) -> Result<Step<Research>, NodeError> {
        let found = cx.run_tool(search_docs, Query { topic: s.topic.clone() }).await?;
        let findings = serde_json::from_value(found.body["result"]["hits"].clone()).unwrap_or_default();
        Ok(goto!(END, Research::update().findings(findings)))
    }
}

// ---------------------------------------------------------------- writer: a child

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Draft {
    notes: Vec<String>,
    body: String,
    receipt: Option<Value>,
}

#[graph(state = Draft, deps = Newsroom, start = draft)]
pub mod writer {
    use super::*;

    #[node(goto = [publish])]
    async fn draft(s: &Draft) -> Step<Draft> {
        goto!(publish, Draft::update().body(format!("What we found: {}.", s.notes.join("; "))))
    }

    #[node(goto = [END], tools = [publish_post])]
    async fn publish(s: &Draft, cx: &Ctx<Newsroom>) -> Result<Step<Draft>, NodeError> {
        let done = cx.run_tool(publish_post, Post { body: s.body.clone() }).await?;
        Ok(goto!(END, Draft::update().receipt(Some(done.body))))
    }
}

// ---------------------------------------------------------------- the supervisor

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Assignment {
    topics: Vec<String>,
    report: String,
}

#[graph(state = Assignment, deps = Newsroom, start = delegate)]
pub mod supervisor {
    use super::*;

    #[node(goto = [END], subgraphs = [research, writer])]
    async fn delegate(s: &Assignment, cx: &Ctx<Newsroom>) -> Result<Step<Assignment>, NodeError> {
        let job = |topic: &String| Research { topic: topic.clone(), findings: vec![] };
        // Two research children at once; each is its own thread.
        let (a, b) = tokio::join!(
            cx.subgraph(research::graph(), job(&s.topics[0])),
            cx.subgraph(research::graph(), job(&s.topics[1]))
        );
        let notes = [a?.findings, b?.findings].concat();
        let post = cx.subgraph(writer::graph(), Draft { notes, ..Draft::default() }).await?;
        let url = post.receipt.as_ref().and_then(|r| r["result"]["url"].as_str()).unwrap_or("(not published)");
        Ok(goto!(END, Assignment::update().report(format!("published at {url}: {}", post.body))))
    }
}

// ---------------------------------------------------------------- the run

/// The supervisor's assignment: two topics to research, then a post.
pub fn assignment() -> Assignment {
    Assignment { topics: vec!["tides".into(), "moon phases".into()], report: String::new() }
}

/// The store's threads as a tree: a child's id extends its parent's with `/`.
fn print_tree(store: &dyn Store) -> Result<(), agentflow::Error> {
    let mut threads = store.list_threads()?;
    threads.sort_by(|a, b| a.id.cmp(&b.id));
    for t in threads {
        let depth = t.id.matches('/').count();
        let name = t.id.rsplit('/').next().unwrap_or(&t.id);
        println!("    {:<28} {}", format!("{}{name}", "  ".repeat(depth)), t.status.as_str());
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::temp_dir().join(format!("agentflow-delegation-{}.redb", std::process::id()));
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(&path)?);
    let app = supervisor::graph().app().store(Arc::clone(&store));
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "editor"))?;
    let newsroom = Newsroom::default();

    println!("Delegation depth (checked at compile time, max_depth 3 by default):");
    for (name, depth) in [
        ("supervisor", supervisor::DELEGATION_DEPTH),
        ("research", research::DELEGATION_DEPTH),
        ("writer", writer::DELEGATION_DEPTH),
    ] {
        println!("    {name:<11} {depth}");
    }

    let run = app.runner(&newsroom).thread("post-1").owner("agent:editor-bot").run(assignment()).await?;
    let Outcome::Interrupted { pending, .. } = &run.outcome else {
        return Err(format!("expected a pause for approval, got: {}", run.outcome).into());
    };
    let item = &pending[0];
    println!("\nThe tree paused: {:?} at `{}`", item.kind, item.payload["path"].as_str().unwrap_or("?"));
    println!("    tool {} wants: {}", item.payload["tool"], item.payload["args"]);
    println!("    waiting thread: {}", item.payload["thread"].as_str().unwrap_or("?"));
    println!("\nThreads while it waits:");
    print_tree(store.as_ref())?;
    assert!(newsroom.published.lock().unwrap().is_empty());

    let id = item.payload["approval"].as_str().unwrap_or_default().to_string();
    desk.approve(&id, &Approver::new("dana", ["editor"]))?;
    println!("\ndana (editor) approved `{id}`; resuming the supervisor.");
    let done = app.runner(&newsroom).thread("post-1").resume().await?;
    println!("Outcome: {}", done.outcome);
    println!("Report: {}", done.state.report);
    println!("\nThreads after:");
    print_tree(store.as_ref())?;
    println!("\nPosts published: {}", newsroom.published.lock().unwrap().len());

    drop(app);
    drop(desk);
    drop(store);
    let _ = std::fs::remove_file(&path);
    Ok(())
}
