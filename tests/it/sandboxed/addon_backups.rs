//! Add-on backups (issue 34) with real PostgreSQL 15 and Redis: a backup is listed `ok` only
//! once a throw-away restore held the source's row counts; it restores into a new add-on
//! with identical counts, and in place; a dump that does not restore (a check constraint
//! whose function needs the search path, the classic `pg_dump` trap) and a file corrupted
//! after its proof are never good, and never restore.

use std::time::Duration;

use serde_json::{json, Value};

use super::addons::{create_addon_id, create_postgres, deploy_shop, run};
use super::Sandboxed;
use crate::support::{eventually, missing_tool, DaemonOptions, TestDaemon};

/// Polls `path` until `field` is not one of `passing`; the last answer.
async fn wait_until(daemon: &TestDaemon, path: &str, field: &str, passing: &[&str]) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let now = daemon.api("GET", path, None).await.json();
        let value = now[field].as_str().unwrap_or("").to_owned();
        if !passing.contains(&value.as_str()) || std::time::Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Backs `addon` up and waits for the proof; the backup as it ended.
async fn backup(daemon: &TestDaemon, addon: &str) -> Value {
    let started = daemon
        .api("POST", &format!("/api/addons/{addon}/backups"), None)
        .await;
    assert_eq!(started.status, 202, "{}", started.text());
    let id = started.json()["id"].as_str().unwrap().to_owned();
    let path = format!("/api/addons/{addon}/backups/{id}");
    wait_until(daemon, &path, "state", &["running", "verifying"]).await
}

async fn restore(daemon: &TestDaemon, addon: &str, backup: &str, target: &str) -> Value {
    let started = daemon
        .api(
            "POST",
            &format!("/api/addons/{addon}/restore"),
            Some(json!({"backupId": backup, "target": target})),
        )
        .await;
    assert_eq!(started.status, 202, "{}", started.text());
    let into = started.json()["id"].as_str().unwrap().to_owned();
    wait_until(
        daemon,
        &format!("/api/addons/{into}"),
        "state",
        &["starting"],
    )
    .await
}

/// The add-on lines of the metrics page.
async fn addon_metrics(daemon: &TestDaemon) -> String {
    let page = daemon.api("GET", "/api/metrics", None).await.text();
    let lines: Vec<&str> = page.lines().filter(|l| l.contains("adn_")).collect();
    lines.join("\n")
}

