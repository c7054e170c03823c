//! Process types and instances (issue 32), in namespaces mode: a Procfile's `worker` runs
//! beside `web`, each instance in its own sandbox; `PATCH …/formation` scales one type
//! without touching the others, leaves exactly the instances asked for, refuses what the
//! machine's memory cannot hold, and a `replace` worker never overlaps itself across
//! deploys.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};

use super::chaos::step_cgroups;
use super::Sandboxed;
use crate::support::{missing_tool, TestDaemon};

/// Answers with the address it was reached at and its pid; `/overlaps` tells what the worker
/// found in `/data`.
const WEB: &str = r#"
const fs = require('fs');
require('http').createServer((req, res) => {
  if (req.url === '/overlaps') {
    let text = 'none';
    try { text = fs.readFileSync('/data/overlaps', 'utf8'); } catch (e) {}
    res.end(text);
    return;
  }
  res.end(JSON.stringify({address: req.socket.localAddress, pid: process.pid, v: process.env.V || ''}));
}).listen(process.env.PORT);
"#;

/// A singleton: holds `/data/worker.lock` while it runs; finding it held means another copy
/// runs at the same time, which it writes down in `/data/overlaps`.
const WORKER: &str = r#"
const fs = require('fs');
try {
  fs.writeFileSync('/data/worker.lock', String(process.pid), {flag: 'wx'});
} catch (e) {
  fs.appendFileSync('/data/overlaps', 'overlap at ' + new Date().toISOString() + '\n');
}
const release = () => { try { fs.unlinkSync('/data/worker.lock'); } catch (e) {} process.exit(0); };
process.on('SIGTERM', release);
setInterval(() => {}, 1000);
"#;

const PROCFILE: &str = "web: node server.js\nworker: node worker.js\n";

fn files() -> Vec<(&'static str, &'static str, u32)> {
    vec![
        ("server.js", WEB, 0o644),
        ("worker.js", WORKER, 0o644),
        ("Procfile", PROCFILE, 0o644),
    ]
}

async fn formation(daemon: &TestDaemon, slug: &str) -> Value {
    let response = daemon
        .api("GET", &format!("/api/projects/{slug}/formation"), None)
        .await;
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()
}

async fn scale(daemon: &TestDaemon, slug: &str, body: Value) -> Value {
    let response = daemon
        .api(
            "PATCH",
            &format!("/api/projects/{slug}/formation"),
            Some(body),
        )
        .await;
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()
}

