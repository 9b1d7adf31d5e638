//! A circuit breaker over a flaky HTTP service.
//!
//! The example starts a small inventory service on 127.0.0.1 that answers its first 3 requests
//! with `503 Service Unavailable` and then works, and counts every request it gets. Each lookup
//! is a thread whose node calls the `check_stock` tool (an HTTP GET) through the App's circuit
//! breaker (`App::circuit_breaker`, 3 failures, a short cool-down):
//!
//! 1. lookups 1-3 fail (503): the third failure opens the breaker;
//! 2. lookups 4-6 are refused with a `CIRCUIT_OPEN` observation, and the service never sees them
//!    (its request counter stays at 3);
//! 3. after the cool-down, lookup 7 is the probe: it reaches the service, succeeds, and closes
//!    the breaker; lookup 8 runs as usual.
//!
//! ```text
//! cargo run --example flaky_service                                  # with its own flaky service
//! cargo run --example flaky_service -- --cool-down 3                 # a 3 s cool-down (default 1 s)
//! cargo run --example flaky_service -- --url http://127.0.0.1:8080   # call another service: GET {url}/stock/{sku}
//! ```
//!
//! The breaker lives in the store (here an in-memory redb store), so every thread of the store,
//! and with `PostgresStore` every process, shares it. No model is called: the node calls the
//! tool itself, with the tool's typed arguments.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use agentflow::breaker::{Breaker, BreakerConfigError};
use agentflow::prelude::*;
use agentflow::{Activity, ErrorClass, Event, RedbStore, Store};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

// ---------------------------------------------------------------- the flaky service

/// How many requests the example's service fails before it works: as many as open the breaker.
pub const FAIL_FIRST: u32 = 3;

/// The example's inventory service: `GET /stock/{sku}` answers a number of units, except the
/// first `fail_first` requests, which get `503`. `requests` counts every request it received.
pub struct FlakyService {
    pub url: String,
    pub requests: Arc<AtomicU32>,
}