/// `family`'s value for `addon` on the metrics page.
async fn gauge(daemon: &TestDaemon, family: &str, addon: &str) -> Option<f64> {
    let prefix = format!("{family}{{addon=\"{addon}\",");
    addon_metrics(daemon)
        .await
        .lines()
        .find(|line| line.starts_with(&prefix))?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

fn installed(test: &str) -> bool {
    for program in [
        "/usr/lib/postgresql/15/bin/postgres",
        "/usr/bin/redis-server",
    ] {
        if !std::path::Path::new(program).exists() {
            eprintln!("SKIP {test}: {program} is not installed (postgresql-15, redis-server)");
            return false;
        }
    }
    !(missing_tool("psql", "the app talks to postgres with psql")
        || missing_tool("redis-cli", "the app talks to redis with redis-cli")
        || missing_tool("python3", "the app is python's http.server"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backups_are_proven_before_they_are_good_and_restore_with_the_same_rows() {
    let test = "backups_are_proven_before_they_are_good_and_restore_with_the_same_rows";
    if !installed(test) {
        return;
    }
    let measured_often = "[addons]\ndisk_check_interval_s = 1\n";
    let Some(sandboxed) = Sandboxed::start(test, measured_often) else {
        return;
    };
    let daemon = &sandboxed.daemon;
    deploy_shop(daemon).await;
    let pg = create_postgres(daemon, "shop").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let sql = "psql \"$DATABASE_URL\" -v ON_ERROR_STOP=1 -tAc 'create table t (x int); \
               insert into t select generate_series(1, 3); create schema s; \
               create table s.u (y text); insert into s.u values ($$a$$), ($$b$$)'";
    assert_eq!(run(daemon, "shop", sql).await.0, "succeeded");

    // A backup is proven: the throw-away restore held what the dump's snapshot held.
    let good = backup(daemon, &pg).await;
    assert_eq!(good["state"], "ok", "{good}");
    assert_eq!(
        good["check"]["tables"],
        json!({"public.t": 3, "s.u": 2}),
        "{good}"
    );
    assert_eq!(good["kind"], "logical");
    assert_eq!(good["sha256"].as_str().unwrap().len(), 64);
    assert!(good["bytes"].as_u64().unwrap() > 0 && good["verifiedAt"].is_string());
    let bak = good["id"].as_str().unwrap().to_owned();

    // The metrics: the newest backup good, when it finished; a held connection is counted.
    let held = daemon
        .api(
            "POST",
            "/api/projects/shop/runs",
            Some(json!({"command": "psql \"$DATABASE_URL\" -c 'select pg_sleep(8)'"})),
        )
        .await;
    assert_eq!(held.status, 202, "{}", held.text());
    let connected = eventually(Duration::from_secs(8), || async {
        gauge(daemon, "slipway_addon_connections", &pg).await >= Some(1.0)
    })
    .await;
    assert!(connected, "{}", addon_metrics(daemon).await);
    assert_eq!(
        gauge(daemon, "slipway_addon_last_backup_ok", &pg).await,
        Some(1.0)
    );
    let at = gauge(
        daemon,
        "slipway_addon_last_good_backup_timestamp_seconds",
        &pg,
    )
    .await;
    let age = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - at.unwrap();
    assert!((0.0..120.0).contains(&age), "{age}");

    // Into a new add-on: the same rows.
    let copy = restore(daemon, &pg, &bak, "new").await;
    assert_eq!(copy["state"], "running", "{copy}");
    assert_eq!(
        copy["links"],
        json!([]),
        "a restored copy is not linked: {copy}"
    );
    let copy_id = copy["id"].as_str().unwrap().to_owned();
    // Both would give the project DATABASE_URL: the link is refused until one is unlinked.
    let linked = daemon
        .api("PUT", &format!("/api/addons/{copy_id}/links/shop"), None)
        .await;
    assert_eq!(linked.status, 409, "{}", linked.text());
    let unlinked = daemon
        .api("DELETE", &format!("/api/addons/{pg}/links/shop"), None)
        .await;
    assert_eq!(unlinked.status, 200, "{}", unlinked.text());
    let linked = daemon
        .api("PUT", &format!("/api/addons/{copy_id}/links/shop"), None)
        .await;
    assert_eq!(linked.status, 200, "{}", linked.text());
    let url = daemon
        .api("GET", &format!("/api/addons/{copy_id}/credentials"), None)
        .await
        .json()["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let count = format!(
        "psql '{url}' -tAc 'select (select count(*) from t) || $$/$$ || (select count(*) from s.u)'"
    );
    let (state, out) = run(daemon, "shop", &count).await;
    assert_eq!((state.as_str(), out.trim()), ("succeeded", "3/2"), "{out}");
    let unlinked = daemon
        .api("DELETE", &format!("/api/addons/{copy_id}/links/shop"), None)
        .await;
    assert_eq!(unlinked.status, 200, "{}", unlinked.text());
    let relinked = daemon
        .api("PUT", &format!("/api/addons/{pg}/links/shop"), None)
        .await;
    assert_eq!(relinked.status, 200, "{}", relinked.text());

    // In place: rows written since are gone, the backup's are back.
    let more = "psql \"$DATABASE_URL\" -tAc 'insert into t values (4), (5)'";
    assert_eq!(run(daemon, "shop", more).await.0, "succeeded");
    let back = restore(daemon, &pg, &bak, "in-place").await;
    assert_eq!(back["state"], "running", "{back}");
    let (state, out) = run(
        daemon,
        "shop",
        "psql \"$DATABASE_URL\" -tAc 'select count(*) from t'",
    )
    .await;
    assert_eq!((state.as_str(), out.trim()), ("succeeded", "3"), "{out}");

    // Export: a proven backup's file; imported into another add-on, the same rows.
    let exported = daemon
        .api(
            "GET",
            &format!("/api/addons/{pg}/export?backupId={bak}"),
            None,
        )
        .await;
    assert_eq!(exported.status, 200, "{}", exported.text());
    assert!(exported.body.starts_with(b"PGDMP"));
    assert_eq!(exported.header("x-slipway-sha256"), good["sha256"].as_str());
    let fresh = daemon
        .api("GET", &format!("/api/addons/{pg}/export"), None)
        .await;
    assert_eq!(fresh.status, 200, "{}", fresh.text());
    assert_ne!(
        fresh.header("x-slipway-backup"),
        Some(bak.as_str()),
        "a new backup"
    );
    let other = create_addon_id(
        daemon,
        json!({"kind": "postgres", "memoryMb": 128, "diskMb": 128, "envName": "OTHER_URL"}),
    )
    .await;
    let import = |body: Vec<u8>| {
        let (daemon, other) = (daemon, other.clone());
        async move {
            let token = daemon.token.clone();
            let path = format!("/api/addons/{other}/import");
            let started = daemon
                .api_as(&token, "PUT", &path, Some("application/octet-stream"), body)
                .await;
            assert_eq!(started.status, 202, "{}", started.text());
            let id = started.json()["id"].as_str().unwrap().to_owned();
            let path = format!("/api/addons/{other}/backups/{id}");
            let backup = wait_until(daemon, &path, "state", &["running", "verifying"]).await;
            let addon = wait_until(
                daemon,
                &format!("/api/addons/{other}"),
                "state",
                &["starting"],
            )
            .await;
            (backup, addon)
        }
    };
    let (imported, addon) = import(exported.body.to_vec()).await;
    assert_eq!(imported["state"], "ok", "{imported}");
    assert_eq!(
        (addon["state"].as_str(), addon["message"].as_str()),
        (Some("running"), None),
        "{addon}"
    );
    let rows = "psql \"$OTHER_URL\" -tAc 'select count(*) from t'";
    assert_eq!(run(daemon, "shop", rows).await.1.trim(), "3");
    let sql = b"create table z (a int); insert into z values (1), (2);".to_vec();
    let (imported, _) = import(sql).await;
    assert_eq!(
        imported["check"]["tables"],
        json!({"public.z": 2}),
        "{imported}"
    );
    let rows = "psql \"$OTHER_URL\" -tAc 'select count(*) from z'";
    assert_eq!(run(daemon, "shop", rows).await.1.trim(), "2");
    let (imported, addon) = import(b"this is not sql;".to_vec()).await;
    assert_eq!(imported["state"], "failed", "{imported}");
    assert!(
        addon["message"].as_str().unwrap().contains("unchanged"),
        "{addon}"
    );
    assert_eq!(
        run(daemon, "shop", rows).await.1.trim(),
        "2",
        "the data it had"
    );

    // A file changed after its proof is failed when proven again, and never restores.
    let file = daemon
        .data_dir()
        .join("addons")
        .join(format!("{pg}-backups"))
        .join(format!("{bak}.dump"));
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();
    let verify = daemon
        .api(
            "POST",
            &format!("/api/addons/{pg}/backups/{bak}/verify"),
            None,
        )
        .await;
    assert_eq!(verify.status, 202, "{}", verify.text());
    let path = format!("/api/addons/{pg}/backups/{bak}");
    let corrupt = wait_until(daemon, &path, "state", &["verifying"]).await;
    assert_eq!(corrupt["state"], "failed", "{corrupt}");
    assert!(
        corrupt["error"].as_str().unwrap().contains("changed"),
        "{corrupt}"
    );
    let refused = daemon
        .api(
            "POST",
            &format!("/api/addons/{pg}/restore"),
            Some(json!({"backupId": bak, "target": "new"})),
        )
        .await;
    assert_eq!(refused.status, 409, "{}", refused.text());

    // A dump that does not restore: never good.
    let trap = "psql \"$DATABASE_URL\" -v ON_ERROR_STOP=1 -tAc 'create table allowed (x int); \
                insert into allowed values (1); create function ok(v int) returns bool \
                language sql as $$select exists (select 1 from allowed where x = v)$$; \
                create table guarded (x int check (ok(x))); insert into guarded values (1)'";
    let (state, out) = run(daemon, "shop", trap).await;
    assert_eq!(state, "succeeded", "{out}");
    let bad = backup(daemon, &pg).await;
    assert_eq!(bad["state"], "failed", "{bad}");
    assert!(bad["error"].as_str().unwrap().contains("restore"), "{bad}");
    let alarmed = eventually(Duration::from_secs(5), || async {
        gauge(daemon, "slipway_addon_last_backup_ok", &pg).await == Some(0.0)
    })
    .await;
    assert!(alarmed, "{}", addon_metrics(daemon).await);
    let listed = daemon
        .api("GET", &format!("/api/addons/{pg}/backups"), None)
        .await
        .json();
    let states: Vec<(&str, &str)> = listed["backups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["id"].as_str().unwrap(), b["state"].as_str().unwrap()))
        .collect();
    assert!(
        states.contains(&(bad["id"].as_str().unwrap(), "failed")),
        "{listed}"
    );
    assert!(states.contains(&(bak.as_str(), "failed")), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_backup_is_proven_and_restores_its_keys() {
    let test = "a_redis_backup_is_proven_and_restores_its_keys";
    if !installed(test) {
        return;
    }
    let Some(sandboxed) = Sandboxed::start(test, "") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    deploy_shop(daemon).await;
    let redis = create_addon_id(daemon, json!({"kind": "redis"})).await;
    let fill = "redis-cli -u \"$REDIS_URL\" --no-auth-warning MSET a 1 b 2 c 3";
    assert_eq!(run(daemon, "shop", fill).await.1.trim(), "OK");

    let good = backup(daemon, &redis).await;
    assert_eq!(good["state"], "ok", "{good}");
    assert_eq!(good["kind"], "rdb");
    assert_eq!(good["check"]["tables"], json!({"db0": 3}), "{good}");
    let bak = good["id"].as_str().unwrap().to_owned();

    // In place: a key written since is gone, the three are back, and they persist.
    let more = "redis-cli -u \"$REDIS_URL\" --no-auth-warning SET d 4";
    assert_eq!(run(daemon, "shop", more).await.1.trim(), "OK");
    let back = restore(daemon, &redis, &bak, "in-place").await;
    assert_eq!(back["state"], "running", "{back}");
    let size = "redis-cli -u \"$REDIS_URL\" --no-auth-warning DBSIZE";
    assert_eq!(run(daemon, "shop", size).await.1.trim(), "3");

    let copy = restore(daemon, &redis, &bak, "new").await;
    assert_eq!(copy["state"], "running", "{copy}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_appliance_backup_brings_add_ons_back_with_their_data() {
    let test = "the_appliance_backup_brings_add_ons_back_with_their_data";
    if !installed(test) {
        return;
    }
    let Some(mut original) = Sandboxed::start(test, "") else {
        return;
    };
    let daemon = &original.daemon;
    deploy_shop(daemon).await;
    for kind in ["postgres", "redis"] {
        let created = daemon
            .api(
                "POST",
                "/api/projects/shop/addons",
                Some(json!({"kind": kind, "memoryMb": 128, "diskMb": 128})),
            )
            .await;
        assert_eq!(created.status, 201, "{}", created.text());
    }
    let write = "psql \"$DATABASE_URL\" -v ON_ERROR_STOP=1 -tAc 'create table t (x int); \
                 insert into t select generate_series(1, 42)' && \
                 redis-cli -u \"$REDIS_URL\" --no-auth-warning MSET a 1 b 2";
    let (state, out) = run(daemon, "shop", write).await;
    assert_eq!(state, "succeeded", "{out}");

    let archive = original.daemon.dir.path().join("backup.tar.gz");
    tokio::task::block_in_place(|| crate::operator::backup::backup(&original.daemon, &archive));
    let names = list(&archive);
    assert!(
        names
            .iter()
            .any(|n| n.contains("-backups/bak_") && n.ends_with(".dump")),
        "the archive holds the add-on's dump: {names:?}"
    );
    assert!(
        !names
            .iter()
            .any(|n| n.contains("/pgdata/") || n.ends_with("appendonly.aof.manifest")),
        "never a copy of a live data dir: {names:?}"
    );
    assert_eq!(original.daemon.stop(), Some(0));
    assert!(original.daemon.stop_apps().status.success());

    let restored = Sandboxed::start_prepared(test, DaemonOptions::default(), "", |dir| {
        crate::operator::backup::restore(&archive, dir);
    })
    .expect("the sandbox ran once");
    let daemon = &restored.daemon;
    // Their data volumes are missing: each is made again from its backup, in the background.
    let addons = daemon
        .api("GET", "/api/projects/shop/addons", None)
        .await
        .json();
    for addon in addons["addons"].as_array().unwrap() {
        let path = format!("/api/addons/{}", addon["id"].as_str().unwrap());
        let now = wait_until(daemon, &path, "state", &["starting"]).await;
        assert_eq!(now["state"], "running", "{now}");
    }
    let read = "psql \"$DATABASE_URL\" -tAc 'select count(*) from t' && \
                redis-cli -u \"$REDIS_URL\" --no-auth-warning MGET a b";
    let (state, out) = run(daemon, "shop", read).await;
    assert_eq!(
        (state.as_str(), out.trim()),
        ("succeeded", "42\n1\n2"),
        "{out}"
    );
    let addons = daemon
        .api("GET", "/api/projects/shop/addons", None)
        .await
        .json();
    for addon in addons["addons"].as_array().unwrap() {
        assert_eq!(addon["state"], "running", "{addon}");
    }
}

/// The names in a `.tar.gz`.
fn list(archive: &std::path::Path) -> Vec<String> {
    let output = std::process::Command::new("tar")
        .arg("tzf")
        .arg(archive)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}
