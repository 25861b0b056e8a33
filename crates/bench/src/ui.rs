//! Benchmark 8: the web UI's Applications list with N Applications, in headless Chromium (through
//! chromedriver), against `capstan server` on its own local control plane (no controller runs: the
//! Applications need not sync, and nothing else changes them while the page is measured); and the
//! list API's first page (its size and time) at that N.
//!
//! The list keeps the first rows in the DOM (more as it is scrolled), so "all N" means the page
//! holds every Application: its count says `(N of N)`.
//!
//! All times are taken inside the page (`performance.now()`), so WebDriver's own round trips do not
//! count: long tasks come from a `PerformanceObserver` (`longtask`, tasks over 50 ms), frame gaps
//! from a `requestAnimationFrame` loop, the JS heap from the DevTools protocol.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use capstan_testkit::TestCluster;
use capstan_testkit::webdriver::Browser;
use futures::{StreamExt, stream};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

pub(crate) const PASSWORD: &str = "bench-ui-password";
/// Destination namespaces the Applications are spread over.
const NAMESPACES: usize = 25;

/// `capstan server`, stopped when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Send `request(i)` for each of the `n` Applications, `concurrency` at a time.
async fn for_each_app<F, Fut>(n: usize, concurrency: usize, request: F) -> anyhow::Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let results: Vec<anyhow::Result<()>> = stream::iter(0..n)
        .map(request)
        .buffer_unordered(concurrency)
        .collect()
        .await;
    results.into_iter().collect()
}

fn name(i: usize) -> String {
    format!("app-{i:04}-t{}", i % 10)
}

/// Installs the page's instruments (long tasks, frame gaps), fills in the login form, notes the
/// time and submits it; a timer then notes when the first row is in the DOM and when the list
/// counts all N Applications.
const LOGIN: &str = r#"
const [n, user, password] = arguments;
const b = window.__bench = { long: [], maxGap: 0, last: 0 };
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) b.long.push([e.startTime, e.duration]);
}).observe({ type: 'longtask', buffered: true });
const frame = (t) => { if (b.last) b.maxGap = Math.max(b.maxGap, t - b.last); b.last = t; requestAnimationFrame(frame); };
requestAnimationFrame(frame);
const form = document.getElementById('login-form');
form.username.value = user;
form.password.value = password;
b.load = { t0: performance.now(), first: null, all: null };
b.maxGap = 0;
const poll = setInterval(() => {
  const c = document.querySelectorAll('[data-testid="app-row"]').length;
  if (c > 0 && b.load.first === null) b.load.first = performance.now() - b.load.t0;
  const count = document.getElementById('count');
  if (count && count.textContent === `(${n} of ${n})`) { b.load.all = performance.now() - b.load.t0; b.load.rows = c; clearInterval(poll); }
}, 20);
form.requestSubmit();
"#;

/// Types into the search box (value + `input` event, as typing does) and waits two frames, so that
/// the time includes the render and the frame that shows it; five times to `term` and back to "".
const FILTER: &str = r#"
const done = arguments[arguments.length - 1];
const term = arguments[0];
const input = document.querySelector('[data-testid="app-search"]');
const frames = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
(async () => {
  await frames();
  const out = [];
  for (let i = 0; i < 5; i++) {
    for (const v of [term, '']) {
      const t = performance.now();
      input.value = v;
      input.dispatchEvent(new Event('input', { bubbles: true }));
      await frames();
      out.push({ term: v, ms: performance.now() - t, rows: document.querySelectorAll('[data-testid="app-row"]').length, count: document.getElementById('count').textContent });
    }
  }
  done(out);
})();
"#;

/// Before the burst: resets the frame-gap maximum, notes the time, and checks every 50 ms whether
/// every row in the DOM shows the new destination namespace (column 7, ending in "-b") and the
/// namespace filter offers only new ones (it lists the namespaces of all N Applications).
const BURST: &str = r#"
const b = window.__bench;
b.burst = { t0: performance.now(), done: null, changed: 0 };
b.maxGap = 0;
b.last = 0;
const poll = setInterval(() => {
  const rows = [...document.querySelectorAll('[data-testid="app-row"]')];
  const changed = rows.filter((r) => r.children[6].textContent.endsWith('-b')).length;
  const options = [...document.querySelectorAll('select[data-filter="namespace"] option')].slice(1);
  b.burst.changed = changed;
  if (rows.length > 0 && changed === rows.length && options.length > 0 && options.every((o) => o.textContent.endsWith('-b'))) {
    b.burst.done = performance.now() - b.burst.t0;
    clearInterval(poll);
  }
}, 50);
"#;

