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
        "the new daemon started the app again instead of adopting it"
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
