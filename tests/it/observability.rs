//! Metrics (issue 15): the Prometheus page on `metrics_listen` and `GET /api/metrics` passes
//! `promtool check metrics`; N requests to a project read exactly N in its counter, and the
//! bytes the visitors received exactly in its byte counter (static and proxied); the usage
//! API and `slipway usage` show the same figures; labels never carry request paths.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;

use crate::support::{http_request, DaemonOptions, TestDaemon, TestResponse, BIN};

fn metrics_daemon() -> TestDaemon {
    TestDaemon::start_with(
        DaemonOptions::default()
            .root_toml("metrics_listen = \"127.0.0.1:0\"\n")
            .extra_toml("[rate_limits]\nrequests_per_minute = 1000\n"),
    )
}

/// `GET /metrics` on the metrics listener (no token).
async fn scrape(daemon: &TestDaemon) -> String {
    let addr = daemon.metrics.expect("metrics_listen is bound");
    let response = http_request(addr, "GET", "metrics.test", "/metrics", &[], vec![]).await;
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(
        response.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    response.text()
}

/// `name{labels} value` lines keyed by `name{labels}`.
fn samples(page: &str) -> HashMap<String, f64> {
    page.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (key, value) = line.rsplit_once(' ').expect("sample line");
            (key.to_owned(), value.parse().expect("sample value"))
        })
        .collect()
}

fn sample(page: &str, key: &str) -> f64 {
    *samples(page)
        .get(key)
        .unwrap_or_else(|| panic!("no sample {key} in:\n{page}"))
}