/// Long tasks since `arguments[0]` (page time): `[count, total ms, longest ms]`.
const LONG_TASKS: &str = r#"
const since = arguments[0];
const tasks = window.__bench.long.filter(([start]) => start >= since);
return [tasks.length, tasks.reduce((s, [, d]) => s + d, 0), tasks.reduce((m, [, d]) => Math.max(m, d), 0)];
"#;

/// Benchmark 8: N Applications (labels `team: t0..t9`, 25 destination namespaces, project
/// `default`) listed by the web UI; see the module documentation.
pub async fn ui_list(capstan: &Path, n: usize) -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let client = cluster.client().await?;
    let kc = cluster.kubeconfig().to_string_lossy().to_string();
    crate::setup::run(capstan, &["install", "--kubeconfig", &kc])?;
    let out = Command::new(capstan)
        .args(["account", "set-password", "admin", "--password", PASSWORD])
        .env("KUBECONFIG", &kc)
        .output()?;
    if !out.status.success() {
        bail!("set-password failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    let apps: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "capstan",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("capstan.dev", "v1alpha1", "Application"),
            "applications",
        ),
    );
    let created = Instant::now();
    for_each_app(n, 16, |i| {
            let apps = apps.clone();
            async move {
                let name = name(i);
                let manifest = json!({
                    "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
                    "metadata": {"name": name, "namespace": "capstan", "labels": {"team": format!("t{}", i % 10)}},
                    "spec": {
                        "project": "default",
                        "source": {"repoURL": "https://git.example.com/fleet.git", "targetRevision": "main", "path": format!("apps/{name}")},
                        "destination": {"server": "https://kubernetes.default.svc", "namespace": format!("ns-{}", i % NAMESPACES)},
                    },
                });
                apps.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(manifest))
                    .await?;
                Ok(())
            }
        })
    .await?;
    let created = created.elapsed();

    let cache = tempfile::tempdir()?;
    let mut child = Command::new(capstan)
        .args(["server", "--kubeconfig", &kc, "--listen", "127.0.0.1:0", "--cache-dir"])
        .arg(cache.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting capstan server")?;
    let stderr = child.stderr.take().context("stderr is piped")?;
    let _server = Server(child);
    let mut lines = BufReader::new(stderr).lines();
    let base = loop {
        let line = lines
            .next()
            .ok_or_else(|| anyhow::anyhow!("capstan server exited before saying where it listens"))??;
        if let Some(url) = line.strip_prefix("capstan server listening on ") {
            break url.trim().to_string();
        }
    };
    // Keep draining its log so that it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.by_ref() {});
    // localhost, not 127.0.0.1: the browser treats it as a secure context for the Secure cookie.
    let port = base.rsplit(':').next().unwrap_or_default().to_string();
    let base = format!("http://localhost:{port}");
    let first_page = first_pages(&base, n)?;

    let browser = Browser::start()?;
    let load = login_until_all_rows(&browser, &base, n)?;
    let load_t0 = load["t0"].as_f64().unwrap_or(0.0);
    let load_rows = load["rows"].as_u64().unwrap_or(0);
    // The load phase's long tasks, only up to the moment all rows were there.
    let load_long_until = browser.execute(
        "const [a, b] = arguments; const t = window.__bench.long.filter(([s]) => s >= a && s <= b); return [t.length, t.reduce((m, [, d]) => Math.max(m, d), 0)];",
        vec![json!(load_t0), json!(load_t0 + load["all"].as_f64().unwrap_or(0.0))],
    )?;

    // Search: `-t3` matches every tenth name.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The longest frame gap since the login (the rows are in; nothing else happened since).
    let load_gap = browser.execute(
        "const g = window.__bench.maxGap; window.__bench.maxGap = 0; return g;",
        vec![],
    )?;
    browser.cdp("Performance.enable", json!({}))?;
    let filter_t0 = browser.execute("return performance.now()", vec![])?;
    let before = Metrics::of(&browser)?;
    let samples = browser.execute_async(FILTER, vec![json!("-t3")])?;
    let filter_cost = Metrics::of(&browser)?.since(&before);
    let filter_long = browser.execute(LONG_TASKS, vec![filter_t0])?;
    let filter_gap = browser.execute("return window.__bench.maxGap", vec![])?;
    let samples = samples.as_array().cloned().unwrap_or_default();
    let (mut narrow, mut widen) = (Vec::new(), Vec::new());
    let mut narrow_count = String::new();
    for s in &samples {
        let ms = s["ms"].as_f64().unwrap_or(f64::NAN);
        if s["term"] == json!("") {
            anyhow::ensure!(
                s["count"] == json!(format!("({n} of {n})")),
                "clearing the search counted {}",
                s["count"]
            );
            widen.push(ms);
        } else {
            let want = format!("({} of {n})", (0..n).filter(|i| name(*i).contains("-t3")).count());
            anyhow::ensure!(
                s["count"] == json!(want),
                "the search counted {}, not {want}",
                s["count"]
            );
            narrow_count = format!("{} ({} in the DOM)", s["count"].as_str().unwrap_or_default(), s["rows"]);
            narrow.push(ms);
        }
    }

    // The burst: every Application's destination namespace changes at once.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = Metrics::of(&browser)?;
    browser.execute(BURST, vec![])?;
    let burst_t0 = browser.execute("return window.__bench.burst.t0", vec![])?;
    let patched = Instant::now();
    for_each_app(n, 32, |i| {
        let apps = apps.clone();
        async move {
            let patch = json!({"spec": {"destination": {"namespace": format!("ns-{}-b", i % NAMESPACES)}}});
            apps.patch(&name(i), &PatchParams::default(), &Patch::Merge(patch))
                .await?;
            Ok(())
        }
    })
    .await?;
    let patched = patched.elapsed();
    let burst = poll(
        &browser,
        "return window.__bench.burst.done === null ? null : window.__bench.burst",
        120,
    )
    .with_context(|| format!("not every row showed the change; browser log: {}", browser.console()))?;
    // Anything still queued after the last row changed counts too.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let burst_long = browser.execute(LONG_TASKS, vec![burst_t0])?;
    let burst_cost = Metrics::of(&browser)?.since(&before);
    let burst_gap = browser.execute("return window.__bench.maxGap", vec![])?;
    let heap = browser.cdp("Runtime.getHeapUsage", json!({}))?;
    let heap_mib = heap["usedSize"].as_f64().unwrap_or(0.0) / 1048576.0;
    let _ = browser.cdp("HeapProfiler.collectGarbage", json!({}));
    let heap_gc = browser.cdp("Runtime.getHeapUsage", json!({}))?;
    let heap_gc_mib = heap_gc["usedSize"].as_f64().unwrap_or(0.0) / 1048576.0;
    let dom_nodes = browser.execute("return document.getElementsByTagName('*').length", vec![])?;

    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let i = |v: &Value| v.as_u64().unwrap_or(0);
    println!(
        "8. UI list with {n} Applications (headless Chromium; created in {:.1} s; {first_page}): login → first row {:.0} ms, all {n} in the list {:.0} ms ({load_rows} rows in the DOM; {} long tasks, longest {:.0} ms; longest frame gap {:.0} ms); search narrowing to {narrow_count} {} ms, back to all {} ms (median (min–max) of 5 each, to the second frame after the input event; {} long tasks, longest {:.0} ms, longest frame gap {:.0} ms; main thread {filter_cost}); burst of {n} changes (patches sent in {:.1} s): every row and the namespace filter updated {:.0} ms after the first patch, {} long tasks totalling {:.0} ms (longest {:.0} ms), longest frame gap {:.0} ms, main thread {burst_cost}; JS heap {heap_mib:.1} MiB after the burst ({heap_gc_mib:.1} MiB after GC), {} DOM elements",
        created.as_secs_f64(),
        f(&load["first"]),
        f(&load["all"]),
        i(&load_long_until[0]),
        f(&load_long_until[1]),
        f(&load_gap),
        range(&narrow),
        range(&widen),
        i(&filter_long[0]),
        f(&filter_long[2]),
        f(&filter_gap),
        patched.as_secs_f64(),
        f(&burst["done"]),
        i(&burst_long[0]),
        f(&burst_long[1]),
        f(&burst_long[2]),
        f(&burst_gap),
        i(&dom_nodes),
    );
    Ok(())
}

