//! A minimal W3C WebDriver client for driving headless Chromium through `chromedriver` (Debian's
//! `chromium` and `chromium-driver`, installed by scripts/setup.sh).
//!
//! Written by hand (a few JSON-over-HTTP calls) because the maintained Rust client, fantoccini, brings
//! a second rustls crypto provider (aws-lc) into the workspace, which breaks the provider kube relies
//! on and costs minutes of C compilation. Used by the browser tests of `crates/capstan/tests` and by
//! the UI benchmark of `capstan-bench`.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The W3C element reference key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process and one browser session; both end when dropped.
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    agent: ureq::Agent,
    _profile: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Browser {
    /// Start chromedriver on a free loopback port and open a headless Chromium session.
    pub fn start() -> anyhow::Result<Browser> {
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start chromedriver (run scripts/setup.sh): {e}"))?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let base = format!("http://127.0.0.1:{port}");
        let profile = tempfile::tempdir()?;
        let mut browser = Browser {
            driver,
            base,
            session: String::new(),
            agent,
            _profile: profile,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while browser.agent.get(format!("{}/status", browser.base)).call().is_err() {
            anyhow::ensure!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let binary = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap_or("/usr/bin/chromium");
        let args = vec![
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--window-size=1280,800".into(),
            format!("--user-data-dir={}", browser._profile.path().display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": binary, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let answer = browser.call("POST", "/session", Some(caps))?;
        browser.session = answer["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("no session: {answer}"))?
            .to_string();
        Ok(browser)
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let response = match (method, body) {
            ("GET", _) => self.agent.get(&url).call(),
            ("DELETE", _) => self.agent.delete(&url).call(),
            (_, body) => self
                .agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(body.unwrap_or_else(|| json!({})).to_string()),
        }?;
        let status = response.status().as_u16();
        let text = response.into_body().read_to_string()?;
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        anyhow::ensure!(status < 400, "WebDriver {method} {path}: {status} {text}");
        Ok(v["value"].clone())
    }

    fn session_call(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        self.call(method, &format!("/session/{}{path}", self.session), body)
    }

    /// Navigate to `url`.
    pub fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.session_call("POST", "/url", Some(json!({"url": url}))).map(|_| ())
    }

    /// Open a new tab (not switched to); its window handle.
    pub fn new_tab(&self) -> anyhow::Result<String> {
        let v = self.session_call("POST", "/window/new", Some(json!({"type": "tab"})))?;
        v["handle"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow::anyhow!("no handle for the new tab: {v}"))
    }

    /// The current tab's window handle.
    pub fn tab(&self) -> anyhow::Result<String> {
        let v = self.session_call("GET", "/window", None)?;
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow::anyhow!("no window handle: {v}"))
    }

    /// Make the tab `handle` the one commands go to.
    pub fn switch_to(&self, handle: &str) -> anyhow::Result<()> {
        self.session_call("POST", "/window", Some(json!({"handle": handle})))
            .map(|_| ())
    }

    /// The current URL.
    pub fn url(&self) -> anyhow::Result<String> {
        Ok(self
            .session_call("GET", "/url", None)?
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// Every element matching `css` now.
    pub fn find_all(&self, css: &str) -> anyhow::Result<Vec<Element<'_>>> {
        let found = self.session_call(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        )?;
        Ok(found
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e[ELEMENT].as_str())
            .map(|id| Element {
                browser: self,
                id: id.to_string(),
            })
            .collect())
    }

    /// The first element matching `css`, waiting up to `timeout` for it to appear.
    pub fn wait_for(&self, css: &str, timeout: Duration) -> anyhow::Result<Element<'_>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.find_all(css)?.into_iter().next() {
                return Ok(e);
            }
            if Instant::now() > deadline {
                let body = self
                    .find_all("body")?
                    .into_iter()
                    .next()
                    .and_then(|b| b.text().ok())
                    .unwrap_or_default();
                anyhow::bail!(
                    "no element {css:?} after {timeout:?} at {}; page text: {body}; browser log: {}",
                    self.url().unwrap_or_default(),
                    self.console()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Click the first element matching `css`, waiting up to `timeout` for it; the page re-renders on
    /// live updates, so an element replaced between finding and clicking is looked up again.
    pub fn click(&self, css: &str, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.wait_for(css, left)?.click() {
                Ok(()) => return Ok(()),
                Err(e) if e.to_string().contains("stale element") && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Wait until the text of the first element matching `css` satisfies `check`.
    pub fn wait_text(&self, css: &str, timeout: Duration, check: impl Fn(&str) -> bool) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        loop {
            // A stale element (re-rendered meanwhile) is looked up again.
            if let Some(e) = self.find_all(css)?.into_iter().next()
                && let Ok(t) = e.text()
            {
                if check(&t) {
                    return Ok(t);
                }
                last = t;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the text of {css:?} never matched within {timeout:?}; last: {last:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The browser's console messages so far (for failure reports).
    pub fn console(&self) -> String {
        self.session_call("POST", "/se/log", Some(json!({"type": "browser"})))
            .map(|v| v.to_string())
            .unwrap_or_default()
    }

    /// Run `script` in the page (an async function body receiving `done` as its last argument).
    pub fn execute_async(&self, script: &str, args: Vec<Value>) -> anyhow::Result<Value> {
        self.session_call("POST", "/execute/async", Some(json!({"script": script, "args": args})))
    }

    /// Run `script` (a function body) in the page.
    pub fn execute(&self, script: &str, args: Vec<Value>) -> anyhow::Result<Value> {
        self.session_call("POST", "/execute/sync", Some(json!({"script": script, "args": args})))
    }

    /// Run a Chrome DevTools Protocol command (chromedriver's `goog/cdp/execute`), e.g.
    /// `Runtime.getHeapUsage`.
    pub fn cdp(&self, cmd: &str, params: Value) -> anyhow::Result<Value> {
        self.session_call("POST", "/goog/cdp/execute", Some(json!({"cmd": cmd, "params": params})))
    }

    /// Save a PNG screenshot of the page to `path`.
    pub fn screenshot(&self, path: &std::path::Path) -> anyhow::Result<()> {
        use base64::Engine;
        let data = self.session_call("GET", "/screenshot", None)?;
        let png = base64::engine::general_purpose::STANDARD.decode(data.as_str().unwrap_or_default())?;
        std::fs::write(path, png)?;
        Ok(())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.call("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// An element of the page.
pub struct Element<'a> {
    browser: &'a Browser,
    id: String,
}

impl Element<'_> {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        self.browser
            .session_call(method, &format!("/element/{}{path}", self.id), body)
    }

    /// Click it.
    pub fn click(&self) -> anyhow::Result<()> {
        self.call("POST", "/click", Some(json!({}))).map(|_| ())
    }

    /// Type `text` into it.
    pub fn send_keys(&self, text: &str) -> anyhow::Result<()> {
        self.call("POST", "/value", Some(json!({"text": text}))).map(|_| ())
    }

    /// Its visible text.
    pub fn text(&self) -> anyhow::Result<String> {
        Ok(self
            .call("GET", "/text", None)?
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// An attribute.
    pub fn attr(&self, name: &str) -> anyhow::Result<Option<String>> {
        Ok(self
            .call("GET", &format!("/attribute/{name}"), None)?
            .as_str()
            .map(str::to_string))
    }

    /// Whether it is displayed.
    pub fn displayed(&self) -> anyhow::Result<bool> {
        Ok(self.call("GET", "/displayed", None)?.as_bool().unwrap_or(false))
    }
}
