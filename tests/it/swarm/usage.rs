//! Metrics per task: what the tasks report (their container's cgroup, through the fetch
//! server) as the formation, the Prometheus page and the project's usage show it, and the
//! report path's refusals.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::web_running;
use crate::support::{eventually, TestDaemon};

/// One instance's figures on the Prometheus page: memory bytes and CPU seconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Figures {
    pub memory_bytes: Option<f64>,
    pub cpu_seconds: Option<f64>,
}

/// `orbit`'s instances on `GET /api/metrics` (`slipway_app_instance_*{instance="web.2"}`).
pub async fn prometheus_instances(daemon: &TestDaemon) -> BTreeMap<String, Figures> {
    let page = daemon.api("GET", "/api/metrics", None).await;
    assert_eq!(page.status, 200, "{}", page.text());
    let mut figures: BTreeMap<String, Figures> = BTreeMap::new();
    for line in page.text().lines() {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        if !labels.contains("project=\"orbit\"") {
            continue;
        }
        let Some(instance) = labels
            .split(',')
            .find_map(|l| l.strip_prefix("instance=\""))
            .map(|i| i.trim_end_matches('"').to_owned())
        else {
            continue;
        };
        let value: f64 = value.trim().parse().unwrap();
        let entry = figures.entry(instance).or_default();
        match name {
            "slipway_app_instance_memory_bytes" => entry.memory_bytes = Some(value),
            "slipway_app_instance_cpu_seconds_total" => entry.cpu_seconds = Some(value),
            _ => {}
        }
    }
    figures
}

/// Whether a figure is what a small node server in a task uses: memory over 1 MiB and
/// under its limit, some CPU and less than a minute of it.
fn plausible(figures: &Figures, limit_bytes: f64) -> bool {
    figures
        .memory_bytes
        .is_some_and(|b| b > f64::from(1 << 20) && b < limit_bytes)
        && figures.cpu_seconds.is_some_and(|s| s > 0.0 && s < 60.0)
}

/// Waits (30 s at most) until each of `orbit`'s `count` web instances has plausible memory
/// and CPU on the formation, the Prometheus page and the project's usage; returns them by
/// instance with the node each runs on.
pub async fn every_task_measured(daemon: &TestDaemon, count: usize) -> Vec<(String, Figures)> {
    let formation: Value = daemon
        .api("GET", "/api/projects/orbit/formation", None)
        .await
        .json();
    let limit = formation["types"]["web"]["memoryMb"].as_f64().unwrap() * f64::from(1 << 20);
    let last = std::sync::Mutex::new((Vec::new(), BTreeMap::new(), Value::Null));
    let measured = eventually(Duration::from_secs(30), || async {
        let running = web_running(daemon).await;
        let metrics = prometheus_instances(daemon).await;
        let usage: Value = daemon
            .api("GET", "/api/projects/orbit/usage", None)
            .await
            .json();
        let all = running.len() == count
            && running.iter().all(|i| {
                let name = i["instance"].as_str().unwrap();
                i["memoryBytes"].as_u64().is_some_and(|b| b > 1 << 20)
                    && metrics.get(name).is_some_and(|f| plausible(f, limit))
            })
            && usage["app"]["memoryBytes"]
                .as_u64()
                .is_some_and(|b| b > (count as u64) << 20)
            && usage["app"]["cpuSeconds"].as_f64().is_some_and(|s| s > 0.0);
        *last.lock().unwrap() = (running, metrics, usage);
        all
    })
    .await;
    let (running, metrics, usage) = last.into_inner().unwrap();
    assert!(
        measured,
        "every web task is measured: formation {running:?}\nmetrics {metrics:?}\nusage {usage}"
    );
    running
        .iter()
        .map(|i| {
            let name = i["instance"].as_str().unwrap();
            let node = i["node"].as_str().unwrap_or_default();
            (format!("{name} on {node}"), metrics[name])
        })
        .collect()
}

/// Prints the figures measured, in MiB and seconds.
pub fn print_figures(what: &str, figures: &[(String, Figures)]) {
    for (instance, f) in figures {
        println!(
            "{what}: {instance}: {:.1} MiB, {:.2} s CPU",
            f.memory_bytes.unwrap_or_default() / f64::from(1 << 20),
            f.cpu_seconds.unwrap_or_default()
        );
    }
}

/// The status of a request to the fetch server (`body`: a POST of it), trusting only the
/// certificate the boot document names.
pub async fn fetch_status(url: &str, cert_pem: &Value, body: Option<&str>) -> u16 {
    let pem = cert_pem.as_str().unwrap().as_bytes().to_vec();
    let (url, body) = (url.to_owned(), body.map(str::to_owned));
    let output = tokio::task::spawn_blocking(move || {
        let ca = std::env::temp_dir().join(format!("slipway-swarm-ca-{}.pem", std::process::id()));
        std::fs::write(&ca, pem).unwrap();
        let mut curl = std::process::Command::new("curl");
        curl.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
            .arg(&ca);
        if let Some(body) = body {
            curl.args([
                "-H",
                "content-type: application/json",
                "--data-binary",
                &body,
            ]);
        }
        let output = curl.arg(&url).output().expect("curl");
        let _ = std::fs::remove_file(&ca);
        output
    })
    .await
    .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// Whether the `/proc/<pid>/stat` lines of a task's processes show `task-boot` (`slipway`)
/// as a child of the engine's init (PID 1) and the app (its `sh`, or what `sh` became) as its
/// child, leading a process group of its own (the one `task-boot` passes signals on to).
pub fn app_in_its_own_group(stats: &str) -> bool {
    // pid (comm) state ppid pgrp …
    let fields = |line: &str| -> Option<(String, Vec<i64>)> {
        let (pid, rest) = line.split_once(" (")?;
        let (comm, rest) = rest.rsplit_once(") ")?;
        let numbers: Vec<i64> = rest
            .split(' ')
            .skip(1)
            .take(2)
            .flat_map(str::parse)
            .collect();
        Some((comm.to_owned(), [vec![pid.parse().ok()?], numbers].concat()))
    };
    let processes: Vec<(String, Vec<i64>)> = stats.lines().filter_map(fields).collect();
    let of = |name: &str| -> Vec<&Vec<i64>> {
        processes
            .iter()
            .filter(|(comm, _)| comm == name)
            .map(|(_, n)| n)
            .collect()
    };
    let boots = of("slipway");
    // [pid, ppid, pgrp]
    boots.len() == 1
        && boots[0][1] == 1
        && processes
            .iter()
            .any(|(_, app)| app[1] == boots[0][0] && app[2] == app[0])
}

/// A report body for `instance` (what a task's reporter sends).
pub fn report(instance: &str) -> String {
    format!(r#"{{"instance":"{instance}","boot":"probe","memoryBytes":1048576,"cpuSeconds":0.5}}"#)
}