/// Log in to the UI at `base` (a `localhost` address: the browser sends the Secure session cookie
/// only to a secure context) and wait until the list holds all `n` Applications. The page's own
/// figures, in ms from the login's submit: `first` (first row), `all` (every Application counted),
/// `rows` (rows in the DOM then), `t0` (the submit, on the page's clock).
pub(crate) fn login_until_all_rows(browser: &Browser, base: &str, n: usize) -> anyhow::Result<Value> {
    browser.goto(&format!("{base}/login"))?;
    browser.wait_for("[data-testid=\"login-submit\"]", Duration::from_secs(30))?;
    browser.execute(LOGIN, vec![json!(n), json!("admin"), json!(PASSWORD)])?;
    poll(
        browser,
        "return window.__bench.load.all === null ? null : window.__bench.load",
        120,
    )
    .with_context(|| format!("not all {n} rows appeared; browser log: {}", browser.console()))
}

/// The renderer's cumulative main-thread times (DevTools `Performance.getMetrics`, in seconds).
struct Metrics(std::collections::HashMap<String, f64>);

impl Metrics {
    fn of(browser: &Browser) -> anyhow::Result<Metrics> {
        let answer = browser.cdp("Performance.getMetrics", json!({}))?;
        Ok(Metrics(
            answer["metrics"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| Some((m["name"].as_str()?.to_string(), m["value"].as_f64()?)))
                .collect(),
        ))
    }

