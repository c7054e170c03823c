//! Point-in-time recovery of a PostgreSQL add-on (issue 34) with real PostgreSQL 15: with
//! `"pitr": true` a proven base backup is taken at once and WAL is archived into the backups
//! volume; a restore to a moment between two writes keeps the first and not the second. A
//! moment outside the window, in place, and redis are refused. `PATCH {"pitr": true}` turns
//! it on for an add-on made without it.

use std::time::Duration;

use serde_json::{json, Value};

use super::addons::{create_addon, deploy_shop, run};
use super::Sandboxed;
use crate::support::{missing_tool, TestDaemon};

/// Polls `path` until `done` holds of the answer (at most 3 minutes); the last answer.
async fn poll(daemon: &TestDaemon, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let now = daemon.api("GET", path, None).await.json();
        if done(&now) || std::time::Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn installed(test: &str) -> bool {
    let program = "/usr/lib/postgresql/15/bin/postgres";
    if !std::path::Path::new(program).exists() {
        eprintln!("SKIP {test}: {program} is not installed (postgresql-15)");
        return false;
    }
    !(missing_tool("psql", "the app talks to postgres with psql")
        || missing_tool("python3", "the app is python's http.server"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_point_in_time_restore_keeps_the_first_write_and_not_the_second() {
    let test = "a_point_in_time_restore_keeps_the_first_write_and_not_the_second";
    if !installed(test) {
        return;
    }
    let Some(sandboxed) = Sandboxed::start(test, "") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    deploy_shop(daemon).await;
    let redis = daemon
        .api(
            "POST",
            "/api/projects/shop/addons",
            Some(json!({"kind": "redis", "pitr": true})),
        )
        .await;
    assert_eq!(redis.status, 409, "{}", redis.text());
    let created = create_addon(
        daemon,
        json!({"kind": "postgres", "memoryMb": 256, "diskMb": 256, "pitr": true}),
    )
    .await;
    assert_eq!(created["pitr"], true);
    let pg = created["id"].as_str().unwrap().to_owned();

    // The first base backup, taken when PITR was turned on, is proven.
    let backups = poll(daemon, &format!("/api/addons/{pg}/backups"), |list| {
        list["backups"].as_array().unwrap().iter().any(|b| {
            b["kind"] == "base" && !matches!(b["state"].as_str(), Some("running" | "verifying"))
        })
    })
    .await;
    let base = backups["backups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["kind"] == "base")
        .cloned()
        .expect("a base backup");
    assert_eq!(base["state"], "ok", "{base}");
    assert_eq!(base["trigger"], "pitr", "{base}");

    // Row 1, the moment T, a second later row 2, and the WAL switched out.
    let script = "set -e\n\
        psql \"$DATABASE_URL\" -v ON_ERROR_STOP=1 -qtA -c 'create table t (x int)' \
        -c 'insert into t values (1)'\n\
        psql \"$DATABASE_URL\" -qtA <<'SQL'\n\
        select 'T=' || to_char(now() at time zone 'utc', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"');\n\
        SQL\n\
        sleep 1\n\
        psql \"$DATABASE_URL\" -v ON_ERROR_STOP=1 -qtA -c 'insert into t values (2)' \
        -c 'select pg_switch_wal()'\n";
    let (state, out) = run(daemon, "shop", script).await;
    assert_eq!(state, "succeeded", "{out}");
    let moment = out
        .lines()
        .find_map(|line| line.trim().strip_prefix("T="))
        .expect("the moment T")
        .to_owned();

    // The switched segment reaches the backups volume: the window covers T.
    let addon = poll(daemon, &format!("/api/addons/{pg}"), |addon| {
        addon["pitrWindow"]["to"]
            .as_str()
            .is_some_and(|to| to > moment.as_str())
    })
    .await;
    assert!(
        addon["pitrWindow"]["from"].as_str().unwrap() < moment.as_str(),
        "{addon}"
    );

    // Outside the window, or in place: refused, saying why.
    let restore = |body: Value| {
        let path = format!("/api/addons/{pg}/restore");
        async move { daemon.api("POST", &path, Some(body)).await }
    };
    let early = restore(json!({"pointInTime": "2001-01-01T00:00:00Z", "target": "new"})).await;
    assert_eq!(early.status, 409, "{}", early.text());
    assert!(early.text().contains("recovery window"), "{}", early.text());
    let in_place = restore(json!({"pointInTime": moment, "target": "in-place"})).await;
    assert_eq!(in_place.status, 409, "{}", in_place.text());

    // To T, into a new add-on: row 1 is there, row 2 is not; the source's password works.
    let started = restore(json!({"pointInTime": moment, "target": "new"})).await;
    assert_eq!(started.status, 202, "{}", started.text());
    assert_eq!(started.json()["state"], "starting");
    let copy = started.json()["id"].as_str().unwrap().to_owned();
    let copy_now = poll(daemon, &format!("/api/addons/{copy}"), |addon| {
        addon["state"] != "starting"
    })
    .await;
    assert_eq!(copy_now["state"], "running", "{copy_now}");
    assert_eq!(copy_now["pitr"], true, "{copy_now}");
    let url = daemon
        .api("GET", &format!("/api/addons/{copy}/credentials"), None)
        .await
        .json()["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let unlinked = daemon
        .api("DELETE", &format!("/api/addons/{pg}/links/shop"), None)
        .await;
    assert_eq!(unlinked.status, 200, "{}", unlinked.text());
    let linked = daemon
        .api("PUT", &format!("/api/addons/{copy}/links/shop"), None)
        .await;
    assert_eq!(linked.status, 200, "{}", linked.text());
    let rows = format!("psql '{url}' -tAc 'select string_agg(x::text, $$,$$ order by x) from t'");
    let (state, out) = run(daemon, "shop", &rows).await;
    assert_eq!((state.as_str(), out.trim()), ("succeeded", "1"), "{out}");
    // The copy takes base backups of its own.
    let own = poll(daemon, &format!("/api/addons/{copy}"), |addon| {
        addon["pitrWindow"].is_object()
    })
    .await;
    assert!(own["pitrWindow"].is_object(), "{own}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pitr_is_turned_on_for_an_existing_add_on_by_patch() {
    let test = "pitr_is_turned_on_for_an_existing_add_on_by_patch";
    if !installed(test) {
        return;
    }
    let Some(sandboxed) = Sandboxed::start(test, "") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    deploy_shop(daemon).await;
    let created = create_addon(
        daemon,
        json!({"kind": "postgres", "memoryMb": 128, "diskMb": 128}),
    )
    .await;
    assert_eq!(created["pitr"], false);
    let pg = created["id"].as_str().unwrap().to_owned();
    let early = daemon
        .api(
            "POST",
            &format!("/api/addons/{pg}/restore"),
            Some(json!({"pointInTime": "2030-01-01T00:00:00+02:00", "target": "new"})),
        )
        .await;
    assert_eq!(early.status, 409, "{}", early.text());
    assert!(early.text().contains("off"), "{}", early.text());
    let patched = daemon
        .api(
            "PATCH",
            &format!("/api/addons/{pg}"),
            Some(json!({"pitr": true})),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text());
    assert_eq!(patched.json()["pitr"], true);
    let addon = poll(daemon, &format!("/api/addons/{pg}"), |addon| {
        addon["pitrWindow"].is_object()
    })
    .await;
    assert_eq!(addon["state"], "running", "{addon}");
    assert!(addon["pitrWindow"]["from"].is_string(), "{addon}");
    let list = daemon
        .api("GET", &format!("/api/addons/{pg}/backups"), None)
        .await
        .json();
    let base = &list["backups"][0];
    assert_eq!(
        (base["kind"].as_str(), base["state"].as_str()),
        (Some("base"), Some("ok")),
        "{list}"
    );
    // A base backup restores only by a moment.
    let by_id = daemon
        .api(
            "POST",
            &format!("/api/addons/{pg}/restore"),
            Some(json!({"backupId": base["id"], "target": "new"})),
        )
        .await;
    assert_eq!(by_id.status, 409, "{}", by_id.text());
}
