//! Scale to zero (issue 35) on a namespaced daemon with a 200 ms idle tick: an idle app
//! sleeps after its `idleTimeoutS` (its processes and cgroups gone), 100 parallel requests
//! wake it with exactly one start and none fails, an SSE stream held open past the timeout
//! keeps it awake and is not cut, a run keeps it awake, a sleeping app stays asleep across a
//! daemon restart, the `page` strategy answers browsers with the starting page, and a wake
//! that fails answers 503 `WAKE_FAILED` and sends `app.wake_failed`.

use std::time::Duration;

use serde_json::json;

use super::runs::wait_run_final;
use super::Sandboxed;
use crate::notifications::allow_loopback;
use crate::notifications::receiver::Receiver;
use crate::support::{cli, eventually, missing_tool, TestDaemon, TestResponse};

/// Counts its starts in `/data/starts` (shown at `/starts`), starts 300 ms late, streams
/// server-sent events at `/sse`, and refuses to start once `/break` was asked for.
const APP: &str = r#"
const fs = require('fs');
if (fs.existsSync('/data/broken')) { console.error('broken on purpose'); process.exit(3); }
fs.appendFileSync('/data/starts', 'x');
const server = require('http').createServer((req, res) => {
  if (req.url === '/starts') return res.end(String(fs.readFileSync('/data/starts', 'utf8').length));
  if (req.url === '/break') { fs.writeFileSync('/data/broken', '1'); return res.end('broken'); }
  if (req.url === '/sse') {
    res.writeHead(200, {'content-type': 'text/event-stream'});
    let n = 0;
    const timer = setInterval(() => res.write(`data: ${n++}\n\n`), 200);
    req.on('close', () => clearInterval(timer));
    return;
  }
  res.end('hi');
});
setTimeout(() => server.listen(process.env.PORT), 300);
"#;

const EXTRA: &str = "[sleep]\ntick_ms = 200\n";

async fn app_state(daemon: &TestDaemon) -> String {
    let project = daemon.api("GET", "/api/projects/shop", None).await.json();
    project["appState"].as_str().unwrap_or("?").to_owned()
}

async fn wait_state(daemon: &TestDaemon, state: &str, within: Duration) {
    let reached = eventually(within, || async { app_state(daemon).await == state }).await;
    assert!(
        reached,
        "appState never became {state}: {}",
        app_state(daemon).await
    );
}

async fn deploy(daemon: &TestDaemon, sleep: serde_json::Value) -> String {
    let status = daemon
        .deploy(
            "shop",
            &[("server.js", APP, 0o644)],
            json!({"startCommand": "node server.js"}),
        )
        .await;
    let patched = set_sleep(daemon, sleep.clone()).await;
    assert_eq!(patched.status, 200, "{}", patched.text());
    assert_eq!(patched.json()["settings"]["sleep"], sleep);
    status["deploymentId"].as_str().unwrap().to_owned()
}

async fn set_sleep(daemon: &TestDaemon, sleep: serde_json::Value) -> TestResponse {
    let body = json!({ "sleep": sleep });
    daemon.api("PATCH", "/api/projects/shop", Some(body)).await
}

