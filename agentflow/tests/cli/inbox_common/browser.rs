//! What the browser tests share: chromedriver on a free port, a headless Chromium session of a
//! given window size, logging in through the form, reading an element's text, screenshots.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
/// How long a page may take to show what the test waits for.
pub const PAGE: Duration = Duration::from_secs(20);

/// chromedriver's path (`CHROMEDRIVER`, or Debian's), or `None` with one line saying the test
/// is skipped when it or Chromium is missing; under `CI=true` a missing browser fails the test.
pub fn chromedriver() -> Option<String> {
    let driver = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| CHROMEDRIVER.to_string());
    if Path::new(&driver).exists() && Path::new(CHROMIUM).exists() {
        return Some(driver);
    }
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "chromedriver ({driver}) or chromium ({CHROMIUM}) is missing under CI: .ci/chromium.sh installs them"
    );
    eprintln!("SKIPPED the browser test: {driver} or {CHROMIUM} is missing (apt-get install chromium chromium-driver)");
    None
}

/// chromedriver on a free loopback port; killed on drop.
pub struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start_driver(path: &str) -> Driver {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(path)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    // Ready when it accepts connections.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "chromedriver did not listen on port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Driver { child, url: format!("http://127.0.0.1:{port}") }
}

/// A browser session with its own profile (so its own cookies), its window `width` x `height`.
pub async fn browser(driver: &Driver, profile: &Path, (width, height): (u32, u32)) -> Client {
    let args = json!([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        format!("--window-size={width},{height}"),
        format!("--user-data-dir={}", profile.display()),
    ]);
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert("goog:chromeOptions".into(), json!({ "binary": CHROMIUM, "args": args }));
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a chromedriver session")
}

pub async fn log_in(c: &Client, base: &str, token: &str) {
    c.goto(&format!("{base}/login")).await.unwrap();
    c.wait().at_most(PAGE).for_element(Locator::Id("token")).await.unwrap().send_keys(token).await.unwrap();
    c.find(Locator::Id("login")).await.unwrap().click().await.unwrap();
    // The inbox, with the logout button of a session.
    if let Err(e) = c.wait().at_most(PAGE).for_element(Locator::Id("logout")).await {
        panic!("{token} did not get logged in ({e}): {}", c.source().await.unwrap_or_default());
    }
}

pub async fn text_of(c: &Client, id: &str) -> String {
    text_when(c, id, |_| true).await
}

/// The text of `#{id}` once `ready` accepts it (the page may still be the one before a click,
/// or be replaced while it is read: an open inbox reloads itself); the last text seen after
/// [`PAGE`] otherwise.
pub async fn text_when(c: &Client, id: &str, ready: impl Fn(&str) -> bool) -> String {
    let began = std::time::Instant::now();
    loop {
        let found = c.wait().at_most(PAGE).for_element(Locator::Id(id)).await;
        let element = found.unwrap_or_else(|e| panic!("no #{id}: {e}"));
        match element.text().await {
            Ok(text) if ready(&text) || began.elapsed() >= PAGE => return text,
            Ok(_) => {}
            // Replaced between the find and the read: find it again on the new page.
            Err(_) if began.elapsed() < PAGE => {}
            Err(e) => panic!("#{id} could not be read: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Where the screenshots go: `AGENTFLOW_SCREENSHOTS`, or a directory under cargo's target dir,
/// so a test run leaves the committed pictures alone.
pub fn screenshots() -> PathBuf {
    let dir = match std::env::var_os("AGENTFLOW_SCREENSHOTS") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_TARGET_TMPDIR")).join("inbox-screenshots"),
    };
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

pub async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "chromedriver returned no PNG for {name}");
    std::fs::write(screenshots().join(name), png).expect("write the screenshot");
}
