//! Add-on services (issue 34), real PostgreSQL 15 and Redis from Debian's packages in
//! namespaced sandboxes: the owning project's code reaches them through `DATABASE_URL` /
//! `REDIS_URL`, a project that is not linked cannot connect even with the password, a link
//! opens the way, the data outlives a daemon restart, and a delete needs its confirmation.

use std::time::Duration;

use serde_json::json;

use super::runs::wait_run_final;
use super::Sandboxed;
use crate::support::{missing_tool, TestDaemon};

const SERVER: &str = "exec python3 -m http.server $PORT";

/// Runs `command` in `project` and returns (state, stdout).
pub(super) async fn run(daemon: &TestDaemon, project: &str, command: &str) -> (String, String) {
    let started = daemon
        .api(
            "POST",
            &format!("/api/projects/{project}/runs"),
            Some(json!({"command": command, "timeoutS": 60})),
        )
        .await;
    assert_eq!(started.status, 202, "{}", started.text());
    let id = started.json()["runId"].as_str().unwrap().to_owned();
    let finished = wait_run_final(daemon, &id, Duration::from_secs(90)).await;
    let logs = daemon
        .api("GET", &format!("/api/runs/{id}/logs"), None)
        .await
        .json();
    let text: Vec<String> = logs["logs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|line| line["stream"] != "system")
        .map(|line| line["message"].as_str().unwrap().to_owned())
        .collect();
    (
        finished["state"].as_str().unwrap().to_owned(),
        text.join("\n"),
    )
}

/// Creates an add-on of `shop` with `body` (asserting the 201); the add-on.
pub(super) async fn create_addon(
    daemon: &TestDaemon,
    body: serde_json::Value,
) -> serde_json::Value {
    create_addon_of(daemon, "shop", body).await
}

/// Creates an add-on of `project` with `body` (asserting the 201); the add-on.
async fn create_addon_of(
    daemon: &TestDaemon,
    project: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    let path = format!("/api/projects/{project}/addons");
    let created = daemon.api("POST", &path, Some(body)).await;
    assert_eq!(created.status, 201, "{}", created.text());
    created.json()
}

/// [`create_addon`]'s id.
pub(super) async fn create_addon_id(daemon: &TestDaemon, body: serde_json::Value) -> String {
    create_addon(daemon, body).await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Deploys `shop` (python's http.server) on `daemon`: the project the add-ons belong to.
pub(super) async fn deploy_shop(daemon: &TestDaemon) {
    daemon
        .deploy(
            "shop",
            &[("index.html", "hi", 0o644)],
            json!({"startCommand": SERVER}),
        )
        .await;
}

/// Makes a PostgreSQL add-on of `project` (256 MiB, 256 MiB of disk); its record.
pub(super) async fn create_postgres(daemon: &TestDaemon, project: &str) -> serde_json::Value {
    let body = json!({"kind": "postgres", "memoryMb": 256, "diskMb": 256});
    create_addon_of(daemon, project, body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_and_redis_serve_linked_projects_only_and_outlive_a_restart() {
    let test = "postgres_and_redis_serve_linked_projects_only_and_outlive_a_restart";
    for program in [
        "/usr/lib/postgresql/15/bin/postgres",
        "/usr/bin/redis-server",
    ] {
        if !std::path::Path::new(program).exists() {
            eprintln!("SKIP {test}: {program} is not installed (postgresql-15, redis-server)");
            return;
        }
    }
    if missing_tool("psql", "the app talks to postgres with psql")
        || missing_tool("redis-cli", "the app talks to redis with redis-cli")
        || missing_tool("python3", "the app is python's http.server")
    {
        return;
    }
    let Some(mut sandboxed) = Sandboxed::start(test, "") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    for project in ["shop", "other"] {
        daemon
            .deploy(
                project,
                &[("index.html", "hi", 0o644)],
                json!({"startCommand": SERVER}),
            )
            .await;
    }
    let postgres = create_postgres(daemon, "shop").await;
    assert_eq!(postgres["state"], "running", "{postgres}");
    assert_eq!(postgres["envName"], "DATABASE_URL");
    assert!(
        postgres["version"].as_str().unwrap().starts_with("15."),
        "{postgres}"
    );
    assert!(!postgres.to_string().contains("password"), "{postgres}");
    let id = postgres["id"].as_str().unwrap().to_owned();

    let sql = "psql \"$DATABASE_URL\" -tAc 'create table t (x int); insert into t values (41), (1); select sum(x) from t'";
    let (state, out) = run(daemon, "shop", sql).await;
    assert_eq!(state, "succeeded", "{out}");
    assert!(out.ends_with("INSERT 0 2\n42"), "{out}");

    // `other` is not linked: even with the password, the address is closed to it.
    let credentials = daemon
        .api("GET", &format!("/api/addons/{id}/credentials"), None)
        .await
        .json();
    let url = credentials["url"].as_str().unwrap();
    let probe = format!("PGCONNECT_TIMEOUT=3 psql '{url}' -tAc 'select sum(x) from t'");
    let (state, out) = run(daemon, "other", &probe).await;
    assert_eq!(
        state, "failed",
        "an unlinked project reached the database: {out}"
    );

    // Linked, its next run (and deployment) gets DATABASE_URL and the way in.
    let linked = daemon
        .api("PUT", &format!("/api/addons/{id}/links/other"), None)
        .await;
    assert_eq!(linked.status, 200, "{}", linked.text());
    let read = "psql \"$DATABASE_URL\" -tAc 'select sum(x) from t'";
    let (state, out) = run(daemon, "other", read).await;
    assert_eq!((state.as_str(), out.trim()), ("succeeded", "42"), "{out}");

    // Memory is admitted as instances' is: more than the machine has free is refused.
    let total_mb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.split_whitespace()
                .nth(1)
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(u64::MAX, |kb| kb / 1024);
    if total_mb < 60_000 {
        let refused = daemon
            .api(
                "POST",
                "/api/projects/other/addons",
                Some(json!({"kind": "redis", "memoryMb": 65536})),
            )
            .await;
        assert_eq!(refused.status, 409, "{}", refused.text());
        assert!(
            refused.text().contains("not enough memory"),
            "{}",
            refused.text()
        );
    }

    // Redis, with a counter.
    let created = daemon
        .api(
            "POST",
            "/api/projects/shop/addons",
            Some(json!({"kind": "redis"})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(created.json()["envName"], "REDIS_URL");
    let incr = "redis-cli -u \"$REDIS_URL\" --no-auth-warning INCR visits";
    assert_eq!(run(daemon, "shop", incr).await.1.trim(), "1");
    assert_eq!(run(daemon, "shop", incr).await.1.trim(), "2");

    // The daemon restarts: the add-ons are adopted, their data intact.
    sandboxed.daemon.restart();
    let daemon = &sandboxed.daemon;
    let (state, out) = run(daemon, "shop", read).await;
    assert_eq!((state.as_str(), out.trim()), ("succeeded", "42"), "{out}");
    assert_eq!(run(daemon, "shop", incr).await.1.trim(), "3");

    // A delete needs its confirmation; then it is gone.
    let refused = daemon
        .api("DELETE", &format!("/api/addons/{id}"), None)
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    let deleted = daemon
        .api("DELETE", &format!("/api/addons/{id}?confirm={id}"), None)
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    let final_backup = deleted.json()["finalBackupId"].as_str().unwrap().to_owned();
    let gone = daemon.api("GET", &format!("/api/addons/{id}"), None).await;
    assert_eq!(gone.status, 404);
    assert!(gone.text().contains("kept until"), "{}", gone.text());

    // Its final backup was proven and is kept: it restores into a new add-on with the data.
    let backups = daemon
        .api("GET", &format!("/api/addons/{id}/backups"), None)
        .await
        .json();
    assert_eq!(
        backups["backups"][0]["id"],
        final_backup.as_str(),
        "{backups}"
    );
    assert_eq!(backups["backups"][0]["state"], "ok", "{backups}");
    let back = daemon
        .api(
            "POST",
            &format!("/api/addons/{id}/restore"),
            Some(json!({"backupId": final_backup, "target": "new"})),
        )
        .await;
    assert_eq!(back.status, 202, "{}", back.text());
    let copy = back.json()["id"].as_str().unwrap().to_owned();
    let restored = crate::support::eventually(Duration::from_secs(60), || async {
        let now = daemon
            .api("GET", &format!("/api/addons/{copy}"), None)
            .await;
        now.json()["state"] == "running"
    })
    .await;
    assert!(restored);
    let linked = daemon
        .api("PUT", &format!("/api/addons/{copy}/links/shop"), None)
        .await;
    assert_eq!(linked.status, 200, "{}", linked.text());
    let (state, out) = run(daemon, "shop", read).await;
    assert_eq!((state.as_str(), out.trim()), ("succeeded", "42"), "{out}");
}
