//! Map-reduce: N tickers fanned out to analyst instances, one per ticker,
//! that read prices and news through read-only tools and ask a model for a
//! signal; an aggregator joins their reports once all instances finished.
//!
//! ```text
//! cargo run --example market_analysis
//! ```
//!
//! The model is [`ScriptedModel`], a deterministic **test double**: it
//! answers by a fixed rule from the trend the analyst computed (up: `buy`,
//! down: `sell`, else `hold`); it shows the map-reduce mechanics, not a
//! language model's judgement. A ticker whose data is missing yields
//! `insufficient_data` and never reaches the model, so it never gets a signal.
//!
//! The run is read as a stream (`Runner::stream`) to print a live progress
//! view: the progress each analyst instance hands out with `cx.emit` as it
//! goes (`custom` items, each with its instance index), and one line per
//! instance when the step merges its report (`updates` items). Then the
//! reports in ticker order, whatever order the instances finished in.

use std::process::ExitCode;

use agentflow::message::Message;
use agentflow::model::{ChatReply, ChatRequest, ScriptedModel};
use agentflow::prelude::*;
use agentflow::{Outcome, StreamMode, StreamPart};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Market {
    /// The tickers to analyse.
    tickers: Vec<String>,
    /// One report per ticker, in ticker order.
    #[reduce(append)]
    reports: Vec<Report>,
    /// The aggregator's summary.
    summary: String,
}

/// What one analyst instance concluded about its ticker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    ticker: String,
    /// `buy`, `hold`, `sell`, or `insufficient_data`.
    signal: String,
    why: String,
}

/// One ticker symbol.
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TickerArgs {
    /// The ticker, e.g. `ACME`.
    ticker: String,
}

/// Closing prices for a ticker, oldest first; empty when there is no data.
#[tool(risk = read)]
async fn prices(args: TickerArgs) -> Result<Vec<f64>, ToolError> {
    Ok(match args.ticker.as_str() {
        "ACME" => vec![10.0, 10.4, 11.2, 11.9],
        "GLOBEX" => vec![52.0, 50.5, 49.0, 47.2],
        "INITECH" => vec![7.0, 7.1, 6.9, 7.0],
        "UMBRELLA" => vec![88.0, 90.1, 93.5, 97.0],
        _ => Vec::new(),
    })
}

/// Recent headlines for a ticker.
#[tool(risk = read)]
async fn news(args: TickerArgs) -> Result<Vec<String>, ToolError> {
    Ok(match args.ticker.as_str() {
        "ACME" => vec!["ACME beats estimates".into()],
        "GLOBEX" => vec!["GLOBEX recalls a product line".into()],
        "UMBRELLA" => vec!["UMBRELLA expands overseas".into()],
        _ => Vec::new(),
    })
}

/// The model the analysts ask (a test double here).
pub struct Desk {
    model: ScriptedModel,
}

#[graph(state = Market, deps = Desk, start = plan)]
pub mod analysis {
    use super::*;

    #[node(goto = [analyst, aggregate])]
    async fn plan(s: &Market) -> Step<Market> {
        if s.tickers.is_empty() {
            // With nothing to map, the aggregator still reports.
            goto!(aggregate)
        } else {
            goto!(each(analyst, s.tickers.clone()))
        }
    }

    #[node(goto = [aggregate], tools = [prices, news], retry = 2, parallel = 3)]
    async fn analyst(_s: &Market, #[payload] ticker: &str, cx: &Ctx<Desk>) -> Result<Step<Market>, NodeError> {
        let report = analyse(ticker, cx).await?;
        Ok(goto!(aggregate, Market::update().reports(vec![report])))
    }

    #[node(goto = [END])]
    async fn aggregate(s: &Market) -> Step<Market> {
        let count = |signal: &str| s.reports.iter().filter(|r| r.signal == signal).count();
        let summary = format!(
            "{} tickers: {} buy, {} hold, {} sell, {} insufficient_data",
            s.reports.len(),
            count("buy"),
            count("hold"),
            count("sell"),
            count("insufficient_data")
        );
        goto!(END, Market::update().summary(summary))
    }
}

/// The result list of a tool observation, or `None` when the call failed.
fn results<T: serde::de::DeserializeOwned>(body: &serde_json::Value) -> Option<T> {
    if body["ok"] != true {
        return None;
    }
    serde_json::from_value(body["result"].clone()).ok()
}

