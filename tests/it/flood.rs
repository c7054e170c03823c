//! One tenant against the daemon (issue 9): an app that prints as fast as it can for 60 s.
//! The daemon's memory and the API's latency stay bounded, the excess is dropped and counted,
//! and the app keeps serving.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::rss_kib;
use crate::support::TestDaemon;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_flood_leaves_memory_and_api_latency_bounded() {
    if crate::support::missing_tool("python3", "the flooding app is a python3 http.server") {
        return;
    }
    // A low rate, so the flood is over it even on a loaded machine where `yes` is slowed down
    // by the pipe: the excess must be dropped and said so.
    let daemon = TestDaemon::start_with(
        crate::support::DaemonOptions::default()
            .extra_toml("[limits]\nlog_rate_kb_s = 64\nlog_burst_kb = 256\n"),
    );
    let pid = daemon.child.as_ref().unwrap().id();
    let baseline = rss_kib(pid);
    let status = daemon
        .deploy(
            "noisy",
            &[("index.html", "<h1>noisy</h1>\n", 0o644)],
            json!({
                "installCommand": "",
                "buildCommand": "",
                "startCommand": "(yes 'a line of a log flood' &) ; exec python3 -m http.server \"$PORT\""
            }),
        )
        .await;
    let deployment = status["deploymentId"].as_str().unwrap().to_owned();

    let started = Instant::now();
    let mut worst_latency = Duration::ZERO;
    let mut peak_rss = baseline;
    while started.elapsed() < Duration::from_secs(60) {
        let asked = Instant::now();
        assert_eq!(daemon.api("GET", "/api/projects", None).await.status, 200);
        worst_latency = worst_latency.max(asked.elapsed());
        peak_rss = peak_rss.max(rss_kib(pid));
        // 40 a minute: under the API rate limit of 60.
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    assert_eq!(daemon.app_get("noisy", "/", &[]).await.status, 200);
    println!(
        "flood: baseline RSS {baseline} KiB, peak {peak_rss} KiB, worst API latency {worst_latency:?}"
    );
    assert!(
        peak_rss < baseline + 200 * 1024,
        "daemon RSS grew from {baseline} KiB to {peak_rss} KiB during the flood"
    );
    assert!(
        worst_latency < Duration::from_secs(3),
        "API latency reached {worst_latency:?} during the flood"
    );
    // The excess was dropped and said so; what was kept stays within the retention.
    let page = daemon
        .api(
            "GET",
            &format!("/api/deployments/{deployment}/logs?stream=system&limit=5000"),
            None,
        )
        .await
        .json();
    let dropped = page["logs"].as_array().unwrap().iter().any(|line| {
        line["message"]
            .as_str()
            .unwrap_or("")
            .contains("lines dropped")
    });
    assert!(dropped, "no 'lines dropped' system line: {page}");
    let store_size = std::fs::metadata(daemon.data_dir().join("slipway.redb"))
        .unwrap()
        .len();
    assert!(
        store_size < 200 * 1024 * 1024,
        "the store grew to {store_size} bytes"
    );
}

/// Builds queue for `limits.max_concurrent_builds` slots instead of all running at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builds_wait_for_a_slot() {
    let daemon = TestDaemon::start_with(
        crate::support::DaemonOptions::default()
            .extra_toml("[limits]\nmax_concurrent_builds = 1\n"),
    );
    let build = json!({"installCommand": "", "buildCommand": "sleep 1 && mkdir -p dist && echo ok > dist/index.html"});
    for slug in ["first", "second"] {
        let upload = daemon
            .upload(slug, crate::support::targz(&[("x", "x", 0o644)]))
            .await;
        assert_eq!(upload.status, 201);
    }
    let started = [
        daemon.provision("first", build.clone()).await,
        daemon.provision("second", build).await,
    ];
    let mut finished = Vec::new();
    let mut waited = Vec::new();
    for run in &started {
        finished.push(daemon.wait_complete(run, Duration::from_secs(60)).await);
        let logs = daemon
            .logs_text(run["deploymentId"].as_str().unwrap())
            .await;
        waited.push(logs.contains("waiting for a build slot"));
    }
    // Whichever got the slot second waited, and its source began after the other's build.
    let (waiting, other) = match waited.as_slice() {
        [false, true] => (1, 0),
        [true, false] => (0, 1),
        _ => panic!("exactly one run waits for the slot: {waited:?}"),
    };
    let started_at = |status: &serde_json::Value, name: &str| {
        status["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .and_then(|s| s["startedAt"].as_str())
            .unwrap()
            .to_owned()
    };
    assert!(
        started_at(&finished[waiting], "source") >= started_at(&finished[other], "build"),
        "{:?}",
        finished
    );
}