async fn starts(daemon: &TestDaemon) -> String {
    let answer = daemon.app_get("shop", "/starts", &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    answer.text()
}

/// The step cgroups of `deployment`'s app instances that still exist.
fn app_cgroups(sandboxed: &Sandboxed, deployment: &str) -> Vec<String> {
    super::chaos::step_cgroups(&sandboxed.instance)
        .into_iter()
        .filter(|name| name.contains(&format!("{deployment}-app")))
        .collect()
}

/// A namespaced daemon with a 200 ms idle tick, subscribed to the sleep events at a
/// receiver; `None` (with a printed reason) where it cannot run.
async fn start(test: &str) -> Option<(Sandboxed, Receiver)> {
    if missing_tool("node", "the app is a node server") {
        return None;
    }
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap()).await;
    let sandboxed = Sandboxed::start(test, &format!("{EXTRA}{}", allow_loopback()))?;
    let events = ["app.slept", "app.woke", "app.wake_failed"];
    let body = json!({"url": receiver.url("/hook"), "events": events});
    let subscribed = sandboxed
        .daemon
        .api("POST", "/api/notifications", Some(body))
        .await;
    assert_eq!(subscribed.status, 201, "{}", subscribed.text());
    Some((sandboxed, receiver))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_apps_sleep_and_wake_once_for_many_requests_streams_and_runs_keep_them_awake() {
    let test = "idle_apps_sleep_and_wake_once_for_many_requests_streams_and_runs_keep_them_awake";
    let Some((mut sandboxed, receiver)) = start(test).await else {
        return;
    };
    let daemon = &sandboxed.daemon;
    let too_short = json!({"idleTimeoutS": 1, "strategy": "hold"});
    let refused = set_sleep(daemon, too_short.clone()).await;
    assert_eq!(refused.status, 404, "no project yet: {}", refused.text());
    let deployment = deploy(daemon, json!({"idleTimeoutS": 2, "strategy": "hold"})).await;
    let refused = set_sleep(daemon, too_short).await;
    refused.assert_error(400, "INVALID_BODY");
    assert_eq!(app_state(daemon).await, "running");

    // Idle for 2 s: asleep, its processes and cgroups gone.
    wait_state(daemon, "sleeping", Duration::from_secs(15)).await;
    sandboxed.assert_no_project_processes("the app fell asleep");
    assert_eq!(app_cgroups(&sandboxed, &deployment), Vec::<String>::new());
    assert!(
        eventually(Duration::from_secs(10), || async {
            !receiver.events("/hook", "app.slept").is_empty()
        })
        .await
    );
    let metrics = daemon.api("GET", "/api/metrics", None).await.text();
    assert!(metrics.contains("slipway_sleeping_apps 1"), "{metrics}");

    // 100 requests at once: one start, every one answered by the app.
    let started = std::time::Instant::now();
    let answers = futures_util::future::join_all(
        (0..100).map(|_| async { daemon.app_get("shop", "/", &[]).await }),
    )
    .await;
    let failed: Vec<_> = answers
        .iter()
        .filter(|a| a.status != 200 || a.text() != "hi")
        .collect();
    assert!(
        failed.is_empty(),
        "{} failed, e.g. {} {}",
        failed.len(),
        failed[0].status,
        failed[0].text()
    );
    eprintln!(
        "100 requests to a sleeping app answered in {:?}",
        started.elapsed()
    );
    assert_eq!(starts(daemon).await, "2", "one start at deploy, one wake");
    assert_eq!(app_state(daemon).await, "running");
    assert!(
        eventually(Duration::from_secs(10), || async {
            receiver.events("/hook", "app.woke").len() == 1
        })
        .await
    );
    let woke = receiver.events("/hook", "app.woke")[0].json();
    assert_eq!(woke["project"], "shop");
    let metrics = daemon.api("GET", "/api/metrics", None).await.text();
    assert!(
        metrics.contains("slipway_app_wakes_total{result=\"ok\"} 1"),
        "{metrics}"
    );

    // An SSE stream open for 6 s (three timeouts): awake, and never cut.
    let stream = tokio::net::TcpStream::connect(daemon.http).await.unwrap();
    let got = read_sse(stream, &daemon.app_host("shop"), Duration::from_secs(6)).await;
    assert!(got >= 20, "the stream was cut after {got} events");
    assert_eq!(
        starts(daemon).await,
        "2",
        "it never slept while the stream was open"
    );

    // A run of 5 s keeps it awake too; then it sleeps.
    let run = daemon
        .api(
            "POST",
            "/api/projects/shop/runs",
            Some(json!({"command": "sleep 5"})),
        )
        .await;
    assert_eq!(run.status, 202, "{}", run.text());
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(app_state(daemon).await, "running", "asleep during a run");
    let run = wait_run_final(
        daemon,
        run.json()["runId"].as_str().unwrap(),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(run["state"], "succeeded", "{run}");
    wait_state(daemon, "sleeping", Duration::from_secs(15)).await;

    // Asleep across a restart: not started; `slipway wake` and `sleep`.
    sandboxed.daemon.restart();
    let daemon = &sandboxed.daemon;
    assert_eq!(app_state(daemon).await, "sleeping");
    sandboxed.assert_no_project_processes("a restart of a sleeping app's daemon");
    let woke = cli(daemon, &["wake", "shop"]);
    assert!(woke.contains("shop is running"), "{woke}");
    assert_eq!(starts(daemon).await, "3");
    let slept = cli(daemon, &["sleep", "shop"]);
    assert!(slept.contains("shop is sleeping"), "{slept}");
    assert_eq!(app_state(daemon).await, "sleeping");
}

/// Reads `/sse` for `within`; how many events came.
async fn read_sse(mut stream: tokio::net::TcpStream, host: &str, within: Duration) -> usize {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!("GET /sse HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut text = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    let mut buffer = [0u8; 4096];
    while let Ok(read) = tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
        match read {
            Ok(0) | Err(_) => break,
            Ok(n) => text.extend_from_slice(&buffer[..n]),
        }
    }
    String::from_utf8_lossy(&text).matches("data: ").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_get_the_starting_page_and_a_failed_wake_answers_503_and_notifies() {
    let test = "browsers_get_the_starting_page_and_a_failed_wake_answers_503_and_notifies";
    let Some((sandboxed, receiver)) = start(test).await else {
        return;
    };
    let daemon = &sandboxed.daemon;
    deploy(daemon, json!({"idleTimeoutS": 600, "strategy": "page"})).await;
    let slept = daemon.api("POST", "/api/projects/shop/sleep", None).await;
    assert_eq!(slept.status, 202, "{}", slept.text());
    assert_eq!(slept.json()["appState"], "sleeping");

    // A browser gets the page that reloads itself, and the app starts.
    let html = [("accept", "text/html,application/xhtml+xml".to_owned())];
    let page = daemon.app_get("shop", "/", &html).await;
    assert_eq!(page.status, 503, "{}", page.text());
    assert!(
        page.text().contains("http-equiv=\"refresh\""),
        "{}",
        page.text()
    );
    wait_state(daemon, "running", Duration::from_secs(30)).await;
    assert_eq!(daemon.app_get("shop", "/", &html).await.text(), "hi");

    // Broken while asleep: the wake fails with the reason, and says so.
    assert_eq!(daemon.app_get("shop", "/break", &[]).await.text(), "broken");
    let slept = daemon.api("POST", "/api/projects/shop/sleep", None).await;
    assert_eq!(slept.status, 202, "{}", slept.text());
    let failed = daemon.app_get("shop", "/api-call", &[]).await;
    failed.assert_error(503, "WAKE_FAILED");
    assert!(
        eventually(Duration::from_secs(10), || async {
            !receiver.events("/hook", "app.wake_failed").is_empty()
        })
        .await
    );
    assert_eq!(
        app_state(daemon).await,
        "sleeping",
        "asleep again, for the next try"
    );
    let woken = daemon.api("POST", "/api/projects/shop/wake", None).await;
    assert_eq!(woken.status, 202, "{}", woken.text());
}
