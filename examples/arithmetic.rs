//! The ReAct tool loop on arithmetic: a model node and a tool node with
//! `add`, `multiply` and `divide` over finite `f64`, under budgets.
//!
//! ```text
//! cargo run --example arithmetic
//! cargo run --example arithmetic -- --model openai --base-url http://localhost:11434/v1 --name qwen2.5
//! ```
//!
//! By default the model is [`ScriptedModel`], a deterministic **test double**
//! that replays a script: it shows the loop's mechanics (tool calls, call
//! ids, observations, budgets), not a language model's behaviour. Its token
//! counts are estimates (words, not tokens).
//!
//! With `--model openai` the same four questions go to a real
//! OpenAI-compatible server (OpenAI, Ollama, vLLM, llama.cpp) through
//! [`OpenAiCompatible`]; the model must support tool calls. `--api-key KEY`
//! or `OPENAI_API_KEY` is sent when set (Ollama needs none). `https` URLs need
//! agentflow's `tls` feature. What a real model answers is printed as it is;
//! only the scripted run checks its results and exits non-zero on a mismatch;
//! a real run stops with a non-zero exit when a model call fails.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agentflow::message::{Message, Role};
use agentflow::model::{ChatModel, ScriptedModel};
use agentflow::model::{OpenAiCompatible, OpenAiConfig};
use agentflow::prebuilt::react::{ReactDeps, ReactState};
use agentflow::prelude::*;
use agentflow::{Limits, Run};
use serde::Deserialize;
use serde_json::{Value, json};

/// Two finite numbers. Unknown fields, strings and non-numbers are refused
/// before a tool runs (`INVALID_ARGUMENT`); JSON cannot carry NaN or infinity.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NumberPair {
    /// The first operand.
    a: f64,
    /// The second operand.
    b: f64,
}

/// Refuses a non-finite result (an overflow) as a `TOOL_ERROR` the model can read.
fn finite(value: f64) -> Result<f64, ToolError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(ToolError::Correctable(format!("the result ({value}) is not a finite number")))
    }
}

/// Adds two numbers: `a + b`. A negative `b` subtracts.
#[tool(risk = read)]
async fn add(args: NumberPair) -> Result<f64, ToolError> {
    finite(args.a + args.b)
}

/// Multiplies two numbers: `a * b`.
#[tool(risk = read)]
async fn multiply(args: NumberPair) -> Result<f64, ToolError> {
    finite(args.a * args.b)
}

/// Divides `a` by `b` as floating point; `b` must not be zero.
#[tool(risk = read)]
async fn divide(args: NumberPair) -> Result<f64, ToolError> {
    if args.b == 0.0 {
        return Err(ToolError::Correctable("division by zero: `b` must not be 0".into()));
    }
    finite(args.a / args.b)
}

agentflow::react_agent!(pub mod calculator, tools = [add, multiply, divide], max_steps = 40);

const SYSTEM: &str = "Compute with the arithmetic tools provided; if an input is missing, say so. \
                      When a tool refuses, correct the call from its error or explain it; \
                      never make up a tool result.";

/// One question, with the script the test double plays for it.
pub struct Scenario {
    pub title: &'static str,
    pub question: &'static str,
    pub limits: Limits,
    pub script: ScriptedModel,
    /// For the scripted run: what must have happened.
    pub check: fn(&Run<ReactState>) -> Result<(), String>,
}

/// The agent's deps around `model`.
pub fn deps(model: Arc<dyn ChatModel>) -> ReactDeps {
    ReactDeps { max_output_tokens: Some(256), ..ReactDeps::new(model).with_system(SYSTEM) }
}