    /// Busy time since `before`, in milliseconds: "X ms busy (script Y, style Z, layout W)".
    fn since(&self, before: &Metrics) -> String {
        let d = |k: &str| (self.0.get(k).unwrap_or(&0.0) - before.0.get(k).unwrap_or(&0.0)) * 1000.0;
        format!(
            "{:.0} ms busy: script {:.0}, style {:.0}, layout {:.0}",
            d("TaskDuration"),
            d("ScriptDuration"),
            d("RecalcStyleDuration"),
            d("LayoutDuration")
        )
    }
}

/// "median (min–max)" of millisecond samples.
fn range(ms: &[f64]) -> String {
    let mut v = ms.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.as_slice() {
        [] => "-".into(),
        [only] => format!("{only:.0}"),
        _ => format!("{:.0} ({:.0}–{:.0})", v[v.len() / 2], v[0], v[v.len() - 1]),
    }
}

/// Run `script` every 200 ms until it returns something other than null.
fn poll(browser: &Browser, script: &str, seconds: u64) -> anyhow::Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let v = browser.execute(script, vec![])?;
        if !v.is_null() {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("{script:?} still null after {seconds} s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Wait until the server lists all `n` Applications (its watch has caught up), through the API;
/// then time its first pages of 50 and 100 (the best of 5 each), as "API first page …".
pub(crate) fn first_pages(base: &str, n: usize) -> anyhow::Result<String> {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    // 503 until the server has read its Secret.
    let deadline = Instant::now() + Duration::from_secs(60);
    let cookie = loop {
        let response = agent
            .post(format!("{base}/api/session"))
            .header("Content-Type", "application/json")
            .send(json!({"username": "admin", "password": PASSWORD}).to_string())?;
        if let Some(cookie) = response
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
        {
            break cookie.to_string();
        }
        if Instant::now() > deadline {
            bail!("login refused: {}", response.status());
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut r = agent
            .get(format!("{base}/api/applications"))
            .header("Cookie", &cookie)
            .call()?;
        let body: Value = serde_json::from_str(&r.body_mut().read_to_string()?).unwrap_or(Value::Null);
        let have = body["items"].as_array().map_or(0, Vec::len);
        if have == n {
            break;
        }
        if Instant::now() > deadline {
            bail!("the server lists {have} of {n} Applications after 60 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut pages = Vec::new();
    for limit in [50, 100] {
        let mut best: Option<(Duration, usize)> = None;
        for _ in 0..5 {
            let started = Instant::now();
            let mut r = agent
                .get(format!("{base}/api/applications?limit={limit}"))
                .header("Cookie", &cookie)
                .call()?;
            let body = r.body_mut().read_to_string()?;
            let took = started.elapsed();
            anyhow::ensure!(r.status() == 200, "first page of {limit}: {} {body}", r.status());
            if best.is_none_or(|(t, _)| took < t) {
                best = Some((took, body.len()));
            }
        }
        if let Some((took, bytes)) = best {
            pages.push(format!(
                "{limit}: {:.1} KB in {:.1} ms",
                bytes as f64 / 1000.0,
                took.as_secs_f64() * 1000.0
            ));
        }
    }
    Ok(format!("API first page of {}", pages.join(", of ")))
}
