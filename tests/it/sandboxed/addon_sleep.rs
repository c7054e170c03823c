//! Linked add-ons sleep with their apps (issue 35), with a real PostgreSQL: an add-on linked
//! to two projects keeps running while one of them sleeps, stops once both do (state
//! `stopped`, "asleep with its app(s)"), stays stopped across a daemon restart, and a request
//! to an app wakes the add-on first: the app's start writes to the database and would fail
//! (and the wake with it) if the add-on did not accept connections yet.

use std::time::Duration;

use serde_json::json;

use super::addons::{create_postgres, run};
use super::Sandboxed;
use crate::support::{eventually, missing_tool, TestDaemon};

/// Records each start in the database before it serves.
const SERVER: &str = "psql \"$DATABASE_URL\" -qc 'create table if not exists starts (at timestamptz); insert into starts values (now())' && exec python3 -m http.server $PORT";

async fn get(daemon: &TestDaemon, path: &str) -> serde_json::Value {
    let answer = daemon.api("GET", path, None).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    answer.json()
}

async fn wait_for(daemon: &TestDaemon, path: &str, field: &str, value: &str) {
    let reached = eventually(Duration::from_secs(20), || async {
        get(daemon, path).await[field] == value
    })
    .await;
    assert!(
        reached,
        "{path} {field} never became {value}: {}",
        get(daemon, path).await
    );
}

async fn set_sleep(daemon: &TestDaemon, project: &str) {
    let body = json!({"sleep": {"idleTimeoutS": 2, "strategy": "hold"}});
    let path = format!("/api/projects/{project}");
    let patched = daemon.api("PATCH", &path, Some(body)).await;
    assert_eq!(patched.status, 200, "{}", patched.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_postgres_sleeps_when_all_its_apps_do_and_wakes_before_them() {
    let test = "a_linked_postgres_sleeps_when_all_its_apps_do_and_wakes_before_them";
    if !std::path::Path::new("/usr/lib/postgresql/15/bin/postgres").exists() {
        eprintln!("SKIP {test}: postgresql-15 is not installed");
        return;
    }
    if missing_tool("psql", "the app writes to postgres with psql")
        || missing_tool("python3", "the app is python's http.server")
    {
        return;
    }
    let Some(mut sandboxed) = Sandboxed::start(test, "[sleep]\ntick_ms = 200\n") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    let files = [("index.html", "hi", 0o644)];
    let plain = json!({"startCommand": "exec python3 -m http.server $PORT"});
    daemon.deploy("other", &files, plain).await;
    let shop = daemon
        .api("POST", "/api/projects", Some(json!({"slug": "shop"})))
        .await;
    assert_eq!(shop.status, 201, "{}", shop.text());
    let created = create_postgres(daemon, "shop").await;
    let addon = format!("/api/addons/{}", created["id"].as_str().unwrap());
    let linked = daemon
        .api("PUT", &format!("{addon}/links/other"), None)
        .await;
    assert_eq!(linked.status, 200, "{}", linked.text());
    daemon
        .deploy("shop", &files, json!({"startCommand": SERVER}))
        .await;

    // One linked app asleep: the add-on serves the other.
    set_sleep(daemon, "shop").await;
    wait_for(daemon, "/api/projects/shop", "appState", "sleeping").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(get(daemon, &addon).await["state"], "running");

    // Both asleep: the add-on stops after them, and says why; no process of theirs is left.
    set_sleep(daemon, "other").await;
    wait_for(daemon, "/api/projects/other", "appState", "sleeping").await;
    wait_for(daemon, &addon, "state", "stopped").await;
    assert_eq!(
        get(daemon, &addon).await["message"],
        "asleep with its app(s)"
    );
    sandboxed.assert_no_project_processes("the apps and their add-on fell asleep");

    // Asleep across a restart.
    sandboxed.daemon.restart();
    let daemon = &sandboxed.daemon;
    assert_eq!(get(daemon, &addon).await["state"], "stopped");
    sandboxed.assert_no_project_processes("a restart with everything asleep");

    // A request wakes the add-on first, then the app (whose start needs the database).
    let woke = daemon.app_get("shop", "/", &[]).await;
    assert_eq!(woke.status, 200, "{}", woke.text());
    assert_eq!(woke.text(), "hi");
    let state = get(daemon, &addon).await;
    assert_eq!(state["state"], "running", "{state}");
    assert!(state["message"].is_null(), "{state}");
    let (state, out) = run(
        daemon,
        "shop",
        "psql \"$DATABASE_URL\" -tAc 'select count(*) from starts'",
    )
    .await;
    assert_eq!(state, "succeeded", "{out}");
    assert!(
        out.ends_with('2'),
        "one start at the deploy, one at the wake: {out}"
    );
    assert_eq!(
        get(daemon, "/api/projects/other").await["appState"],
        "sleeping"
    );
}