async fn analyse(ticker: &str, cx: &Ctx<'_, Desk>) -> Result<Report, NodeError> {
    cx.emit("fetching prices and news").await?;
    let args = || TickerArgs { ticker: ticker.to_string() };
    let closes: Option<Vec<f64>> = results(&cx.run_tool(prices, args()).await?.body);
    let headlines: Vec<String> = results(&cx.run_tool(news, args()).await?.body).unwrap_or_default();
    let closes = closes.unwrap_or_default();
    let (Some(first), Some(last)) = (closes.first(), closes.last()) else {
        // No data, no signal: the model is not asked.
        return Ok(Report {
            ticker: ticker.to_string(),
            signal: "insufficient_data".into(),
            why: "no price history".into(),
        });
    };
    cx.emit("asking the model").await?;
    let change = (last - first) / first * 100.0;
    let trend = if change > 2.0 {
        "up"
    } else if change < -2.0 {
        "down"
    } else {
        "flat"
    };
    let request = ChatRequest::new(vec![
        Message::system("Answer with one word: buy, hold or sell."),
        Message::human(format!(
            "ticker: {ticker}\ntrend: {trend} ({change:+.1}% over {} closes)\nnews: {}",
            closes.len(),
            headlines.join("; ")
        )),
    ]);
    let reply = cx.chat(&cx.deps().model, &request).await?;
    let signal = reply.text.trim().to_lowercase();
    let signal = if ["buy", "hold", "sell"].contains(&signal.as_str()) { signal } else { "hold".to_string() };
    Ok(Report { ticker: ticker.to_string(), signal, why: format!("trend {trend} ({change:+.1}%)") })
}

/// The test double's rule: the trend line of the request decides.
fn scripted_model() -> ScriptedModel {
    ScriptedModel::new().respond_with(|request: &ChatRequest| {
        let text = request.messages.last().map(|m| m.content.as_str()).unwrap_or_default();
        let signal = if text.contains("trend: up") {
            "buy"
        } else if text.contains("trend: down") {
            "sell"
        } else {
            "hold"
        };
        Ok(ChatReply::text(signal))
    })
}

/// The tickers the example analyses.
pub const TICKERS: [&str; 5] = ["ACME", "GLOBEX", "INITECH", "HOOLI", "UMBRELLA"];

/// The analysts' desk, with the test double.
pub fn desk() -> Desk {
    Desk { model: scripted_model() }
}

/// The run's input: `tickers` to analyse.
pub fn input(tickers: &[&str]) -> Market {
    Market { tickers: tickers.iter().map(|t| t.to_string()).collect(), ..Market::default() }
}

#[tokio::main]
async fn main() -> ExitCode {
    let tickers = TICKERS;
    let desk = desk();
    let input = input(&tickers);
    println!("analysing {} tickers, at most 3 at once (model: ScriptedModel, a test double)", tickers.len());
    let graph = analysis::graph();
    let app = graph.app();
    let modes = [StreamMode::Custom, StreamMode::Updates];
    let mut stream = app.runner(&desk).stream_modes(modes).stream(input);
    let mut done = 0;
    let mut result = None;
    while let Some(item) = stream.next().await {
        let ticker = |i: Option<u32>| i.and_then(|i| tickers.get(i as usize)).copied().unwrap_or("?");
        match item.part {
            StreamPart::Custom { node: "analyst", instance, value, .. } => {
                println!(
                    "  analyst[{}] {:<9} {}",
                    instance.unwrap_or(0),
                    ticker(instance),
                    value.as_str().unwrap_or("?")
                );
            }
            StreamPart::Update { node: "analyst", instance, update, .. } => {
                done += 1;
                let signal = update.reports.as_ref().and_then(|r| r.first()).map_or("?", |r| r.signal.as_str());
                println!(
                    "  [{done}/{}] analyst[{}] {} -> {signal}",
                    tickers.len(),
                    instance.unwrap_or(0),
                    ticker(instance)
                );
            }
            StreamPart::Update { node, .. } => println!("  {node} done"),
            StreamPart::Done(end) => result = Some(end),
            _ => {}
        }
    }
    let run = match result {
        Some(Ok(run)) => run,
        // A stream always ends with its result: `None` cannot happen.
        None => return ExitCode::FAILURE,
        Some(Err(e)) => {
            eprintln!("the run could not start: {e}");
            return ExitCode::FAILURE;
        }
    };
    if run.outcome != Outcome::Completed {
        eprintln!("the run did not complete: {}", run.outcome);
        return ExitCode::FAILURE;
    }
    println!("reports, in ticker order:");
    for r in &run.state.reports {
        println!("  {:<9} {:<17} {}", r.ticker, r.signal, r.why);
    }
    println!("{}", run.state.summary);
    // What the scripted run must show.
    let signals: Vec<&str> = run.state.reports.iter().map(|r| r.signal.as_str()).collect();
    if signals != ["buy", "sell", "hold", "insufficient_data", "buy"] {
        eprintln!("unexpected signals: {signals:?}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
