//! Usage history (issue 37): traffic sent through the router is in the project's history as
//! typed points, and stays there across daemon restarts (each stop writes the minute under
//! way; the next daemon's reading of the same minute adds to it). Bad queries are 400 in the
//! contract's envelope; the machine's history is the operator's.

use serde_json::json;
use slipway::api::types::{MachineHistory, UsageHistory};

use crate::support::{DaemonOptions, TestDaemon};

/// A node server: 500 at `/boom`, 200 elsewhere.
pub(crate) const SERVER: &str = "require('http').createServer((req, res) => { res.statusCode = req.url === '/boom' ? 500 : 200; res.end('hello from web'); }).listen(process.env.PORT);\n";

/// Deploys [`SERVER`] as `web` with `build` as its build command; false (after a SKIP line)
/// without node.
pub(crate) async fn deploy_web(daemon: &TestDaemon, build: &str) -> bool {
    if crate::support::missing_tool("node", "the app is a node server") {
        return false;
    }
    let files = [("server.js", SERVER, 0o644)];
    let body = json!({"startCommand": "node server.js", "buildCommand": build});
    daemon.deploy("web", &files, body).await;
    true
}

fn history_daemon() -> TestDaemon {
    TestDaemon::start_with(
        DaemonOptions::default().extra_toml("[rate_limits]\nrequests_per_minute = 1000\n"),
    )
}

async fn history(daemon: &TestDaemon) -> UsageHistory {
    let response = daemon
        .api("GET", "/api/projects/web/usage/history?step=minute", None)
        .await;
    assert_eq!(response.status, 200, "{}", response.text());
    serde_json::from_slice(&response.body).expect("a typed UsageHistory")
}

