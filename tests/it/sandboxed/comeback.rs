//! Apps that died while no daemon ran (issue 29 §1): the daemon is stopped (SIGTERM, as
//! `systemctl stop` does), every process of one app's sandbox — or of every app's — is killed
//! with SIGKILL, and the daemon is started again. The dead apps are started again from their
//! live builds with new processes within seconds; the apps that survived keep theirs.
//! Disk limits are on (namespaces mode as root), as on a server.

use std::time::{Duration, Instant};

use serde_json::json;

use super::Sandboxed;
use crate::support::missing_tool;

/// A node server that answers its own name and pid.
const APP: &str = "require('http').createServer((q, r) => r.end(process.env.NAME + ' ' + process.pid)).listen(process.env.PORT);";

const SLUGS: [&str; 3] = ["one", "two", "three"];

/// Deploys the three apps; returns the daemon (project uids follow creation order).
async fn three_apps(test: &str) -> Option<Sandboxed> {
    if missing_tool("node", "the apps are node servers") {
        return None;
    }
    let sandboxed = Sandboxed::start(test, "")?;
    for slug in SLUGS {
        sandboxed
            .daemon
            .deploy(
                slug,
                &[("server.js", APP, 0o644)],
                json!({"startCommand": format!("NAME={slug} node server.js")}),
            )
            .await;
    }
    Some(sandboxed)
}

