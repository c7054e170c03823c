//! The release command (issue 33): runs once per deployment, after the build and before the
//! switch, with the app's environment and `/data`; a failing one fails the run with
//! `RELEASE_FAILED` and its output, and the live deployment keeps serving.

use serde_json::json;

use super::Sandboxed;
use crate::support::{missing_tool, step_state};

/// Serves `/releases`: what the release commands appended to `/data/releases`.
const WEB: &str = r#"
const fs = require('fs');
require('http').createServer((req, res) => {
  let text = '';
  try { text = fs.readFileSync('/data/releases', 'utf8'); } catch (e) {}
  res.end(req.url === '/releases' ? text : 'v=' + process.env.V);
}).listen(process.env.PORT);
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_commands_run_once_per_deployment_and_a_failing_one_changes_nothing() {
    if missing_tool("node", "the app is a node server") {
        return;
    }
    let Some(sandboxed) = Sandboxed::start(
        "release_commands_run_once_per_deployment_and_a_failing_one_changes_nothing",
        "",
    ) else {
        return;
    };
    let daemon = &sandboxed.daemon;
    let env = daemon
        .api(
            "POST",
            "/api/projects/shop/env-vars",
            Some(json!({"V": "1"})),
        )
        .await;
    assert!(env.status < 300, "{}", env.text());
    let files = [
        ("server.js", WEB, 0o644),
        // The Procfile's release line, used when releaseCommand is not set.
        (
            "Procfile",
            "web: node server.js\nrelease: echo \"procfile $V\" >> /data/releases\n",
            0o644,
        ),
    ];
    // 1: the Procfile's release line, with the app's env vars and /data.
    let first = daemon
        .deploy("shop", &files, json!({"startCommand": "node server.js"}))
        .await;
    assert_eq!(step_state(&first, "release"), "succeeded", "{first}");
    // 2: releaseCommand wins over the Procfile.
    let second = daemon
        .deploy(
            "shop",
            &files,
            json!({"startCommand": "node server.js",
                   "releaseCommand": "echo \"setting $V\" >> /data/releases && echo migrated"}),
        )
        .await;
    let logs = daemon
        .logs_text(second["deploymentId"].as_str().unwrap())
        .await;
    assert!(logs.contains("migrated"), "{logs}");
    let releases = daemon.app_get("shop", "/releases", &[]).await.text();
    assert_eq!(
        releases, "procfile 1\nsetting 1\n",
        "each release ran exactly once"
    );

    // 3: a failing release: the run fails with RELEASE_FAILED and its output; nothing new
    // started, the live deployment still serves.
    let (failed, logs) = sandboxed
        .run(
            "shop",
            &files,
            json!({"startCommand": "node server.js",
                   "releaseCommand": "echo 'cannot migrate' >&2; exit 3"}),
            std::time::Duration::from_secs(120),
        )
        .await;
    assert_eq!(failed["status"], "provisioning_failed", "{failed}");
    assert_eq!(failed["error"]["code"], "RELEASE_FAILED", "{failed}");
    assert_eq!(failed["failedStep"], "release", "{failed}");
    assert_eq!(step_state(&failed, "deploy"), "pending", "{failed}");
    assert!(logs.contains("cannot migrate"), "{logs}");
    let project = daemon.api("GET", "/api/projects/shop", None).await.json();
    assert_eq!(
        project["liveDeploymentId"], second["deploymentId"],
        "the live deployment changed: {project}"
    );
    let page = daemon.app_get("shop", "/releases", &[]).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.text(), "procfile 1\nsetting 1\n");

    // A rollback runs no release.
    let rollback = daemon
        .api(
            "POST",
            "/api/projects/shop/rollback",
            Some(json!({"deploymentId": first["deploymentId"]})),
        )
        .await;
    assert_eq!(rollback.status, 202, "{}", rollback.text());
    let done = daemon
        .wait_complete(&rollback.json(), std::time::Duration::from_secs(60))
        .await;
    assert_eq!(step_state(&done, "release"), "skipped", "{done}");
    // Each release is among the project's runs, newest first; the rollback ran none.
    let runs = daemon
        .api("GET", "/api/projects/shop/runs", None)
        .await
        .json();
    let releases: Vec<(&str, &str)> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|run| run["trigger"] == "release")
        .map(|run| {
            (
                run["state"].as_str().unwrap(),
                run["deploymentId"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(releases.len(), 3, "{runs}");
    assert_eq!(releases[0].0, "failed", "{runs}");
    assert_eq!(
        releases[1],
        ("succeeded", second["deploymentId"].as_str().unwrap()),
        "{runs}"
    );
    assert_eq!(
        daemon.app_get("shop", "/releases", &[]).await.text(),
        "procfile 1\nsetting 1\n"
    );
}