/// Runs `promtool check metrics` on the page; `false` (with the reason printed) when promtool
/// is missing.
fn promtool_accepts(page: &str) -> bool {
    use std::io::Write;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        println!(
            "SKIP: promtool is not installed (Debian package prometheus); the page is not linted"
        );
        return false;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(page.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success() && output.stdout.is_empty() && output.stderr.is_empty(),
        "promtool check metrics refused the page:\n{}{}\npage:\n{page}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_requests_are_counted_exactly_and_promtool_accepts_the_page() {
    let daemon = metrics_daemon();
    let page = "<h1>counted</h1>";
    let status = daemon.deploy_page("site", page).await;
    assert_eq!(status["status"], "provisioning_complete", "{status}");
    // Nothing counted yet for the new project, and the families are there already.
    let before = scrape(&daemon).await;
    assert_eq!(
        sample(
            &before,
            "slipway_http_requests_total{project=\"site\",code=\"2xx\"}"
        ),
        0.0
    );

    const OK: usize = 37;
    const MISSING: usize = 5;
    let mut bytes_received = 0;
    for _ in 0..OK {
        let response = daemon.app_get("site", "/", &[]).await;
        assert_eq!(response.status, 200);
        bytes_received += response.body.len();
    }
    for index in 0..MISSING {
        // A path a visitor typed must never become a label.
        let path = format!("/evil-label-{index}.txt?x=%22");
        let response: TestResponse = daemon.app_get("site", &path, &[]).await;
        assert_eq!(response.status, 404);
        bytes_received += response.body.len();
    }
    // A request for an unknown host is nobody's.
    let unknown = daemon
        .request("GET", "nobody.localhost", "/", &[], vec![])
        .await;
    assert_eq!(unknown.status, 404);

    let page_text = scrape(&daemon).await;
    let key = |name: &str, labels: &str| format!("{name}{{project=\"site\"{labels}}}");
    assert_eq!(
        sample(
            &page_text,
            &key("slipway_http_requests_total", ",code=\"2xx\"")
        ),
        OK as f64
    );
    assert_eq!(
        sample(
            &page_text,
            &key("slipway_http_requests_total", ",code=\"4xx\"")
        ),
        MISSING as f64
    );
    assert_eq!(
        sample(
            &page_text,
            &key("slipway_http_requests_total", ",code=\"5xx\"")
        ),
        0.0
    );
    assert_eq!(
        sample(
            &page_text,
            &key("slipway_http_request_duration_seconds_count", "")
        ),
        (OK + MISSING) as f64
    );
    assert_eq!(
        sample(
            &page_text,
            &key(
                "slipway_http_request_duration_seconds_bucket",
                ",le=\"+Inf\""
            )
        ),
        (OK + MISSING) as f64
    );
    assert_eq!(
        sample(&page_text, &key("slipway_http_response_bytes_total", "")),
        bytes_received as f64
    );
    assert_eq!(
        sample(
            &page_text,
            "slipway_provisioning_runs_total{result=\"succeeded\"}"
        ),
        1.0
    );
    assert_eq!(
        sample(&page_text, "slipway_provisioning_duration_seconds_count"),
        1.0
    );
    assert!(sample(&page_text, "process_resident_memory_bytes") > 0.0);
    assert!(sample(&page_text, "process_open_fds") > 0.0);
    assert!(
        !page_text.contains("evil-label"),
        "a path became a label:\n{page_text}"
    );
    assert!(
        !page_text.contains("nobody"),
        "an unknown host became a label"
    );
    promtool_accepts(&page_text);

    // The same page through the API, for any token; not without one.
    let api = daemon.api("GET", "/api/metrics", None).await;
    assert_eq!(api.status, 200);
    assert_eq!(
        sample(
            &api.text(),
            &key("slipway_http_requests_total", ",code=\"2xx\"")
        ),
        OK as f64
    );
    let anonymous = daemon
        .request("GET", &daemon.control_host(), "/api/metrics", &[], vec![])
        .await;
    anonymous.assert_error(401, "UNAUTHORIZED");
    // The metrics listener answers only /metrics.
    let other = http_request(
        daemon.metrics.unwrap(),
        "GET",
        "x",
        "/api/projects",
        &[],
        vec![],
    )
    .await;
    assert_eq!(other.status, 404);

    // The usage API: the same figures as JSON.
    let usage = daemon.api("GET", "/api/projects/site/usage", None).await;
    assert_eq!(usage.status, 200, "{}", usage.text());
    let usage = usage.json();
    assert_eq!(usage["slug"], "site");
    assert_eq!(usage["requests"]["2xx"], OK);
    assert_eq!(usage["requests"]["4xx"], MISSING);
    assert_eq!(usage["requestsTotal"], OK + MISSING);
    assert_eq!(usage["responseBytes"], bytes_received);
    assert_eq!(usage["requestDuration"]["count"], OK + MISSING);
    assert_eq!(
        usage["app"],
        serde_json::Value::Null,
        "a static site has no app"
    );
    daemon
        .api("GET", "/api/projects/nope/usage", None)
        .await
        .assert_error(404, "NOT_FOUND");

    // `slipway usage` prints them.
    let output = tokio::process::Command::new(BIN)
        .args(["usage", "site"])
        .env(
            "SLIPWAY_URL",
            format!("http://slipway.localhost:{}", daemon.http.port()),
        )
        .env("SLIPWAY_TOKEN", &daemon.token)
        .env("HOME", daemon.dir.path())
        .env_remove("SLIPWAY_CA_FILE")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "requests       {} (1xx 0, 2xx {OK}, 3xx 0, 4xx {MISSING}, 5xx 0)",
            OK + MISSING
        )),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxied_requests_and_streamed_bytes_are_counted_exactly() {
    if crate::support::missing_tool("node", "the app is a node server") {
        return;
    }
    let daemon = metrics_daemon();
    daemon
        .deploy(
            "web",
            &[("server.js", crate::pipeline::NODE_APP, 0o644)],
            json!({"startCommand": "node server.js"}),
        )
        .await;
    const N: usize = 23;
    let mut bytes_received = 0;
    for _ in 0..N {
        let response = daemon.app_get("web", "/", &[]).await;
        assert_eq!(response.status, 200);
        bytes_received += response.body.len();
    }
    let page = scrape(&daemon).await;
    assert_eq!(
        sample(
            &page,
            "slipway_http_requests_total{project=\"web\",code=\"2xx\"}"
        ),
        N as f64
    );
    assert_eq!(
        sample(&page, "slipway_http_response_bytes_total{project=\"web\"}"),
        bytes_received as f64
    );
    assert_eq!(
        sample(&page, "slipway_upstream_errors_total{project=\"web\"}"),
        0.0
    );
    promtool_accepts(&page);
    let usage = daemon
        .api("GET", "/api/projects/web/usage", None)
        .await
        .json();
    assert_eq!(usage["requestsTotal"], N);
    assert!(usage["app"]["deploymentId"]
        .as_str()
        .unwrap()
        .starts_with("dpl_"));

    // A crash and restart counts in app_restarts.
    assert_eq!(daemon.app_get("web", "/crash", &[]).await.status, 200);
    let restarted = crate::support::eventually(Duration::from_secs(20), || async {
        let page = scrape(&daemon).await;
        samples(&page).get("slipway_app_restarts_total{project=\"web\"}") == Some(&1.0)
    })
    .await;
    assert!(
        restarted,
        "the restart was not counted:\n{}",
        scrape(&daemon).await
    );
}