pub fn scenarios() -> Vec<Scenario> {
    let standard = Limits::none().model_calls(8).tool_calls(16).tokens(4096);
    vec![
        Scenario {
            title: "one tool call",
            question: "What is 3 + 4?",
            limits: standard,
            script: ScriptedModel::new().reply_tool_call("add", json!({"a": 3, "b": 4})).reply_text("3 + 4 = 7."),
            check: |run| {
                expect_completed(run)?;
                expect_results(run, &[json!({"ok": true, "result": 7.0})])
            },
        },
        Scenario {
            title: "two dependent calls",
            question: "What is (3 + 4) * 5?",
            limits: standard,
            script: ScriptedModel::new()
                .reply_tool_call("add", json!({"a": 3, "b": 4}))
                // The second call uses the first one's result: the double
                // checks the observation is in the conversation before it asks.
                .reply_tool_call("multiply", json!({"a": 7, "b": 5}))
                .expect("the result of add(3, 4) is in the conversation", |req| {
                    req.messages.iter().any(|m| m.role == Role::Tool && m.content.contains("\"result\":7.0"))
                })
                .reply_text("(3 + 4) * 5 = 35."),
            check: |run| {
                expect_completed(run)?;
                expect_results(run, &[json!({"ok": true, "result": 7.0}), json!({"ok": true, "result": 35.0})])
            },
        },
        Scenario {
            title: "a tool error comes back to the model",
            question: "What is 10 / 0?",
            limits: standard,
            script: ScriptedModel::new()
                .reply_tool_call("divide", json!({"a": 10, "b": 0}))
                .reply_text("10 / 0 has no value: the divide tool refused because the divisor is zero."),
            check: |run| {
                expect_completed(run)?;
                let results = tool_results(run);
                match results.first() {
                    Some(r) if r["code"] == "TOOL_ERROR" && results.len() == 1 => Ok(()),
                    _ => Err(format!("expected one TOOL_ERROR observation, got {results:?}")),
                }
            },
        },
        Scenario {
            title: "a model that keeps calling tools",
            question: "Start from 0 and keep adding 1 with the add tool, one call at a time, forever.",
            limits: Limits::none().model_calls(4).tool_calls(16).tokens(4096),
            script: (0..50).fold(ScriptedModel::new(), |m, i| m.reply_tool_call("add", json!({"a": i, "b": 1}))),
            check: |run| match &run.outcome {
                Outcome::BudgetExhausted { which: agentflow::Budget::ModelCalls } if run.state.answer.is_none() => {
                    Ok(())
                }
                other => Err(format!("expected BudgetExhausted {{ which: model_calls }} and no answer, got {other}")),
            },
        },
    ]
}

fn expect_completed(run: &Run<ReactState>) -> Result<(), String> {
    if run.outcome.is_completed() && run.state.answer.is_some() {
        Ok(())
    } else {
        Err(format!("expected a completed run with an answer, got {}", run.outcome))
    }
}

fn tool_results(run: &Run<ReactState>) -> Vec<Value> {
    run.state
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| serde_json::from_str(&m.content).ok())
        .collect()
}

fn expect_results(run: &Run<ReactState>, expected: &[Value]) -> Result<(), String> {
    let got = tool_results(run);
    if got == expected { Ok(()) } else { Err(format!("expected tool results {expected:?}, got {got:?}")) }
}

