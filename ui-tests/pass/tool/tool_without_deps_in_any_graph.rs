// Tools that read no deps (no context, or `cx: &ToolCx`) fit graphs with any deps.
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

struct Deps {
    region: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Note {
    text: Option<String>,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Word {
    /// A word.
    word: String,
}

/// Upper-cases a word.
#[tool(risk = read)]
async fn shout(args: Word) -> Result<String, ToolError> {
    Ok(args.word.to_uppercase())
}

/// Tags a word with the calling node.
#[tool(risk = read)]
async fn tag(args: Word, cx: &ToolCx) -> Result<String, ToolError> {
    Ok(format!("{}@{}", args.word, cx.node()))
}

#[graph(state = Note, start = write)]
mod no_deps {
    use super::*;

    #[node(goto = [END], tools = [shout, tag])]
    async fn write(_s: &Note, cx: &Ctx<()>) -> Result<Step<Note>, NodeError> {
        let a = cx.run_tool(shout, Word { word: "hi".into() }).await?;
        let b = cx.run_tool(tag, Word { word: "hi".into() }).await?;
        let text = format!("{} {}", a.result().unwrap(), b.result().unwrap());
        Ok(goto!(END, Note::update().text(Some(text))))
    }
}

#[graph(state = Note, deps = Deps, start = write)]
mod with_deps {
    use super::*;

    #[node(goto = [END], tools = [shout, tag])]
    async fn write(_s: &Note, cx: &Ctx<Deps>) -> Result<Step<Note>, NodeError> {
        let a = cx.run_tool(shout, Word { word: cx.deps().region.clone() }).await?;
        let b = cx.run_tool(tag, Word { word: "hi".into() }).await?;
        let text = format!("{} {}", a.result().unwrap(), b.result().unwrap());
        Ok(goto!(END, Note::update().text(Some(text))))
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(no_deps::graph().run(Note::default(), &())).unwrap();
    assert_eq!(run.state.text.as_deref(), Some("\"HI\" \"hi@write\""));
    let deps = Deps { region: "eu".into() };
    let run = rt.block_on(with_deps::graph().run(Note::default(), &deps)).unwrap();
    assert_eq!(run.state.text.as_deref(), Some("\"EU\" \"hi@write\""));
}