async fn send(daemon: &TestDaemon, n: usize) -> u64 {
    let mut bytes = 0;
    for _ in 0..n {
        let response = daemon.app_get("web", "/", &[]).await;
        assert_eq!(response.status, 200);
        bytes += response.body.len() as u64;
    }
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_is_kept_in_the_history_across_restarts() {
    let mut daemon = history_daemon();
    if !deploy_web(&daemon, "true").await {
        return;
    }
    let mut first_bytes = send(&daemon, 16).await;
    // A request with a body: its bytes are the history's `bytesIn`.
    let host = daemon.app_host("web");
    let posted = daemon
        .request("POST", &host, "/", &[], vec![b'x'; 1234])
        .await;
    assert_eq!(posted.status, 200);
    first_bytes += posted.body.len() as u64;
    daemon.restart();
    let after_one = history(&daemon).await;
    let total = |h: &UsageHistory| h.points.iter().map(|p| p.requests.success).sum::<u64>();
    assert_eq!(total(&after_one), 17, "{after_one:?}");
    assert_eq!(
        after_one.points.iter().map(|p| p.bytes_out).sum::<u64>(),
        first_bytes
    );
    assert_eq!(
        after_one.points.iter().map(|p| p.bytes_in).sum::<u64>(),
        1234
    );
    let busy = after_one
        .points
        .iter()
        .find(|p| p.requests_total > 0)
        .unwrap();
    assert!(busy.latency_p50_ms.unwrap() > 0.0);
    assert!(busy.latency_p95_ms.unwrap() >= busy.latency_p50_ms.unwrap());
    let builds: Vec<_> = after_one.points.iter().flat_map(|p| &p.builds).collect();
    assert_eq!(builds.len(), 1, "the one build: {after_one:?}");
    assert_eq!(builds[0].result, "succeeded");
    assert!(builds[0].duration_seconds > 0.0);

    send(&daemon, 5).await;
    daemon.restart();
    let after_two = history(&daemon).await;
    assert_eq!(total(&after_two), 22, "{after_two:?}");
    println!(
        "history after two restarts: {} points, {} requests",
        after_two.points.len(),
        total(&after_two)
    );

    let machine = daemon.api("GET", "/api/usage/history", None).await;
    assert_eq!(machine.status, 200, "{}", machine.text());
    let machine: MachineHistory = serde_json::from_slice(&machine.body).unwrap();
    let point = machine.points.last().expect("the machine's minutes");
    assert!(point.memory_total_bytes > 0 && point.disk_total_bytes > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_queries_are_refused_in_the_envelope() {
    let daemon = history_daemon();
    daemon
        .api("POST", "/api/projects", Some(json!({"slug": "web"})))
        .await;
    for query in [
        "step=day",
        "from=yesterday",
        "to=2025-01-01T00:00:00",
        "limit=3",
    ] {
        for path in ["/api/projects/web/usage/history", "/api/usage/history"] {
            daemon
                .api("GET", &format!("{path}?{query}"), None)
                .await
                .assert_error(400, "INVALID_QUERY");
        }
    }
    let empty = daemon
        .api(
            "GET",
            "/api/projects/web/usage/history?from=2025-01-02T00:00:00Z&to=2025-01-01T00:00:00%2B01:00&step=hour",
            None,
        )
        .await;
    assert_eq!(empty.status, 200, "{}", empty.text());
    assert_eq!(empty.json()["points"], json!([]));
    // The document says what the checks take: the same pattern, the step's two names.
    let doc = daemon.api("GET", "/api/openapi.json", None).await.json();
    let operation = &doc["paths"]["/api/projects/{projectId}/usage/history"]["get"];
    let parameters = operation["parameters"].as_array().unwrap();
    let parameter = |name: &str| {
        parameters
            .iter()
            .find(|p| p["name"] == name && p["in"] == "query")
            .unwrap_or_else(|| panic!("no query parameter {name}: {operation}"))["schema"]
            .clone()
    };
    for name in ["from", "to"] {
        assert_eq!(
            parameter(name)["pattern"],
            slipway::api::types::HISTORY_TIME_PATTERN,
            "{operation}"
        );
    }
    let step = parameter("step");
    let step = match step["$ref"].as_str() {
        Some(reference) => {
            let name = reference.rsplit('/').next().unwrap();
            doc["components"]["schemas"][name].clone()
        }
        None => step,
    };
    assert_eq!(step["enum"], json!(["minute", "hour"]), "{step}");
    let missing = daemon
        .api("GET", "/api/projects/nope/usage/history", None)
        .await;
    assert_eq!(missing.status, 404);
}

/// In namespaces mode: memory and CPU per process type (and per instance, for web's two)
/// from the instances' cgroups, against their limits. CPU needs two readings by one daemon: a minute's turn, then the stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_apps_memory_and_cpu_are_kept_per_process_type() {
    if crate::support::missing_tool("node", "the app is a node server") {
        return;
    }
    let Some(mut sandboxed) = crate::sandboxed::Sandboxed::start("usage history per type", "")
    else {
        return;
    };
    let daemon = &sandboxed.daemon;
    let files = [
        ("server.js", SERVER, 0o644),
        ("worker.js", "setInterval(() => {}, 1000);\n", 0o644),
        (
            "Procfile",
            "web: node server.js\nworker: node worker.js\n",
            0o644,
        ),
    ];
    daemon
        .deploy("web", &files, json!({"startCommand": "node server.js"}))
        .await;
    let scaled = daemon
        .api(
            "PATCH",
            "/api/projects/web/formation",
            Some(json!({"web": {"instances": 2}})),
        )
        .await;
    assert_eq!(scaled.status, 200, "{}", scaled.text());
    // The sampler's reading at the next minute's turn (its first: no CPU yet).
    let turned = crate::support::eventually(std::time::Duration::from_secs(75), || async {
        history(daemon)
            .await
            .points
            .iter()
            .any(|p| p.memory_bytes.is_some())
    })
    .await;
    assert!(turned, "no minute sampled within 75 s");
    send(daemon, 5).await;
    sandboxed.daemon.restart();
    let after = history(&sandboxed.daemon).await;
    let last = after.points.last().unwrap();
    assert!(last.cpu_cores.is_some(), "{last:?}");
    let types: Vec<&str> = last
        .process_types
        .iter()
        .map(|t| t.process_type.as_str())
        .collect();
    assert_eq!(types, ["web", "worker"], "{last:?}");
    for figures in &last.process_types {
        let memory = figures.memory_bytes.unwrap();
        assert!(
            memory > 1_000_000 && memory < figures.memory_limit_bytes,
            "{figures:?}"
        );
    }
    // web runs two instances: each has its own figures too; worker's one is its type's.
    let (web, worker) = (&last.process_types[0], &last.process_types[1]);
    assert_eq!((web.instances, worker.instances), (2, 1), "{last:?}");
    let names: Vec<&str> = web
        .by_instance
        .iter()
        .map(|i| i.instance.as_str())
        .collect();
    assert_eq!(names, ["web.1", "web.2"], "{web:?}");
    let own: u64 = web
        .by_instance
        .iter()
        .map(|i| i.memory_bytes.unwrap())
        .sum();
    assert_eq!(Some(own), web.memory_bytes, "{web:?}");
    assert!(
        web.by_instance.iter().all(|i| i.cpu_cores.is_some()),
        "{web:?}"
    );
    assert!(worker.by_instance.is_empty(), "{worker:?}");
    let limits: u64 = last
        .process_types
        .iter()
        .map(|t| t.memory_limit_bytes)
        .sum();
    assert_eq!(last.memory_limit_bytes, Some(limits));
    assert_eq!(after.cpu_limit_cores, Some(3.0), "three instances of 1 CPU");
    println!(
        "sandboxed: {} MB in all, {:.4} cores",
        last.memory_bytes.unwrap() / 1_000_000,
        last.cpu_cores.unwrap()
    );
}
