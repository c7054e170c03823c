//! Chaos (issue 10): the daemon is killed with SIGKILL at 20 points spread over provisioning
//! (upload, source, install, build, deploy, the route switch) and serving, and started again
//! each time. After every restart: each run is complete or `INTERRUPTED`, the live deployment
//! answers, only the live app's process, cgroup and link are left, the nftables table is
//! there once, and the workspaces of interrupted builds are gone.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use super::Sandboxed;
use crate::support::{missing_tool, targz};

const APP: &str =
    "require('http').createServer((q, r) => r.end('v' + process.env.V)).listen(process.env.PORT);";

/// Child directories (step cgroups) of every `<instance>` cgroup directory.
pub(super) fn step_cgroups(instance: &str) -> Vec<String> {
    let output = std::process::Command::new("find")
        .args(["/sys/fs/cgroup", "-maxdepth", "7", "-type", "d", "-path"])
        .arg(format!("*/{instance}/*"))
        .output()
        .expect("find");
    let mut names: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            Path::new(line)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_twenty_points_leaves_a_consistent_machine() {
    if missing_tool("node", "the app is a node server") {
        return;
    }
    let Some(mut sandboxed) =
        Sandboxed::start("kill_9_at_twenty_points_leaves_a_consistent_machine", "")
    else {
        return;
    };
    let first = sandboxed
        .daemon
        .deploy(
            "web",
            &[("server.js", APP, 0o644)],
            json!({"startCommand": "V=0 node server.js"}),
        )
        .await;
    assert_eq!(first["status"], "provisioning_complete");
    let data_dir = sandboxed.daemon.data_dir();
    let mut interrupted = 0;
    let mut steps_hit = std::collections::BTreeSet::new();
    for point in 1..=20u64 {
        // The last point kills a daemon that is only serving.
        let started = if point < 20 {
            let upload = sandboxed
                .daemon
                .upload("web", targz(&[("server.js", APP, 0o644)]))
                .await;
            assert_eq!(upload.status, 201);
            let body = json!({
                "installCommand": "sleep 0.3",
                "buildCommand": "sleep 0.3",
                "startCommand": format!("V={point} node server.js"),
            });
            let started = sandboxed.daemon.provision("web", body).await;
            // Spread the kills over the ~1.2 s a run takes here, and the longer it takes on
            // a slower machine (the packaged test's container: no kill reached `deploy` at
            // 65 ms steps there once).
            tokio::time::sleep(Duration::from_millis(point * 90)).await;
            let status = sandboxed
                .daemon
                .api(
                    "GET",
                    &format!(
                        "/api/provisioning/{}/status",
                        started["provisioningId"].as_str().unwrap()
                    ),
                    None,
                )
                .await
                .json();
            if let Some(step) = status["steps"]
                .as_array()
                .and_then(|steps| steps.iter().find(|s| s["state"] == "running"))
            {
                steps_hit.insert(step["name"].as_str().unwrap_or("").to_owned());
            }
            Some(started)
        } else {
            None
        };
        sandboxed.daemon.kill_hard();
        sandboxed.daemon.start_again();

        if let Some(started) = started {
            let id = started["provisioningId"].as_str().unwrap();
            let status = sandboxed.daemon.wait_run(id, Duration::from_secs(30)).await;
            match status["status"].as_str() {
                Some("provisioning_complete") => {}
                Some("provisioning_failed") => {
                    assert_eq!(
                        status["error"]["code"], "INTERRUPTED",
                        "point {point}: {status}"
                    );
                    interrupted += 1;
                    let workspace = data_dir
                        .join("deployments")
                        .join(started["deploymentId"].as_str().unwrap());
                    assert!(
                        !workspace.exists(),
                        "point {point}: an interrupted build's workspace is left"
                    );
                }
                other => panic!("point {point}: the run is {other:?}: {status}"),
            }
        }
        let answer = sandboxed.daemon.app_get("web", "/", &[]).await;
        assert_eq!(answer.status, 200, "point {point}: {}", answer.text());
        assert!(answer.text().starts_with('v'), "{}", answer.text());
        // Only the live app is left: its process, its cgroup, its link.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let processes = sandboxed.project_processes();
            let cgroups = step_cgroups(&sandboxed.instance);
            let links = sandboxed.interfaces();
            // The app is its sandbox's init, `sh -c …` and node; anything else (a build's
            // `sleep`, a second app) is left over.
            let apps = processes
                .iter()
                .filter(|p| p.contains(": node server.js"))
                .count();
            let strays = processes
                .iter()
                .filter(|p| !p.contains("sandbox-exec") && !p.contains("node server.js"))
                .count();
            let clean = apps == 1 && strays == 0 && cgroups.len() == 1 && links.len() == 1;
            if clean {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "point {point}: left behind: processes {processes:?}, cgroups {cgroups:?}, links {links:?}\n{}",
                sandboxed.daemon.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let tables = std::process::Command::new("nft")
            .args(["list", "tables"])
            .output()
            .unwrap();
        let tables = String::from_utf8_lossy(&tables.stdout);
        assert_eq!(
            tables
                .matches(&format!("inet {}", sandboxed.instance))
                .count(),
            1,
            "{tables}"
        );
    }
    eprintln!("chaos: {interrupted} of 19 runs interrupted; steps hit: {steps_hit:?}");
    assert!(interrupted > 0, "no kill landed inside a run");
    for step in ["install", "build", "deploy"] {
        assert!(
            steps_hit.contains(step),
            "no kill landed in {step}: {steps_hit:?}"
        );
    }
}