/// With `sandbox.mode = "namespaces"` the app runs in its own cgroup: its memory and CPU are
/// on the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_app_reports_memory_and_cpu_from_its_cgroup() {
    if crate::support::missing_tool("node", "the app is a node server") {
        return;
    }
    let Some(sandboxed) = crate::sandboxed::Sandboxed::start_with(
        "app memory metrics",
        DaemonOptions::default().root_toml("metrics_listen = \"127.0.0.1:0\"\n"),
        "",
    ) else {
        return;
    };
    let daemon = &sandboxed.daemon;
    daemon
        .deploy(
            "boxed",
            &[("server.js", crate::pipeline::NODE_APP, 0o644)],
            json!({"startCommand": "node server.js"}),
        )
        .await;
    for _ in 0..10 {
        assert_eq!(daemon.app_get("boxed", "/", &[]).await.status, 200);
    }
    let page = scrape(daemon).await;
    let memory = sample(&page, "slipway_app_memory_bytes{project=\"boxed\"}");
    assert!(
        memory > 1_000_000.0 && memory < 1024.0 * 1024.0 * 1024.0,
        "node's memory: {memory}"
    );
    let usage = daemon
        .api("GET", "/api/projects/boxed/usage", None)
        .await
        .json();
    assert!(
        usage["app"]["memoryBytes"].as_u64().unwrap() > 1_000_000,
        "{usage}"
    );
    let cpu = sample(&page, "slipway_app_cpu_seconds_total{project=\"boxed\"}");
    assert!(cpu > 0.0 && cpu < 60.0, "node's CPU seconds: {cpu}");
    promtool_accepts(&page);
}

/// With TLS on, every served certificate's expiry is on the page (labelled by its name only),
/// and the project's own certificate is in its usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_expiry_is_reported_per_domain() {
    let daemon = TestDaemon::start_with(
        DaemonOptions::default()
            .tls(crate::support::TlsSetup::Internal)
            .root_toml("metrics_listen = \"127.0.0.1:0\"\n"),
    );
    daemon.deploy_verified("secure", "<p>tls</p>").await;
    let page = scrape(&daemon).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as f64;
    for domain in ["secure.localhost", "slipway.localhost"] {
        let expiry = sample(
            &page,
            &format!("slipway_certificate_expiry_timestamp_seconds{{domain=\"{domain}\"}}"),
        );
        assert!(
            expiry > now + 86_400.0 && expiry < now + 400.0 * 86_400.0,
            "{domain} expires at {expiry}"
        );
    }
    promtool_accepts(&page);
    let usage = daemon
        .api("GET", "/api/projects/secure/usage", None)
        .await
        .json();
    let certificates = usage["certificates"].as_array().unwrap();
    assert_eq!(certificates.len(), 1, "{usage}");
    assert_eq!(certificates[0]["domain"], "secure.localhost");
    assert!(certificates[0]["expiresAt"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
}