fn print_trace(messages: &[Message]) {
    for m in messages {
        let role = m.role.as_str();
        match m.role {
            Role::Ai if !m.tool_calls.is_empty() => {
                for call in &m.tool_calls {
                    println!("    {role:<6} {:<12} {}({})", call.id, call.name, call.arguments);
                }
                if !m.content.trim().is_empty() {
                    println!("    {role:<6} {:<12} {}", "", one_line(&m.content));
                }
            }
            Role::Tool => println!("    {role:<6} {:<12} {}", m.tool_call_id.as_deref().unwrap_or("?"), m.content),
            _ => println!("    {role:<6} {:<12} {}", "", one_line(&m.content)),
        }
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn describe(limits: &Limits) -> String {
    let show = |v: Option<u64>| v.map_or_else(|| "none".to_string(), |v| v.to_string());
    format!(
        "model calls {}, tool calls {}, tokens {}",
        show(limits.model_calls.map(u64::from)),
        show(limits.tool_calls.map(u64::from)),
        show(limits.tokens)
    )
}

enum ModelChoice {
    Scripted,
    OpenAi(OpenAiConfig),
}

fn parse_args() -> Result<ModelChoice, String> {
    let mut kind = "scripted".to_string();
    let (mut base_url, mut name, mut api_key) = (None, None, std::env::var("OPENAI_API_KEY").ok());
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("`{flag}` needs a value"));
        match flag.as_str() {
            "--model" => kind = value()?,
            "--base-url" => base_url = Some(value()?),
            "--name" => name = Some(value()?),
            "--api-key" => api_key = Some(value()?),
            "-h" | "--help" => {
                return Err("usage: arithmetic [--model scripted | --model openai --base-url URL --name MODEL \
                            [--api-key KEY]]"
                    .into());
            }
            other => return Err(format!("unknown argument `{other}`; try --help")),
        }
    }
    match kind.as_str() {
        "scripted" => Ok(ModelChoice::Scripted),
        "openai" => {
            let base_url =
                base_url.ok_or("`--model openai` needs `--base-url URL` (e.g. http://localhost:11434/v1)")?;
            let name = name.ok_or("`--model openai` needs `--name MODEL` (e.g. qwen2.5)")?;
            let mut config = OpenAiConfig::new(base_url, name).with_timeout(Duration::from_secs(120));
            if let Some(key) = api_key.filter(|k| !k.trim().is_empty()) {
                config = config.with_api_key(key);
            }
            Ok(ModelChoice::OpenAi(config))
        }
        other => Err(format!("unknown model `{other}`; expected `scripted` or `openai`")),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let choice = match parse_args() {
        Ok(choice) => choice,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let real: Option<Arc<dyn ChatModel>> = match &choice {
        ModelChoice::Scripted => {
            println!("Model: ScriptedModel, a deterministic TEST DOUBLE replaying a fixed script; it is not a");
            println!("language model. Token counts are its estimates (words), not real tokens.");
            None
        }
        ModelChoice::OpenAi(config) => match OpenAiCompatible::new(config.clone()) {
            Ok(model) => {
                println!("Model: `{}` at {} (OpenAI-compatible chat completions).", config.model, config.base_url);
                Some(Arc::new(model))
            }
            Err(e) => {
                eprintln!("cannot set up the model: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let graph = calculator::graph();
    let mut failures = 0;
    for (i, scenario) in scenarios().into_iter().enumerate() {
        let model: Arc<dyn ChatModel> = match &real {
            Some(model) => model.clone(),
            None => Arc::new(scenario.script),
        };
        let deps = deps(model);
        println!();
        println!("== {}. {}: {:?}", i + 1, scenario.title, scenario.question);
        println!("   limits: {}", describe(&scenario.limits));
        let run = match graph.app().runner(&deps).limits(scenario.limits).run(ReactState::ask(scenario.question)).await
        {
            Ok(run) => run,
            Err(e) => {
                println!("   the run could not start: {e}");
                failures += 1;
                continue;
            }
        };
        println!("   trace (role, tool call id, content):");
        print_trace(&run.state.messages);
        println!("   outcome: {}", run.outcome);
        if let Some(answer) = &run.state.answer {
            println!("   answer: {}", one_line(answer));
        }
        let u = run.usage;
        println!(
            "   counters: model calls {}, tool calls {}, tokens {}{}, usage known: {}",
            u.model_calls,
            u.tool_calls,
            u.tokens,
            if real.is_none() { " (test-double estimate)" } else { "" },
            if u.usage_known() {
                "yes".to_string()
            } else {
                format!("no ({} calls without usage)", u.unknown_usage_calls)
            }
        );
        if let (Some(_), Outcome::Failed { node, .. }) = (&real, &run.outcome)
            && node == "model"
        {
            eprintln!("stopping: the model call failed (is the server up and does the model support tools?)");
            return ExitCode::FAILURE;
        }
        if real.is_none() {
            match (scenario.check)(&run) {
                Ok(()) => println!("   check: ok"),
                Err(why) => {
                    println!("   check: FAILED: {why}");
                    failures += 1;
                }
            }
        }
    }
    if failures > 0 {
        eprintln!("{failures} scenario(s) failed");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
