//! Upgrading an add-on (issue 34) with the PostgreSQL installed here: a major version is
//! refused in place; `upgrade` makes a new add-on holding the same rows, moves the links (the
//! linked app goes live again with the new URL), keeps the old one stopped across a daemon
//! restart, and a rollback relinks the old one, which takes writes again.

use std::time::Duration;

use serde_json::{json, Value};

use super::addons::{create_addon, deploy_shop, run};
use super::Sandboxed;
use crate::support::{missing_tool, TestDaemon};

/// Writes the database host it was started with into /tmp/db and serves /tmp.
const SHOW_DB: &str =
    "cd /tmp && printf '%s' \"${DATABASE_URL#*@}\" > db && exec python3 -m http.server $PORT";

async fn addon(daemon: &TestDaemon, id: &str) -> Value {
    daemon
        .api("GET", &format!("/api/addons/{id}"), None)
        .await
        .json()
}

/// Polls add-on `id` until `done` holds; the add-on then.
async fn wait_addon(daemon: &TestDaemon, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    loop {
        let now = addon(daemon, id).await;
        if done(&now) || std::time::Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What the linked app's web process was started with: `host:port/app`.
async fn app_database(daemon: &TestDaemon) -> String {
    daemon.app_get("shop", "/db", &[]).await.text()
}

async fn count(daemon: &TestDaemon) -> String {
    let (state, out) = run(
        daemon,
        "shop",
        "psql \"$DATABASE_URL\" -tAc 'select count(*) from t'",
    )
    .await;
    format!("{state} {}", out.trim())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_moves_data_and_links_and_a_rollback_relinks_the_old_one() {
    let test = "an_upgrade_moves_data_and_links_and_a_rollback_relinks_the_old_one";
    if !std::path::Path::new("/usr/lib/postgresql/15/bin/postgres").exists() {
        eprintln!("SKIP {test}: postgresql-15 is not installed");
        return;
    }
    if missing_tool("psql", "the app talks to postgres") || missing_tool("python3", "the app") {
        return;
    }
    let Some(mut sandboxed) = Sandboxed::start(test, "") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    deploy_shop(daemon).await;
    let old = create_addon(
        daemon,
        json!({"kind": "postgres", "memoryMb": 128, "diskMb": 128}),
    )
    .await;
    let old_id = old["id"].as_str().unwrap().to_owned();
    let shop = json!([old["projectId"]]);
    let old_host = format!("{}:{}/app", old["host"].as_str().unwrap(), old["port"]);
    assert!(old["version"].as_str().unwrap().starts_with("15."), "{old}");
    daemon
        .deploy(
            "shop",
            &[("x", "x", 0o644)],
            json!({"startCommand": SHOW_DB}),
        )
        .await;
    assert_eq!(app_database(daemon).await, old_host);
    let sql = "psql \"$DATABASE_URL\" -v ON_ERROR_STOP=1 -tAc \
               'create table t (x int); insert into t select generate_series(1, 5)'";
    assert_eq!(run(daemon, "shop", sql).await.0, "succeeded");

    // A major version never changes in place; the add-on's own is no change.
    let patch = |version: &'static str| {
        let path = format!("/api/addons/{old_id}");
        async move {
            daemon
                .api("PATCH", &path, Some(json!({ "version": version })))
                .await
        }
    };
    let refused = patch("16").await;
    assert_eq!(refused.status, 409, "{}", refused.text());
    assert!(refused.text().contains("/upgrade"), "{}", refused.text());
    assert_eq!(patch("15").await.status, 200);
    let upgrade = |body: Value| {
        let path = format!("/api/addons/{old_id}/upgrade");
        async move { daemon.api("POST", &path, Some(body)).await }
    };
    let missing = upgrade(json!({"version": "99"})).await;
    assert_eq!(missing.status, 409, "{}", missing.text());
    assert!(
        missing.text().contains("not installed"),
        "{}",
        missing.text()
    );

    // The upgrade: a new add-on with the rows, the links moved, the app live with its URL.
    let started = upgrade(json!({})).await;
    assert_eq!(started.status, 202, "{}", started.text());
    let new_id = started.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(started.json()["upgradedFrom"], old_id.as_str());
    let new = wait_addon(daemon, &new_id, |a| a["links"] == shop).await;
    assert_eq!(new["state"], "running", "{new}");
    let new_host = format!("{}:{}/app", new["host"].as_str().unwrap(), new["port"]);
    let old = wait_addon(daemon, &old_id, |a| a["state"] == "stopped").await;
    assert_eq!(
        (&old["state"], &old["links"], &old["upgradedTo"]),
        (&json!("stopped"), &json!([]), &json!(new_id)),
        "{old}"
    );
    assert_eq!(count(daemon).await, "succeeded 5");
    assert_eq!(app_database(daemon).await, new_host);
    let again = upgrade(json!({})).await;
    assert_eq!(again.status, 409, "upgraded already: {}", again.text());
    let write = "psql \"$DATABASE_URL\" -v ON_ERROR_STOP=1 -tAc 'insert into t values (6)'";
    assert_eq!(run(daemon, "shop", write).await.0, "succeeded");

    // The old one stays stopped across a daemon restart; the new one comes back.
    sandboxed.daemon.restart();
    let daemon = &sandboxed.daemon;
    assert_eq!(addon(daemon, &old_id).await["state"], "stopped");
    assert_eq!(count(daemon).await, "succeeded 6");

    // A rollback relinks the old one, which takes writes again; the new one stops.
    let back = daemon
        .api("POST", &format!("/api/addons/{new_id}/rollback"), None)
        .await;
    assert_eq!(back.status, 202, "{}", back.text());
    let new = wait_addon(daemon, &new_id, |a| a["state"] == "stopped").await;
    assert_eq!(new["links"], json!([]), "{new}");
    let old = addon(daemon, &old_id).await;
    assert_eq!(
        (&old["state"], &old["links"]),
        (&json!("running"), &shop),
        "{old}"
    );
    assert_eq!(count(daemon).await, "succeeded 5");
    assert_eq!(run(daemon, "shop", write).await.0, "succeeded");
    assert_eq!(app_database(daemon).await, old_host);
    let twice = daemon
        .api("POST", &format!("/api/addons/{new_id}/rollback"), None)
        .await;
    assert_eq!(twice.status, 409, "{}", twice.text());
}