impl FlakyService {
    /// Listens on a free port of 127.0.0.1 and serves in the background.
    pub async fn start(fail_first: u32) -> std::io::Result<FlakyService> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let requests = Arc::new(AtomicU32::new(0));
        let counter = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let Some(path) = read_request_path(&mut socket).await else { return };
                    let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                    let (status, body) = if n <= fail_first {
                        ("503 Service Unavailable", "overloaded, try later".to_string())
                    } else {
                        ("200 OK", units(&path).to_string())
                    };
                    println!("    [service] request {n}: GET {path} -> {status}");
                    let _ = socket.write_all(response(status, &body).as_bytes()).await;
                });
            }
        });
        Ok(FlakyService { url, requests })
    }

    pub fn requests(&self) -> u32 {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Reads an HTTP request's head and returns its path (`None` if the connection closed first).
pub async fn read_request_path(socket: &mut tokio::net::TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = socket.read(&mut buf).await.ok().filter(|n| *n > 0)?;
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    head.lines().next()?.split_whitespace().nth(1).map(str::to_string)
}

/// A complete HTTP/1.1 response that closes the connection.
pub fn response(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The units in stock of the item at `path`: made up, the same every time.
fn units(path: &str) -> u32 {
    path.bytes().map(u32::from).sum::<u32>() % 40 + 2
}

// ---------------------------------------------------------------- the tool and the graph

pub struct Inventory {
    /// The service's base URL.
    pub url: String,
    pub client: reqwest::Client,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StockQuery {
    /// The item, such as `SKU-1`.
    sku: String,
}

/// Asks the inventory service how many units of an item are in stock.
#[tool(risk = read)]
async fn check_stock(args: StockQuery, cx: &ToolCx<Inventory>) -> Result<u32, ToolError> {
    let inventory = cx.deps();
    let url = format!("{}/stock/{}", inventory.url, args.sku);
    let response =
        inventory.client.get(&url).send().await.map_err(|e| ToolError::Transient(format!("GET {url} failed: {e}")))?;
    let status = response.status();
    if !status.is_success() {
        // A failure for the breaker: the service is down or overloaded.
        return Err(ToolError::Transient(format!("the inventory service answered {status}")));
    }
    let body = response.text().await.map_err(|e| ToolError::Transient(format!("reading the answer: {e}")))?;
    body.trim().parse().map_err(|_| ToolError::Fatal(format!("the inventory service answered {body:?}, not a number")))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Lookup {
    sku: String,
    /// The units in stock, when the service answered.
    units: Option<u32>,
    /// `ok`, `failed: ..` (the tool failed) or the refusal's code (`CIRCUIT_OPEN`).
    result: Option<String>,
}

#[graph(state = Lookup, deps = Inventory, start = lookup)]
pub mod stock {
    use super::*;

    #[node(goto = [END], tools = [check_stock])]
    async fn lookup(s: &Lookup, cx: &Ctx<Inventory>) -> Result<Step<Lookup>, NodeError> {
        let called = cx.run_tool(check_stock, StockQuery { sku: s.sku.clone() }).await;
        let (units, result) = match called {
            Ok(obs) => match obs.code() {
                None => (obs.result().and_then(|v| v.as_u64()).and_then(|n| u32::try_from(n).ok()), "ok".into()),
                // The breaker refused the call: the tool did not run. A page would show
                // "stock unknown" here, or a cached figure.
                Some(code) => (
                    None,
                    serde_json::to_value(code).ok().and_then(|c| c.as_str().map(str::to_string)).unwrap_or_default(),
                ),
            },
            Err(e) if e.class == ErrorClass::NeedsInput => return Err(e),
            // The tool failed (the service answered 503): recorded, so each lookup calls once.
            Err(e) => (None, format!("failed: {}", e.message)),
        };
        Ok(goto!(END, Lookup::update().units(units).result(Some(result))))
    }
}

/// Lookup `n`'s input: item `SKU-N`.
pub fn input(n: u32) -> Lookup {
    Lookup { sku: format!("SKU-{n}"), ..Lookup::default() }
}

/// The App: the graph on `store`, `check_stock` guarded by a breaker that opens after 3
/// consecutive failures and lets a probe through after `cool_down`.
pub fn app(store: Arc<dyn Store>, cool_down: Duration) -> Result<App<Lookup, Inventory>, BreakerConfigError> {
    let breaker = Breaker::after(3).cool_down(cool_down);
    stock::graph().app().store(store).circuit_breaker("check_stock", breaker)
}

// ---------------------------------------------------------------- the demo

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs lookup `n` (thread `lookup-N`, item `SKU-N`) and prints one line for it, then the breaker
/// moves it caused.
async fn lookup(app: &App<Lookup, Inventory>, inventory: &Inventory, n: u32) -> Result<String, BoxError> {
    let mut moves = Vec::new();
    let run = app
        .runner(inventory)
        .thread(format!("lookup-{n}"))
        .on_event(|e: Event<Lookup>| {
            if let Event::Activity(Activity::CircuitBreaker { from, to, failures, .. }) = e {
                moves.push(format!("{from} -> {to} ({failures} consecutive failure(s))"));
            }
        })
        .run(input(n))
        .await?;
    let result = run.state.result.clone().unwrap_or_default();
    let why = match (result.as_str(), run.state.units) {
        ("ok", Some(units)) => format!(", {units} units in stock"),
        ("CIRCUIT_OPEN", _) => " (refused by the open breaker: the tool did not run)".into(),
        _ => String::new(),
    };
    println!("lookup {n} SKU-{n}: {result}{why}");
    for m in moves {
        println!("    breaker check_stock, during lookup {n}: {m}");
    }
    Ok(result)
}

fn print_breaker(store: &dyn Store) -> Result<(), BoxError> {
    match store.breaker("check_stock")? {
        Some(b) => println!("    breaker in the store: {}, {} consecutive failure(s)", b.state, b.failures),
        None => println!("    breaker in the store: closed, never moved"),
    }
    Ok(())
}

/// The requests the example's own service received (not known for a service given with `--url`).
fn print_requests(service: Option<&FlakyService>) {
    if let Some(service) = service {
        println!("    service requests so far: {}", service.requests());
    }
}

async fn run(url: Option<String>, cool_down: Duration) -> Result<(), BoxError> {
    let service = match url {
        Some(_) => None,
        None => Some(FlakyService::start(FAIL_FIRST).await?),
    };
    let url = url.or_else(|| service.as_ref().map(|s| s.url.clone())).unwrap_or_default();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    let inventory = Inventory { url: url.trim_end_matches('/').to_string(), client };
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory()?);
    let app = app(store.clone(), cool_down)?;
    match &service {
        Some(_) => println!("inventory service: {url} (fails its first {FAIL_FIRST} requests with 503)"),
        None => println!("inventory service: {url}"),
    }
    println!("breaker: opens after 3 consecutive failures, cool-down {} s\n", cool_down.as_secs_f64());

    let mut results = Vec::new();
    println!("1. The service fails: three failures in a row open the breaker.");
    for n in 1..=3 {
        results.push(lookup(&app, &inventory, n).await?);
    }
    let opened = Instant::now();
    print_breaker(&*store)?;
    print_requests(service.as_ref());

    println!("\n2. While it is open, calls are refused without reaching the service.");
    for n in 4..=6 {
        results.push(lookup(&app, &inventory, n).await?);
    }
    print_breaker(&*store)?;
    print_requests(service.as_ref());

    let left = cool_down.saturating_sub(opened.elapsed()) + Duration::from_millis(50);
    println!(
        "\n3. After the cool-down ({:.1} s from now), one probe goes through; it succeeds and closes the breaker.",
        left.as_secs_f64()
    );
    tokio::time::sleep(left).await;
    for n in 7..=8 {
        results.push(lookup(&app, &inventory, n).await?);
    }
    print_breaker(&*store)?;
    print_requests(service.as_ref());
    let count = |f: fn(&str) -> bool| results.iter().filter(|r| f(r)).count();
    let (ok, refused) = (count(|r| r == "ok"), count(|r| r == "CIRCUIT_OPEN"));
    let failed = count(|r| r.starts_with("failed"));
    println!("\n{} lookups: {failed} failed, {refused} refused by the open breaker, {ok} succeeded", results.len());
    if let Some(service) = &service {
        println!("requests that reached the service: {}", service.requests());
    }
    Ok(())
}

const USAGE: &str = "usage: flaky_service [--cool-down SECONDS] [--url URL]
  --cool-down SECONDS  how long the breaker stays open before a probe (default 1)
  --url URL            call this service (GET URL/stock/SKU-N) instead of starting the example's own";

fn parse(args: &[String]) -> Result<(Option<String>, Duration), String> {
    let (mut url, mut cool_down) = (None, Duration::from_secs(1));
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| it.next().cloned().ok_or_else(|| format!("`{flag}` needs a value"));
        match arg.as_str() {
            "--url" => url = Some(value("--url")?),
            "--cool-down" => {
                let v = value("--cool-down")?;
                cool_down = v
                    .parse::<f64>()
                    .ok()
                    .and_then(|s| Duration::try_from_secs_f64(s).ok())
                    .ok_or_else(|| format!("`--cool-down {v}`: expected seconds, such as 1 or 0.5"))?;
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok((url, cool_down))
}

#[tokio::main]
async fn main() -> ExitCode {
    run_with_args(std::env::args().skip(1).collect()).await
}

/// The example's `main` with its command-line arguments (without the program's name).
pub(crate) async fn run_with_args(args: Vec<String>) -> ExitCode {
    let (url, cool_down) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(url, cool_down).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