/// The pids of a type's running instances, by instance name.
fn pids(formation: &Value, process: &str) -> Vec<(String, i64)> {
    formation["types"][process]["running"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["instance"].as_str().unwrap().to_owned(),
                i["pid"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

/// Host processes of the projects whose command line is `command` (not the `sh -c` above it).
fn count_processes(sandboxed: &Sandboxed, command: &str) -> usize {
    sandboxed
        .project_processes()
        .iter()
        .filter(|line| {
            line.split_once(": ")
                .is_some_and(|(_, rest)| rest.starts_with(&format!("{command} (pid")))
        })
        .count()
}

fn start(test: &str) -> Option<Sandboxed> {
    if missing_tool("node", "the apps are node servers") {
        return None;
    }
    Sandboxed::start(test, "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_scale_alone_and_leave_exactly_what_was_asked() {
    let Some(sandboxed) = start("types_scale_alone_and_leave_exactly_what_was_asked") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    daemon
        .deploy("shop", &files(), json!({"startCommand": "node server.js"}))
        .await;
    let first = formation(daemon, "shop").await;
    assert_eq!(first["types"]["web"]["instances"], 1, "{first}");
    assert_eq!(first["types"]["worker"]["deploy"], "replace", "{first}");
    assert_eq!(first["types"]["worker"]["command"], "node worker.js");
    assert_eq!(pids(&first, "worker").len(), 1, "{first}");
    let web_before = pids(&first, "web");

    // Scaling the worker leaves every web pid as it was.
    let scaled = scale(
        daemon,
        "shop",
        json!({"worker": {"instances": 3, "memoryMb": 128}}),
    )
    .await;
    assert_eq!(pids(&scaled, "worker").len(), 3, "{scaled}");
    assert_eq!(scaled["types"]["worker"]["memoryMb"], 128);
    assert_eq!(
        pids(&scaled, "web"),
        web_before,
        "scaling worker touched web"
    );
    assert_eq!(count_processes(&sandboxed, "node worker.js"), 3);
    let workers = pids(&scaled, "worker");
    // Metrics per type and instance.
    let metrics = daemon.api("GET", "/api/metrics", None).await.text();
    for instance in ["web.1", "worker.1", "worker.2", "worker.3"] {
        let process = instance.split('.').next().unwrap();
        let sample = format!(
            "slipway_app_instance_memory_bytes{{project=\"shop\",process=\"{process}\",instance=\"{instance}\"}}"
        );
        assert!(metrics.contains(&sample), "no {sample} in:\n{metrics}");
    }

    // Scaling web leaves every worker pid as it was; three web instances, three addresses.
    let scaled = scale(daemon, "shop", json!({"web": {"instances": 3}})).await;
    assert_eq!(
        pids(&scaled, "worker"),
        workers,
        "scaling web touched the workers"
    );
    let addresses: BTreeSet<String> = scaled["types"]["web"]["running"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["address"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        addresses.len(),
        3,
        "each instance its own address: {scaled}"
    );
    assert_eq!(count_processes(&sandboxed, "node server.js"), 3);
    let mut served = BTreeSet::new();
    for _ in 0..60 {
        let response = daemon.app_get("shop", "/", &[]).await;
        assert_eq!(response.status, 200, "{}", response.text());
        let body: Value = serde_json::from_str(&response.text()).unwrap();
        served.insert(body["address"].as_str().unwrap().to_owned());
    }
    assert!(served.len() >= 2, "traffic reached only {served:?}");

    // 3 → 1 leaves exactly one web sandbox: one process, one cgroup.
    let scaled = scale(daemon, "shop", json!({"web": {"instances": 1}})).await;
    assert_eq!(pids(&scaled, "web").len(), 1, "{scaled}");
    assert_eq!(pids(&scaled, "worker"), workers);
    assert_eq!(count_processes(&sandboxed, "node server.js"), 1);
    let web_cgroups: Vec<String> = step_cgroups(&sandboxed.instance)
        .into_iter()
        .filter(|name| name.contains("-app-web_"))
        .collect();
    assert_eq!(web_cgroups.len(), 1, "web cgroups left: {web_cgroups:?}");
    let response = daemon.app_get("shop", "/", &[]).await;
    assert_eq!(response.status, 200);

    // 0 stops the type.
    let scaled = scale(daemon, "shop", json!({"worker": {"instances": 0}})).await;
    assert!(pids(&scaled, "worker").is_empty(), "{scaled}");
    assert_eq!(count_processes(&sandboxed, "node worker.js"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_refusals_change_nothing() {
    let Some(sandboxed) = start("scale_refusals_change_nothing") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    daemon
        .deploy("shop", &files(), json!({"startCommand": "node server.js"}))
        .await;
    let before = formation(daemon, "shop").await;
    let refused = daemon
        .api(
            "PATCH",
            "/api/projects/shop/formation",
            Some(json!({"web": {"instances": 32, "memoryMb": 262144}})),
        )
        .await;
    refused.assert_error(409, "CONFLICT");
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("asks 8388608 MiB") && message.contains("MiB is free"),
        "{message}"
    );
    for (body, status) in [
        (json!({"clock": {"instances": 1}}), 409),
        (json!({"web": {"instances": 33}}), 400),
        (json!({"web": {"instances": -1}}), 400),
        (json!({"web": {"replicas": 2}}), 400),
        (json!({"web": {"deploy": "replace"}}), 400),
        (json!({}), 400),
        (json!({"Web": {"instances": 1}}), 400),
    ] {
        let response = daemon
            .api("PATCH", "/api/projects/shop/formation", Some(body.clone()))
            .await;
        assert_eq!(response.status, status, "{body}: {}", response.text());
    }
    let after = formation(daemon, "shop").await;
    assert_eq!(pids(&after, "web"), pids(&before, "web"));
    assert_eq!(after["types"]["web"]["instances"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replace_worker_never_overlaps_across_deploys() {
    let Some(sandboxed) = start("a_replace_worker_never_overlaps_across_deploys") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    for _ in 0..5 {
        daemon
            .deploy("jobs", &files(), json!({"startCommand": "node server.js"}))
            .await;
    }
    let overlaps = daemon.app_get("jobs", "/overlaps", &[]).await;
    assert_eq!(overlaps.text(), "none", "the worker ran twice at once");
    // The drain of each replaced deployment ends; one worker remains.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let live = formation(daemon, "jobs").await;
    assert_eq!(pids(&live, "worker").len(), 1, "{live}");
    assert_eq!(count_processes(&sandboxed, "node worker.js"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_formation_survives_a_daemon_restart_with_the_same_pids() {
    let Some(mut sandboxed) = start("the_formation_survives_a_daemon_restart_with_the_same_pids")
    else {
        return;
    };
    sandboxed
        .daemon
        .deploy("shop", &files(), json!({"startCommand": "node server.js"}))
        .await;
    let before = scale(
        &sandboxed.daemon,
        "shop",
        json!({"web": {"instances": 2}, "worker": {"instances": 2}}),
    )
    .await;
    sandboxed.daemon.stop();
    sandboxed.daemon.start_again();
    let after = formation(&sandboxed.daemon, "shop").await;
    assert_eq!(pids(&after, "web"), pids(&before, "web"), "{after}");
    assert_eq!(pids(&after, "worker"), pids(&before, "worker"), "{after}");
    let response = sandboxed.daemon.app_get("shop", "/", &[]).await;
    assert_eq!(response.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_fails_no_request_and_affinity_pins_a_client() {
    let Some(sandboxed) = start("a_killed_instance_fails_no_request_and_affinity_pins_a_client")
    else {
        return;
    };
    let daemon = &sandboxed.daemon;
    daemon
        .deploy("shop", &files(), json!({"startCommand": "node server.js"}))
        .await;
    scale(
        daemon,
        "shop",
        json!({"web": {"instances": 2}, "worker": {"instances": 0}}),
    )
    .await;

    // Four clients in a loop for 3 s; one web instance is SIGKILLed after 1 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let client = || async move {
        let (mut ok, mut failed) = (0, Vec::new());
        while std::time::Instant::now() < deadline {
            let response = daemon.app_get("shop", "/", &[]).await;
            match response.status {
                200 => ok += 1,
                status => failed.push(format!("{status}: {}", response.text())),
            }
        }
        (ok, failed)
    };
    let killer = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let victim = sandboxed
            .project_processes()
            .into_iter()
            .find_map(|line| {
                let (_, rest) = line.split_once(": ")?;
                let pid = rest
                    .strip_prefix("node server.js (pid ")?
                    .strip_suffix(')')?;
                pid.parse::<i32>().ok()
            })
            .expect("a web instance's process");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(victim),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
    };
    let (results, ()) = tokio::join!(
        futures_util::future::join_all((0..4).map(|_| client())),
        killer
    );
    let (mut ok, mut failed) = (0, Vec::new());
    for (o, f) in results {
        ok += o;
        failed.extend(f);
    }
    assert!(ok > 50, "only {ok} requests");
    let proxy_log: Vec<String> = daemon
        .log_text()
        .lines()
        .filter(|line| line.contains("proxy"))
        .map(str::to_owned)
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} failed: {:?}\n{proxy_log:#?}",
        failed.len(),
        ok + failed.len(),
        &failed[..failed.len().min(5)]
    );

    // Cookie affinity: the first answer sets the cookie, every request carrying it reaches
    // the same instance.
    scale(daemon, "shop", json!({"web": {"affinity": "cookie"}})).await;
    tokio::time::sleep(Duration::from_secs(3)).await; // the killed instance is back
    let first = daemon.app_get("shop", "/", &[]).await;
    let cookie = first
        .header("set-cookie")
        .expect("an affinity cookie")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert!(cookie.starts_with("slipway_instance=web."), "{cookie}");
    let mut reached = BTreeSet::new();
    for _ in 0..20 {
        let response = daemon
            .app_get("shop", "/", &[("cookie", cookie.clone())])
            .await;
        let body: Value = serde_json::from_str(&response.text()).unwrap();
        reached.insert(body["address"].as_str().unwrap().to_owned());
    }
    assert_eq!(reached.len(), 1, "a pinned client reached {reached:?}");
}

/// `web.3` exits at once until `/data/fixed` exists; `/fix` creates it.
const PICKY_WEB: &str = r#"
const fs = require('fs');
if (process.env.SLIPWAY_INSTANCE === 'web.3' && !fs.existsSync('/data/fixed')) process.exit(3);
require('http').createServer((req, res) => {
  if (req.url === '/fix') fs.writeFileSync('/data/fixed', 'yes');
  res.end(JSON.stringify({address: req.socket.localAddress, instance: process.env.SLIPWAY_INSTANCE}));
}).listen(process.env.PORT);
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_healthy_switches_with_enough_instances_and_the_rest_join_later() {
    let Some(sandboxed) =
        start("min_healthy_switches_with_enough_instances_and_the_rest_join_later")
    else {
        return;
    };
    let daemon = &sandboxed.daemon;
    let files = [("server.js", PICKY_WEB, 0o644)];
    daemon
        .deploy("picky", &files, json!({"startCommand": "node server.js"}))
        .await;
    // web=3 needing all three: web.3 does not start, so the scale is refused and undone.
    let refused = daemon
        .api(
            "PATCH",
            "/api/projects/picky/formation",
            Some(json!({"web": {"instances": 3}})),
        )
        .await;
    refused.assert_error(409, "CONFLICT");
    assert!(refused.text().contains("web.3"), "{}", refused.text());
    assert_eq!(pids(&formation(daemon, "picky").await, "web").len(), 1);

    // Needing 2 of 3, the scale goes through: web.3 keeps trying.
    let scaled = scale(
        daemon,
        "picky",
        json!({"web": {"instances": 3, "minHealthy": 2}}),
    )
    .await;
    assert_eq!(scaled["types"]["web"]["minHealthy"], 2);
    // A deploy needing 2 of 3 goes live with web.1 and web.2.
    let status = daemon
        .deploy("picky", &files, json!({"startCommand": "node server.js"}))
        .await;
    let logs = daemon
        .logs_text(status["deploymentId"].as_str().unwrap())
        .await;
    assert!(
        logs.contains("2 of 3 `web` instances are up, 2 needed"),
        "{logs}"
    );
    let running = |formation: &Value| {
        formation["types"]["web"]["running"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["state"] == "running")
            .count()
    };
    assert_eq!(running(&formation(daemon, "picky").await), 2);

    // Once web.3 can start, it joins the route by itself.
    assert_eq!(daemon.app_get("picky", "/fix", &[]).await.status, 200);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while running(&formation(daemon, "picky").await) < 3 {
        assert!(std::time::Instant::now() < deadline, "web.3 never came up");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut seen = BTreeSet::new();
    for _ in 0..60 {
        let body: Value =
            serde_json::from_str(&daemon.app_get("picky", "/", &[]).await.text()).unwrap();
        seen.insert(body["instance"].as_str().unwrap().to_owned());
    }
    assert!(seen.contains("web.3"), "web.3 is not routed: {seen:?}");
}

/// A worker that beats: `/data/beat` exists while it runs; `/sick` on the web makes the
/// health command fail.
const SICKLY_WEB: &str = r#"
const fs = require('fs');
require('http').createServer((req, res) => {
  if (req.url === '/sick') fs.writeFileSync('/data/sick', 'yes');
  res.end('ok');
}).listen(process.env.PORT);
"#;
const BEATING_WORKER: &str = r#"
require('fs').writeFileSync('/data/beat', String(process.pid));
setInterval(() => {}, 1000);
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_failing_its_health_command_is_restarted() {
    if missing_tool("node", "the apps are node servers") {
        return;
    }
    let Some(sandboxed) = Sandboxed::start(
        "a_worker_failing_its_health_command_is_restarted",
        "[limits]\nhealth_interval_s = 1\nhealth_timeout_s = 5\n",
    ) else {
        return;
    };
    let daemon = &sandboxed.daemon;
    let files = [
        ("server.js", SICKLY_WEB, 0o644),
        ("worker.js", BEATING_WORKER, 0o644),
        ("Procfile", PROCFILE, 0o644),
    ];
    let status = daemon
        .deploy("beats", &files, json!({"startCommand": "node server.js"}))
        .await;
    let refused = daemon
        .api(
            "PATCH",
            "/api/projects/beats/formation",
            Some(json!({"web": {"healthCommand": "true"}})),
        )
        .await;
    refused.assert_error(400, "INVALID_BODY");
    // Failing at once: the change is refused and undone.
    let refused = daemon
        .api(
            "PATCH",
            "/api/projects/beats/formation",
            Some(json!({"worker": {"healthCommand": "test -f /data/never"}})),
        )
        .await;
    refused.assert_error(409, "CONFLICT");
    assert!(
        refused.text().contains("did not exit 0"),
        "{}",
        refused.text()
    );
    let healthy = "test -f /data/beat && ! test -f /data/sick";
    let scaled = scale(
        daemon,
        "beats",
        json!({"worker": {"healthCommand": healthy}}),
    )
    .await;
    assert_eq!(scaled["types"]["worker"]["healthCommand"], healthy);
    let before = pids(&scaled, "worker");
    assert_eq!(before.len(), 1, "{scaled}");

    assert_eq!(daemon.app_get("beats", "/sick", &[]).await.status, 200);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = formation(daemon, "beats").await;
        let restarts = now["types"]["worker"]["running"][0]["restarts"]
            .as_u64()
            .unwrap_or(0);
        if restarts >= 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never restarted: {now}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let logs = daemon
        .logs_text(status["deploymentId"].as_str().unwrap())
        .await;
    assert!(
        logs.contains("the health command failed 3 times in a row"),
        "{logs}"
    );
}