/// Host pids of every process in the step cgroups (under the daemon's `instance`) that hold
/// the processes of project uid `uid`: the app's whole sandbox (its helper, init and command).
/// Only cgroups named after the instance: on cgroup v1 the other hierarchies put the app in
/// the root cgroup, which holds every process of the machine.
fn sandbox_pids(instance: &str, uid: u32) -> Vec<i32> {
    let mut cgroups = std::collections::BTreeSet::new();
    for line in super::processes_with_uids(uid..uid + 1) {
        let Some(pid) = line
            .rsplit_once("(pid ")
            .and_then(|(_, rest)| rest.trim_end_matches(')').parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(membership) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
            continue;
        };
        for line in membership.lines() {
            // `0::/path` (v2) or `N:controllers:/path` (v1): every hierarchy's path.
            let (Some(controllers), Some(path)) =
                (line.split(':').nth(1), line.splitn(3, ':').nth(2))
            else {
                continue;
            };
            if path.contains(instance) {
                let mount = if controllers.is_empty() {
                    "/sys/fs/cgroup".to_owned()
                } else {
                    format!(
                        "/sys/fs/cgroup/{}",
                        controllers.split(',').next().unwrap_or("")
                    )
                };
                cgroups.insert(format!("{mount}{path}"));
            }
        }
    }
    let mut pids = Vec::new();
    for cgroup in cgroups {
        let Ok(procs) = std::fs::read_to_string(format!("{cgroup}/cgroup.procs")) else {
            continue;
        };
        pids.extend(procs.lines().filter_map(|pid| pid.parse::<i32>().ok()));
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Kills the sandbox of each of `slugs` (SIGKILL to every process in it) and waits until
/// they are gone.
fn kill_sandboxes(sandboxed: &Sandboxed, indexes: &[u32]) {
    let mut killed = Vec::new();
    for index in indexes {
        let pids = sandbox_pids(&sandboxed.instance, sandboxed.uid_base + index);
        assert!(!pids.is_empty(), "no processes found for app {index}");
        // A sandbox holds its helper, init, the shell and the app: never the machine's.
        assert!(
            pids.len() <= 8 && !pids.contains(&1),
            "not one sandbox: {pids:?}"
        );
        for pid in &pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        killed.extend(pids);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while killed
        .iter()
        .any(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
    {
        assert!(Instant::now() < deadline, "killed processes still there");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The host's `node server.js` processes of app `index` (`uid: command (pid N)`).
fn app_processes(sandboxed: &Sandboxed, index: u32) -> Vec<String> {
    let uid = sandboxed.uid_base + index;
    super::processes_with_uids(uid..uid + 1)
        .into_iter()
        .filter(|p| p.contains(": node server.js"))
        .collect()
}

/// Restarts the daemon and checks: the killed apps answer again with new processes within
/// seconds of "ready", the others with the same processes as before.
async fn come_back(mut sandboxed: Sandboxed, killed: &[u32]) {
    let before: Vec<Vec<String>> = (0..SLUGS.len() as u32)
        .map(|index| app_processes(&sandboxed, index))
        .collect();
    assert!(before.iter().all(|p| p.len() == 1), "{before:?}");
    sandboxed.daemon.stop();
    kill_sandboxes(&sandboxed, killed);
    sandboxed.daemon.start_again();
    let ready = Instant::now();
    let deadline = ready + Duration::from_secs(10);
    loop {
        let mut serving = Vec::new();
        for slug in SLUGS {
            let answer = sandboxed.daemon.app_get(slug, "/", &[]).await;
            if answer.status == 200 && answer.text().starts_with(&format!("{slug} ")) {
                serving.push(slug);
            }
        }
        if serving.len() == SLUGS.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {serving:?} serve again 10 s after ready\n{}",
            sandboxed.daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "{} killed app(s) serving again {:?} after ready",
        killed.len(),
        ready.elapsed()
    );
    for (index, before) in before.iter().enumerate() {
        let after = app_processes(&sandboxed, index as u32);
        if killed.contains(&(index as u32)) {
            assert_eq!(after.len(), 1, "app {index}: {after:?}");
            assert_ne!(&after, before, "app {index} has no new process");
        } else {
            assert_eq!(
                &after, before,
                "app {index} was started again instead of adopted"
            );
        }
    }
    let log = sandboxed.daemon.log_text();
    assert!(!log.contains("did not come back"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_killed_while_the_daemon_was_down_comes_back() {
    let Some(sandboxed) = three_apps("an_app_killed_while_the_daemon_was_down_comes_back").await
    else {
        return;
    };
    come_back(sandboxed, &[1]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_apps_killed_while_the_daemon_was_down_come_back() {
    let Some(sandboxed) = three_apps("all_apps_killed_while_the_daemon_was_down_come_back").await
    else {
        return;
    };
    come_back(sandboxed, &[0, 1, 2]).await;
}

/// An app that fails the next `/data/fail` starts (after `GET /arm`), exiting with code 2 — as
/// an app does whose database is not up yet after a reboot.
const FLAKY_APP: &str = r#"
const fs = require('fs');
let fail = 0;
try { fail = Number(fs.readFileSync('/data/fail', 'utf8')); } catch (e) {}
if (fail > 0) { fs.writeFileSync('/data/fail', String(fail - 1)); process.exit(2); }
require('http').createServer((q, r) => {
  if (q.url === '/arm') fs.writeFileSync('/data/fail', '2');
  r.end('flaky up');
}).listen(process.env.PORT);
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_fails_after_a_restart_is_retried_with_backoff() {
    let test = "a_start_that_fails_after_a_restart_is_retried_with_backoff";
    if missing_tool("node", "the app is a node server") {
        return;
    }
    let Some(mut sandboxed) = Sandboxed::start(test, "") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    daemon
        .deploy(
            "flaky",
            &[("server.js", FLAKY_APP, 0o644)],
            json!({"startCommand": "node server.js"}),
        )
        .await;
    assert_eq!(
        daemon.app_get("flaky", "/arm", &[]).await.text(),
        "flaky up"
    );
    let live = daemon.api("GET", "/api/projects/flaky", None).await.json()["liveDeploymentId"]
        .as_str()
        .unwrap()
        .to_owned();
    sandboxed.daemon.stop();
    kill_sandboxes(&sandboxed, &[0]);
    sandboxed.daemon.start_again();
    let ready = Instant::now();
    // Two starts fail (the first before ready, one 1 s later); the third, 2 s after that, serves.
    let first = sandboxed.daemon.app_get("flaky", "/", &[]).await;
    assert_eq!(first.status, 503, "{}", first.text());
    assert!(
        first.text().contains("Restarting"),
        "the restarting page: {}",
        first.text()
    );
    let deadline = ready + Duration::from_secs(15);
    loop {
        let answer = sandboxed.daemon.app_get("flaky", "/", &[]).await;
        if answer.status == 200 {
            assert_eq!(answer.text(), "flaky up");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the app was not tried again: {} {}\n{}",
            answer.status,
            answer.text(),
            sandboxed.daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let served_after = ready.elapsed();
    eprintln!("{test}: served again {served_after:?} after ready");
    assert!(
        served_after >= Duration::from_secs(2),
        "{served_after:?}: no backoff"
    );
    let logs = sandboxed.daemon.logs_text(&live).await;
    for wait in ["trying again in 1 s", "trying again in 2 s"] {
        assert!(logs.contains(wait), "{wait}: {logs}");
    }
    assert!(logs.contains("exited with code 2"), "{logs}");
}
