//! Apps outlive the daemon (issue 10): a `kill -9` or a SIGTERM of the daemon leaves live apps
//! running (same pids); the next daemon adopts them — routes to them before "ready", keeps
//! their logs and restarts them with backoff when they crash — and `slipway stop-apps` stops
//! them for real.

use std::time::{Duration, Instant};

use serde_json::json;

use super::Sandboxed;
use crate::pipeline::NODE_APP;
use crate::support::missing_tool;

/// The project processes whose command line is exactly `command` (`uid: command (pid N)`).
fn pids_of(sandboxed: &Sandboxed, command: &str) -> Vec<String> {
    let mut pids: Vec<String> = sandboxed
        .project_processes()
        .into_iter()
        .filter(|line| {
            line.split_once(": ")
                .is_some_and(|(_, rest)| rest.starts_with(&format!("{command} (pid")))
        })
        .collect();
    pids.sort();
    pids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_apps_survive_a_daemon_crash_and_are_adopted() {
    if missing_tool("node", "the app is a node server") {
        return;
    }
    let Some(mut sandboxed) =
        Sandboxed::start("live_apps_survive_a_daemon_crash_and_are_adopted", "")
    else {
        return;
    };
    let site = sandboxed
        .daemon
        .deploy_page("site", "<h1>static survivor</h1>")
        .await;
    assert_eq!(site["status"], "provisioning_complete");
    sandboxed
        .daemon
        .deploy(
            "web",
            &[("server.js", NODE_APP, 0o644)],
            json!({"startCommand": "node server.js"}),
        )
        .await;
    let before = pids_of(&sandboxed, "node server.js");
    assert_eq!(before.len(), 1, "one node process: {before:?}");

    sandboxed.daemon.kill_hard();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        pids_of(&sandboxed, "node server.js"),
        before,
        "the app died with the daemon"
    );

    sandboxed.daemon.start_again();
    let ready = Instant::now();
    let app = sandboxed.daemon.app_get("web", "/", &[]).await;
    let page = sandboxed.daemon.app_get("site", "/", &[]).await;
    let served_after = ready.elapsed();
    assert_eq!(app.status, 200, "{}", app.text());
    assert!(app.text().contains("port="), "{}", app.text());
    assert_eq!(page.status, 200);
    assert!(page.text().contains("static survivor"));
    assert!(
        served_after < Duration::from_secs(1),
        "both sites answered {served_after:?} after ready"
    );
    assert_eq!(
        pids_of(&sandboxed, "node server.js"),
        before,
        "the new daemon started the app again instead of adopting it:\n{}",
        sandboxed.daemon.log_text()
    );
    let log = sandboxed.daemon.log_text();
    assert!(
        log.contains("adopted = true") || log.contains("adopted=true"),
        "{log}"
    );

    // An adopted app that crashes is restarted (with a new process) and served again.
    assert_eq!(
        sandboxed.daemon.app_get("web", "/crash", &[]).await.status,
        200
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = pids_of(&sandboxed, "node server.js");
        let answer = sandboxed.daemon.app_get("web", "/", &[]).await;
        if answer.status == 200 && now.len() == 1 && now != before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the adopted app was not restarted after its crash: {now:?}\n{}",
            sandboxed.daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A clean stop (SIGTERM) leaves the restarted app running too; stop-apps ends it.
    let running = pids_of(&sandboxed, "node server.js");
    sandboxed.daemon.stop();
    assert_eq!(pids_of(&sandboxed, "node server.js"), running);
    let output = sandboxed.daemon.stop_apps();
    assert!(
        output.status.success(),
        "stop-apps: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("stopped 1 app"));
    sandboxed.assert_no_project_processes("stop-apps");
    assert!(
        sandboxed.interfaces().is_empty(),
        "stop-apps left links: {:?}",
        sandboxed.interfaces()
    );
}

/// A node server that answers its own name: small enough that 50 of them fit anywhere.
const NAMED_APP: &str = "require('http').createServer((q, r) => r.end('app ' + process.env.NAME)).listen(process.env.PORT);";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_apps_stopped_like_a_reboot_all_serve_again() {
    if missing_tool("node", "the apps are node servers") {
        return;
    }
    let Some(mut sandboxed) = Sandboxed::start(
        "fifty_apps_stopped_like_a_reboot_all_serve_again",
        "[limits]\napp_memory_mb = 128\n",
    ) else {
        return;
    };
    const APPS: usize = 50;
    let slugs: Vec<String> = (0..APPS).map(|i| format!("app{i:02}")).collect();
    for chunk in slugs.chunks(10) {
        let deploys = chunk.iter().map(|slug| {
            let daemon = &sandboxed.daemon;
            async move {
                daemon
                    .deploy(
                        slug,
                        &[("server.js", NAMED_APP, 0o644)],
                        json!({"startCommand": format!("NAME={slug} node server.js")}),
                    )
                    .await
            }
        });
        futures_util::future::join_all(deploys).await;
    }
    // A reboot: the daemon stops and every app with it.
    sandboxed.daemon.stop();
    let output = sandboxed.daemon.stop_apps();
    assert!(output.status.success(), "{output:?}");
    sandboxed.assert_no_project_processes("stop-apps");

    let started = Instant::now();
    sandboxed.daemon.start_again();
    for slug in &slugs {
        let answer = sandboxed.daemon.app_get(slug, "/", &[]).await;
        assert_eq!(answer.status, 200, "{slug}: {}", answer.text());
        assert_eq!(answer.text(), format!("app {slug}"));
    }
    let all_serving = started.elapsed();
    // The figure is for the note (speed is measured, not asserted tightly: tests share the
    // machine); the bound only catches restores that went serial or stuck.
    eprintln!("{APPS} apps started again and serving {all_serving:?} after the daemon started");
    assert!(
        all_serving < Duration::from_secs(30),
        "{APPS} apps took {all_serving:?} to serve again"
    );
}

/// Every directory named `name` under /sys/fs/cgroup (each hierarchy, a few levels deep).
fn cgroup_dirs_named(name: &str) -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, name: &str, depth: u32, found: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if entry.file_name() == name {
                found.push(path);
            } else if depth > 0 {
                walk(&path, name, depth - 1, found);
            }
        }
    }
    let mut found = Vec::new();
    walk(std::path::Path::new("/sys/fs/cgroup"), name, 6, &mut found);
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_deleted_behind_the_daemons_back_comes_back() {
    if missing_tool("node", "the app is a node server") {
        return;
    }
    let Some(sandboxed) = Sandboxed::start(
        "what_is_deleted_behind_the_daemons_back_comes_back",
        "[limits]\nhealth_interval_s = 1\n",
    ) else {
        return;
    };
    // The instance's cgroup parent, removed (as another daemon's clean-up once did): the next
    // build makes it again instead of failing.
    let parents = cgroup_dirs_named(&sandboxed.instance);
    assert!(!parents.is_empty(), "the daemon's cgroup parent exists");
    for parent in &parents {
        std::fs::remove_dir(parent).unwrap_or_else(|e| panic!("rmdir {}: {e}", parent.display()));
    }
    sandboxed
        .daemon
        .deploy(
            "web",
            &[("server.js", NODE_APP, 0o644)],
            json!({"installCommand": "echo installing", "startCommand": "node server.js"}),
        )
        .await;
    assert_eq!(cgroup_dirs_named(&sandboxed.instance).len(), parents.len());
    assert_eq!(sandboxed.daemon.app_get("web", "/", &[]).await.status, 200);

    // The app's link, deleted: the app stops answering, the supervisor notices within three
    // probes and starts it again on a new link.
    let links = sandboxed.interfaces();
    assert_eq!(links.len(), 1, "{links:?}");
    let deleted = std::process::Command::new("ip")
        .args(["link", "del", &links[0]])
        .status()
        .unwrap();
    assert!(deleted.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // A request caught on the dead link waits for the proxy's timeout: give up early.
        let answer = tokio::time::timeout(
            Duration::from_secs(2),
            sandboxed.daemon.app_get("web", "/", &[]),
        )
        .await;
        if answer.is_ok_and(|a| a.status == 200) && sandboxed.interfaces().len() == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the app did not come back after its link was deleted:\n{}",
            sandboxed.daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let logs = sandboxed
        .daemon
        .logs_text(
            sandboxed
                .daemon
                .api("GET", "/api/projects/web", None)
                .await
                .json()["liveDeploymentId"]
                .as_str()
                .unwrap_or_default(),
        )
        .await;
    assert!(logs.contains("stopped accepting connections"), "{logs}");
}
